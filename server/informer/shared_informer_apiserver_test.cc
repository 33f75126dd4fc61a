// SharedInformer over ClientListerWatcher against testing/apiserver (a real process on a real
// socket), one test per fault the fake server can inject: after each, the cache must hold exactly
// the server's objects (keys, uids, resourceVersions), and the reflector must have recovered the
// way docs/semantics.md §2 ("When a watch ends") says (relist or not).
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/apiserver_fixture.h"
#include "server/informer/shared_informer.h"

namespace informerd::informer {
namespace {

using ::testing::HasSubstr;
using testing::ApiServerFixture;

// Counts what handlers are told about deletions.
class DeletionCounter : public ResourceEventHandler {
 public:
  void OnAdd(const ObjectPtr&, bool) override {}
  void OnUpdate(const ObjectPtr&, const ObjectPtr&) override {}
  void OnDelete(const ObjectPtr&, bool final_state_unknown) override {
    MutexLock lock(&mu_);
    ++(final_state_unknown ? tombstones_ : deletes_);
  }
  int tombstones() {
    MutexLock lock(&mu_);
    return tombstones_;
  }

 private:
  Mutex mu_;
  int deletes_ ABSL_GUARDED_BY(mu_) = 0;
  int tombstones_ ABSL_GUARDED_BY(mu_) = 0;
};

class SharedInformerApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = absl::AsciiStrToLower(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (char& c : name) {
      if (!absl::ascii_isalnum(c)) c = '-';
    }
    name = absl::StrCat("inf-", name.substr(0, 50));
    fixture_ = std::make_unique<ApiServerFixture>(name);
    absl::Status seeded = fixture_->Seed(40);
    ASSERT_TRUE(seeded.ok()) << seeded;
  }
  void TearDown() override { informer_.reset(); }

  void Start(SharedInformerOptions options = {}) {
    informer_ = fixture_->NewInformer(std::move(options));
    deletions_ = std::make_shared<DeletionCounter>();
    ASSERT_TRUE(informer_->AddEventHandler(deletions_, {.name = "deletions"}).ok());
    ASSERT_TRUE(informer_->Start().ok());
    ASSERT_TRUE(fixture_->WaitConverged(*informer_).ok());
  }

  // Some creates, updates and deletes through the verify client.
  void Churn(const std::string& tag) {
    absl::StatusOr<testing::State> state = fixture_->ServerState();
    ASSERT_TRUE(state.ok()) << state.status();
    int i = 0;
    for (const auto& [key, s] : *state) {
      const std::string name = key.substr(key.find('/') + 1);
      if (i < 4) {
        ASSERT_TRUE(fixture_->Update(name).ok());
      }
      if (i == 4) {
        ASSERT_TRUE(fixture_->Delete(name).ok());
      }
      if (++i > 4) break;
    }
    ASSERT_TRUE(fixture_->Create(absl::StrCat("new-", tag)).ok());
  }

  void ExpectConverged() {
    absl::Status s = fixture_->WaitConverged(*informer_);
    EXPECT_TRUE(s.ok()) << s;
  }

  absl::Status CloseWatches() {
    return fixture_->Immediate(
        absl::StrCat(R"({"type":"close-watches","namespace":")", fixture_->ns(), R"("})"));
  }

  ReflectorStatus Status() { return informer_->reflector_status(); }

  std::unique_ptr<ApiServerFixture> fixture_;
  std::unique_ptr<SharedInformer> informer_;
  std::shared_ptr<DeletionCounter> deletions_;
};

TEST_F(SharedInformerApiServerTest, SyncsByListingAndFollowsChanges) {
  Start({.use_streaming_list = false});
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
  EXPECT_EQ(Status().streaming_syncs, 0u);
  EXPECT_GE(Status().events, 6u);
}

TEST_F(SharedInformerApiServerTest, SyncsByStreamingListWhenTheServerSupportsIt) {
  Start({.use_streaming_list = true});
  EXPECT_EQ(Status().streaming_syncs, 1u);
  EXPECT_EQ(Status().list_requests, 0u);
  Churn("a");
  ExpectConverged();
}

TEST_F(SharedInformerApiServerTest, GoneInTheMiddleOfAWatchRelists) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"gone","verb":"watch","afterEvents":2)").ok());
  ASSERT_TRUE(CloseWatches().ok());  // the next watch carries the fault
  Churn("a");
  ExpectConverged();
  EXPECT_GE(Status().syncs, 2u);
  EXPECT_GE(Status().backoffs, 1u);
}

TEST_F(SharedInformerApiServerTest, GoneAtWatchStartAsAnHttpStatusRelists) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"gone","verb":"watch","mode":"status")").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  EXPECT_GE(Status().syncs, 2u);
}

TEST_F(SharedInformerApiServerTest, GoneOnTheFirstListIsRetriedAsAConsistentRead) {
  ASSERT_TRUE(fixture_->Fault(R"("type":"gone","verb":"list")").ok());
  Start({.use_streaming_list = false});
  EXPECT_EQ(Status().syncs, 1u);
  EXPECT_EQ(Status().list_requests, 2u);
  EXPECT_EQ(Status().backoffs, 0u) << "retried at once";
}

TEST_F(SharedInformerApiServerTest, GoneOnAStreamingListFallsBackToListing) {
  ASSERT_TRUE(fixture_->Fault(R"("type":"gone","verb":"watch","mode":"status")").ok());
  Start({.use_streaming_list = true});
  EXPECT_EQ(Status().streaming_list_fallbacks, 1u);
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, TooManyRequestsDoNotCauseARelist) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"too-many-requests","verb":"watch","count":2,"retryAfterSeconds":1)").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, AnInternalErrorMidWatchRetriesTheWatchWithoutARelist) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"internal-error","verb":"watch","afterEvents":1,"message":"etcd leader changed")").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
  EXPECT_THAT(Status().last_error.message(), HasSubstr("etcd leader changed"));
}

TEST_F(SharedInformerApiServerTest, TruncatedAndGarbledStreamsAreResumed) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"truncate","verb":"watch","afterEvents":1)").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  ASSERT_TRUE(fixture_->Fault(R"("type":"garbage","verb":"watch","afterEvents":1)").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("b");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, ClosedWatchesAreResumedAtOnce) {
  Start();
  for (int i = 0; i < 3; ++i) {
    const ReflectorStatus before = Status();
    ASSERT_TRUE(CloseWatches().ok());
    // A new watch starts without a backoff wait (a server-closed watch is not an error) ...
    ASSERT_TRUE(Eventually([&] { return Status().watches_started > before.watches_started; }))
        << "round " << i;
    EXPECT_EQ(Status().backoffs, before.backoffs) << "round " << i;
    // ... from where the last one ended: what changes next arrives without a relist.
    Churn(absl::StrCat(i));
    ExpectConverged();
  }
  EXPECT_EQ(Status().syncs, 1u);
  EXPECT_EQ(Status().backoffs, 0u);
}

TEST_F(SharedInformerApiServerTest, ASlowDripStillConverges) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"slow","verb":"watch","bytesPerSecond":4000,"count":-1)").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, AStalledWatchIsTornDownAndResumed) {
  Start();
  ASSERT_TRUE(fixture_->Fault(R"("type":"stall","verb":"watch")").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ExpectConverged();
  EXPECT_GE(Status().stalls, 1u);
  EXPECT_EQ(Status().syncs, 1u) << "resumed from the last resourceVersion, not relisted";
}

TEST_F(SharedInformerApiServerTest, CompactedHistoryForcesARelist) {
  Start();
  // The informer falls behind (its next watch hangs), changes happen, the history is compacted:
  // the watch it resumes with starts too far back.
  ASSERT_TRUE(fixture_->Fault(R"("type":"stall","verb":"watch")").ok());
  ASSERT_TRUE(CloseWatches().ok());
  Churn("a");
  ASSERT_TRUE(fixture_->Immediate(R"({"type":"compact","resource":"configmaps"})").ok());
  ExpectConverged();
  EXPECT_GE(Status().syncs, 2u);
}

TEST_F(SharedInformerApiServerTest, RefusedConnectionsAreRetriedWithoutARelist) {
  Start();
  const uint64_t watches = Status().watches_started;
  ASSERT_TRUE(fixture_->Immediate(R"({"type":"refuse","durationMs":800})").ok());
  // The informer notices (its watch is reset and re-watching is refused for a while)...
  ASSERT_TRUE(Eventually([&] { return Status().watches_started > watches; }));
  // ... and once the server listens again (the comparison needs it too) it is back in step.
  ExpectConverged();
  EXPECT_GE(Status().backoffs, 1u);
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, ResetConnectionsAreResumed) {
  Start();
  const uint64_t watches = Status().watches_started;
  ASSERT_TRUE(fixture_->Immediate(R"({"type":"reset-connections"})").ok());
  // The server resets its connections a moment after answering; changes made before that could
  // meet a connection about to be reset, so wait until the informer has watched again.
  ASSERT_TRUE(Eventually([&] { return Status().watches_started > watches; }));
  Churn("a");
  ExpectConverged();
  EXPECT_EQ(Status().syncs, 1u);
}

TEST_F(SharedInformerApiServerTest, DeletesMissedWhileDisconnectedSurfaceAsTombstones) {
  Start();
  // The informer's next watch hangs without a byte; meanwhile objects are deleted and the history
  // compacted, so the watch it resumes with is told 410 and it relists.
  ASSERT_TRUE(fixture_->Fault(R"("type":"stall","verb":"watch")").ok());
  ASSERT_TRUE(CloseWatches().ok());
  absl::StatusOr<testing::State> state = fixture_->ServerState();
  ASSERT_TRUE(state.ok());
  int deleted = 0;
  for (const auto& [key, s] : *state) {
    if (deleted == 3) break;
    ASSERT_TRUE(fixture_->Delete(key.substr(key.find('/') + 1)).ok());
    ++deleted;
  }
  ASSERT_TRUE(fixture_->Immediate(R"({"type":"compact","resource":"configmaps"})").ok());
  ExpectConverged();
  // Handlers are notified after the cache changes (through their own listener): the cache can
  // converge before the counter has seen the relist's deletions.
  EXPECT_TRUE(Eventually([&] { return deletions_->tombstones() == 3; }, absl::Seconds(30)))
      << deletions_->tombstones() << " tombstones";
  EXPECT_EQ(deletions_->tombstones(), 3);
  EXPECT_GE(Status().syncs, 2u);
}

}  // namespace
}  // namespace informerd::informer
