// MetricsRegistry: counters, gauges and histograms with labels, rendered in the Prometheus text
// exposition format (version 0.0.4) for the daemon's /metrics endpoint.
//
// A metric family is declared once by name (type, help, label names, buckets); each distinct
// label-value tuple gets its own series, created on first use and kept until RemoveSeries (what
// owns a queue or an informer removes its series when it goes, so that /metrics does not grow with
// every object ever created).
// Series are updated lock-free (atomics), so hot paths pay no lock; creating a series and
// rendering take the registry's lock.
//
//   MetricsRegistry registry;
//   Counter* adds = registry.GetCounter("workqueue_adds_total", "Total adds", {{"name", "pods"}});
//   adds->Inc();
//   std::string text = registry.Render();
//
// Thread safety: all methods may be called concurrently. Returned series pointers stay valid until
// RemoveSeries removes the series (or the registry is destroyed); a later Get* with the same
// labels creates a new series.
#ifndef INFORMERD_BASE_METRICS_H_
#define INFORMERD_BASE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/mutex.h"

namespace informerd {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Inc(double by = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Non-cumulative count of bucket i (i == upper_bounds().size() is +Inf).
  uint64_t BucketCount(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }

 private:
  const std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// `count` bounds start, start*factor, ... (Prometheus's ExponentialBuckets).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Returns the series of family `name` with `labels`, creating either as needed. A family's
  // type and help are fixed by its first use; asking for it as another type returns nullptr.
  Counter* GetCounter(absl::string_view name, absl::string_view help, const Labels& labels);
  Gauge* GetGauge(absl::string_view name, absl::string_view help, const Labels& labels);
  Histogram* GetHistogram(absl::string_view name, absl::string_view help, const Labels& labels,
                          const std::vector<double>& upper_bounds);
  // The same, sharing ownership: a series removed by RemoveSeries while its holder still updates
  // it (a deleted queue that a stream still holds) lives on, unrendered, until the holder goes.
  std::shared_ptr<Counter> SharedCounter(absl::string_view name, absl::string_view help,
                                         const Labels& labels);
  std::shared_ptr<Gauge> SharedGauge(absl::string_view name, absl::string_view help,
                                     const Labels& labels);
  std::shared_ptr<Histogram> SharedHistogram(absl::string_view name, absl::string_view help,
                                             const Labels& labels,
                                             const std::vector<double>& upper_bounds);

  // Removes the series of family `name` (any type) whose labels include every pair of `match`;
  // returns how many. A family left without series is no longer rendered (not even its HELP).
  // The registry lets go of them at once: raw pointers from Get* to them dangle (REQUIRES that
  // nobody uses those any more), shared ones keep theirs alive.
  size_t RemoveSeries(absl::string_view name, const Labels& match);

  // Every family and series in the Prometheus text format, families sorted by name.
  std::string Render() const;

  // The series of histogram family `name` as they are now (none when there is no such
  // histogram family), by labels.
  struct HistogramReading {
    Labels labels;
    std::vector<double> upper_bounds;
    // Non-cumulative; the last one is +Inf.
    std::vector<uint64_t> buckets;
  };
  std::vector<HistogramReading> ReadHistograms(absl::string_view name) const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, std::shared_ptr<Counter>> counters;
    std::map<Labels, std::shared_ptr<Gauge>> gauges;
    std::map<Labels, std::shared_ptr<Histogram>> histograms;
  };
  Family* FamilyLocked(absl::string_view name, absl::string_view help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd

#endif  // INFORMERD_BASE_METRICS_H_
