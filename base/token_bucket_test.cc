#include "base/token_bucket.h"

#include "gtest/gtest.h"

namespace informerd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(TokenBucketTest, BurstIsFreeThenCallersAreSpacedByOneOverQps) {
  TokenBucket bucket(/*qps=*/10, /*burst=*/3, kT0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(kT0), absl::ZeroDuration()) << i;
  // In debt: each reservation waits 100 ms longer than the one before.
  EXPECT_EQ(bucket.Reserve(kT0), absl::Milliseconds(100));
  EXPECT_EQ(bucket.Reserve(kT0), absl::Milliseconds(200));
  EXPECT_EQ(bucket.Reserve(kT0), absl::Milliseconds(300));
}

TEST(TokenBucketTest, RefillsAtQpsUpToBurst) {
  TokenBucket bucket(/*qps=*/10, /*burst=*/2, kT0);
  EXPECT_EQ(bucket.Reserve(kT0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(kT0), absl::ZeroDuration());
  // 100 ms later one token is back, not more.
  const absl::Time t1 = kT0 + absl::Milliseconds(100);
  EXPECT_EQ(bucket.Reserve(t1), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t1), absl::Milliseconds(100));
  // An hour idle refills to the burst only.
  const absl::Time t2 = t1 + absl::Hours(1);
  EXPECT_EQ(bucket.Reserve(t2), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t2), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t2), absl::Milliseconds(100));
}

TEST(TokenBucketTest, TimeGoingBackwardsRefillsNothing) {
  TokenBucket bucket(/*qps=*/1, /*burst=*/1, kT0);
  EXPECT_EQ(bucket.Reserve(kT0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(kT0 - absl::Hours(1)), absl::Seconds(1));
}

TEST(TokenBucketTest, DebtIsPaidBackBeforeTokensAccumulate) {
  TokenBucket bucket(/*qps=*/2, /*burst=*/1, kT0);
  EXPECT_EQ(bucket.Reserve(kT0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(kT0), absl::Milliseconds(500));
  EXPECT_EQ(bucket.Reserve(kT0), absl::Seconds(1));
  // After 1 s the two tokens of debt are paid back: a new reservation waits as the second did.
  EXPECT_EQ(bucket.Reserve(kT0 + absl::Seconds(1)), absl::Milliseconds(500));
}

TEST(TokenBucketTest, TryTakeRefusesInsteadOfGoingIntoDebt) {
  TokenBucket bucket(/*qps=*/1, /*burst=*/2, kT0);
  EXPECT_TRUE(bucket.TryTake(kT0));
  EXPECT_TRUE(bucket.TryTake(kT0));
  EXPECT_FALSE(bucket.TryTake(kT0));
  EXPECT_FALSE(bucket.TryTake(kT0 + absl::Milliseconds(999)));
  EXPECT_TRUE(bucket.TryTake(kT0 + absl::Seconds(1)));
  // A refusal took nothing: a reservation after it does not wait for a debt.
  EXPECT_EQ(bucket.Reserve(kT0 + absl::Seconds(2)), absl::ZeroDuration());
}

}  // namespace
}  // namespace informerd
