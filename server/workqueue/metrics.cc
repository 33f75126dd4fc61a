#include "server/workqueue/metrics.h"

namespace informerd::workqueue {

std::unique_ptr<QueueMetrics> QueueMetrics::Create(MetricsProvider& provider,
                                                   absl::string_view name) {
  auto m = std::make_unique<QueueMetrics>();
  m->depth = provider.NewDepthMetric(name);
  m->adds = provider.NewAddsMetric(name);
  m->queue_latency = provider.NewLatencyMetric(name);
  m->work_duration = provider.NewWorkDurationMetric(name);
  m->unfinished_work_seconds = provider.NewUnfinishedWorkSecondsMetric(name);
  m->longest_running_processor = provider.NewLongestRunningProcessorSecondsMetric(name);
  m->retries = provider.NewRetriesMetric(name);
  return m;
}

}  // namespace informerd::workqueue
