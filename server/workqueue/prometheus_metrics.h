// PrometheusMetricsProvider: workqueue metrics recorded in a MetricsRegistry under client-go's
// names and label (`name`), with client-go's histogram buckets (10 ns .. 100 s, x10).
//
//   MetricsRegistry registry;
//   PrometheusMetricsProvider provider(&registry);
//   auto queue = Queue::Create({.name = "pods", .metrics_provider = &provider}).value();
//
// A queue's series stay in /metrics until RemoveQueue(name) (QueueRegistry calls it when the queue
// is deleted or freed); a queue still running after that keeps updating its own, unrendered series.
//
// Thread safety: the provider and the metrics it creates may be used from any thread.
#ifndef INFORMERD_SERVER_WORKQUEUE_PROMETHEUS_METRICS_H_
#define INFORMERD_SERVER_WORKQUEUE_PROMETHEUS_METRICS_H_

#include <memory>

#include "base/metrics.h"
#include "server/workqueue/metrics.h"

namespace informerd::workqueue {

class PrometheusMetricsProvider final : public MetricsProvider {
 public:
  // REQUIRES: `registry` outlives the provider and every queue using it.
  explicit PrometheusMetricsProvider(MetricsRegistry* registry) : registry_(registry) {}

  // MetricsProvider:
  std::unique_ptr<GaugeMetric> NewDepthMetric(absl::string_view name) override;
  std::unique_ptr<CounterMetric> NewAddsMetric(absl::string_view name) override;
  std::unique_ptr<HistogramMetric> NewLatencyMetric(absl::string_view name) override;
  std::unique_ptr<HistogramMetric> NewWorkDurationMetric(absl::string_view name) override;
  std::unique_ptr<SettableGaugeMetric> NewUnfinishedWorkSecondsMetric(
      absl::string_view name) override;
  std::unique_ptr<SettableGaugeMetric> NewLongestRunningProcessorSecondsMetric(
      absl::string_view name) override;
  std::unique_ptr<CounterMetric> NewRetriesMetric(absl::string_view name) override;

  // Removes every series of the queue `name` from the registry.
  void RemoveQueue(absl::string_view name);

 private:
  MetricsRegistry* const registry_;
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_PROMETHEUS_METRICS_H_
