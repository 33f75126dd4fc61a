#include "server/informer/processor_listener.h"

#include <atomic>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using testing::Obj;

ObjectPtr Cm(const std::string& name, int rv) { return Obj("d", name, absl::StrCat(rv)); }
// What one Cm holds (they differ only in their one-character name and resource version).
size_t BytesOfAnObject() { return Cm("x", 1)->allocated_bytes(); }

Notification Add(ObjectPtr o, bool initial = false) {
  Notification n;
  n.type = Notification::Type::kAdd;
  n.object = std::move(o);
  n.is_in_initial_list = initial;
  return n;
}
Notification Update(ObjectPtr old_object, ObjectPtr o) {
  Notification n;
  n.type = Notification::Type::kUpdate;
  n.object = std::move(o);
  n.old_object = std::move(old_object);
  return n;
}
Notification Delete(ObjectPtr o, bool unknown = false) {
  Notification n;
  n.type = Notification::Type::kDelete;
  n.object = std::move(o);
  n.final_state_unknown = unknown;
  return n;
}

std::string Describe(const Notification& n) {
  switch (n.type) {
    case Notification::Type::kAdd:
      return absl::StrCat("add ", n.object->name(), "@", n.object->resource_version(),
                          n.is_in_initial_list ? " initial" : "");
    case Notification::Type::kUpdate:
      return absl::StrCat("update ", n.object->name(), "@", n.old_object->resource_version(), "->",
                          n.object->resource_version());
    case Notification::Type::kDelete:
      return absl::StrCat("delete ", n.object->name(), "@", n.object->resource_version(),
                          n.final_state_unknown ? " unknown" : "");
    case Notification::Type::kResnapshot:
      return absl::StrCat("resnapshot ", n.resnapshot_keys);
  }
  return "?";
}

// The informer's side of an overflow: the "cache" the coalesced keys are resolved against. Its
// mutex doubles as the distribution lock (held while the cache changes and notifications are
// pushed, and while an overflow is resolved).
class FakeCache : public ProcessorListener::OverflowResolver {
 public:
  void SetLocked(ObjectPtr o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    objects_[std::string(o->key())] = o;
  }
  void RemoveLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    objects_.erase(key);
  }
  void Set(ObjectPtr o) {
    MutexLock lock(&mu);
    SetLocked(std::move(o));
  }
  std::map<std::string, ObjectPtr> objects() {
    MutexLock lock(&mu);
    return objects_;
  }
  void ResolveOverflow(ProcessorListener* listener) override {
    MutexLock lock(&mu);
    ++resolved_;
    listener->FinishOverflow([&](absl::string_view key) ABSL_NO_THREAD_SAFETY_ANALYSIS -> ObjectPtr {
      auto it = objects_.find(std::string(key));
      return it == objects_.end() ? nullptr : it->second;
    });
  }
  int resolved() {
    MutexLock lock(&mu);
    return resolved_;
  }
  Mutex mu;

 private:
  std::map<std::string, ObjectPtr> objects_ ABSL_GUARDED_BY(mu);
  int resolved_ ABSL_GUARDED_BY(mu) = 0;
};

std::vector<std::string> PopAll(ProcessorListener& l) {
  std::vector<Notification> out;
  EXPECT_TRUE(l.Pop(1000, &out, /*wait=*/false));
  l.Done(out);
  std::vector<std::string> described;
  for (const Notification& n : out) described.push_back(Describe(n));
  return described;
}

class ProcessorListenerTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProcessorListener> Listener(size_t buffer = 100,
                                              std::function<bool()> synced = [] { return true; }) {
    ProcessorListener::Options options;
    options.name = "h";
    options.buffer_size = buffer;
    return std::make_unique<ProcessorListener>(std::move(options), &cache_, std::move(synced));
  }
  FakeCache cache_;
};

TEST_F(ProcessorListenerTest, NotificationsArriveInOrder) {
  auto l = Listener();
  l->Push(Add(Cm("a", 1)));
  l->Push(Update(Cm("a", 1), Cm("a", 2)));
  l->Push(Add(Cm("b", 3)));
  l->Push(Delete(Cm("a", 4)));
  EXPECT_THAT(PopAll(*l), ElementsAre("add a@1", "update a@1->2", "add b@3", "delete a@4"));
  EXPECT_EQ(l->pending(), 0u);
  EXPECT_EQ(l->delivered(), 4u);
}

TEST_F(ProcessorListenerTest, PopHandsOutAtMostMax) {
  auto l = Listener();
  for (int i = 0; i < 5; ++i) l->Push(Add(Cm(absl::StrCat("k", i), i)));
  std::vector<Notification> out;
  ASSERT_TRUE(l->Pop(2, &out, false));
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(l->pending(), 3u);
}

TEST_F(ProcessorListenerTest, AHandlerRunsOnItsOwnThreadInOrder) {
  Mutex mu;
  std::vector<std::string> seen;
  std::set<std::thread::id> threads;  // every thread a handler call ran on
  auto record = [&](std::string what) {
    MutexLock lock(&mu);
    seen.push_back(std::move(what));
    threads.insert(std::this_thread::get_id());
  };
  auto handler = std::make_shared<ResourceEventHandlerFuncs>();
  handler->add = [&](const ObjectPtr& o, bool) { record(absl::StrCat("add ", o->name())); };
  handler->update = [&](const ObjectPtr&, const ObjectPtr& o) {
    record(absl::StrCat("update ", o->name()));
  };
  handler->del = [&](const ObjectPtr& o, bool) { record(absl::StrCat("delete ", o->name())); };
  ProcessorListener l({.name = "h", .buffer_size = 100, .handler = handler}, &cache_,
                      [] { return true; });
  l.Start();
  l.Push(Add(Cm("a", 1)));
  l.Push(Update(Cm("a", 1), Cm("a", 2)));
  l.Push(Delete(Cm("a", 3)));
  {
    MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithDeadline(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return seen.size() == 3; },
        absl::Now() + absl::Seconds(60)))
        << "seen: " << seen.size();
    EXPECT_THAT(seen, ElementsAre("add a", "update a", "delete a"));
    // All three calls ran on one thread, the listener's, not on the thread that pushed.
    EXPECT_EQ(threads.size(), 1u);
    EXPECT_NE(*threads.begin(), std::this_thread::get_id());
  }
  l.Stop();
}

TEST_F(ProcessorListenerTest, OverflowCoalescesKeysIntoTheirNetChange) {
  auto l = Listener(/*buffer=*/3);
  // Seen by the handler before the overflow.
  l->Push(Add(Cm("seen-updated", 1)));
  l->Push(Add(Cm("seen-deleted", 2)));
  l->Push(Add(Cm("seen-tombstoned", 3)));
  EXPECT_EQ(PopAll(*l).size(), 3u);
  cache_.Set(Cm("seen-updated", 1));
  // Now the handler falls behind.
  l->Push(Update(Cm("seen-updated", 1), Cm("seen-updated", 10)));
  l->Push(Update(Cm("seen-updated", 10), Cm("seen-updated", 11)));
  l->Push(Delete(Cm("seen-deleted", 12)));
  l->Push(Delete(Cm("seen-tombstoned", 3), /*unknown=*/true));  // overflow: 4th pending
  l->Push(Add(Cm("new", 14)));
  l->Push(Add(Cm("transient", 15)));
  l->Push(Delete(Cm("transient", 16)));
  EXPECT_EQ(l->overflows(), 1u);
  EXPECT_EQ(l->pending(), 5u) << "one entry per changed key, not per event";
  cache_.Set(Cm("seen-updated", 11));
  cache_.Set(Cm("new", 14));
  std::vector<std::string> got = PopAll(*l);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], "resnapshot 4");
  got.erase(got.begin());
  EXPECT_THAT(got, UnorderedElementsAre("update seen-updated@1->11", "delete seen-deleted@12",
                                        "delete seen-tombstoned@3 unknown", "add new@14"))
      << "the transient key, added and deleted while coalesced, is not mentioned";
  EXPECT_EQ(cache_.resolved(), 1);
  // Back to normal.
  l->Push(Update(Cm("new", 14), Cm("new", 17)));
  EXPECT_THAT(PopAll(*l), ElementsAre("update new@14->17"));
}

// The buffer is bounded in bytes too: a subscriber that falls behind by big objects overflows
// (and re-snapshots) long before it holds buffer_size of them.
TEST_F(ProcessorListenerTest, TheBufferIsBoundedInBytesToo) {
  const size_t one = BytesOfAnObject();
  ProcessorListener l({.name = "h", .buffer_size = 1000, .buffer_bytes = 3 * one}, &cache_,
                      [] { return true; });
  l.Push(Add(Cm("a", 1)));
  l.Push(Add(Cm("b", 2)));
  l.Push(Add(Cm("c", 3)));
  EXPECT_EQ(l.overflows(), 0u);
  EXPECT_EQ(l.pending_bytes(), 3 * one);
  l.Push(Add(Cm("d", 4)));  // a fourth object's bytes do not fit
  EXPECT_EQ(l.overflows(), 1u);
  EXPECT_EQ(l.pending_bytes(), 0u) << "coalesced: only which keys changed is kept";
  cache_.Set(Cm("a", 1));
  cache_.Set(Cm("b", 2));
  cache_.Set(Cm("c", 3));
  cache_.Set(Cm("d", 4));
  std::vector<std::string> got = PopAll(l);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], "resnapshot 4");
  EXPECT_EQ(l.pending_bytes(), 0u);
  // One notification is always held, however big.
  ProcessorListener tiny({.name = "t", .buffer_size = 1000, .buffer_bytes = 1}, &cache_,
                         [] { return true; });
  tiny.Push(Add(Cm("a", 5)));
  EXPECT_EQ(tiny.overflows(), 0u);
  EXPECT_THAT(PopAll(tiny), ElementsAre("add a@5"));
}

TEST_F(ProcessorListenerTest, AHandlerToldToResnapshotGetsItThroughItsCallback) {
  std::atomic<size_t> resnapshot{0};
  std::atomic<int> calls{0};
  auto handler = std::make_shared<ResourceEventHandlerFuncs>();
  handler->resnapshot = [&](size_t keys) { resnapshot = keys; };
  handler->add = [&](const ObjectPtr&, bool) { ++calls; };
  // Not started yet: everything accumulates.
  ProcessorListener l({.name = "h", .buffer_size = 2, .handler = handler}, &cache_,
                      [] { return true; });
  for (int i = 0; i < 5; ++i) {
    cache_.Set(Cm(absl::StrCat("k", i), i));
    l.Push(Add(Cm(absl::StrCat("k", i), i)));
  }
  l.Start();
  ASSERT_TRUE(Eventually([&] { return calls.load() == 5; }));
  EXPECT_EQ(resnapshot.load(), 5u);
}

TEST_F(ProcessorListenerTest, TheInitialSnapshotComesFirstAndIsNotBoundedByTheBuffer) {
  auto l = Listener(/*buffer=*/2);
  std::vector<ObjectPtr> snapshot;
  for (int i = 0; i < 50; ++i) snapshot.push_back(Cm(absl::StrCat("k", i), i));
  l->SetInitial(snapshot);
  l->Push(Update(Cm("k0", 0), Cm("k0", 100)));
  EXPECT_EQ(l->overflows(), 0u);
  std::vector<std::string> got = PopAll(*l);
  ASSERT_EQ(got.size(), 50u);
  EXPECT_EQ(got[0], "add k0@0 initial");
  EXPECT_THAT(PopAll(*l), ElementsAre("update k0@0->100"));
}

TEST_F(ProcessorListenerTest, HasSyncedWaitsUntilTheInitialListIsHandled) {
  auto l = Listener();
  l->SetInitial({Cm("a", 1), Cm("b", 2)});
  EXPECT_FALSE(l->HasSynced());
  std::vector<Notification> out;
  ASSERT_TRUE(l->Pop(10, &out, false));
  EXPECT_FALSE(l->HasSynced()) << "popped but not yet handled";
  l->Done(out);
  EXPECT_TRUE(l->HasSynced());
  l->Push(Add(Cm("c", 3)));
  EXPECT_TRUE(l->HasSynced()) << "never goes back";
}

TEST_F(ProcessorListenerTest, InitialObjectsAreTakenAsPoppedAndOnesThatCannotBeAreSkipped) {
  // A snapshot that makes each object when it is taken, and cannot make "b" (as a compressed
  // cache whose frame does not decompress).
  class Lazy : public ObjectSnapshot {
   public:
    explicit Lazy(std::vector<std::string>* taken) : taken_(taken) {}
    size_t size() const override { return 3; }
    ObjectPtr Take(size_t i) override {
      const std::string name(1, static_cast<char>('a' + i));
      taken_->push_back(name);
      return name == "b" ? nullptr : Cm(name, static_cast<int>(i));
    }

   private:
    std::vector<std::string>* taken_;
  };
  std::vector<std::string> taken;
  auto l = Listener();
  l->SetInitial(std::make_unique<Lazy>(&taken));
  EXPECT_THAT(taken, IsEmpty()) << "nothing is made before it is popped";
  std::vector<Notification> out;
  ASSERT_TRUE(l->Pop(1, &out, false));
  EXPECT_THAT(taken, ElementsAre("a"));
  l->Done(out);
  out.clear();
  ASSERT_TRUE(l->Pop(10, &out, false));
  EXPECT_THAT(taken, ElementsAre("a", "b", "c"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].object->name(), "c");
  EXPECT_FALSE(l->HasSynced());
  l->Done(out);
  EXPECT_TRUE(l->HasSynced()) << "the object that could not be made does not hold sync back";
}

TEST_F(ProcessorListenerTest, HasSyncedOfAnEarlyListenerFollowsTheInitialListItWasPushed) {
  std::atomic<bool> upstream{false};
  auto l = Listener(100, [&] { return upstream.load(); });
  l->Push(Add(Cm("a", 1), /*initial=*/true));
  l->Push(Add(Cm("b", 2), /*initial=*/true));
  EXPECT_FALSE(l->HasSynced());
  upstream = true;  // the informer processed its first list
  EXPECT_FALSE(l->HasSynced());
  PopAll(*l);
  EXPECT_TRUE(l->HasSynced());
}

TEST_F(ProcessorListenerTest, HasSyncedWaitsForAnOverflowDuringTheInitialList) {
  auto l = Listener(/*buffer=*/1);
  cache_.Set(Cm("a", 1));
  cache_.Set(Cm("b", 2));
  l->Push(Add(Cm("a", 1), true));
  l->Push(Add(Cm("b", 2), true));  // overflow
  EXPECT_FALSE(l->HasSynced());
  EXPECT_THAT(PopAll(*l), UnorderedElementsAre("resnapshot 2", "add a@1 initial", "add b@2 initial"));
  EXPECT_TRUE(l->HasSynced());
}

TEST_F(ProcessorListenerTest, ResyncIsDueOncePerPeriod) {
  ProcessorListener l({.name = "h", .resync_period = absl::Seconds(30)}, &cache_,
                      [] { return true; });
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  l.ScheduleFirstResync(t0);
  EXPECT_EQ(l.next_resync(), t0 + absl::Seconds(30));
  EXPECT_FALSE(l.ShouldResync(t0 + absl::Seconds(29)));
  EXPECT_FALSE(l.is_syncing());
  EXPECT_TRUE(l.ShouldResync(t0 + absl::Seconds(30)));
  EXPECT_TRUE(l.is_syncing());
  EXPECT_EQ(l.next_resync(), t0 + absl::Seconds(60));
  ProcessorListener never({.name = "n"}, &cache_, [] { return true; });
  never.ScheduleFirstResync(t0);
  EXPECT_FALSE(never.ShouldResync(t0 + absl::Hours(1)));
  EXPECT_EQ(never.next_resync(), absl::InfiniteFuture());
}

TEST_F(ProcessorListenerTest, StopFreesTheBufferAndEndsPop) {
  auto l = Listener();
  l->SetInitial({Cm("a", 1)});
  l->Push(Add(Cm("b", 2)));
  l->Stop();
  EXPECT_EQ(l->pending(), 0u);
  std::vector<Notification> out;
  EXPECT_FALSE(l->Pop(10, &out, true));
  l->Push(Add(Cm("c", 3)));
  EXPECT_EQ(l->pending(), 0u);
}

TEST_F(ProcessorListenerTest, OnReadyFiresWhenSomethingArrivesAfterAnEmptyPop) {
  std::atomic<int> ready{0};
  ProcessorListener l({.name = "h", .on_ready = [&] { ++ready; }}, &cache_, [] { return true; });
  l.Push(Add(Cm("a", 1)));
  EXPECT_EQ(ready.load(), 0) << "nobody asked yet";
  EXPECT_THAT(PopAll(l), ElementsAre("add a@1"));
  EXPECT_THAT(PopAll(l), IsEmpty());
  l.Push(Add(Cm("b", 2)));
  l.Push(Add(Cm("c", 3)));
  EXPECT_EQ(ready.load(), 1) << "once per empty Pop";
}

// Random changes of a few keys pushed (under the "distribution lock", after updating the cache,
// as the informer does) while a slow consumer with a tiny buffer overflows again and again: per
// key the consumer sees resourceVersions only increase, and it ends at the cache's state.
TEST_F(ProcessorListenerTest, PerKeyOrderAndConvergenceSurviveRepeatedOverflows) {
  auto l = Listener(/*buffer=*/8);
  std::map<std::string, int> consumer_state;  // key -> rv (-1: deleted)
  std::atomic<bool> done{false};
  std::thread producer([&] {
    std::mt19937 rng(3);
    std::map<std::string, ObjectPtr> live;
    for (int rv = 1; rv <= 20000; ++rv) {
      const std::string name = absl::StrCat("k", rng() % 20);
      const std::string key = absl::StrCat("d/", name);
      ObjectPtr now = Cm(name, rv);
      auto it = live.find(key);
      MutexLock lock(&cache_.mu);
      // Apply to the cache, then push: the informer's order, under its distribution lock.
      if (it == live.end()) {
        live[key] = now;
        cache_.SetLocked(now);
        l->Push(Add(now));
      } else if (rng() % 4 == 0) {
        live.erase(it);
        cache_.RemoveLocked(key);
        l->Push(Delete(now));
      } else {
        ObjectPtr old = it->second;
        it->second = now;
        cache_.SetLocked(now);
        l->Push(Update(old, now));
      }
    }
    done = true;
  });
  std::vector<Notification> batch;
  auto consume = [&] {
    batch.clear();
    l->Pop(3, &batch, /*wait=*/false);
    for (const Notification& n : batch) {
      if (n.type == Notification::Type::kResnapshot) continue;
      const std::string key(n.object->key());
      const int rv = std::stoi(std::string(n.object->resource_version()));
      auto it = consumer_state.find(key);
      if (it != consumer_state.end()) {
        ASSERT_GE(rv, std::abs(it->second)) << key << " went back in time";
      }
      consumer_state[key] = n.type == Notification::Type::kDelete ? -rv : rv;
    }
    l->Done(batch);
  };
  // Alternate: consume a while, then stop consuming until the listener overflows again, so that
  // overflows happen however the threads are scheduled (a sanitizer's slow producer included).
  uint64_t overflows_seen = 0;
  for (int round = 0; !done; ++round) {
    if (round % 64 == 63) {
      while (!done && l->overflows() == overflows_seen) std::this_thread::yield();
      overflows_seen = l->overflows();
    }
    consume();
    std::this_thread::yield();
  }
  producer.join();
  for (int i = 0; i < 100000 && l->pending() > 0; ++i) consume();
  EXPECT_EQ(l->pending(), 0u);
  EXPECT_GT(l->overflows(), 0u) << "the test must exercise overflows";
  const std::map<std::string, ObjectPtr> cache = cache_.objects();
  for (const auto& [key, rv] : consumer_state) {
    auto it = cache.find(key);
    if (it == cache.end()) {
      EXPECT_LT(rv, 0) << key << " is gone from the cache: the consumer must have seen it deleted";
    } else {
      EXPECT_EQ(rv, std::stoi(std::string(it->second->resource_version()))) << key;
    }
  }
  for (const auto& [key, object] : cache) EXPECT_TRUE(consumer_state.contains(key)) << key;
}

}  // namespace
}  // namespace informerd::informer
