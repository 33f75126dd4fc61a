#include "server/informer/delta_fifo.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// client-go's mkFifoObj(name, val): here a cluster-scoped object whose key is `name` and whose
// resourceVersion is `val`.
ObjectPtr Fifo(const std::string& name, int val) {
  return testing::Obj("", name, absl::StrCat(val));
}

std::string Describe(const Delta& d) {
  return absl::StrCat(DeltaTypeName(d.type), " ", d.object->key(), "@",
                      d.object->resource_version(), d.final_state_unknown ? " (tombstone)" : "");
}

std::vector<std::string> Describe(const Deltas& deltas) {
  std::vector<std::string> out;
  for (const Delta& d : deltas) out.push_back(Describe(d));
  return out;
}

// client-go's literalListerGetter.
class LiteralKnownObjects : public KnownObjects {
 public:
  explicit LiteralKnownObjects(std::vector<ObjectPtr> objects) : objects_(std::move(objects)) {}
  ObjectPtr GetByKey(absl::string_view key) const override {
    for (const ObjectPtr& o : objects_) {
      if (o->key() == key) return o;
    }
    return nullptr;
  }
  void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const override {
    for (const ObjectPtr& o : objects_) fn(o);
  }

 private:
  std::vector<ObjectPtr> objects_;
};

std::unique_ptr<DeltaFIFO> NewFifo(const KnownObjects* known = nullptr, bool replaced = false) {
  return DeltaFIFO::Create({.known_objects = known, .emit_delta_type_replaced = replaced}).value();
}

// Pops one item (which must be queued) and returns its deltas.
Deltas PopDeltas(DeltaFIFO& f, bool* initial = nullptr) {
  Deltas out;
  absl::Status s = f.TryPop([&](Deltas& d, const PopContext& ctx) {
    out = d;
    if (initial != nullptr) *initial = ctx.is_in_initial_list;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// client-go's testPop: the newest object's value.
std::string PopNewest(DeltaFIFO& f) {
  Deltas d = PopDeltas(f);
  return d.empty() ? "<none>" : std::string(d.back().object->resource_version());
}

TEST(DeltaFIFOTest, ItemsArePoppedInOrderOfFirstChange) {
  auto f = NewFifo();
  for (int i = 0; i < 100; ++i) f->Add(Fifo(absl::StrCat("k", i), i));
  for (int i = 0; i < 100; ++i) {
    Deltas d = PopDeltas(*f);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].object->key(), absl::StrCat("k", i));
  }
  EXPECT_EQ(f->Len(), 0u);
}

TEST(DeltaFIFOTest, ConcurrentProducersLoseNothing) {  // client-go TestDeltaFIFO_basic
  auto f = NewFifo();
  constexpr int kAmount = 500;
  std::thread a([&] {
    for (int i = 0; i < kAmount; ++i) f->Add(Fifo(absl::StrCat("a", i), i));
  });
  std::thread b([&] {
    for (int i = 0; i < kAmount; ++i) f->Add(Fifo(absl::StrCat("b", i), i));
  });
  int last_a = -1, last_b = -1, popped = 0;
  while (popped < 2 * kAmount) {
    const absl::Status s = f->TryPop([&](Deltas& d, const PopContext&) {
      const std::string key(d[0].object->key());
      const int v = std::stoi(std::string(d[0].object->resource_version()));
      int& last = key[0] == 'a' ? last_a : last_b;
      EXPECT_GT(v, last) << "each producer's items come out in order";
      last = v;
      return absl::OkStatus();
    });
    if (absl::IsUnavailable(s)) {  // the producers are behind: nothing queued yet
      std::this_thread::yield();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    ++popped;
  }
  a.join();
  b.join();
  EXPECT_EQ(last_a, kAmount - 1);
  EXPECT_EQ(last_b, kAmount - 1);
}

TEST(DeltaFIFOTest, DeletedThenReplacedIsDeliveredAsBoth) {  // replaceWithDeleteDeltaIn
  ObjectPtr old_obj = Fifo("foo", 1);
  ObjectPtr new_obj = Fifo("foo", 2);
  LiteralKnownObjects known({old_obj});
  auto f = NewFifo(&known);
  f->Delete(old_obj);
  f->Replace({new_obj}, "");
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted foo@1", "Sync foo@2"));
}

// client-go TestDeltaFIFOW_ReplaceMakesDeletionsForObjectsOnlyInQueue, with and without known
// objects.
TEST(DeltaFIFOTest, ReplaceMakesDeletionsForObjectsOnlyInTheQueue) {
  ObjectPtr obj = Fifo("foo", 2);
  ObjectPtr obj_v2 = Fifo("foo", 3);
  struct Case {
    std::string name;
    bool replaced;
    std::function<void(DeltaFIFO&)> operations;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"added object is deleted on Replace", false,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Replace({}, "0");
       },
       {"Added foo@2", "Deleted foo@2 (tombstone)"}},
      {"replaced object has a single Delete", true,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Replace({obj}, "0");
         f.Replace({}, "0");
       },
       {"Added foo@2", "Replaced foo@2", "Deleted foo@2 (tombstone)"}},
      {"deleted object has a single Delete", false,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Delete(obj);
         f.Replace({}, "0");
       },
       {"Added foo@2", "Deleted foo@2"}},
      {"synced objects have a single Delete", false,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Replace({obj}, "0");
         f.Replace({obj}, "0");
         f.Replace({}, "0");
       },
       {"Added foo@2", "Sync foo@2", "Sync foo@2", "Deleted foo@2 (tombstone)"}},
      {"added object has a single Delete over several Replaces", false,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Replace({}, "0");
         f.Replace({}, "1");
       },
       {"Added foo@2", "Deleted foo@2 (tombstone)"}},
      {"added, deleted and added again is deleted", false,
       [&](DeltaFIFO& f) {
         f.Add(obj);
         f.Delete(obj);
         f.Add(obj_v2);
         f.Replace({}, "0");
       },
       {"Added foo@2", "Deleted foo@2", "Added foo@3", "Deleted foo@3 (tombstone)"}},
  };
  for (const Case& c : cases) {
    LiteralKnownObjects empty({});
    for (const KnownObjects* known : {static_cast<const KnownObjects*>(&empty),
                                      static_cast<const KnownObjects*>(nullptr)}) {
      auto f = NewFifo(known, c.replaced);
      c.operations(*f);
      EXPECT_THAT(Describe(PopDeltas(*f)), ::testing::ElementsAreArray(c.expected))
          << c.name << (known ? " (with known objects)" : " (without)");
    }
  }
}

TEST(DeltaFIFOTest, AddUpdateDeleteAccumulateUnderOneKey) {  // TestDeltaFIFO_addUpdate
  auto f = NewFifo();
  f->Add(Fifo("foo", 10));
  f->Update(Fifo("foo", 12));
  f->Delete(Fifo("foo", 15));
  ASSERT_EQ(f->List().size(), 1u);
  EXPECT_EQ(f->List()[0]->resource_version(), "15");
  EXPECT_THAT(f->ListKeys(), ElementsAre("foo"));
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Added foo@10", "Updated foo@12", "Deleted foo@15"));
  EXPECT_EQ(f->Len(), 0u) << "nothing else was queued";
  EXPECT_THAT(f->GetByKey("foo"), IsEmpty()) << "the item was removed";
}

TEST(DeltaFIFOTest, DeleteOfAnUnknownKeyIsIgnoredWithoutKnownObjects) {  // enqueueingNoLister
  auto f = NewFifo();
  f->Add(Fifo("foo", 10));
  f->Update(Fifo("bar", 15));
  f->Add(Fifo("qux", 17));
  f->Delete(Fifo("qux", 18));
  f->Delete(Fifo("baz", 20));  // baz does not exist: nothing is queued
  EXPECT_EQ(PopNewest(*f), "10");
  EXPECT_EQ(PopNewest(*f), "15");
  EXPECT_EQ(PopNewest(*f), "18");
  EXPECT_EQ(f->Len(), 0u);
}

TEST(DeltaFIFOTest, DeleteOfAKnownKeyIsQueued) {  // enqueueingWithLister
  LiteralKnownObjects known({Fifo("foo", 5), Fifo("bar", 6), Fifo("baz", 7)});
  auto f = NewFifo(&known);
  f->Add(Fifo("foo", 10));
  f->Update(Fifo("bar", 15));
  f->Delete(Fifo("baz", 20));  // baz is known: the deletion is queued
  EXPECT_EQ(PopNewest(*f), "10");
  EXPECT_EQ(PopNewest(*f), "15");
  EXPECT_EQ(PopNewest(*f), "20");
  EXPECT_EQ(f->Len(), 0u);
}

TEST(DeltaFIFOTest, DeleteOfAKeyUnknownToTheCacheButQueuedIsQueued) {
  // client-go TestDeltaFIFO_DeleteExistingNonPropagated
  LiteralKnownObjects known({});
  auto f = NewFifo(&known);
  f->Add(Fifo("foo", 5));
  f->Delete(Fifo("foo", 6));
  EXPECT_THAT(Describe(f->GetByKey("foo")), ElementsAre("Added foo@5", "Deleted foo@6"));
}

TEST(DeltaFIFOTest, AddThenReplaceDeliversBothOnce) {  // TestDeltaFIFO_addReplace
  auto f = NewFifo();
  f->Add(Fifo("foo", 10));
  f->Replace({Fifo("foo", 15)}, "0");
  EXPECT_EQ(PopNewest(*f), "15");
  EXPECT_EQ(f->Len(), 0u);
  EXPECT_THAT(f->GetByKey("foo"), IsEmpty());
}

TEST(DeltaFIFOTest, ResyncDoesNotFollowAQueuedDeletion) {  // ResyncNonExisting
  LiteralKnownObjects known({Fifo("foo", 5)});
  auto f = NewFifo(&known);
  f->Delete(Fifo("foo", 10));
  f->Resync();
  EXPECT_THAT(Describe(f->GetByKey("foo")), ElementsAre("Deleted foo@10"));
}

TEST(DeltaFIFOTest, ResyncQueuesSyncForKnownObjects) {  // TestDeltaFIFO_Resync
  LiteralKnownObjects known({Fifo("foo", 5)});
  auto f = NewFifo(&known);
  f->Resync();
  EXPECT_THAT(Describe(f->GetByKey("foo")), ElementsAre("Sync foo@5"));
}

TEST(DeltaFIFOTest, ResyncSkipsKeysWithAQueuedUpdate) {  // UpdateResyncRace
  LiteralKnownObjects known({Fifo("foo", 5)});
  auto f = NewFifo(&known);
  f->Update(Fifo("foo", 6));
  f->Resync();
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Updated foo@6"));
  EXPECT_EQ(f->Len(), 0u);
}

TEST(DeltaFIFOTest, ReplaceMakesTombstonesForKnownObjectsMissingFromTheList) {
  // client-go TestDeltaFIFO_ReplaceMakesDeletions: one pre-existing deletion...
  {
    LiteralKnownObjects known({Fifo("foo", 5), Fifo("bar", 6), Fifo("baz", 7)});
    auto f = NewFifo(&known);
    f->Delete(Fifo("baz", 10));
    f->Replace({Fifo("foo", 5)}, "0");
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted baz@10"));
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Sync foo@5"));
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted bar@6 (tombstone)"))
        << "bar had no delete event and is not listed: a tombstone with the last known object";
  }
  // ... then an Add instead of a Delete ...
  {
    LiteralKnownObjects known({Fifo("foo", 5), Fifo("bar", 6), Fifo("baz", 7)});
    auto f = NewFifo(&known);
    f->Add(Fifo("baz", 10));
    f->Replace({Fifo("foo", 5)}, "0");
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Added baz@10", "Deleted baz@10 (tombstone)"));
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Sync foo@5"));
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted bar@6 (tombstone)"));
  }
  // ... and without known objects.
  {
    auto f = NewFifo();
    f->Add(Fifo("baz", 10));
    f->Replace({Fifo("foo", 5)}, "0");
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Added baz@10", "Deleted baz@10 (tombstone)"));
    EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Sync foo@5"));
    EXPECT_EQ(f->Len(), 0u);
  }
}

TEST(DeltaFIFOTest, ReplaceEmitsReplacedWhenAsked) {  // ReplaceMakesDeletionsReplaced, ReplaceDeltaType
  LiteralKnownObjects known({Fifo("foo", 5), Fifo("bar", 6), Fifo("baz", 7)});
  auto f = NewFifo(&known, /*replaced=*/true);
  f->Delete(Fifo("baz", 10));
  f->Replace({Fifo("foo", 6)}, "0");
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted baz@10"));
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Replaced foo@6"));
  EXPECT_THAT(Describe(PopDeltas(*f)), ElementsAre("Deleted bar@6 (tombstone)"));
}

TEST(DeltaFIFOTest, OnlyTwoConsecutiveDeletionsAreDeduplicated) {
  auto f = NewFifo();
  f->Add(Fifo("foo", 1));
  f->Delete(Fifo("foo", 2));
  f->Delete(Fifo("foo", 3));  // both real: the newer is kept
  EXPECT_THAT(Describe(f->GetByKey("foo")), ElementsAre("Added foo@1", "Deleted foo@3"));
  f->Replace({}, "4");  // a tombstone after a real deletion is dropped
  EXPECT_THAT(Describe(f->GetByKey("foo")), ElementsAre("Added foo@1", "Deleted foo@3"));
  f->Update(Fifo("foo", 5));
  f->Update(Fifo("foo", 6));  // updates are never merged
  EXPECT_THAT(Describe(f->GetByKey("foo")),
              ElementsAre("Added foo@1", "Deleted foo@3", "Updated foo@5", "Updated foo@6"));
}

TEST(DeltaFIFOTest, HasSyncedOnlyAfterTheFirstReplaceIsProcessed) {  // HasSyncedCorrectOnDeletion
  LiteralKnownObjects known({Fifo("foo", 5), Fifo("bar", 6), Fifo("baz", 7)});
  auto f = NewFifo(&known);
  f->Replace({Fifo("foo", 5)}, "0");
  for (const char* expected : {"Sync foo@5", "Deleted bar@6 (tombstone)", "Deleted baz@7 (tombstone)"}) {
    EXPECT_FALSE(f->HasSynced());
    bool initial = false;
    EXPECT_THAT(Describe(PopDeltas(*f, &initial)), ElementsAre(expected));
    EXPECT_TRUE(initial) << "part of the initial list";
  }
  EXPECT_TRUE(f->HasSynced());
}

TEST(DeltaFIFOTest, HasSyncedFollowsClientGo) {  // TestDeltaFIFO_HasSynced
  auto pop = [](DeltaFIFO& f) { PopDeltas(f); };
  struct Case {
    std::function<void(DeltaFIFO&)> actions;
    bool synced;
  };
  const std::vector<Case> cases = {
      {[](DeltaFIFO&) {}, false},
      {[](DeltaFIFO& f) { f.Add(Fifo("a", 1)); }, true},
      {[](DeltaFIFO& f) { f.Replace({}, "0"); }, true},
      {[](DeltaFIFO& f) { f.Replace({Fifo("a", 1), Fifo("b", 2)}, "0"); }, false},
      {[&](DeltaFIFO& f) {
         f.Replace({Fifo("a", 1), Fifo("b", 2)}, "0");
         pop(f);
       },
       false},
      {[&](DeltaFIFO& f) {
         f.Replace({Fifo("a", 1), Fifo("b", 2)}, "0");
         pop(f);
         pop(f);
       },
       true},
      // Duplicate keys in one list (a broken server): one item, synced after one pop.
      {[&](DeltaFIFO& f) {
         f.Replace({Fifo("a", 1), Fifo("a", 2)}, "0");
         pop(f);
       },
       true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto f = NewFifo();
    cases[i].actions(*f);
    EXPECT_EQ(f->HasSynced(), cases[i].synced) << "case " << i;
  }
}

TEST(DeltaFIFOTest, HasSyncedWaitsUntilTheLastInitialItemIsProcessed) {
  auto f = NewFifo();
  f->Replace({Fifo("a", 1)}, "1");
  ASSERT_TRUE(f->TryPop([&](Deltas&, const PopContext& ctx) {
                 EXPECT_TRUE(ctx.is_in_initial_list);
                 EXPECT_FALSE(f->HasSynced()) << "not while the item is being processed";
                 return absl::OkStatus();
               }).ok());
  EXPECT_TRUE(f->HasSynced());
}

TEST(DeltaFIFOTest, AKeyDoesNotJumpTheLine) {  // TestDeltaFIFO_detectLineJumpers
  auto f = NewFifo();
  f->Add(Fifo("foo", 10));
  f->Add(Fifo("bar", 1));
  f->Add(Fifo("foo", 11));
  f->Add(Fifo("foo", 13));
  f->Add(Fifo("zab", 30));
  EXPECT_EQ(PopNewest(*f), "13");
  f->Add(Fifo("foo", 14));  // foo goes to the back, not back to the front
  EXPECT_EQ(PopNewest(*f), "1");
  EXPECT_EQ(PopNewest(*f), "30");
  EXPECT_EQ(PopNewest(*f), "14");
}

TEST(DeltaFIFOTest, AddIfNotPresentRequeuesOnlyAbsentKeys) {  // TestDeltaFIFO_addIfNotPresent
  auto f = NewFifo();
  EXPECT_EQ(f->AddIfNotPresent({}).code(), absl::StatusCode::kInvalidArgument);
  f->Add(Fifo("b", 3));
  Deltas b3 = PopDeltas(*f);
  f->Add(Fifo("c", 4));
  Deltas c4 = PopDeltas(*f);
  EXPECT_EQ(f->Len(), 0u);
  f->Add(Fifo("a", 1));
  f->Add(Fifo("b", 2));
  ASSERT_TRUE(f->AddIfNotPresent(b3).ok());
  ASSERT_TRUE(f->AddIfNotPresent(c4).ok());
  EXPECT_EQ(f->Len(), 3u);
  EXPECT_EQ(PopNewest(*f), "1");
  EXPECT_EQ(PopNewest(*f), "2");
  EXPECT_EQ(PopNewest(*f), "4");
}

TEST(DeltaFIFOTest, OnReadyTellsWhenTheQueueStopsBeingEmpty) {
  int ready = 0;
  auto f = DeltaFIFO::Create({.on_ready = [&] { ++ready; }}).value();
  EXPECT_EQ(f->TryPopBatch(8, [](Deltas&, const PopContext&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kUnavailable);
  f->Add(Fifo("a", 1));
  f->Add(Fifo("b", 2));
  f->Update(Fifo("a", 3));
  EXPECT_EQ(ready, 1);  // only the first item readied it
  std::vector<std::string> popped;
  ASSERT_TRUE(f->TryPopBatch(8, [&](Deltas& d, const PopContext&) {
                 popped.push_back(Describe(d).back());
                 return absl::OkStatus();
               }).ok());
  EXPECT_THAT(popped, ElementsAre("Updated a@3", "Added b@2"));
  f->Replace({Fifo("c", 4)}, "4");
  EXPECT_EQ(ready, 2);
  Deltas c = PopDeltas(*f);
  ASSERT_TRUE(f->AddIfNotPresent(c).ok());
  EXPECT_EQ(ready, 3);
}

TEST(DeltaFIFOTest, APopThatDrainsTheQueueReportsTheLatestResourceVersion) {
  auto f = NewFifo();
  f->Add(Fifo("a", 5));
  f->Add(Fifo("b", 6));
  std::vector<std::string> drained;
  auto record = [&](Deltas&, const PopContext& ctx) {
    drained.push_back(ctx.drained_resource_version);
    return absl::OkStatus();
  };
  ASSERT_TRUE(f->TryPop(record).ok());
  f->Update(Fifo("a", 7));
  ASSERT_TRUE(f->TryPop(record).ok());
  ASSERT_TRUE(f->TryPop(record).ok());
  EXPECT_THAT(drained, ElementsAre("", "", "7"));
}

TEST(DeltaFIFOTest, ResourceVersionsReachingAnIdleQueueAreReportedAtOnce) {
  std::vector<std::string> idle;
  auto f = DeltaFIFO::Create({.on_idle_resource_version = [&](const std::string& rv) {
                               idle.push_back(rv);
                             }}).value();
  f->UpdateResourceVersion("10");  // a bookmark
  f->Replace({}, "11");            // an empty list
  f->Add(Fifo("a", 12));
  f->UpdateResourceVersion("13");  // not idle: "a" is queued
  EXPECT_THAT(idle, ElementsAre("10", "11"));
}

TEST(DeltaFIFOTest, DeleteWaitsForTheItemBeingProcessed) {
  // The cache gains "a" only when the Pop that carries its Added is processed. A Delete that
  // arrives meanwhile must see the cache after that update, or it would be dropped as unknown
  // and "a" would stay in the cache for good.
  struct Cache : KnownObjects {
    ObjectPtr GetByKey(absl::string_view key) const override {
      MutexLock lock(&mu);
      return key == "a" ? a : nullptr;
    }
    void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const override {
      MutexLock lock(&mu);
      if (a) fn(a);
    }
    mutable Mutex mu;
    ObjectPtr a ABSL_GUARDED_BY(mu);
  } cache;
  auto f = NewFifo(&cache);
  f->Add(Fifo("a", 1));
  std::atomic<bool> processing{false};
  std::atomic<bool> release{false};
  std::thread consumer([&] {
    ASSERT_TRUE(f->TryPop([&](Deltas& d, const PopContext&) {
                   processing = true;
                   while (!release) std::this_thread::yield();
                   MutexLock lock(&cache.mu);
                   cache.a = d.back().object;
                   return absl::OkStatus();
                 }).ok());
  });
  while (!processing) std::this_thread::yield();
  std::thread deleter([&] { f->Delete(Fifo("a", 2)); });
  release = true;
  deleter.join();
  consumer.join();
  EXPECT_THAT(Describe(f->GetByKey("a")), ElementsAre("Deleted a@2"));
}

}  // namespace
}  // namespace informerd::informer
