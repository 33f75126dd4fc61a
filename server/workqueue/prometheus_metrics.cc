#include "server/workqueue/prometheus_metrics.h"

#include <string>

namespace informerd::workqueue {
namespace {

class RegistryGauge final : public GaugeMetric, public SettableGaugeMetric {
 public:
  explicit RegistryGauge(Gauge* gauge) : gauge_(gauge) {}
  void Inc() override { gauge_->Add(1); }
  void Dec() override { gauge_->Add(-1); }
  void Set(double v) override { gauge_->Set(v); }

 private:
  Gauge* const gauge_;
};

class RegistryCounter final : public CounterMetric {
 public:
  explicit RegistryCounter(Counter* counter) : counter_(counter) {}
  void Inc() override { counter_->Inc(); }

 private:
  Counter* const counter_;
};

class RegistryHistogram final : public HistogramMetric {
 public:
  explicit RegistryHistogram(Histogram* histogram) : histogram_(histogram) {}
  void Observe(double v) override { histogram_->Observe(v); }

 private:
  Histogram* const histogram_;
};

Labels QueueLabel(absl::string_view name) { return {{"name", std::string(name)}}; }

const std::vector<double>& DurationBuckets() {
  static const auto* const buckets = new std::vector<double>(ExponentialBuckets(10e-9, 10, 10));
  return *buckets;
}

}  // namespace

std::unique_ptr<GaugeMetric> PrometheusMetricsProvider::NewDepthMetric(absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->GetGauge(
      "workqueue_depth", "Number of keys waiting in the workqueue.", QueueLabel(name)));
}

std::unique_ptr<CounterMetric> PrometheusMetricsProvider::NewAddsMetric(absl::string_view name) {
  return std::make_unique<RegistryCounter>(registry_->GetCounter(
      "workqueue_adds_total", "Adds to the workqueue that were not deduplicated.",
      QueueLabel(name)));
}

std::unique_ptr<HistogramMetric> PrometheusMetricsProvider::NewLatencyMetric(
    absl::string_view name) {
  return std::make_unique<RegistryHistogram>(registry_->GetHistogram(
      "workqueue_queue_duration_seconds", "Seconds a key waits in the workqueue before a Get.",
      QueueLabel(name), DurationBuckets()));
}

std::unique_ptr<HistogramMetric> PrometheusMetricsProvider::NewWorkDurationMetric(
    absl::string_view name) {
  return std::make_unique<RegistryHistogram>(registry_->GetHistogram(
      "workqueue_work_duration_seconds", "Seconds from a Get of a key to its Done.",
      QueueLabel(name), DurationBuckets()));
}

std::unique_ptr<SettableGaugeMetric> PrometheusMetricsProvider::NewUnfinishedWorkSecondsMetric(
    absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->GetGauge(
      "workqueue_unfinished_work_seconds",
      "Total age in seconds of the work in progress that has not reached Done; a steady rise "
      "points at stuck workers.",
      QueueLabel(name)));
}

std::unique_ptr<SettableGaugeMetric>
PrometheusMetricsProvider::NewLongestRunningProcessorSecondsMetric(absl::string_view name) {
  return std::make_unique<RegistryGauge>(registry_->GetGauge(
      "workqueue_longest_running_processor_seconds",
      "Age in seconds of the oldest work in progress.", QueueLabel(name)));
}

std::unique_ptr<CounterMetric> PrometheusMetricsProvider::NewRetriesMetric(
    absl::string_view name) {
  return std::make_unique<RegistryCounter>(registry_->GetCounter(
      "workqueue_retries_total", "Delayed and rate-limited re-adds to the workqueue.",
      QueueLabel(name)));
}

}  // namespace informerd::workqueue
