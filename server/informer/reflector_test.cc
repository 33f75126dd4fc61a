#include "server/informer/reflector.h"

#include <set>
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
using testing::Added;
using testing::Bookmark;
using testing::Deleted;
using testing::FakeListerWatcher;
using testing::MakeObject;
using testing::Modified;
using testing::Obj;
using testing::Page;

ObjectPtr Cm(const std::string& name, int rv) { return Obj("default", name, absl::StrCat(rv)); }

absl::Status ApiStatus(int code, std::string reason, std::string cause = "") {
  client::ApiError error;
  error.code = code;
  error.reason = std::move(reason);
  error.message = absl::StrCat("fake ", error.reason);
  if (!cause.empty()) error.causes.push_back({.type = cause});
  return client::ToStatus(error);
}
absl::Status Expired() { return ApiStatus(410, "Expired"); }
absl::Status TooManyRequests() { return ApiStatus(429, "TooManyRequests"); }

// The cache behind the FIFO, as the informer's store would be.
class Known : public KnownObjects {
 public:
  void Set(std::vector<ObjectPtr> objects) {
    MutexLock lock(&mu_);
    objects_ = std::move(objects);
  }
  ObjectPtr GetByKey(absl::string_view key) const override {
    MutexLock lock(&mu_);
    for (const ObjectPtr& o : objects_) {
      if (o->key() == key) return o;
    }
    return nullptr;
  }
  void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const override {
    MutexLock lock(&mu_);
    for (const ObjectPtr& o : objects_) fn(o);
  }

 private:
  mutable Mutex mu_;
  std::vector<ObjectPtr> objects_ ABSL_GUARDED_BY(mu_);
};

class ReflectorTest : public ::testing::Test {
 protected:
  void SetUp() override { fifo_ = DeltaFIFO::Create({.known_objects = &known_}).value(); }
  void TearDown() override {
    lw_.Close();  // a List waiting for a scripted answer returns
    reflector_.reset();
  }

  void Start(ReflectorOptions options = {}) {
    options.name = "test";
    options.lister_watcher = &lw_;
    options.store = fifo_.get();
    options.known_objects = &known_;
    options.clock = &clock_;
    options.seed = 42;
    if (!streaming_) options.use_streaming_list = false;
    reflector_ = Reflector::Create(std::move(options)).value();
    reflector_->Start();
  }

  // Everything queued in the FIFO, one string per item, deltas joined by "; ".
  std::vector<std::string> Drain() {
    std::vector<std::string> out;
    while (fifo_->Len() > 0) {
      EXPECT_TRUE(fifo_->TryPop([&](Deltas& deltas, const PopContext&) {
                      std::string s;
                      for (const Delta& d : deltas) {
                        absl::StrAppend(&s, s.empty() ? "" : "; ", DeltaTypeName(d.type), " ",
                                        d.object->name(), "@", d.object->resource_version(),
                                        d.final_state_unknown ? " (tombstone)" : "");
                      }
                      out.push_back(s);
                      return absl::OkStatus();
                    }).ok());
    }
    return out;
  }

  ReflectorStatus Status() { return reflector_->status(); }

  // Waits until the reflector begins its next backoff and returns its status then.
  ReflectorStatus AwaitBackoff() {
    EXPECT_TRUE(Eventually([&] {
      ReflectorStatus s = Status();
      return s.state == ReflectorState::kBackingOff && s.backoffs > backoffs_seen_;
    }));
    ReflectorStatus s = Status();
    backoffs_seen_ = s.backoffs;
    return s;
  }
  // Waits for the next backoff, then moves the clock to its end.
  void FinishBackoff() { clock_.SetTime(AwaitBackoff().backoff_until); }

  // A first sync: lists `items` at `rv` and waits for the watch.
  void SyncAt(std::vector<ObjectPtr> items, const std::string& rv) {
    lw_.PushList(Page(std::move(items), rv));
    ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  }

  bool streaming_ = false;
  uint64_t backoffs_seen_ = 0;
  FakeClock clock_;
  FakeListerWatcher lw_;
  Known known_;
  std::unique_ptr<DeltaFIFO> fifo_;
  std::unique_ptr<Reflector> reflector_;
};

TEST_F(ReflectorTest, ListsThenWatchesFromTheListResourceVersion) {
  Start();
  SyncAt({Cm("a", 1)}, "1");
  ASSERT_THAT(lw_.list_requests(), ::testing::SizeIs(1));
  EXPECT_EQ(lw_.list_requests()[0].resource_version, "0") << "the first list may be served from cache";
  EXPECT_EQ(lw_.list_requests()[0].limit, 500);
  WatchRequest watch = lw_.watch_requests()[0];
  EXPECT_EQ(watch.resource_version, "1");
  EXPECT_TRUE(watch.allow_bookmarks);
  EXPECT_FALSE(watch.send_initial_events);
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@1"));
  EXPECT_EQ(Status().state, ReflectorState::kWatching);
  EXPECT_EQ(Status().last_sync_resource_version, "1");
  EXPECT_TRUE(fifo_->HasSynced());
}

// client-go TestReflectorListAndWatch: events flow through; a closed watch resumes from the last
// event's RV.
TEST_F(ReflectorTest, ClosedWatchResumesFromTheLastEvent) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("foo", 2)), Added(Cm("bar", 3))}));
  ASSERT_TRUE(lw_.CloseWatch(absl::OkStatus()));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("baz", 4)), Added(Cm("qux", 5)), Added(Cm("zoo", 6))}));
  EXPECT_THAT(lw_.watch_requests()[1].resource_version, "3");
  EXPECT_THAT(Drain(), ElementsAre("Added foo@2", "Added bar@3", "Added baz@4", "Added qux@5",
                                   "Added zoo@6"));
  EXPECT_EQ(lw_.list_requests().size(), 1u) << "a clean close needs no relist";
  EXPECT_EQ(Status().events, 5u);
}

TEST_F(ReflectorTest, WatchEventsBecomeDeltas) {
  Start();
  SyncAt({Cm("a", 1)}, "1");
  Drain();
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("b", 2)), Modified(Cm("a", 3)), Deleted(Cm("b", 4))}));
  EXPECT_THAT(Drain(), ElementsAre("Added b@2; Deleted b@4", "Updated a@3"));
  EXPECT_EQ(Status().last_sync_resource_version, "4");
}

TEST_F(ReflectorTest, BookmarksOnlyAdvanceTheResourceVersion) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.SendEvents({Bookmark("7")}));
  EXPECT_THAT(Drain(), IsEmpty());
  EXPECT_EQ(Status().last_sync_resource_version, "7");
  EXPECT_EQ(Status().bookmarks, 1u);
  ASSERT_TRUE(lw_.CloseWatch(absl::OkStatus()));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "7");
}

TEST_F(ReflectorTest, AQuietWatchClosedByTheServerIsResumedAtOnce) {
  Start();
  SyncAt({}, "1");
  clock_.Advance(absl::Minutes(2));  // longer than a very short watch, shorter than a stall
  const absl::Time closed_at = clock_.Now();
  ASSERT_TRUE(lw_.CloseWatch(absl::OkStatus()));
  // The next watch opens while the fake clock stands still: no backoff or timer in between.
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_EQ(clock_.Now(), closed_at);
  EXPECT_EQ(Status().backoffs, 0u);
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "1");
  EXPECT_EQ(lw_.list_requests().size(), 1u);
  EXPECT_TRUE(Status().last_error.ok());
}

TEST_F(ReflectorTest, AVeryShortWatchIsAnErrorThatRelistsAfterABackoff) {
  Start();
  SyncAt({}, "5");
  ASSERT_TRUE(lw_.CloseWatch(absl::OkStatus()));  // at once, nothing delivered
  FinishBackoff();
  EXPECT_THAT(Status().last_error.message(), HasSubstr("very short watch"));
  ASSERT_TRUE(lw_.WaitForLists(2));
  EXPECT_EQ(lw_.list_requests()[1].resource_version, "5");
  EXPECT_EQ(lw_.list_requests()[1].limit, 0) << "unpaged, so the watch cache can serve it";
}

TEST_F(ReflectorTest, ExpiredWatchRelistsAtTheLastSyncedResourceVersion) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 8))}));
  ASSERT_TRUE(lw_.CloseWatch(Expired()));  // an ERROR event with 410 mid-stream
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(2));
  EXPECT_EQ(lw_.list_requests()[1].resource_version, "8");
  lw_.PushList(Page({Cm("a", 9)}, "9"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "9");
}

TEST_F(ReflectorTest, ExpiredAtWatchStartRelists) {
  Start();
  lw_.FailNextWatch(Expired());
  lw_.PushList(Page({}, "3"));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(2));
  EXPECT_EQ(lw_.list_requests()[1].resource_version, "3");
}

// client-go TestBackoffOnTooManyRequests: 429 at watch start and as an ERROR event both back off
// and watch again, without a relist.
TEST_F(ReflectorTest, TooManyRequestsBacksOffAndWatchesAgainWithoutRelisting) {
  Start();
  lw_.FailNextWatch(TooManyRequests());
  lw_.PushList(Page({}, "1"));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  ASSERT_TRUE(lw_.CloseWatch(TooManyRequests()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(3));
  EXPECT_EQ(lw_.list_requests().size(), 1u);
  for (const WatchRequest& w : lw_.watch_requests()) EXPECT_EQ(w.resource_version, "1");
  EXPECT_TRUE(client::IsTooManyRequests(Status().last_error));
}

TEST_F(ReflectorTest, RefusedConnectionsBackOffAndWatchAgainWithoutRelisting) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.CloseWatch(absl::UnavailableError("Couldn't connect to server")));
  lw_.FailNextWatch(absl::UnavailableError("Couldn't connect to server"));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForWatches(2));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(3));
  EXPECT_EQ(lw_.list_requests().size(), 1u);
}

TEST_F(ReflectorTest, ServerErrorsAndBrokenStreamsRetryTheWatch) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2))}));
  ASSERT_TRUE(lw_.CloseWatch(ApiStatus(500, "InternalError")));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  ASSERT_TRUE(lw_.CloseWatch(absl::DataLossError("garbage in the stream")));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(3));
  EXPECT_EQ(lw_.watch_requests()[2].resource_version, "2");
  EXPECT_EQ(lw_.list_requests().size(), 1u);
}

TEST_F(ReflectorTest, OtherErrorsRelistAfterABackoff) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.CloseWatch(ApiStatus(403, "Forbidden")));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(2));
}

TEST_F(ReflectorTest, ListFailuresAreRetriedForeverWithGrowingBackoff) {
  Start();
  absl::Duration previous_base = absl::ZeroDuration();
  for (int i = 0; i < 8; ++i) {
    lw_.PushList(ApiStatus(500, "InternalError"));
    ReflectorStatus s = AwaitBackoff();
    EXPECT_TRUE(client::IsInternalError(s.last_error));
    const absl::Duration wait = s.backoff_until - clock_.Now();
    EXPECT_LE(wait, absl::Seconds(60));
    if (i < 6) {
      EXPECT_GT(wait, previous_base) << i;
    }
    previous_base = std::min(absl::Milliseconds(800) * (1 << i), absl::Seconds(30));
    clock_.SetTime(s.backoff_until);
    ASSERT_TRUE(lw_.WaitForLists(i + 2));
  }
  lw_.PushList(Page({Cm("a", 1)}, "1"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@1"));
}

// client-go TestReflectorFullListIfExpired / relistResourceVersion.
TEST_F(ReflectorTest, AnExpiredListResourceVersionIsRetriedAtOnceWithAConsistentRead) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  lw_.PushList(Expired());            // LIST at "1": too old
  lw_.PushList(Page({Cm("a", 10)}, "10"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  std::vector<ListRequest> lists = lw_.list_requests();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[1].resource_version, "1");
  EXPECT_EQ(lists[2].resource_version, "") << "retried without a backoff, as a consistent read";
  EXPECT_EQ(lists[2].limit, 500);
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "10");
  // The RV is usable again: the next relist is at the last synced RV.
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(4));
  EXPECT_EQ(lw_.list_requests()[3].resource_version, "10");
}

TEST_F(ReflectorTest, ATooLargeListResourceVersionIsRetriedWithAConsistentRead) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  lw_.PushList(ApiStatus(504, "Timeout", "ResourceVersionTooLarge"));
  lw_.PushList(Page({}, "20"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_EQ(lw_.list_requests()[2].resource_version, "");
}

TEST_F(ReflectorTest, PagedListsFollowContinueTokens) {
  Start();
  lw_.PushList(Page({Cm("a", 1), Cm("b", 2)}, "5", "token-1"));
  lw_.PushList(Page({Cm("c", 3)}, "5", ""));
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  std::vector<ListRequest> lists = lw_.list_requests();
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(lists[1].continue_token, "token-1");
  EXPECT_EQ(lists[1].resource_version, "") << "a continue token carries its own RV";
  EXPECT_EQ(lists[1].limit, 500);
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@1", "Replaced b@2", "Replaced c@3"));
  EXPECT_EQ(lw_.watch_requests()[0].resource_version, "5");
}

// client-go's pager with FullListIfExpired.
TEST_F(ReflectorTest, AnExpiredContinueTokenListsEverythingInOneRequest) {
  Start();
  lw_.PushList(Page({Cm("a", 1)}, "5", "token-1"));
  lw_.PushList(Expired());
  lw_.PushList(Page({Cm("a", 1), Cm("b", 7)}, "7"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  std::vector<ListRequest> lists = lw_.list_requests();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[2].continue_token, "");
  EXPECT_EQ(lists[2].resource_version, "0");
  EXPECT_EQ(lists[2].limit, 0);
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@1", "Replaced b@7")) << "page one is not kept twice";
}

// client-go TestReflectorNotPaginatingNotConsistentReads and
// TestReflectorPaginatingNonConsistentReadsIfWatchCacheDisabled.
TEST_F(ReflectorTest, RelistsArePagedOnlyIfTheFirstListWas) {
  Start();
  SyncAt({}, "10");
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(2));
  EXPECT_EQ(lw_.list_requests()[1].limit, 0);
}

TEST_F(ReflectorTest, RelistsStayPagedWhenTheServerPagedResourceVersionZero) {
  Start();
  lw_.PushList(Page({Cm("a", 1)}, "10", "more"));
  lw_.PushList(Page({Cm("b", 2)}, "10"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(3));
  EXPECT_EQ(lw_.list_requests()[2].resource_version, "10");
  EXPECT_EQ(lw_.list_requests()[2].limit, 500);
}

TEST_F(ReflectorTest, DeletesMissedWhileDisconnectedSurfaceAsTombstones) {
  Start();
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  Drain();
  known_.Set({Cm("a", 1), Cm("b", 2)});  // what the informer's cache holds by now
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  lw_.PushList(Page({Cm("a", 1)}, "9"));  // b was deleted while we were away
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@1", "Deleted b@2 (tombstone)"));
}

TEST_F(ReflectorTest, RelistsReuseUnchangedCachedObjects) {
  ObjectPtr cached = Cm("a", 1);
  known_.Set({cached});
  Start();
  SyncAt({Cm("a", 1), Cm("b", 2)}, "2");
  std::vector<ObjectPtr> queued = fifo_->List();
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_EQ(queued[0], cached) << "same key, uid and RV: the cached object, not a second copy";
  EXPECT_EQ(queued[1]->name(), "b");
}

TEST_F(ReflectorTest, ListedObjectsAreTransformedBeforeQueueingButLiveEventsAreNot) {
  auto transform = Transform::Create({}).value();  // strips managedFields
  ReflectorOptions options;
  options.transform = transform.get();
  Start(options);
  auto managed = [](const std::string& name, int rv) {
    return MakeObject({.name = name, .rv = absl::StrCat(rv),
                       .extra_metadata = R"("managedFields":[{"manager":"m"}])"});
  };
  SyncAt({managed("a", 1)}, "1");
  ASSERT_TRUE(lw_.SendEvents({Added(managed("b", 2))}));
  std::vector<ObjectPtr> queued = fifo_->List();
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_THAT(queued[0]->json(), ::testing::Not(HasSubstr("managedFields")));
  EXPECT_THAT(queued[1]->json(), HasSubstr("managedFields"))
      << "left to the consumer, off the transport's thread";
  reflector_.reset();  // before `transform`
}

TEST_F(ReflectorTest, EventsOfAnotherKindAreDropped) {
  ReflectorOptions options;
  options.expected_kind = "ConfigMap";
  Start(options);
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.SendEvents({Added(MakeObject({.name = "p", .rv = "2", .kind = "Pod"})),
                              Added(Cm("c", 3))}));
  EXPECT_THAT(Drain(), ElementsAre("Added c@3"));
  EXPECT_EQ(Status().wrong_kind_dropped, 1u);
}

TEST_F(ReflectorTest, WatchTimeoutsAreRandomBetweenFiveAndTenMinutes) {
  Start();
  SyncAt({}, "1");
  std::set<int64_t> seen;
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(lw_.CloseWatch(absl::OkStatus()));
    ASSERT_TRUE(lw_.WaitForOpenWatch(i + 2));
  }
  for (const WatchRequest& w : lw_.watch_requests()) {
    EXPECT_GE(w.timeout_seconds, 300);
    EXPECT_LT(w.timeout_seconds, 600);
    seen.insert(w.timeout_seconds);
  }
  EXPECT_GT(seen.size(), 5u);
}

TEST_F(ReflectorTest, AStalledWatchIsTornDownAndResumedWithoutRelisting) {
  ReflectorOptions options;
  options.stall_timeout = absl::Minutes(3);
  Start(options);
  SyncAt({}, "1");
  EXPECT_EQ(lw_.watch_requests()[0].idle_timeout, absl::Minutes(3)) << "byte-level detection too";
  clock_.Advance(absl::Minutes(2));
  ASSERT_TRUE(lw_.SendEvents({Bookmark("4")}));  // progress: the deadline moves
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(lw_.watch_requests().size(), 1u);
  EXPECT_EQ(Status().stalls, 0u);
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "4");
  EXPECT_EQ(Status().stalls, 1u);
  EXPECT_THAT(Status().last_error.message(), HasSubstr("stalled"));
  EXPECT_EQ(lw_.list_requests().size(), 1u);
}

TEST_F(ReflectorTest, StopInterruptsABackoff) {
  Start();
  SyncAt({}, "1");
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  AwaitBackoff();
  reflector_->Stop();
  EXPECT_EQ(Status().state, ReflectorState::kStopped);
}

TEST_F(ReflectorTest, StopEndsTheWatch) {
  Start();
  SyncAt({}, "1");
  reflector_->Stop();
  EXPECT_FALSE(lw_.watch_open());
  EXPECT_FALSE(lw_.SendEvents({Added(Cm("late", 9))})) << "no callback after the handle is gone";
  EXPECT_EQ(Status().state, ReflectorState::kStopped);
}

// ---- streaming list (WatchList) ----

class StreamingReflectorTest : public ReflectorTest {
 protected:
  StreamingReflectorTest() { streaming_ = true; }
};

TEST_F(StreamingReflectorTest, SyncsFromInitialEventsAndKeepsTheStreamAsTheWatch) {
  Start();
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  WatchRequest w = lw_.watch_requests()[0];
  EXPECT_TRUE(w.send_initial_events);
  EXPECT_TRUE(w.allow_bookmarks);
  EXPECT_EQ(w.resource_version, "");
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2)), Added(Cm("b", 3))}));
  EXPECT_FALSE(fifo_->HasSynced()) << "nothing is queued before the initial events end";
  EXPECT_THAT(fifo_->ListKeys(), IsEmpty());
  ASSERT_TRUE(lw_.SendEvents({Bookmark("4", /*initial_events_end=*/true), Added(Cm("c", 5))}));
  EXPECT_THAT(Drain(), ::testing::UnorderedElementsAre("Replaced a@2", "Replaced b@3", "Added c@5"));
  EXPECT_EQ(Status().syncs, 1u);
  EXPECT_EQ(Status().streaming_syncs, 1u);
  EXPECT_EQ(Status().last_sync_resource_version, "5");
  EXPECT_EQ(lw_.watch_requests().size(), 1u) << "the same stream goes on";
  EXPECT_THAT(lw_.list_requests(), IsEmpty());
}

TEST_F(StreamingReflectorTest, BookmarksWithoutTheAnnotationDoNotEndTheInitialEvents) {
  Start();
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2)), Bookmark("3")}));
  EXPECT_EQ(Status().syncs, 0u);
  EXPECT_EQ(Status().state, ReflectorState::kListing);
  EXPECT_THAT(fifo_->ListKeys(), IsEmpty());
}

TEST_F(StreamingReflectorTest, InitialEventsAreAppliedToATemporarySet) {
  Start();
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2)), Modified(Cm("a", 3)), Added(Cm("b", 4)),
                              Deleted(Cm("b", 5)), Bookmark("5", true)}));
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@3"));
}

TEST_F(StreamingReflectorTest, ARejectedStreamingListFallsBackToListingForGood) {
  lw_.FailNextWatch(ApiStatus(422, "Invalid"));  // before Start: the first request is the watch
  Start();
  lw_.PushList(Page({Cm("a", 1)}, "1"));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_FALSE(lw_.watch_requests()[1].send_initial_events);
  EXPECT_EQ(lw_.watch_requests()[1].resource_version, "1");
  EXPECT_TRUE(Status().streaming_list_unsupported);
  EXPECT_EQ(Status().streaming_list_fallbacks, 1u);
  // A later relist lists directly.
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForLists(2));
  EXPECT_EQ(lw_.watch_requests().size(), 2u);
}

TEST_F(StreamingReflectorTest, AStreamingListEndingEarlyFallsBackOnlyOnce) {
  Start();
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  lw_.PushList(Page({}, "2"));
  ASSERT_TRUE(lw_.CloseWatch(absl::UnavailableError("connection reset")));
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  EXPECT_FALSE(lw_.watch_requests()[1].send_initial_events);
  EXPECT_FALSE(Status().streaming_list_unsupported);
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(3));
  EXPECT_TRUE(lw_.watch_requests()[2].send_initial_events) << "streaming is tried again";
  EXPECT_EQ(lw_.watch_requests()[2].resource_version, "2");
}

TEST_F(StreamingReflectorTest, ARelistByStreamingDetectsDeletions) {
  Start();
  ASSERT_TRUE(lw_.WaitForOpenWatch(1));
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2)), Added(Cm("b", 3)), Bookmark("3", true)}));
  Drain();
  known_.Set({Cm("a", 2), Cm("b", 3)});
  ASSERT_TRUE(lw_.CloseWatch(Expired()));
  FinishBackoff();
  ASSERT_TRUE(lw_.WaitForOpenWatch(2));
  ASSERT_TRUE(lw_.SendEvents({Added(Cm("a", 2)), Bookmark("9", true)}));
  EXPECT_THAT(Drain(), ElementsAre("Replaced a@2", "Deleted b@3 (tombstone)"));
}

}  // namespace
}  // namespace informerd::informer
