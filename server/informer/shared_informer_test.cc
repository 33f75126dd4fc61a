#include "server/informer/shared_informer.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "client/api_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/fake_lister_watcher.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using testing::Added;
using testing::Bookmark;
using testing::Deleted;
using testing::FakeListerWatcher;
using testing::MakeObject;
using testing::Modified;
using testing::Obj;
using testing::Page;

ObjectPtr Cm(const std::string& name, int rv) { return Obj("d", name, absl::StrCat(rv)); }

// Records what it is told; can be held up to play a slow handler. Checks that the cache already
// holds what an Add or Update announces.
class RecordingHandler : public ResourceEventHandler {
 public:
  explicit RecordingHandler(const SharedInformer* informer = nullptr) : informer_(informer) {}

  void OnAdd(const ObjectPtr& o, bool initial) override {
    CheckCached(o);
    Record(absl::StrCat("add ", o->name(), "@", o->resource_version(), initial ? " initial" : ""),
           o, false);
  }
  void OnUpdate(const ObjectPtr& old_object, const ObjectPtr& o) override {
    CheckCached(o);
    Record(absl::StrCat("update ", o->name(), "@", old_object->resource_version(), "->",
                        o->resource_version()),
           o, false);
  }
  void OnDelete(const ObjectPtr& o, bool unknown) override {
    Record(absl::StrCat("delete ", o->name(), "@", o->resource_version(), unknown ? " unknown" : ""),
           o, true);
  }
  void OnResnapshot(size_t keys) override {
    MutexLock lock(&mu_);
    ++resnapshots_;
  }

  void Hold() {
    MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    MutexLock lock(&mu_);
    held_ = false;
  }
  std::vector<std::string> events() {
    MutexLock lock(&mu_);
    return events_;
  }
  size_t count() {
    MutexLock lock(&mu_);
    return events_.size();
  }
  int resnapshots() {
    MutexLock lock(&mu_);
    return resnapshots_;
  }
  // What the handler believes: key -> resourceVersion, deleted keys removed.
  std::map<std::string, std::string> view() {
    MutexLock lock(&mu_);
    return view_;
  }

 private:
  void CheckCached(const ObjectPtr& o) {
    if (informer_ == nullptr) return;
    EXPECT_NE(informer_->store().Get(o->key()).object, nullptr)
        << o->key() << ": the cache is updated before handlers hear of it";
  }
  void Record(std::string what, const ObjectPtr& o, bool deleted) {
    MutexLock lock(&mu_);
    mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !held_; });
    events_.push_back(std::move(what));
    if (deleted) {
      view_.erase(std::string(o->key()));
    } else {
      view_[std::string(o->key())] = std::string(o->resource_version());
    }
  }

  const SharedInformer* const informer_;
  Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> view_ ABSL_GUARDED_BY(mu_);
  int resnapshots_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status Expired() {
  client::ApiError error;
  error.code = 410;
  error.reason = "Expired";
  return client::ToStatus(error);
}

class SharedInformerTest : public ::testing::Test {
 protected:
  void SetUp() override { Create({}); }
  void TearDown() override {
    lw_->Close();
    informer_.reset();
  }

  void Create(SharedInformerOptions options) {
    if (informer_ != nullptr) {
      lw_->Close();
      informer_.reset();
    }
    auto lw = std::make_unique<FakeListerWatcher>();
    lw_ = lw.get();
    options.name = "test";
    options.lister_watcher = std::move(lw);
    options.use_streaming_list = false;
    options.clock = &clock_;
    options.metrics = &metrics_;
    options.seed = 7;
    informer_ = SharedInformer::Create(std::move(options)).value();
  }

  // With `check_cache`, the handler checks that the cache holds whatever it is told of (valid
  // only while nothing later removes it).
  std::shared_ptr<RecordingHandler> Handler(bool check_cache = false) {
    return std::make_shared<RecordingHandler>(check_cache ? informer_.get() : nullptr);
  }

  // Starts and completes a first list of `items` at `rv`.
  void SyncAt(std::vector<ObjectPtr> items, const std::string& rv) {
    ASSERT_TRUE(informer_->Start().ok());
    lw_->PushList(Page(std::move(items), rv));
    ASSERT_TRUE(lw_->WaitForOpenWatch(1));
    ASSERT_TRUE(Eventually([&] { return informer_->HasSynced(); }));
  }

  FakeClock clock_;
  MetricsRegistry metrics_;
  FakeListerWatcher* lw_ = nullptr;
  std::unique_ptr<SharedInformer> informer_;
};

TEST_F(SharedInformerTest, HandlersHearOfChangesAfterTheCacheHasThem) {
  auto handler = Handler(/*check_cache=*/true);
  auto handle = informer_->AddEventHandler(handler, {.name = "h"}).value();
  EXPECT_FALSE(handle->HasSynced());
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  ASSERT_TRUE(Eventually([&] { return handle->HasSynced(); }));
  EXPECT_THAT(handler->events(), ElementsAre("add a@1 initial", "add b@2 initial"));
  ASSERT_TRUE(lw_->SendEvents({Modified(Cm("a", 3)), Deleted(Cm("b", 4)), Added(Cm("c", 5))}));
  ASSERT_TRUE(Eventually([&] { return handler->count() == 5; }));
  EXPECT_THAT(handler->events(), ElementsAre("add a@1 initial", "add b@2 initial",
                                             "update a@1->3", "delete b@4", "add c@5"));
  EXPECT_EQ(informer_->store().Get("d/b").object, nullptr);
  EXPECT_EQ(informer_->store().Size(), 2u);
}

TEST_F(SharedInformerTest, ReadsReportTheResourceVersionTheCacheReached) {
  SyncAt({Cm("a", 1)}, "5");
  ASSERT_TRUE(Eventually([&] { return informer_->store().ResourceVersion() == "5"; }));
  ASSERT_TRUE(lw_->SendEvents({Modified(Cm("a", 6))}));
  ASSERT_TRUE(Eventually([&] { return informer_->store().Get("d/a").resource_version == "6"; }));
  ASSERT_TRUE(lw_->SendEvents({Bookmark("9")}));
  ASSERT_TRUE(Eventually([&] { return informer_->lister().List(LabelSelector()).resource_version == "9"; }));
}

TEST_F(SharedInformerTest, ALateHandlerGetsTheCacheFirstThenLiveEvents) {
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  auto late = Handler();
  auto handle = informer_->AddEventHandler(late, {.name = "late"}).value();
  ASSERT_TRUE(Eventually([&] { return handle->HasSynced(); }));
  EXPECT_THAT(late->events(), UnorderedElementsAre("add a@1 initial", "add b@2 initial"));
  ASSERT_TRUE(lw_->SendEvents({Added(Cm("c", 3))}));
  ASSERT_TRUE(Eventually([&] { return late->count() == 3; }));
  EXPECT_EQ(late->events()[2], "add c@3");
}

TEST_F(SharedInformerTest, ASlowHandlerNeitherBlocksOthersNorMissesChanges) {
  auto fast = Handler();
  auto slow = Handler();
  informer_->AddEventHandler(fast, {.name = "fast"}).value();
  auto slow_handle = informer_->AddEventHandler(slow, {.name = "slow", .buffer_size = 4}).value();
  SyncAt({}, "1");
  slow->Hold();
  std::vector<client::WatchEvent> events;
  for (int i = 0; i < 60; ++i) {
    const std::string name = absl::StrCat("k", i % 7);
    events.push_back(i < 7 ? Added(Cm(name, i + 2)) : Modified(Cm(name, i + 2)));
  }
  events.push_back(Deleted(Cm("k3", 100)));
  ASSERT_TRUE(lw_->SendEvents(events));
  ASSERT_TRUE(Eventually([&] { return fast->count() == 61; })) << "the fast handler is not held up";
  EXPECT_GT(slow_handle->overflows(), 0u);
  slow->Release();
  ASSERT_TRUE(Eventually([&] { return slow->view() == fast->view() && slow_handle->pending() == 0; }));
  EXPECT_GE(slow->resnapshots(), 1);
  EXPECT_EQ(slow->view().size(), 6u);
  EXPECT_EQ(slow->view().count("d/k3"), 0u);
}

TEST_F(SharedInformerTest, ARelistNotifiesOnlyWhatChangedAndTombstonesWhatIsGone) {
  auto handler = Handler();
  informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt({Cm("a", 1), Cm("b", 2), Cm("c", 3)}, "3");
  ASSERT_TRUE(Eventually([&] { return handler->count() == 3; }));
  ASSERT_TRUE(lw_->CloseWatch(Expired()));
  ASSERT_TRUE(Eventually([&] { return informer_->reflector_status().state == ReflectorState::kBackingOff; }));
  clock_.SetTime(informer_->reflector_status().backoff_until);
  lw_->PushList(Page({Cm("a", 1), Cm("b", 5)}, "9"));  // a unchanged, b changed, c deleted meanwhile
  ASSERT_TRUE(lw_->WaitForOpenWatch(2));
  ASSERT_TRUE(Eventually([&] { return handler->count() == 5; }));
  const std::vector<std::string> events = handler->events();
  EXPECT_THAT(std::vector<std::string>(events.begin() + 3, events.end()),
              ElementsAre("update b@2->5", "delete c@3 unknown"))
      << "nothing for a, which the relist found unchanged";
  EXPECT_EQ(informer_->store().Size(), 2u);
}

// The same with a compressed cache (thread_safe_store.h): ConfigMaps of 4 KiB, enough of them for
// the cache to train its dictionary at the first drain, so that the relist meets compressed
// objects: unchanged ones are recognised from the cache's metadata, the deleted one is read back
// (decompressed) for its tombstone.
TEST_F(SharedInformerTest, ARelistOfACompressedCacheNotifiesOnlyWhatChanged) {
  Create({.compression = StoreCompression::kZstd});
  const std::string payload(4000, 'x');
  auto big = [&](int i, int rv) {
    return MakeObject({.ns = "d",
                       .name = absl::StrCat("cm-", i),
                       .rv = absl::StrCat(rv),
                       .extra = absl::StrCat(R"("data":{"n":")", i, R"(","blob":")", payload,
                                             R"("})")});
  };
  constexpr int kCount = 600;  // 2.4 MiB
  std::vector<ObjectPtr> first;
  for (int i = 0; i < kCount; ++i) first.push_back(big(i, 1));
  auto handler = Handler();
  informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt(first, "1");
  ASSERT_TRUE(Eventually([&] { return handler->count() == kCount; }));
  ASSERT_TRUE(Eventually([&] {
    return informer_->store().memory().bytes * 2 < kCount * payload.size();
  }, absl::Seconds(10))) << "compressed once the first list drained: "
                         << informer_->store().memory().bytes;

  ASSERT_TRUE(lw_->CloseWatch(Expired()));
  ASSERT_TRUE(Eventually([&] { return informer_->reflector_status().state == ReflectorState::kBackingOff; }));
  clock_.SetTime(informer_->reflector_status().backoff_until);
  std::vector<ObjectPtr> relisted;  // cm-1 changed, cm-2 deleted meanwhile, the rest unchanged
  for (int i = 0; i < kCount; ++i) {
    if (i != 2) relisted.push_back(big(i, i == 1 ? 5 : 1));
  }
  lw_->PushList(Page(relisted, "9"));
  ASSERT_TRUE(lw_->WaitForOpenWatch(2));
  ASSERT_TRUE(Eventually([&] { return handler->count() == kCount + 2; }));
  const std::vector<std::string> events = handler->events();
  EXPECT_THAT(std::vector<std::string>(events.begin() + kCount, events.end()),
              UnorderedElementsAre("update cm-1@1->5", "delete cm-2@1 unknown"));
  EXPECT_EQ(informer_->store().Size(), size_t{kCount} - 1);
  const ObjectPtr got = informer_->store().Get("d/cm-1").object;
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->json(), big(1, 5)->json());
}

TEST_F(SharedInformerTest, ResyncRedeliversTheCacheToDueHandlersOnly) {
  auto resyncing = Handler();
  auto resync_handle =
      informer_->AddEventHandler(resyncing, {.name = "r", .resync_period = absl::Seconds(30)}).value();
  auto quiet = informer_->AddListener({.name = "q"}).value();
  SyncAt({Cm("a", 1)}, "1");
  ASSERT_TRUE(Eventually([&] { return resyncing->count() == 1; }));
  std::vector<Notification> drained;
  quiet->Pop(100, &drained, false);
  quiet->Done(drained);
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(Eventually([&] { return resyncing->count() == 2; }));
  EXPECT_EQ(resyncing->events()[1], "update a@1->1");
  EXPECT_EQ(quiet->pending(), 0u) << "a handler without resync is not told";
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(Eventually([&] { return resyncing->count() == 3; }));
}

TEST_F(SharedInformerTest, RemovedHandlersHearNothingMore) {
  auto handler = Handler();
  auto handle = informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt({Cm("a", 1)}, "1");
  ASSERT_TRUE(Eventually([&] { return handler->count() == 1; }));
  ASSERT_TRUE(informer_->RemoveEventHandler(handle).ok());
  EXPECT_EQ(informer_->RemoveEventHandler(handle).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(lw_->SendEvents({Added(Cm("b", 2))}));
  ASSERT_TRUE(Eventually([&] { return informer_->store().Size() == 2; }));
  EXPECT_EQ(handler->count(), 1u);
  EXPECT_EQ(handle->pending(), 0u);
}

TEST_F(SharedInformerTest, PullListenersAreToldWhenThereIsSomethingToTake) {
  std::atomic<int> ready{0};
  auto listener = informer_->AddListener({.name = "grpc", .on_ready = [&] { ++ready; }}).value();
  std::vector<Notification> got;
  EXPECT_TRUE(listener->Pop(10, &got, false));
  EXPECT_THAT(got, IsEmpty());
  SyncAt({Cm("a", 1)}, "1");
  ASSERT_TRUE(Eventually([&] { return ready.load() >= 1; }));
  EXPECT_TRUE(listener->Pop(10, &got, false));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].is_in_initial_list);
  EXPECT_FALSE(listener->HasSynced());
  listener->Done(got);
  EXPECT_TRUE(listener->HasSynced());
}

TEST_F(SharedInformerTest, ObjectsAreTransformedBeforeTheyAreStored) {
  SyncAt({MakeObject({.ns = "d", .name = "a", .extra_metadata = R"("managedFields":[{"m":1}])"})},
         "1");
  ObjectPtr stored = informer_->store().Get("d/a").object;
  ASSERT_NE(stored, nullptr);
  EXPECT_THAT(stored->json(), ::testing::Not(HasSubstr("managedFields")));
  ASSERT_TRUE(lw_->SendEvents({Added(MakeObject(
      {.ns = "d", .name = "b", .rv = "2", .extra_metadata = R"("managedFields":[{"m":1}])"}))}));
  ASSERT_TRUE(Eventually([&] { return informer_->store().Get("d/b").object != nullptr; }));
  EXPECT_THAT(informer_->store().Get("d/b").object->json(),
              ::testing::Not(HasSubstr("managedFields")))
      << "live events are transformed before they are stored too";
}

TEST_F(SharedInformerTest, IndexesAreDeclaredPerInformer) {
  Create({.indexers = {IndexSpec::Label("by-app", "app")}});
  SyncAt({MakeObject({.ns = "d", .name = "a", .labels = {{"app", "web"}}}),
          MakeObject({.ns = "d", .name = "b", .labels = {{"app", "db"}}})},
         "1");
  EXPECT_THAT(informer_->store().IndexKeys("by-app", "web").value().keys, ElementsAre("d/a"));
  ASSERT_TRUE(informer_->AddIndexers({IndexSpec::Field("by-name", "metadata.name")}).ok());
  EXPECT_THAT(informer_->store().IndexKeys("by-name", "b").value().keys, ElementsAre("d/b"));
}

TEST_F(SharedInformerTest, MemoryIsAccountedAndExported) {
  auto handler = Handler();
  informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  InformerMemory memory = informer_->memory();
  EXPECT_EQ(memory.store.objects, 2u);
  EXPECT_GT(memory.store.bytes, 2 * Cm("a", 1)->json().size());
  clock_.Advance(absl::Seconds(10));  // the metrics period
  const std::string text = metrics_.Render();
  EXPECT_THAT(text, HasSubstr("informer_objects{informer=\"test\"} 2"));
  EXPECT_THAT(text, HasSubstr("informer_synced{informer=\"test\"} 1"));
  EXPECT_THAT(text, HasSubstr("informer_handler_pending{informer=\"test\",handler=\"h\"}"));
  EXPECT_THAT(text, HasSubstr("informer_object_bytes{informer=\"test\"}"));
}

TEST_F(SharedInformerTest, AHandlersSeriesGoWithTheLastHandlerOfItsNameAndAllWithStop) {
  auto handler = Handler();
  auto first = informer_->AddEventHandler(handler, {.name = "h"}).value();
  auto second = informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt({Cm("a", 1)}, "2");
  clock_.Advance(absl::Seconds(10));  // the metrics period
  const std::string series = "informer_handler_pending{informer=\"test\",handler=\"h\"}";
  ASSERT_TRUE(informer_->RemoveEventHandler(first).ok());
  clock_.Advance(absl::Seconds(10));  // the remaining handler still writes its series
  EXPECT_THAT(metrics_.Render(), HasSubstr(series));
  ASSERT_TRUE(informer_->RemoveEventHandler(second).ok());
  EXPECT_THAT(metrics_.Render(), ::testing::Not(HasSubstr(series)));
  informer_->Stop();
  EXPECT_THAT(metrics_.Render(), ::testing::Not(HasSubstr("informer=\"test\"")));
}

TEST_F(SharedInformerTest, StoppingFreesTheCacheAndIsFinal) {
  auto handler = Handler();
  auto handle = informer_->AddEventHandler(handler, {.name = "h"}).value();
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  informer_->Stop();
  EXPECT_EQ(informer_->store().Size(), 0u);
  EXPECT_EQ(informer_->memory().store.objects, 0u);
  EXPECT_EQ(informer_->memory().pending_notifications, 0u);
  EXPECT_EQ(informer_->reflector_status().state, ReflectorState::kStopped);
  EXPECT_FALSE(lw_->watch_open());
  EXPECT_EQ(informer_->Start().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(informer_->AddEventHandler(Handler()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SharedInformerTest, StartingTwiceIsRefused) {
  ASSERT_TRUE(informer_->Start().ok());
  EXPECT_EQ(informer_->Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SharedInformerTest, InvalidOptionsAreRejected) {
  EXPECT_FALSE(SharedInformer::Create({}).ok()) << "no lister-watcher";
  SharedInformerOptions bad;
  bad.lister_watcher = std::make_unique<FakeListerWatcher>();
  bad.indexers = {IndexSpec::Field("f", "a..b")};
  EXPECT_EQ(SharedInformer::Create(std::move(bad)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(informer_->AddEventHandler(Handler(), {.resync_period = absl::Milliseconds(10)})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace informerd::informer
