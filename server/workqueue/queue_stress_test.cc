// Randomized concurrency test with an exclusion oracle: no key is ever held by two consumers at
// once, and every Add is followed by a processing of that key that starts after it.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/workqueue/queue.h"

namespace informerd::workqueue {
namespace {

TEST(QueueStressTest, NoKeyIsEverHeldByTwoConsumersAndNoAddIsLost) {
  constexpr int kKeys = 64;
  constexpr int kProducers = 3;
  constexpr int kConsumers = 4;
  constexpr int kAddsPerProducer = 50000;
  constexpr int kRound = 500;  // so each producer waits for progress 100 times: processed >= 100
  auto q = Queue::Create({}).value();

  std::vector<std::string> names;
  for (int i = 0; i < kKeys; ++i) names.push_back("ns/key-" + std::to_string(i));
  // Oracle state per key.
  std::unique_ptr<std::atomic<int>[]> holders(new std::atomic<int>[kKeys]);
  std::unique_ptr<std::atomic<uint64_t>[]> last_add(new std::atomic<uint64_t>[kKeys]);
  std::unique_ptr<std::atomic<uint64_t>[]> last_start(new std::atomic<uint64_t>[kKeys]);
  for (int i = 0; i < kKeys; ++i) {
    holders[i] = 0;
    last_add[i] = 0;
    last_start[i] = 0;
  }
  std::atomic<uint64_t> ticks{0};
  std::atomic<int> overlaps{0};
  std::atomic<uint64_t> processed{0};
  auto index_of = [](const std::string& key) { return std::stoi(key.substr(7)); };
  auto raise = [](std::atomic<uint64_t>& slot, uint64_t v) {
    uint64_t cur = slot.load();
    while (cur < v && !slot.compare_exchange_weak(cur, v)) {
    }
  };

  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      std::mt19937 rng(1000 + c);
      for (;;) {
        // Half the consumers end hand-outs by lease, half by key.
        std::vector<Lease> batch;
        if (q->GetBatch(1 + rng() % 4, &batch) == 0) return;
        for (const Lease& lease : batch) {
          const std::string& key = lease.key;
          int i = index_of(key);
          raise(last_start[i], ++ticks);
          if (holders[i].fetch_add(1) != 0) ++overlaps;
          for (int spin = rng() % 50; spin > 0; --spin) std::this_thread::yield();
          holders[i].fetch_sub(1);
          ++processed;
          ASSERT_TRUE(c % 2 == 0 ? q->Done(lease).ok() : q->Done(key).ok());
        }
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 rng(p);
      uint64_t seen = 0;
      for (int n = 0; n < kAddsPerProducer; ++n) {
        // Every kRound adds, wait for the consumers to finish something: producers and consumers
        // interleave however the scheduler runs the threads (on a loaded machine the producers could
        // otherwise finish before any consumer runs, and dedup would leave one hand-out per key).
        if (n % kRound == kRound - 1) {
          while (processed.load() <= seen) std::this_thread::yield();
          seen = processed.load();
        }
        int i = rng() % kKeys;
        raise(last_add[i], ++ticks);
        ASSERT_TRUE(q->Add(names[i]).ok());
      }
    });
  }
  for (auto& t : producers) t.join();
  q->ShutDownWithDrain();
  for (auto& t : consumers) t.join();

  EXPECT_EQ(overlaps.load(), 0) << "a key was held by two consumers at once";
  for (int i = 0; i < kKeys; ++i) {
    if (last_add[i].load() == 0) continue;
    EXPECT_GT(last_start[i].load(), last_add[i].load())
        << names[i] << ": its last Add was never followed by processing";
  }
  EXPECT_GE(processed.load(), static_cast<uint64_t>(kAddsPerProducer / kRound));
  EXPECT_EQ(q->Len(), 0u);
  EXPECT_EQ(q->Processing(), 0u);
}

}  // namespace
}  // namespace informerd::workqueue
