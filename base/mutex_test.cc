#include "base/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace informerd {
namespace {

TEST(MutexTest, GuardsACounterAcrossThreads) {
  Mutex mu;
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(counter, 40000);
}

TEST(MutexTest, AwaitReturnsOnceThePredicateHolds) {
  Mutex mu;
  int stage = 0;
  std::thread waiter([&] {
    MutexLock lock(&mu);
    mu.Await([&] { return stage == 1; });
    stage = 2;
  });
  {
    MutexLock lock(&mu);
    stage = 1;
  }
  waiter.join();
  MutexLock lock(&mu);
  EXPECT_EQ(stage, 2);
}

TEST(MutexTest, AwaitWithDeadlineGivesUpWhenThePredicateNeverHolds) {
  Mutex mu;
  MutexLock lock(&mu);
  EXPECT_FALSE(mu.AwaitWithDeadline([] { return false; }, absl::Now() + absl::Milliseconds(5)));
  EXPECT_TRUE(mu.AwaitWithDeadline([] { return true; }, absl::Now() + absl::Seconds(5)));
}

TEST(MutexTest, AwaitWithTimeoutGivesUpAfterItOrReturnsWhenThePredicateHolds) {
  Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
  });
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(mu.AwaitWithTimeout([] { return false; }, absl::Milliseconds(5)));
    EXPECT_TRUE(mu.AwaitWithTimeout([&] { return ready; }, absl::InfiniteDuration()));
  }
  setter.join();
}

TEST(MutexTest, AwaitRechecksAfterEveryUnlockUntilThePredicateHolds) {
  Mutex mu;
  int value = 0;
  std::thread waiter([&] {
    MutexLock lock(&mu);
    mu.Await([&] { return value == 100; });
    EXPECT_EQ(value, 100);
  });
  for (int i = 0; i < 100; ++i) {
    MutexLock lock(&mu);
    ++value;
  }
  waiter.join();
}

TEST(MutexTest, AwaitWithDeadlineSucceedsWhenAnotherThreadMakesThePredicateTrue) {
  Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
  });
  MutexLock lock(&mu);
  EXPECT_TRUE(mu.AwaitWithDeadline([&] { return ready; }, absl::Now() + absl::Seconds(30)));
  setter.join();
}

}  // namespace
}  // namespace informerd
