#include "base/clock.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

using ::testing::ElementsAre;

TEST(FakeClockTest, TimersFireOnlyWhenTimeReachesTheirDeadline) {
  FakeClock clock;
  int fired = 0;
  auto timer = clock.CreateTimer([&] { ++fired; });
  timer->ArmAt(clock.Now() + absl::Seconds(2));
  EXPECT_TRUE(timer->armed());
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(fired, 0);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(timer->armed());
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(fired, 1) << "a timer fires once per arming";
}

TEST(FakeClockTest, TimersFireInDeadlineOrderThenArmingOrder) {
  FakeClock clock;
  std::vector<std::string> order;
  auto a = clock.CreateTimer([&] { order.push_back("a"); });
  auto b = clock.CreateTimer([&] { order.push_back("b"); });
  auto c = clock.CreateTimer([&] { order.push_back("c"); });
  absl::Time t0 = clock.Now();
  a->ArmAt(t0 + absl::Seconds(3));
  b->ArmAt(t0 + absl::Seconds(1));
  c->ArmAt(t0 + absl::Seconds(1));
  clock.Advance(absl::Seconds(5));
  EXPECT_THAT(order, ElementsAre("b", "c", "a"));
}

TEST(FakeClockTest, ReArmingMovesTheDeadlineAndDisarmCancels) {
  FakeClock clock;
  int fired = 0;
  auto timer = clock.CreateTimer([&] { ++fired; });
  timer->ArmAt(clock.Now() + absl::Seconds(1));
  timer->ArmAt(clock.Now() + absl::Seconds(5));
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(fired, 0);
  EXPECT_EQ(clock.NextDeadline(), clock.Now() + absl::Seconds(3));
  timer->Disarm();
  EXPECT_EQ(clock.ArmedTimers(), 0);
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(fired, 0);
}

TEST(FakeClockTest, ReArmingAndDestroyingTimersForFarDeadlinesKeepsTheHeapBounded) {
  FakeClock clock;
  int fired = 0;
  auto kept = clock.CreateTimer([&] { ++fired; });
  for (int i = 0; i < 10000; ++i) {
    kept->ArmAt(clock.Now() + absl::Hours(10) + absl::Seconds(i));
    auto gone = clock.CreateTimer([] {});
    gone->ArmAt(clock.Now() + absl::Hours(20));
  }
  EXPECT_LE(clock.TimerHeapSize(), 2u + 16u + 2u);
  kept->ArmAt(clock.Now() + absl::Seconds(1));
  clock.Advance(absl::Hours(30));
  EXPECT_EQ(fired, 1);
}

TEST(FakeClockTest, CallbackMayReArmItselfForNowAndRunsInTheSameAdvance) {
  FakeClock clock;
  int fired = 0;
  std::unique_ptr<Timer> timer;
  timer = clock.CreateTimer([&] {
    if (++fired < 3) timer->ArmAt(clock.Now());
  });
  timer->ArmAt(clock.Now() + absl::Seconds(1));
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(fired, 3);
}

TEST(FakeClockTest, CallbackMayDestroyItsOwnTimer) {
  FakeClock clock;
  int fired = 0;
  std::unique_ptr<Timer> timer;
  timer = clock.CreateTimer([&] {
    ++fired;
    timer.reset();
  });
  timer->ArmAt(clock.Now());
  clock.RunDue();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(timer, nullptr);
  EXPECT_EQ(clock.ArmedTimers(), 0);
}

TEST(FakeClockTest, SetTimeNeverMovesBackwards) {
  FakeClock clock;
  absl::Time t0 = clock.Now();
  clock.SetTime(t0 - absl::Hours(1));
  EXPECT_EQ(clock.Now(), t0);
  clock.SetTime(t0 + absl::Hours(1));
  EXPECT_EQ(clock.Now(), t0 + absl::Hours(1));
}

TEST(RealClockTest, RunsACallbackOnItsTimerThreadAtTheDeadline) {
  RealClock clock;
  Mutex mu;
  bool fired = false;
  std::thread::id ran_on;
  auto timer = clock.CreateTimer([&] {
    MutexLock lock(&mu);
    fired = true;
    ran_on = std::this_thread::get_id();
  });
  absl::Time start = clock.Now();
  timer->ArmAt(start + absl::Milliseconds(20));
  MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithDeadline([&] { return fired; }, start + absl::Seconds(30)));
  EXPECT_GE(clock.Now() - start, absl::Milliseconds(20));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(RealClockTest, AnEarlierDeadlineWakesTheTimerThread) {
  RealClock clock;
  Mutex mu;
  std::vector<int> order;
  auto late = clock.CreateTimer([&] {
    MutexLock lock(&mu);
    order.push_back(2);
  });
  auto early = clock.CreateTimer([&] {
    MutexLock lock(&mu);
    order.push_back(1);
  });
  absl::Time start = clock.Now();
  late->ArmAt(start + absl::Hours(1));
  early->ArmAt(start + absl::Milliseconds(10));
  MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithDeadline([&] { return !order.empty(); }, start + absl::Seconds(30)));
  EXPECT_THAT(order, ElementsAre(1));
  EXPECT_LT(clock.Now() - start, absl::Minutes(59));
}

TEST(RealClockTest, DestroyingATimerWaitsForItsRunningCallback) {
  RealClock clock;
  std::atomic<bool> entered{false};
  std::atomic<bool> release{false};
  std::atomic<bool> finished{false};
  auto timer = clock.CreateTimer([&] {
    entered = true;
    while (!release.load()) std::this_thread::yield();
    finished = true;
  });
  timer->ArmAt(clock.Now());
  while (!entered.load()) std::this_thread::yield();
  std::thread releaser([&] { release = true; });
  timer.reset();  // must not return before the callback has finished
  EXPECT_TRUE(finished.load());
  releaser.join();
}

}  // namespace
}  // namespace informerd
