// The informer cache's read cost and memory with and without compression (StoreOptions::
// compression, docs/architecture.md "Storage"): Get of one object by key, List of every object,
// ByIndex of one node's pods, and an Update (the write path: the frame and the shell are made
// then), on a store of kObjects Pods of the benchmarks' shape (bench/pods.h), stored as an
// informer stores them (managedFields stripped), filled as a first list fills it (updates, then
// the drain that trains the dictionary).
//
// Counters: bytes_per_object is the store's memory() per object (objects, shells, frames, indexes
// and the dictionary: what InformerState.bytes reports), json_per_object the compact JSON's size,
// and x_json their ratio (the target row: <= 1.0 with compression, <= 1.3 without).
//
//   bazel run -c opt //bench:store_benchmark -- --benchmark_counters_tabular=true
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/pods.h"
#include "benchmark/benchmark.h"
#include "client/object.h"
#include "server/informer/thread_safe_store.h"
#include "server/informer/transform.h"

namespace informerd::informer {
namespace {

constexpr int kObjects = 20000;

enum class Size { kSmall, k4KiB };

std::string PodJson(Size size, int i, int rv) {
  return size == Size::kSmall ? bench::SmallPod(i, rv) : bench::SizedPod(i, rv, 4096);
}

ObjectPtr Stored(Size size, int i, int rv) {
  static const Transform* strip = Transform::Create({}).value().release();
  return strip->Apply(client::Object::Parse(PodJson(size, i, rv)).value()).value();
}

struct Fixture {
  std::unique_ptr<ThreadSafeStore> store;
  std::vector<std::string> keys;
  size_t json_bytes = 0;
};

Fixture& Store(StoreCompression compression, Size size) {
  static auto* fixtures = new std::map<std::pair<int, int>, Fixture>();
  Fixture& f = (*fixtures)[{static_cast<int>(compression), static_cast<int>(size)}];
  if (f.store != nullptr) return f;
  f.store = ThreadSafeStore::Create({.indexers = {IndexSpec::Field("by-node", "spec.nodeName")},
                                     .compression = compression})
                .value();
  for (int i = 0; i < kObjects; ++i) {
    ObjectPtr pod = Stored(size, i, 1000 + i);
    f.json_bytes += pod->json().size();
    f.keys.emplace_back(pod->key());
    f.store->Update(std::move(pod));
  }
  f.store->SetResourceVersion("999999");  // the drain: trains the dictionary
  return f;
}

void Report(benchmark::State& state, const Fixture& f) {
  const double bytes = static_cast<double>(f.store->memory().bytes) / kObjects;
  const double json = static_cast<double>(f.json_bytes) / kObjects;
  state.counters["bytes_per_object"] = bytes;
  state.counters["json_per_object"] = json;
  state.counters["x_json"] = bytes / json;
}

void BM_Get(benchmark::State& state, StoreCompression compression, Size size) {
  Fixture& f = Store(compression, size);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, kObjects - 1);
  for (auto _ : state) {
    GetResult got = f.store->Get(f.keys[pick(rng)]);
    benchmark::DoNotOptimize(got.object->json().data());
  }
  state.SetItemsProcessed(state.iterations());
  Report(state, f);
}

void BM_List(benchmark::State& state, StoreCompression compression, Size size) {
  Fixture& f = Store(compression, size);
  for (auto _ : state) {
    ListResult all = f.store->List();
    benchmark::DoNotOptimize(all.objects.data());
  }
  state.SetItemsProcessed(state.iterations() * kObjects);  // items/s: objects listed per second
  Report(state, f);
}

void BM_ByIndex(benchmark::State& state, StoreCompression compression, Size size) {
  Fixture& f = Store(compression, size);
  size_t n = 0;
  for (auto _ : state) {
    ListResult on_node = f.store->ByIndex("by-node", "node-7").value();
    n += on_node.objects.size();
  }
  state.SetItemsProcessed(n);
  Report(state, f);
}

// A watch's MODIFIED event: a new version of one object replaces the stored one. Two versions of
// 256 objects, alternately, so that every update changes the object (the same version again
// would be a relist's no-op).
void BM_Update(benchmark::State& state, StoreCompression compression, Size size) {
  Fixture& f = Store(compression, size);
  std::vector<ObjectPtr> versions;
  for (int v = 0; v < 2; ++v) {
    for (int i = 0; i < 256; ++i) versions.push_back(Stored(size, i * 37 % kObjects, 2000000 + v));
  }
  size_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.store->Update(versions[n++ % versions.size()]));
  }
  state.SetItemsProcessed(state.iterations());
}

constexpr auto kNone = StoreCompression::kNone;
constexpr auto kZstd = StoreCompression::kZstd;

BENCHMARK_CAPTURE(BM_Get, plain_small, kNone, Size::kSmall);
BENCHMARK_CAPTURE(BM_Get, zstd_small, kZstd, Size::kSmall);
BENCHMARK_CAPTURE(BM_Get, plain_4KiB, kNone, Size::k4KiB);
BENCHMARK_CAPTURE(BM_Get, zstd_4KiB, kZstd, Size::k4KiB);
BENCHMARK_CAPTURE(BM_List, plain_small, kNone, Size::kSmall)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_List, zstd_small, kZstd, Size::kSmall)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_List, plain_4KiB, kNone, Size::k4KiB)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_List, zstd_4KiB, kZstd, Size::k4KiB)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ByIndex, plain_4KiB, kNone, Size::k4KiB)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ByIndex, zstd_4KiB, kZstd, Size::k4KiB)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Update, plain_4KiB, kNone, Size::k4KiB);
BENCHMARK_CAPTURE(BM_Update, zstd_4KiB, kZstd, Size::k4KiB);

}  // namespace
}  // namespace informerd::informer

BENCHMARK_MAIN();
