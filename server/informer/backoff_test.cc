#include "server/informer/backoff.h"

#include "gtest/gtest.h"

namespace informerd::informer {
namespace {

TEST(BackoffTest, DoublesFrom800MillisecondsTo30SecondsWithJitterUpToTwice) {
  FakeClock clock;
  Backoff backoff({}, &clock, 1);
  absl::Duration base = absl::Milliseconds(800);
  for (int i = 0; i < 12; ++i) {
    const absl::Duration wait = backoff.Next();
    EXPECT_GE(wait, base) << i;
    EXPECT_LT(wait, 2 * base) << i;
    base = std::min(base * 2, absl::Seconds(30));
    clock.Advance(wait);
  }
  EXPECT_EQ(backoff.base(), absl::Seconds(30));
}

TEST(BackoffTest, WithoutJitterTheSequenceIsExact) {
  FakeClock clock;
  Backoff backoff({.jitter = 0}, &clock, 1);
  for (double s : {0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0}) {
    EXPECT_EQ(backoff.Next(), absl::Seconds(s));
    clock.Advance(absl::Seconds(1));
  }
}

TEST(BackoffTest, ResetsAfterTwoMinutesWithoutBackingOff) {
  FakeClock clock;
  Backoff backoff({.jitter = 0}, &clock, 1);
  backoff.Next();
  backoff.Next();
  EXPECT_EQ(backoff.Next(), absl::Seconds(3.2));
  clock.Advance(absl::Minutes(2));
  EXPECT_EQ(backoff.Next(), absl::Seconds(6.4)) << "exactly two minutes is not longer than two";
  clock.Advance(absl::Minutes(2) + absl::Seconds(1));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(800));
}

}  // namespace
}  // namespace informerd::informer
