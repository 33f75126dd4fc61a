// LatencyHistogram: a fixed-size log-linear histogram of durations in nanoseconds (about 1.6%
// relative precision, any value up to 2^63 ns), for the benchmarks' percentiles.
//
//   LatencyHistogram h;
//   h.Record(elapsed_ns);
//   total.Merge(h);
//   int64_t p99 = total.Percentile(99);   // ns; 0 when empty
//
// Thread safety: none; give each thread its own and Merge them under the caller's lock.
#ifndef INFORMERD_BENCH_LATENCY_HISTOGRAM_H_
#define INFORMERD_BENCH_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace informerd::bench {

class LatencyHistogram {
 public:
  void Record(int64_t ns) {
    const uint64_t v = ns < 0 ? 0 : static_cast<uint64_t>(ns);
    ++counts_[Index(v)];
    ++count_;
    max_ = std::max(max_, v);
  }

  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    max_ = std::max(max_, other.max_);
  }

  void Clear() { *this = LatencyHistogram(); }

  uint64_t count() const { return count_; }
  int64_t max() const { return static_cast<int64_t>(max_); }

  // The smallest recorded value v such that p percent of the values are <= v (as the middle
  // of its bucket, capped at the maximum). REQUIRES: 0 <= p <= 100.
  int64_t Percentile(double p) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(p / 100.0 * static_cast<double>(count_) + 0.5);
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return static_cast<int64_t>(std::min(Middle(i), max_));
    }
    return static_cast<int64_t>(max_);
  }

 private:
  // Values below 128 have a bucket each; above, 64 buckets per power of two.
  static constexpr size_t kBuckets = 58 * 64 + 128;

  static size_t Index(uint64_t v) {
    if (v < 128) return static_cast<size_t>(v);
    const int shift = 63 - std::countl_zero(v) - 6;
    return static_cast<size_t>(shift) * 64 + static_cast<size_t>(v >> shift);
  }
  static uint64_t Middle(size_t index) {
    if (index < 128) return index;
    const size_t shift = index / 64 - 1;
    const uint64_t low = static_cast<uint64_t>(index - shift * 64) << shift;
    return low + (uint64_t{1} << shift) / 2;
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ = 0;
};

}  // namespace informerd::bench

#endif  // INFORMERD_BENCH_LATENCY_HISTOGRAM_H_
