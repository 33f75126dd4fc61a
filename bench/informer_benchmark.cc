// informer_benchmark: one informerd informer against a running testing/apiserver, one scenario per
// process (so that RSS figures belong to that scenario), printing one JSON object of figures.
// tools/bench_informer runs it beside the client-go baseline (bench/baseline/cmd/informer-baseline)
// on the same server and data.
//
//   informer_benchmark --kubeconfig=K --resource=configmaps --namespace=N --mode=sync
//
// Modes:
//   sync    time from Start to synced (cache and one handler), CPU seconds, peak and steady RSS,
//           cache figures (objects, bytes, stored JSON bytes).
//   ingest  after the sync: the informer's watch is held up while --events updates are made,
//           then released; the replay is timed from the first to the last update the handler gets.
//   relist  after the sync: a forced 410 makes the informer relist; peak RSS during the relist
//           over the steady RSS before it.
//   floor   the floor of decoding the watch events built from the cached objects
//           (bench/metadata_floor.h), and simdjson's full DOM parse of them (events/s).
// Options (`--help` lists them): --transform=strip|none (managedFields stripping), --streaming
// (streaming list), --compression=none|zstd (how the cache keeps objects).
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "bench/metadata_floor.h"
#include "client/client.h"
#include "client/kubeconfig.h"
#include "server/informer/client_lister_watcher.h"
#include "server/informer/shared_informer.h"
#include "simdjson.h"

ABSL_FLAG(std::string, kubeconfig, "", "The test API server's kubeconfig (required).");
ABSL_FLAG(std::string, mode, "sync", "sync, ingest, relist or floor (above).");
ABSL_FLAG(std::string, namespace, "", "The objects' namespace (\"\": every namespace).");
ABSL_FLAG(std::string, resource, "configmaps", "A core (v1) resource: configmaps, pods, ...");
ABSL_FLAG(std::string, transform, "strip", "strip (managedFields) or none.");
ABSL_FLAG(bool, streaming, true, "List by a streaming watch (sendInitialEvents).");
ABSL_FLAG(std::string, compression, "none", "How the cache keeps objects: none or zstd.");
ABSL_FLAG(int64_t, events, 100000, "ingest: the updates made while the watch is held (1..10000000).");
ABSL_FLAG(int, hold_ms, 15000, "ingest: how long the informer's watch is held (100..600000).");

namespace informerd::informer {
namespace {

// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:").
int64_t StatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field)) continue;
    int64_t kib = 0;
    for (char c : line.substr(std::string(field).size())) {
      if (c >= '0' && c <= '9') kib = kib * 10 + (c - '0');
    }
    return kib;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

// The RSS once the process has given back what it freed.
int64_t SteadyRssKiB() {
  malloc_trim(0);
  return StatusKiB("VmRSS:");
}

class CountingHandler : public ResourceEventHandler {
 public:
  void OnAdd(const ObjectPtr&, bool) override { adds.fetch_add(1, std::memory_order_relaxed); }
  void OnUpdate(const ObjectPtr&, const ObjectPtr&) override {
    const int64_t n = updates.fetch_add(1, std::memory_order_relaxed) + 1;
    const int64_t now = absl::GetCurrentTimeNanos();
    if (n == 1) {
      first_update_ns.store(now);
      first_update_cpu.store(CpuSeconds());
    }
    last_update_ns.store(now);
  }
  void OnDelete(const ObjectPtr&, bool) override { deletes.fetch_add(1, std::memory_order_relaxed); }
  std::atomic<int64_t> adds{0}, updates{0}, deletes{0};
  std::atomic<int64_t> first_update_ns{0}, last_update_ns{0};
  std::atomic<double> first_update_cpu{0};
};

absl::Status Control(client::Client& c, const std::string& method, const std::string& path,
                     const std::string& body, std::string* out = nullptr) {
  client::HttpRequest request;
  request.method = method;
  request.path = path;
  request.body = body;
  request.headers = {{"Content-Type", "application/json"}};
  absl::StatusOr<client::Client::RawResponse> response = c.Send(std::move(request));
  if (!response.ok()) return response.status();
  if (out != nullptr) *out = response->body;
  return absl::OkStatus();
}

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::string ns = absl::GetFlag(FLAGS_namespace);
  const std::string resource = absl::GetFlag(FLAGS_resource);
  const std::string transform = absl::GetFlag(FLAGS_transform);
  const bool strip = transform == "strip";
  const bool streaming = absl::GetFlag(FLAGS_streaming);
  const int64_t events = absl::GetFlag(FLAGS_events);
  const int hold_ms = absl::GetFlag(FLAGS_hold_ms);
  StoreCompression compression = StoreCompression::kNone;
  if (absl::GetFlag(FLAGS_compression) == "zstd") {
    compression = StoreCompression::kZstd;
  } else if (absl::GetFlag(FLAGS_compression) != "none") {
    return FlagError(IllegalValue(FLAGS_compression, "expected none or zstd"));
  }
  if (mode != "sync" && mode != "ingest" && mode != "relist" && mode != "floor") {
    return FlagError(IllegalValue(FLAGS_mode, "expected sync, ingest, relist or floor"));
  }
  if (transform != "strip" && transform != "none") {
    return FlagError(IllegalValue(FLAGS_transform, "expected strip or none"));
  }
  for (const absl::Status& s : {CheckRange<int64_t>(FLAGS_events, 1, 10000000),
                                CheckRange(FLAGS_hold_ms, 100, 600000)}) {
    if (!s.ok()) return FlagError(s);
  }
  if (absl::GetFlag(FLAGS_kubeconfig).empty()) {
    return FlagError(MissingFlag(FLAGS_kubeconfig, "the test API server's kubeconfig"));
  }

  absl::StatusOr<client::RestConfig> config =
      client::LoadKubeconfig({.paths = {absl::GetFlag(FLAGS_kubeconfig)}});
  if (!config.ok()) {
    std::fprintf(stderr, "kubeconfig: %s\n", config.status().ToString().c_str());
    return 2;
  }
  const std::string user_agent = absl::StrCat("informerd-bench-", mode);
  auto client = client::Client::Create({.config = *config, .user_agent = user_agent, .qps = 0}).value();
  const client::GroupVersionResource gvr{"", "v1", resource};

  const int64_t rss_before = StatusKiB("VmRSS:");
  const double cpu0 = CpuSeconds();
  const absl::Time t0 = absl::Now();
  SharedInformerOptions options;
  options.name = resource;
  options.lister_watcher =
      ClientListerWatcher::Create({.client = client.get(),
                                   .resource = gvr,
                                   .namespace_name = ns,
                                   .drop_managed_fields = strip})
          .value();
  options.transform.strip_managed_fields = strip;
  options.use_streaming_list = streaming;
  options.compression = compression;
  options.stall_timeout = absl::Minutes(10);
  options.backoff.initial = absl::Milliseconds(100);
  auto informer = SharedInformer::Create(std::move(options)).value();
  auto handler = std::make_shared<CountingHandler>();
  auto registration = informer->AddEventHandler(handler, {.name = "count"}).value();
  if (!informer->Start().ok()) return 3;
  if (!WaitFor([&] { return informer->HasSynced() && registration->HasSynced(); },
               absl::Minutes(10))) {
    std::fprintf(stderr, "not synced: %s\n", informer->reflector_status().last_error.ToString().c_str());
    return 4;
  }
  const double sync_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  const double sync_cpu = CpuSeconds() - cpu0;
  const int64_t peak_kib = StatusKiB("VmHWM:");
  absl::SleepFor(absl::Milliseconds(500));  // let the threads go idle
  const int64_t steady_kib = SteadyRssKiB();
  const InformerMemory memory = informer->memory();
  size_t json_bytes = 0;
  const ListResult cached = informer->store().List();
  for (const ObjectPtr& o : cached.objects) json_bytes += o->json().size();

  std::string out = absl::StrCat(
      R"({"side":"informerd","mode":")", mode, R"(","resource":")", resource,
      R"(","transform":")", strip ? "strip" : "none", R"(","streaming":)", streaming ? "true" : "false",
      R"(,"compression":")", compression == StoreCompression::kZstd ? "zstd" : "none", R"(")",
      R"(,"objects":)", memory.store.objects, R"(,"sync_seconds":)", sync_seconds,
      R"(,"sync_cpu_seconds":)", sync_cpu, R"(,"peak_rss_kib":)", peak_kib,
      R"(,"steady_rss_kib":)", steady_kib, R"(,"base_rss_kib":)", rss_before,
      R"(,"store_bytes":)", memory.store.bytes, R"(,"json_bytes":)", json_bytes);

  // Lists (and streaming lists) the server has answered: an ingestion run must not include one.
  std::string stats;
  auto server_lists = [&] {
    Control(*client, "GET", "/_fake/stats", "", &stats).IgnoreError();
    int64_t lists = 0, watch_lists = 0;
    for (const std::string field : {"\"lists\":", "\"watchLists\":"}) {
      const size_t at = stats.find(field);
      if (at == std::string::npos) continue;
      int64_t v = 0;
      const size_t begin = at + field.size();
      if (!absl::SimpleAtoi(stats.substr(begin, stats.find_first_of(",}", begin) - begin), &v)) continue;
      (field == "\"lists\":" ? lists : watch_lists) = v;
    }
    return lists + watch_lists;
  };
  if (mode == "ingest") {
    // The watch that follows the sync must be older than a second before it is closed: a
    // reflector takes a younger watch that ends without events as an error and relists
    // (client-go's "very short watch"), which would turn this into a relist benchmark.
    absl::SleepFor(absl::Milliseconds(1500));
    // Hold the informer's next watch for a while, re-open it, make the updates meanwhile; when
    // the hold ends the stream closes and the informer replays them from the server's history.
    if (!Control(*client, "POST", "/_fake/faults",
                 absl::StrCat(R"({"type":"stall","verb":"watch","durationMs":)", hold_ms,
                              R"(,"userAgent":")", user_agent, R"("})"))
             .ok() ||
        !Control(*client, "POST", "/_fake/faults",
                 absl::StrCat(R"({"type":"close-watches","namespace":")", ns, R"("})"))
             .ok()) {
      return 5;
    }
    const int64_t lists_before_churn = server_lists();
    const absl::Time churn_start = absl::Now();
    if (!Control(*client, "POST", "/_fake/churn",
                 absl::StrCat(R"({"resource":")", resource, R"(","namespace":")", ns,
                              R"(","ops":)", events, R"(,"wait":true})"))
             .ok()) {
      return 6;
    }
    const double churn_seconds = absl::ToDoubleSeconds(absl::Now() - churn_start);
    std::fprintf(stderr, "churned %lld updates in %.2fs; waiting for the replay\n",
                 static_cast<long long>(events), churn_seconds);
    if (!WaitFor([&] { return handler->updates.load() >= events; }, absl::Minutes(5))) {
      std::fprintf(stderr, "only %lld of %lld updates arrived\n",
                   static_cast<long long>(handler->updates.load()), static_cast<long long>(events));
      return 7;
    }
    const double seconds = (handler->last_update_ns.load() - handler->first_update_ns.load()) / 1e9;
    absl::StrAppend(&out, R"(,"ingest_events":)", events, R"(,"ingest_seconds":)", seconds,
                    R"(,"ingest_events_per_second":)", seconds > 0 ? (events - 1) / seconds : 0,
                    R"(,"ingest_cpu_seconds":)", CpuSeconds() - handler->first_update_cpu.load(),
                    R"(,"churn_seconds":)", churn_seconds,
                    // Anything but 0: the updates came through a relist, not the watch.
                    R"(,"ingest_relists":)", server_lists() - lists_before_churn);
  } else if (mode == "relist") {
    const int64_t lists_before = server_lists();
    const uint64_t syncs_before = informer->reflector_status().syncs;
    ResetPeakRss();
    const double cpu_before = CpuSeconds();
    const absl::Time start = absl::Now();
    if (!Control(*client, "POST", "/_fake/faults",
                 absl::StrCat(R"({"type":"gone","verb":"watch","userAgent":")", user_agent, R"("})"))
             .ok() ||
        !Control(*client, "POST", "/_fake/faults",
                 absl::StrCat(R"({"type":"close-watches","namespace":")", ns, R"("})"))
             .ok()) {
      return 8;
    }
    if (!WaitFor([&] { return server_lists() > lists_before; }, absl::Minutes(2))) return 9;
    // Settled: the informer's own signal, checked with the same rule the baseline uses (RSS
    // unchanged for a second).
    WaitFor([&] { return informer->reflector_status().syncs > syncs_before &&
                         informer->memory().fifo_items == 0; },
            absl::Minutes(2));
    int64_t last = StatusKiB("VmRSS:");
    for (int stable = 0; stable < 10;) {
      absl::SleepFor(absl::Milliseconds(100));
      const int64_t now = StatusKiB("VmRSS:");
      stable = (now == last) ? stable + 1 : 0;
      last = now;
    }
    const int64_t relist_peak = StatusKiB("VmHWM:");
    absl::StrAppend(&out, R"(,"relist_seconds":)", absl::ToDoubleSeconds(absl::Now() - start),
                    R"(,"relist_cpu_seconds":)", CpuSeconds() - cpu_before,
                    R"(,"relist_peak_rss_kib":)", relist_peak,
                    R"(,"relist_peak_over_steady":)",
                    steady_kib > 0 ? static_cast<double>(relist_peak) / steady_kib : 0);
  } else if (mode == "floor") {
    // The same watch events as the server sends, through the floor of decoding them
    // (bench/metadata_floor.h) and, for reference, simdjson's full DOM parse.
    std::vector<simdjson::padded_string> lines;
    lines.reserve(cached.objects.size());
    for (const ObjectPtr& o : cached.objects) {
      lines.emplace_back(absl::StrCat(R"({"type":"MODIFIED","object":)", o->json(), "}"));
    }
    auto rate = [&](auto&& decode) {
      const absl::Time start = absl::Now();
      int64_t decoded = 0;
      while (absl::Now() - start < absl::Seconds(3)) {
        for (const simdjson::padded_string& line : lines) decoded += decode(line) ? 1 : 0;
      }
      return static_cast<double>(decoded) / absl::ToDoubleSeconds(absl::Now() - start);
    };
    bench::MetadataFloor floor;
    const double floor_rate = rate([&](const simdjson::padded_string& line) {
      return floor.Decode(line.data(), line.size());
    });
    simdjson::dom::parser parser;
    const double dom_rate = rate([&](const simdjson::padded_string& line) {
      simdjson::dom::element doc;
      return parser.parse(line).get(doc) == simdjson::SUCCESS;
    });
    size_t bytes = 0;
    for (const simdjson::padded_string& line : lines) bytes += line.size();
    absl::StrAppend(&out, R"(,"floor_events_per_second":)", floor_rate,
                    R"(,"dom_parse_events_per_second":)", dom_rate,
                    R"(,"event_bytes":)", lines.empty() ? 0 : bytes / lines.size());
  }
  absl::StrAppend(&out, "}");
  std::printf("%s\n", out.c_str());
  std::fflush(stdout);
  informer->Stop();
  return 0;
}

}  // namespace
}  // namespace informerd::informer

int main(int argc, char** argv) {
  informerd::ParseFlags(argc, argv,
                        "one informerd informer against testing/apiserver, one scenario per run; "
                        "prints a JSON object of figures.");
  return informerd::informer::Run();
}
