#include "server/workqueue/prometheus_metrics.h"

#include <string>
#include <utility>

namespace informerd::workqueue {
namespace {

class RegistryGauge final : public GaugeMetric, public SettableGaugeMetric {
 public:
  explicit RegistryGauge(std::shared_ptr<Gauge> gauge) : gauge_(std::move(gauge)) {}
  void Inc() override { gauge_->Add(1); }
  void Dec() override { gauge_->Add(-1); }
  void Set(double v) override { gauge_->Set(v); }

 private:
  // Shared: the series outlives its removal from /metrics while the queue still uses it.
  const std::shared_ptr<Gauge> gauge_;
};

class RegistryCounter final : public CounterMetric {
 public:
  explicit RegistryCounter(std::shared_ptr<Counter> counter) : counter_(std::move(counter)) {}
  void Inc() override { counter_->Inc(); }

 private:
  // Shared: the series outlives its removal from /metrics while the queue still uses it.
  const std::shared_ptr<Counter> counter_;
};

class RegistryHistogram final : public HistogramMetric {
 public:
  explicit RegistryHistogram(std::shared_ptr<Histogram> histogram)
      : histogram_(std::move(histogram)) {}
  void Observe(double v) override { histogram_->Observe(v); }

 private:
  // Shared: the series outlives its removal from /metrics while the queue still uses it.
  const std::shared_ptr<Histogram> histogram_;
};

// Every family this provider writes (RemoveQueue removes a queue's series from each).
constexpr absl::string_view kFamilies[] = {
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "workqueue_retries_total",
};

Labels QueueLabel(absl::string_view name) { return {{"name", std::string(name)}}; }

const std::vector<double>& DurationBuckets() {
  static const auto* const buckets = new std::vector<double>(ExponentialBuckets(10e-9, 10, 10));
  return *buckets;
}

}  // namespace

std::unique_ptr<GaugeMetric> PrometheusMetricsProvider::NewDepthMetric(absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->SharedGauge(
      "workqueue_depth", "Number of keys waiting in the workqueue.", QueueLabel(name)));
}

std::unique_ptr<CounterMetric> PrometheusMetricsProvider::NewAddsMetric(absl::string_view name) {
  return std::make_unique<RegistryCounter>(registry_->SharedCounter(
      "workqueue_adds_total", "Adds to the workqueue that were not deduplicated.",
      QueueLabel(name)));
}

std::unique_ptr<HistogramMetric> PrometheusMetricsProvider::NewLatencyMetric(
    absl::string_view name) {
  return std::make_unique<RegistryHistogram>(registry_->SharedHistogram(
      "workqueue_queue_duration_seconds", "Seconds a key waits in the workqueue before a Get.",
      QueueLabel(name), DurationBuckets()));
}

std::unique_ptr<HistogramMetric> PrometheusMetricsProvider::NewWorkDurationMetric(
    absl::string_view name) {
  return std::make_unique<RegistryHistogram>(registry_->SharedHistogram(
      "workqueue_work_duration_seconds", "Seconds from a Get of a key to its Done.",
      QueueLabel(name), DurationBuckets()));
}

std::unique_ptr<SettableGaugeMetric> PrometheusMetricsProvider::NewUnfinishedWorkSecondsMetric(
    absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->SharedGauge(
      "workqueue_unfinished_work_seconds",
      "Total age in seconds of the work in progress that has not reached Done; a steady rise "
      "points at stuck workers.",
      QueueLabel(name)));
}

std::unique_ptr<SettableGaugeMetric>
PrometheusMetricsProvider::NewLongestRunningProcessorSecondsMetric(absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->SharedGauge(
      "workqueue_longest_running_processor_seconds",
      "Age in seconds of the oldest work in progress.", QueueLabel(name)));
}

std::unique_ptr<CounterMetric> PrometheusMetricsProvider::NewRetriesMetric(
    absl::string_view name) {
  return std::make_unique<RegistryCounter>(registry_->SharedCounter(
      "workqueue_retries_total", "Delayed and rate-limited re-adds to the workqueue.",
      QueueLabel(name)));
}

void PrometheusMetricsProvider::RemoveQueue(absl::string_view name) {
  for (absl::string_view family : kFamilies) registry_->RemoveSeries(family, QueueLabel(name));
}

}  // namespace informerd::workqueue
