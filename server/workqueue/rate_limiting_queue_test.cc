#include "server/workqueue/rate_limiting_queue.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::workqueue {
namespace {

using ::testing::Optional;

class RateLimitingQueueTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  std::unique_ptr<RateLimitingQueue> q_ =
      RateLimitingQueue::Create(
          {.clock = &clock_},
          ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(1), absl::Seconds(1))
              .value())
          .value();
};

TEST_F(RateLimitingQueueTest, AddRateLimitedWaitsForTheLimitersDelay) {
  ASSERT_TRUE(q_->AddRateLimited("one").ok());
  EXPECT_EQ(q_->Waiting(), 1u);
  ASSERT_TRUE(q_->AddRateLimited("one").ok());  // 2 ms, but the earlier 1 ms deadline stays
  EXPECT_EQ(q_->Waiting(), 1u);
  EXPECT_EQ(q_->NumRequeues("one"), 2);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(q_->Len(), 1u);
  EXPECT_EQ(q_->Waiting(), 0u);
}

TEST_F(RateLimitingQueueTest, ForgetResetsBackoffButDoesNotEndProcessing) {
  ASSERT_TRUE(q_->AddRateLimited("one").ok());
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_THAT(q_->Get(), Optional(std::string("one")));
  q_->Forget("one");
  EXPECT_EQ(q_->NumRequeues("one"), 0);
  EXPECT_EQ(q_->Processing(), 1u) << "Forget is not Done";
  ASSERT_TRUE(q_->Done("one").ok());
  EXPECT_EQ(q_->Processing(), 0u);
}

TEST_F(RateLimitingQueueTest, FailedKeyIsRetriedWithGrowingDelays) {
  absl::Duration expected = absl::Milliseconds(1);
  ASSERT_TRUE(q_->Add("k").ok());
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSERT_THAT(q_->Get(), Optional(std::string("k")));
    ASSERT_TRUE(q_->AddRateLimited("k").ok());  // the reconcile failed
    ASSERT_TRUE(q_->Done("k").ok());
    clock_.Advance(expected - absl::Nanoseconds(1));
    EXPECT_EQ(q_->Len(), 0u) << "attempt " << attempt;
    clock_.Advance(absl::Nanoseconds(1));
    EXPECT_EQ(q_->Len(), 1u) << "attempt " << attempt;
    expected *= 2;
  }
  EXPECT_EQ(q_->NumRequeues("k"), 5);
}

TEST_F(RateLimitingQueueTest, AddRateLimitedAfterShutDownAndEmptyKeysAreRefused) {
  EXPECT_EQ(q_->AddRateLimited("").code(), absl::StatusCode::kInvalidArgument);
  q_->ShutDown();
  EXPECT_EQ(q_->AddRateLimited("k").code(), absl::StatusCode::kFailedPrecondition);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(q_->Len(), 0u);
}

TEST(RateLimitingQueueDefaultsTest, UsesTheDefaultControllerRateLimiter) {
  FakeClock clock;
  auto q = RateLimitingQueue::Create({.clock = &clock}).value();
  ASSERT_TRUE(q->AddRateLimited("k").ok());
  clock.Advance(absl::Milliseconds(4));
  EXPECT_EQ(q->Len(), 0u);
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(q->Len(), 1u);
}

}  // namespace
}  // namespace informerd::workqueue
