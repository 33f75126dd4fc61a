#include "base/heap_trimmer.h"

#include <cstdlib>

#include "absl/time/time.h"
#include "base/clock.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A process whose RSS the test sets, and a trim that gives back what malloc held unused.
struct FakeProcess {
  size_t resident = 100 * kMiB;
  size_t unused = 0;  // part of `resident` that a trim returns
  int trims = 0;
  HeapTrimmerOptions Options(Clock* clock) {
    return {.period = absl::Seconds(5),
            .min_growth_bytes = 64 * kMiB,
            .clock = clock,
            .resident_bytes = [this] { return resident; },
            .trim = [this] {
              ++trims;
              resident -= unused;
              unused = 0;
            }};
  }
};

TEST(HeapTrimmerTest, TrimsAfterGrowthOnTheTimerAndNotBefore) {
  FakeClock clock;
  FakeProcess p;
  HeapTrimmer trimmer(p.Options(&clock));
  p.resident += 63 * kMiB;  // below the growth that counts
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(p.trims, 0);
  p.resident += 2 * kMiB;
  p.unused = 60 * kMiB;
  clock.Advance(absl::Seconds(4));
  EXPECT_EQ(p.trims, 0) << "checked before its period";
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(p.trims, 1);
  EXPECT_EQ(trimmer.trims(), 1u);
  EXPECT_EQ(p.resident, 105 * kMiB);
}

TEST(HeapTrimmerTest, MemoryInUseMovesTheBaselineSoTheNextTrimWaitsForMoreGrowth) {
  FakeClock clock;
  FakeProcess p;
  HeapTrimmer trimmer(p.Options(&clock));
  p.resident += 500 * kMiB;  // all in use: a trim returns nothing
  EXPECT_TRUE(trimmer.CheckNow());
  EXPECT_FALSE(trimmer.CheckNow()) << "trimmed again without new growth";
  p.resident += 70 * kMiB;
  EXPECT_TRUE(trimmer.CheckNow());
  EXPECT_EQ(p.trims, 2);
}

TEST(HeapTrimmerTest, GrowthCountsFromTheLowestRssSeen) {
  FakeClock clock;
  FakeProcess p;
  HeapTrimmer trimmer(p.Options(&clock));
  p.resident -= 50 * kMiB;  // malloc gave memory back by itself
  EXPECT_FALSE(trimmer.CheckNow());
  p.resident += 64 * kMiB;  // 14 MiB above the start, 64 above the low point
  EXPECT_TRUE(trimmer.CheckNow());
}

}  // namespace
}  // namespace informerd
