#include "server/workqueue/rate_limiter.h"

#include <vector>

#include "gtest/gtest.h"

namespace informerd::workqueue {
namespace {

TEST(ItemExponentialFailureRateLimiterTest, DoublesPerFailureUpToTheCap) {
  auto limiter =
      ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(1), absl::Seconds(1)).value();
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(1));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(2));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(4));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(8));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(16));
  EXPECT_EQ(limiter->NumRequeues("one"), 5);
  EXPECT_EQ(limiter->When("two"), absl::Milliseconds(1)) << "keys have separate histories";
  EXPECT_EQ(limiter->When("two"), absl::Milliseconds(2));
  EXPECT_EQ(limiter->NumRequeues("two"), 2);
  for (int i = 0; i < 20; ++i) limiter->When("one");
  EXPECT_EQ(limiter->When("one"), absl::Seconds(1));
}

TEST(ItemExponentialFailureRateLimiterTest, ForgetResetsTheHistory) {
  auto limiter =
      ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(1), absl::Seconds(1)).value();
  limiter->When("one");
  limiter->When("one");
  limiter->Forget("one");
  EXPECT_EQ(limiter->NumRequeues("one"), 0);
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(1));
}

TEST(RetryCountsTest, CountsSurviveForgetsOfOtherKeysAndTheLastForgetEmptiesThem) {
  // Forget and Get skip the lock while nothing is counted: check they still see counts that
  // appear, and stop seeing them once forgotten or set to 0.
  RetryCounts counts;
  counts.Forget("a");
  EXPECT_EQ(counts.Get("a"), 0);
  EXPECT_EQ(counts.Increment("a"), 0);
  EXPECT_EQ(counts.Increment("a"), 1);
  counts.Forget("b");
  EXPECT_EQ(counts.Get("a"), 2);
  counts.Set("b", 5);
  counts.Forget("a");
  EXPECT_EQ(counts.Get("a"), 0);
  EXPECT_EQ(counts.Get("b"), 5);
  counts.Set("b", 0);
  EXPECT_EQ(counts.Get("b"), 0);
  EXPECT_EQ(counts.Increment("b"), 0) << "a key set to 0 starts again";
}

TEST(ItemExponentialFailureRateLimiterTest, NeverOverflowsAtLargeFailureCounts) {
  auto limiter =
      ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(5), absl::Seconds(1000))
          .value();
  absl::Duration previous = absl::ZeroDuration();
  for (int i = 0; i < 10000; ++i) {
    absl::Duration d = limiter->When("k");
    ASSERT_GE(d, previous) << "failure " << i;
    ASSERT_LE(d, absl::Seconds(1000)) << "failure " << i;
    previous = d;
  }
  EXPECT_EQ(previous, absl::Seconds(1000));
  EXPECT_EQ(limiter->NumRequeues("k"), 10000);
}

TEST(ItemExponentialFailureRateLimiterTest, HugeCapStillSaturatesInsteadOfWrapping) {
  auto limiter =
      ItemExponentialFailureRateLimiter::Create(absl::Seconds(1), absl::InfiniteDuration())
          .value();
  absl::Duration d;
  for (int i = 0; i < 200; ++i) d = limiter->When("k");
  EXPECT_GT(d, absl::ZeroDuration());
}

TEST(ItemExponentialFailureRateLimiterTest, ZeroBaseAlwaysRetriesAtOnce) {
  auto limiter =
      ItemExponentialFailureRateLimiter::Create(absl::ZeroDuration(), absl::Seconds(1)).value();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(limiter->When("k"), absl::ZeroDuration());
}

TEST(ItemExponentialFailureRateLimiterTest, RejectsNegativeOrInvertedBounds) {
  EXPECT_FALSE(
      ItemExponentialFailureRateLimiter::Create(absl::Seconds(-1), absl::Seconds(1)).ok());
  EXPECT_FALSE(
      ItemExponentialFailureRateLimiter::Create(absl::Seconds(2), absl::Seconds(1)).ok());
}

TEST(ItemFastSlowRateLimiterTest, IsFastForTheFirstAttemptsThenSlow) {
  auto limiter =
      ItemFastSlowRateLimiter::Create(absl::Milliseconds(5), absl::Seconds(10), 3).value();
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Seconds(10));
  EXPECT_EQ(limiter->When("one"), absl::Seconds(10));
  EXPECT_EQ(limiter->NumRequeues("one"), 5);
  EXPECT_EQ(limiter->When("two"), absl::Milliseconds(5));
  limiter->Forget("one");
  EXPECT_EQ(limiter->NumRequeues("one"), 0);
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_FALSE(ItemFastSlowRateLimiter::Create(absl::Seconds(1), absl::Seconds(1), -1).ok());
}

TEST(BucketRateLimiterTest, AllowsABurstThenSpacesRequestsAtTheRate) {
  FakeClock clock;
  auto limiter = BucketRateLimiter::Create(10, 3, &clock).value();
  EXPECT_EQ(limiter->When("a"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("b"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("c"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("d"), absl::Milliseconds(100));
  EXPECT_EQ(limiter->When("e"), absl::Milliseconds(200)) << "the bucket goes into debt";
  EXPECT_EQ(limiter->NumRequeues("a"), 0) << "the bucket keeps no per-key history";
  clock.Advance(absl::Seconds(10));  // refills, but never beyond the burst
  EXPECT_EQ(limiter->When("f"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("g"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("h"), absl::ZeroDuration());
  EXPECT_EQ(limiter->When("i"), absl::Milliseconds(100));
}

TEST(BucketRateLimiterTest, RejectsNonPositiveRatesAndBursts) {
  EXPECT_FALSE(BucketRateLimiter::Create(0, 10).ok());
  EXPECT_FALSE(BucketRateLimiter::Create(-1, 10).ok());
  EXPECT_FALSE(BucketRateLimiter::Create(std::nan(""), 10).ok());
  EXPECT_FALSE(BucketRateLimiter::Create(10, 0).ok());
}

TEST(MaxOfRateLimiterTest, TakesTheLongestDelayAndForgetsEverywhere) {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(
      ItemFastSlowRateLimiter::Create(absl::Milliseconds(5), absl::Seconds(3), 3).value());
  limiters.push_back(
      ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(1), absl::Seconds(1)).value());
  auto limiter = MaxOfRateLimiter::Create(std::move(limiters)).value();
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("one"), absl::Seconds(3));
  EXPECT_EQ(limiter->NumRequeues("one"), 4);
  limiter->Forget("one");
  EXPECT_EQ(limiter->NumRequeues("one"), 0);
  EXPECT_EQ(limiter->When("one"), absl::Milliseconds(5));
  EXPECT_FALSE(MaxOfRateLimiter::Create({}).ok());
}

TEST(DefaultControllerRateLimiterTest, IsExponentialFrom5msWithABucketOf10QpsBurst100) {
  FakeClock clock;
  auto limiter = DefaultControllerRateLimiter(&clock);
  EXPECT_EQ(limiter->When("k"), absl::Milliseconds(5));
  EXPECT_EQ(limiter->When("k"), absl::Milliseconds(10));
  for (int i = 2; i < 100; ++i) limiter->When("other" + std::to_string(i));
  // 100 tokens spent: the bucket now dominates a fresh key's 5 ms.
  EXPECT_EQ(limiter->When("fresh"), absl::Milliseconds(100));
  EXPECT_EQ(limiter->NumRequeues("k"), 2);
  for (int i = 0; i < 40; ++i) limiter->When("k");
  EXPECT_EQ(limiter->When("k"), absl::Seconds(1000)) << "capped at 1000 s";
}

}  // namespace
}  // namespace informerd::workqueue
