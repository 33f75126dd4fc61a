#include "base/keyed_mutex.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace informerd {
namespace {

TEST(KeyedMutexTest, OneHolderPerKeyAndNoEntryLeftAfter) {
  KeyedMutex locks;
  std::atomic<int> inside[2] = {0, 0};
  std::atomic<int> most[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const int k = t % 2;
      for (int i = 0; i < 2000; ++i) {
        KeyedMutex::Lock lock(&locks, k == 0 ? "a" : "b");
        const int now = ++inside[k];
        int seen = most[k].load();
        while (now > seen && !most[k].compare_exchange_weak(seen, now)) {
        }
        --inside[k];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(most[0].load(), 1);
  EXPECT_EQ(most[1].load(), 1);
  EXPECT_EQ(locks.size(), 0u);
}

TEST(KeyedMutexTest, DifferentKeysDoNotWaitForEachOther) {
  KeyedMutex locks;
  KeyedMutex::Lock a(&locks, "a");
  std::thread other([&] { KeyedMutex::Lock b(&locks, "b"); });  // would hang if it waited for a
  other.join();
  EXPECT_EQ(locks.size(), 1u);
}

}  // namespace
}  // namespace informerd
