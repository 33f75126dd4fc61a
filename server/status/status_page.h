// The live status page on the metrics listener: "/" is a self-contained HTML page
// (server/status/page.html, compiled into the binary: no files to ship, no external assets) and
// "/status.json" is what the page polls once a second: Admin's clusters, informers and queues,
// in the proto's JSON mapping (the field names grpcurl prints), with each queue's latency
// histograms (workqueue_work_duration_seconds, workqueue_queue_duration_seconds) as bucket
// counts, from which the page computes percentiles over its last minute.
//
//   http.Get("/status.json", [&](auto&, auto& res) {
//     res.set_content(status::StatusJson(admin, metrics, absl::Now()), "application/json");
//   });
//
// Thread safety: both functions may be called from any thread.
#ifndef INFORMERD_SERVER_STATUS_STATUS_PAGE_H_
#define INFORMERD_SERVER_STATUS_STATUS_PAGE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "server/service/admin_service.h"

namespace informerd::status {

// The page, as served at "/".
absl::string_view PageHtml();

// The document served at "/status.json" (one JSON object):
//   {"nowUnixMs": <ms>, "clusters": [ClusterInfo...], "informers": [InformerInfo...],
//    "queues": [QueueDetails...],
//    "latency": {"<queue>": {"bounds": [<le>...], "work_duration": [<count>...],
//                            "queue_duration": [<count>...]}}}
// Counts are per bucket (not cumulative); the last is +Inf. Zero values are printed.
std::string StatusJson(service::AdminService& admin, const MetricsRegistry& metrics,
                       absl::Time now);

}  // namespace informerd::status

#endif  // INFORMERD_SERVER_STATUS_STATUS_PAGE_H_
