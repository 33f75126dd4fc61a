// Workqueue metrics: the provider interface the queues report through.
//
// The names and meanings are client-go's (k8s.io/client-go/util/workqueue/metrics.go), so
// dashboards built for client-go controllers work unchanged:
//   workqueue_depth                               gauge      current Len()
//   workqueue_adds_total                          counter    Adds that were not deduplicated
//   workqueue_queue_duration_seconds              histogram  time from Add to Get
//   workqueue_work_duration_seconds               histogram  time from Get to Done
//   workqueue_unfinished_work_seconds             gauge      sum of in-flight work ages
//   workqueue_longest_running_processor_seconds   gauge      oldest in-flight work age
//   workqueue_retries_total                       counter    AddAfter/AddRateLimited retries
// each labelled name=<queue name>. A queue with an empty name or no provider records nothing and
// never reads the clock for metrics.
//
// Thread safety: metric objects are called with the queue's lock held, from many queues at once;
// implementations must be thread-safe and must not call back into a queue.
#ifndef INFORMERD_SERVER_WORKQUEUE_METRICS_H_
#define INFORMERD_SERVER_WORKQUEUE_METRICS_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace informerd::workqueue {

class GaugeMetric {
 public:
  virtual ~GaugeMetric() = default;
  virtual void Inc() = 0;
  virtual void Dec() = 0;
};

class SettableGaugeMetric {
 public:
  virtual ~SettableGaugeMetric() = default;
  virtual void Set(double value) = 0;
};

class CounterMetric {
 public:
  virtual ~CounterMetric() = default;
  virtual void Inc() = 0;
};

class HistogramMetric {
 public:
  virtual ~HistogramMetric() = default;
  virtual void Observe(double value) = 0;
};

// Creates the metrics of one queue. Called once per queue, at creation.
class MetricsProvider {
 public:
  virtual ~MetricsProvider() = default;
  virtual std::unique_ptr<GaugeMetric> NewDepthMetric(absl::string_view name) = 0;
  virtual std::unique_ptr<CounterMetric> NewAddsMetric(absl::string_view name) = 0;
  virtual std::unique_ptr<HistogramMetric> NewLatencyMetric(absl::string_view name) = 0;
  virtual std::unique_ptr<HistogramMetric> NewWorkDurationMetric(absl::string_view name) = 0;
  virtual std::unique_ptr<SettableGaugeMetric> NewUnfinishedWorkSecondsMetric(
      absl::string_view name) = 0;
  virtual std::unique_ptr<SettableGaugeMetric> NewLongestRunningProcessorSecondsMetric(
      absl::string_view name) = 0;
  virtual std::unique_ptr<CounterMetric> NewRetriesMetric(absl::string_view name) = 0;
};

// The metrics of one queue, created from a provider. All members are non-null.
struct QueueMetrics {
  std::unique_ptr<GaugeMetric> depth;
  std::unique_ptr<CounterMetric> adds;
  std::unique_ptr<HistogramMetric> queue_latency;
  std::unique_ptr<HistogramMetric> work_duration;
  std::unique_ptr<SettableGaugeMetric> unfinished_work_seconds;
  std::unique_ptr<SettableGaugeMetric> longest_running_processor;
  std::unique_ptr<CounterMetric> retries;

  static std::unique_ptr<QueueMetrics> Create(MetricsProvider& provider, absl::string_view name);
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_METRICS_H_
