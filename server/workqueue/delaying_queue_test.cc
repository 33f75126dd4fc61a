#include "server/workqueue/delaying_queue.h"

#include <random>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/workqueue/prometheus_metrics.h"

namespace informerd::workqueue {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

class DelayingQueueTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  std::unique_ptr<DelayingQueue> q_ = DelayingQueue::Create({.clock = &clock_}).value();
};

TEST_F(DelayingQueueTest, KeyBecomesAvailableOnlyOnceItsDelayHasPassed) {
  ASSERT_TRUE(q_->AddAfter("a", absl::Milliseconds(50)).ok());
  EXPECT_EQ(q_->Len(), 0u);
  EXPECT_EQ(q_->Waiting(), 1u);
  clock_.Advance(absl::Milliseconds(49));
  EXPECT_EQ(q_->Len(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(q_->Len(), 1u);
  EXPECT_EQ(q_->Waiting(), 0u);
  EXPECT_THAT(q_->Get(), Optional(std::string("a")));
}

TEST_F(DelayingQueueTest, NonPositiveDelayIsAPlainAdd) {
  ASSERT_TRUE(q_->AddAfter("zero", absl::ZeroDuration()).ok());
  ASSERT_TRUE(q_->AddAfter("negative", absl::Seconds(-5)).ok());
  EXPECT_EQ(q_->Len(), 2u);
  EXPECT_EQ(q_->Waiting(), 0u);
}

TEST_F(DelayingQueueTest, ReAddingAWaitingKeyKeepsTheEarlierDeadline) {
  ASSERT_TRUE(q_->AddAfter("a", absl::Milliseconds(100)).ok());
  ASSERT_TRUE(q_->AddAfter("a", absl::Milliseconds(50)).ok());   // earlier: moves up
  ASSERT_TRUE(q_->AddAfter("a", absl::Milliseconds(300)).ok());  // later: ignored
  EXPECT_EQ(q_->Waiting(), 1u);
  clock_.Advance(absl::Milliseconds(50));
  EXPECT_EQ(q_->Len(), 1u);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(q_->Len(), 1u) << "the superseded deadlines must not add the key again";
  EXPECT_THAT(q_->Get(), Optional(std::string("a")));
  ASSERT_TRUE(q_->Done("a").ok());
  EXPECT_EQ(q_->Len(), 0u);
}

TEST_F(DelayingQueueTest, KeysBecomeAvailableInDeadlineOrderAndFifoAmongTies) {
  ASSERT_TRUE(q_->AddAfter("c", absl::Seconds(3)).ok());
  ASSERT_TRUE(q_->AddAfter("a", absl::Seconds(1)).ok());
  ASSERT_TRUE(q_->AddAfter("b1", absl::Seconds(2)).ok());
  ASSERT_TRUE(q_->AddAfter("b2", absl::Seconds(2)).ok());
  clock_.Advance(absl::Seconds(10));
  EXPECT_THAT(q_->GetBatch(10), ElementsAre("a", "b1", "b2", "c"));
}

TEST_F(DelayingQueueTest, RandomDelaysComeOutSortedByDeadline) {
  std::mt19937 rng(7);
  std::vector<std::pair<int, std::string>> expected;
  for (int i = 0; i < 1000; ++i) {
    int ms = 1 + rng() % 10000;
    std::string key = "k" + std::to_string(i);
    expected.emplace_back(ms, key);
    ASSERT_TRUE(q_->AddAfter(key, absl::Milliseconds(ms)).ok());
  }
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> got;
  for (int step = 0; step < 10000; ++step) {
    clock_.Advance(absl::Milliseconds(1));
    std::vector<std::string> ready;
    q_->TryGetBatch(1000, &ready);
    got.insert(got.end(), ready.begin(), ready.end());
  }
  std::vector<std::string> want;
  for (const auto& [ms, key] : expected) want.push_back(key);
  EXPECT_EQ(got, want);
}

TEST_F(DelayingQueueTest, WaitingKeyThatIsAlreadyQueuedIsDeduplicatedWhenDue) {
  ASSERT_TRUE(q_->Add("a").ok());
  ASSERT_TRUE(q_->AddAfter("a", absl::Seconds(1)).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(q_->Len(), 1u);
}

TEST_F(DelayingQueueTest, DeadlinesCloserThanTheTimerSlackAreServedInOneBatch) {
  // Default slack: 100 us. Keys are never early, and at most the slack late.
  ASSERT_TRUE(q_->AddAfter("a", absl::Milliseconds(1)).ok());
  ASSERT_TRUE(q_->AddAfter("b", absl::Milliseconds(1) + absl::Microseconds(10)).ok());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(q_->Len(), 1u);
  clock_.Advance(absl::Microseconds(10));
  EXPECT_EQ(q_->Len(), 1u) << "b waits for the coalesced run";
  clock_.Advance(absl::Microseconds(90));
  EXPECT_EQ(q_->Len(), 2u);
}

TEST(DelayingQueueSlackTest, ZeroSlackServesEveryDeadlineExactly) {
  FakeClock clock;
  auto q = DelayingQueue::Create({.clock = &clock, .timer_slack = absl::ZeroDuration()}).value();
  ASSERT_TRUE(q->AddAfter("a", absl::Milliseconds(1)).ok());
  ASSERT_TRUE(q->AddAfter("b", absl::Milliseconds(1) + absl::Microseconds(10)).ok());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(q->Len(), 1u);
  clock.Advance(absl::Microseconds(10));
  EXPECT_EQ(q->Len(), 2u);
  EXPECT_EQ(DelayingQueue::Create({.timer_slack = absl::Seconds(-1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DelayingQueueTest, OneTimerServesEveryWaitingKey) {
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(q_->AddAfter("k" + std::to_string(i), absl::Seconds(1 + i)).ok());
  }
  EXPECT_EQ(clock_.ArmedTimers(), 1);
  EXPECT_EQ(clock_.NextDeadline(), clock_.Now() + absl::Seconds(1));
}

TEST_F(DelayingQueueTest, AddAfterShutDownIsRefusedAndWaitingKeysAreDropped) {
  ASSERT_TRUE(q_->AddAfter("a", absl::Seconds(1)).ok());
  q_->ShutDown();
  EXPECT_EQ(q_->AddAfter("b", absl::Seconds(1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q_->AddAfter("c", absl::ZeroDuration()).code(),
            absl::StatusCode::kFailedPrecondition);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(q_->Len(), 0u);
  EXPECT_EQ(q_->Waiting(), 0u);
  EXPECT_EQ(q_->Get(), std::nullopt);
}

TEST_F(DelayingQueueTest, EmptyKeyIsRefused) {
  EXPECT_EQ(q_->AddAfter("", absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q_->Waiting(), 0u);
}

TEST(DelayingQueueRealClockTest, GetBlocksUntilTheDelayedKeyIsDue) {
  auto q = DelayingQueue::Create({}).value();
  absl::Time start = absl::Now();
  ASSERT_TRUE(q->AddAfter("a", absl::Milliseconds(20)).ok());
  EXPECT_THAT(q->Get(), Optional(std::string("a")));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

TEST(DelayingQueueMetricsTest, EveryAddAfterCountsAsARetry) {
  FakeClock clock;
  MetricsRegistry registry;
  PrometheusMetricsProvider provider(&registry);
  auto q = DelayingQueue::Create({.name = "q", .clock = &clock, .metrics_provider = &provider})
               .value();
  ASSERT_TRUE(q->AddAfter("a", absl::Seconds(1)).ok());
  ASSERT_TRUE(q->AddAfter("a", absl::Seconds(2)).ok());
  ASSERT_TRUE(q->AddAfter("b", absl::ZeroDuration()).ok());
  EXPECT_EQ(registry.GetCounter("workqueue_retries_total", "", {{"name", "q"}})->Value(), 3);
}

}  // namespace
}  // namespace informerd::workqueue
