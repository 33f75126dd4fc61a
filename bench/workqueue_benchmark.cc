// Workqueue hot paths. The same shapes run against client-go's workqueue in
// bench/baseline (`make bench-workqueue` runs both and prints the ratios), and the Priority*
// shapes against controller-runtime's priorityqueue.
//
// Every row reports keys per second (items_per_second).
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "server/workqueue/delaying_queue.h"
#include "server/workqueue/queue.h"

namespace informerd::workqueue {
namespace {

constexpr int kBatch = 10000;

// Realistic keys: namespace/name, longer than the small-string buffer.
const std::vector<std::string>& Keys(int n) {
  static auto* const keys = [] {
    auto* k = new std::vector<std::string>();
    for (int i = 0; i < 1000000; ++i) k->push_back(absl::StrCat("namespace-", i % 50, "/object-", i));
    return k;
  }();
  (void)n;
  return *keys;
}

void Drain(Queue& q) {
  std::vector<std::string> keys;
  while (q.TryGetBatch(1024, &keys) > 0) {
    for (const auto& k : keys) q.Done(k).IgnoreError();
    keys.clear();
  }
}

// Add of distinct keys (no dedup), kBatch at a time.
void BM_Add(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i]).IgnoreError();
    state.PauseTiming();
    Drain(*q);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_Add);

// Get then Done of kBatch waiting keys, through leases (the path the gRPC layer uses).
void BM_GetDone(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  Lease lease;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i]).IgnoreError();
    state.ResumeTiming();
    for (int i = 0; i < kBatch; ++i) {
      q->Get(&lease);
      q->Done(lease).IgnoreError();
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_GetDone);

// As BM_GetDone, with client-go's calls: Done by key.
void BM_GetDoneByKey(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  std::string key;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i]).IgnoreError();
    state.ResumeTiming();
    for (int i = 0; i < kBatch; ++i) {
      q->Get(&key);
      q->Done(key).IgnoreError();
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_GetDoneByKey);

// One producer thread adds kBatch*10 distinct keys while one consumer thread Gets and Dones them.
void BM_ContendedAddGet(benchmark::State& state) {
  constexpr int kN = kBatch * 10;
  const auto& keys = Keys(kN);
  for (auto _ : state) {
    auto q = Queue::Create({}).value();
    std::thread consumer([&] {
      Lease lease;
      for (int done = 0; done < kN; ++done) {
        q->Get(&lease);
        q->Done(lease).IgnoreError();
      }
    });
    for (int i = 0; i < kN; ++i) q->Add(keys[i]).IgnoreError();
    consumer.join();
  }
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_ContendedAddGet)->UseRealTime()->Unit(benchmark::kMillisecond);

// 1M AddAfter with random delays up to 10 ms on the real clock, then Get+Done of all of them.
void BM_AddAfterDrain1M(benchmark::State& state) {
  constexpr int kN = 1000000;
  const auto& keys = Keys(kN);
  std::vector<absl::Duration> delays;
  std::mt19937 rng(1);
  for (int i = 0; i < kN; ++i) delays.push_back(absl::Microseconds(rng() % 10000));
  for (auto _ : state) {
    auto q = DelayingQueue::Create({}).value();
    for (int i = 0; i < kN; ++i) q->AddAfter(keys[i], delays[i]).IgnoreError();
    Lease lease;
    for (int i = 0; i < kN; ++i) {
      q->Get(&lease);
      q->Done(lease).IgnoreError();
    }
  }
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_AddAfterDrain1M)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// GetBatch(128) then Done of each, over kBatch waiting keys.
void BM_GetBatch128(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  std::vector<Lease> batch;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i]).IgnoreError();
    state.ResumeTiming();
    for (int got = 0; got < kBatch;) {
      q->GetBatch(128, &batch);
      for (const Lease& lease : batch) q->Done(lease).IgnoreError();
      got += batch.size();
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_GetBatch128);

// The priorities of the Priority* rows (controller-runtime's five-level test), in turn.
constexpr int32_t kPriorities[] = {10, 5, 0, -5, -10};

// Add of distinct keys at five priorities in turn, kBatch at a time (controller-runtime's
// priorityqueue AddWithOpts in bench/baseline).
void BM_PriorityAdd(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i], kPriorities[i % 5]).IgnoreError();
    state.PauseTiming();
    Drain(*q);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_PriorityAdd);

// Get then Done of kBatch keys waiting at five priorities (GetWithPriority + Done there).
void BM_PriorityGetDone(benchmark::State& state) {
  const auto& keys = Keys(kBatch);
  auto q = Queue::Create({}).value();
  Lease lease;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) q->Add(keys[i], kPriorities[i % 5]).IgnoreError();
    state.ResumeTiming();
    for (int i = 0; i < kBatch; ++i) {
      q->Get(&lease);
      q->Done(lease).IgnoreError();
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_PriorityGetDone);

}  // namespace
}  // namespace informerd::workqueue

BENCHMARK_MAIN();
