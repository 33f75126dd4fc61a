#include "server/status/status_page.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_writer.h"
#include "google/protobuf/util/json_util.h"

namespace informerd::status {

// Generated from page.html (BUILD.bazel: page_html_cc).
extern const char kPageHtml[];

namespace {

// A repeated field of `response` as a JSON array of its elements' JSON mapping.
template <typename Messages>
void AppendArray(std::string* out, const Messages& messages) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  out->push_back('[');
  bool first = true;
  for (const auto& m : messages) {
    if (!first) out->push_back(',');
    first = false;
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(m, &json, options).ok()) json = "{}";
    out->append(json);
  }
  out->push_back(']');
}

struct QueueLatency {
  std::vector<double> bounds;
  std::vector<uint64_t> work;
  std::vector<uint64_t> queue;
};

// The queue histograms' series by their "name" label (the queue's name).
void CollectLatency(const MetricsRegistry& metrics, absl::string_view family, bool work,
                    std::map<std::string, QueueLatency>* by_queue) {
  for (MetricsRegistry::HistogramReading& r : metrics.ReadHistograms(family)) {
    for (const auto& [label, value] : r.labels) {
      if (label != "name") continue;
      QueueLatency& q = (*by_queue)[value];
      q.bounds = r.upper_bounds;
      (work ? q.work : q.queue) = std::move(r.buckets);
    }
  }
}

void AppendLatency(std::string* out, const MetricsRegistry& metrics) {
  std::map<std::string, QueueLatency> by_queue;
  CollectLatency(metrics, "workqueue_work_duration_seconds", /*work=*/true, &by_queue);
  CollectLatency(metrics, "workqueue_queue_duration_seconds", /*work=*/false, &by_queue);
  out->push_back('{');
  bool first = true;
  for (const auto& [name, q] : by_queue) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(out, name);
    absl::StrAppend(out, ":{\"bounds\":[", absl::StrJoin(q.bounds, ","),
                    "],\"work_duration\":[", absl::StrJoin(q.work, ","),
                    "],\"queue_duration\":[", absl::StrJoin(q.queue, ","), "]}");
  }
  out->push_back('}');
}

}  // namespace

absl::string_view PageHtml() { return kPageHtml; }

std::string StatusJson(service::AdminService& admin, const MetricsRegistry& metrics,
                       absl::Time now) {
  v1::ListClustersResponse clusters;
  admin.FillClusters(&clusters);
  v1::ListInformersResponse informers;
  admin.FillInformers(&informers);
  v1::ListQueuesResponse queues;
  admin.FillQueues(&queues);
  std::string out = absl::StrCat("{\"nowUnixMs\":", absl::ToUnixMillis(now), ",\"clusters\":");
  AppendArray(&out, clusters.clusters());
  out.append(",\"informers\":");
  AppendArray(&out, informers.informers());
  out.append(",\"queues\":");
  AppendArray(&out, queues.queues());
  out.append(",\"latency\":");
  AppendLatency(&out, metrics);
  out.push_back('}');
  return out;
}

}  // namespace informerd::status
