// load: a load generator for a running informerd — the tool to load-test a deployment with.
// It adds keys to a queue, drains them through Work streams with a no-op reconcile (every key
// answered SUCCESS at once, one Outcomes message per batch), watches and reads an informer, and can
// make changes on the API server itself, then reports throughput and latency percentiles: a live
// progress line once a second (on stderr) and a summary table at the end (--json: one JSON object
// on stdout instead). With --apiserver it creates --namespace when it is missing.
//
//   bazel run //bench:load -- --target=127.0.0.1:7470 --queue=load --duration=30s
//       --add_rate=50000 --keys=10000 --workers=4 --batch=16
//   bazel run //bench:load -- --target=127.0.0.1:7470 --resource=v1/configmaps --namespace=demo
//       --subscribers=100 --get_rate=1000 --get_key=demo/cm-1
//   bazel run //bench:load -- --target=... --resource=v1/configmaps --namespace=load
//       --queue=cms --bind --apiserver=http://127.0.0.1:8080 --change_rate=1000 --adders=0
//
// `load --help` lists every flag (Abseil flags, base/flags.h: --name=value, durations like 10s,
// bools as --name or --noname, --flagfile=PATH for a saved scenario).
//
// Replica sets: Queues and Work calls go to the leader. The tool asks --target (GetQueue) and, when
// the answer is NOT_LEADER, follows the leader_address it names (waiting while no leader is known);
// a Work stream that a leader ends with NOT_LEADER (it stepped down) finds the new leader and
// starts again. Reads (Watch, Get, List) stay on --target.
//
// Latency add→delivery: each key's first pending add (or change) is kept in a map until a worker
// receives the key; a key added again before delivery keeps its first time (the queue coalesces).
// Adds are timed just before the Add call is sent, changes just before the PATCH is sent.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "bench/latency_histogram.h"
#include "client/read_file.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"

ABSL_FLAG(std::string, target, "",
          "informerd's gRPC address (host:port or unix:///path). Required.");
ABSL_FLAG(std::string, tls_ca, "",
          "Connect with TLS, trusting this CA (PEM) for the daemon's certificate.");
ABSL_FLAG(std::string, token_file, "",
          "Send the bearer token in this file with every call (needs --tls_ca; informerd "
          "authenticates it with a TokenReview).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "How long the measured phase runs.");
ABSL_FLAG(std::string, queue, "", "The queue to load (created when missing); workers need it.");
ABSL_FLAG(int, adders, 1, "Threads calling Queues.Add (0..64; 0: no adds).");
ABSL_FLAG(double, add_rate, 0, "Keys/s added over all adders; 0: as fast as possible.");
ABSL_FLAG(int, add_batch, 100,
          "Keys per Add call at most (1..10000; fewer at low rates to keep latency).");
ABSL_FLAG(int, priorities, 0,
          "Spread adds (and the prefill) over this many priorities, a request's keys at one of "
          "0, -10, -20, ... in turn (0..100; 0: every key at the default priority).");
ABSL_FLAG(int, keys, 10000,
          "The key space (1..100000000): keys are load/key-00000000 .. load/key-<keys-1>.");
ABSL_FLAG(bool, prefill, false,
          "Add every key once before the run (not timed); with --adders=0 the run ends when the "
          "queue is drained, giving pure Work-stream throughput.");
ABSL_FLAG(std::optional<int>, workers, std::nullopt,
          "Work streams, each on its own connection (0..1000; default 1 with --queue, else 0).");
ABSL_FLAG(int, batch, 1,
          "max_batch per stream (1..100000; and max_in_flight unless --in_flight is given).");
ABSL_FLAG(std::optional<int>, in_flight, std::nullopt,
          "max_in_flight per stream (default --batch; at least --batch).");
ABSL_FLAG(bool, delete_queue, false, "Delete the queue at the end.");
ABSL_FLAG(bool, objects, false,
          "Workers ask for each lease's object from the informer (--informer or --resource; "
          "Start.object_informer_id), as controllers do.");
ABSL_FLAG(std::string, informer, "",
          "The informer for --subscribers, --get_rate and --lists (or --resource).");
ABSL_FLAG(std::string, resource, "",
          "[GROUP/]VERSION/RESOURCE: ensure that informer (with --namespace, --cluster).");
ABSL_FLAG(std::string, namespace, "",
          "The --resource informer's namespace, and where --apiserver's changes are made (created "
          "when missing).");
ABSL_FLAG(std::string, cluster, "", "The --resource informer's cluster (default: the daemon's).");
ABSL_FLAG(bool, bind, false,
          "When creating --queue, source it from the informer (an informer-bound queue: the "
          "informer's events enqueue object keys).");
ABSL_FLAG(int, subscribers, 0, "Watch streams on the informer (0..10000).");
ABSL_FLAG(double, get_rate, 0,
          "Lister Get calls/s on --get_key (one thread; 0 with --get_key set: as fast as "
          "possible).");
ABSL_FLAG(std::string, get_key, "", "The key Get reads, NAMESPACE/NAME.");
ABSL_FLAG(int, lists, 0, "List the whole informer this many times before the run (timed).");
ABSL_FLAG(std::string, apiserver, "",
          "Make changes on this API server, http://HOST:PORT (plain HTTP, no auth: a test "
          "server); --namespace is created there when missing.");
ABSL_FLAG(double, change_rate, 0,
          "ConfigMap merge-patches/s in --namespace, each stamped with the time it was sent "
          "(data.ts); latency is measured from it to the key's delivery and to each subscriber's "
          "event. With --subscribers, changes start once every subscriber has its initial objects "
          "(or --sync_wait has passed).");
ABSL_FLAG(absl::Duration, sync_wait, absl::Seconds(60),
          "How long changes wait for the subscribers' initial objects (100 subscribers of 150k "
          "Pods take minutes).");
ABSL_FLAG(int, change_objects, 100,
          "ConfigMaps load-000000 .. created before the run (1..1000000; existing ones reused).");
ABSL_FLAG(int, change_threads, 4, "HTTP connections making changes (1..64).");
ABSL_FLAG(bool, churn, false,
          "The API server makes the --change_rate changes itself (the fake API server's POST "
          "/_fake/churn, stamped with the time) on the objects of --resource in --namespace: for "
          "ConfigMaps, --change_objects it seeds; other resources must exist already. Rates no "
          "client's PATCHes reach; each event's latency is timed from the server's stamp (Watch "
          "events only).");
ABSL_FLAG(bool, compress, false,
          "The --resource informer keeps its objects zstd-compressed (InformerSpec.storage).");
ABSL_FLAG(bool, json, false, "Print the summary as one JSON object on stdout.");

namespace informerd::bench {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SleepUntilNs(int64_t deadline_ns) {
  const int64_t wait = deadline_ns - NowNs();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
}

// ---- Options --------------------------------------------------------------------------------

struct Options {
  std::string target;
  std::string tls_ca;      // PEM, read from --tls_ca
  std::string token;       // read from --token_file
  absl::Duration duration = absl::Seconds(10);
  absl::Duration sync_wait = absl::Seconds(60);
  std::string queue;
  int adders = 1;
  double add_rate = 0;
  int add_batch = 100;
  int priorities = 0;
  int keys = 10000;
  bool prefill = false;
  int workers = 1;
  int batch = 1;
  int in_flight = 0;  // 0: batch
  bool delete_queue = false;
  bool objects = false;
  std::string informer;
  std::string resource;
  std::string namespace_;
  std::string cluster;
  bool bind = false;
  int subscribers = 0;
  double get_rate = 0;
  std::string get_key;
  int lists = 0;
  std::string apiserver;
  double change_rate = 0;
  int change_objects = 100;
  int change_threads = 4;
  bool churn = false;
  bool compress = false;
  bool json = false;
};

// A file's contents ("" when the flag is not given), or an error naming the flag.
absl::StatusOr<std::string> ReadFlagFile(const absl::Flag<std::string>& flag) {
  const std::string path = absl::GetFlag(flag);
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text = client::ReadFile(path, /*max_bytes=*/1 << 20);
  if (!text.ok()) return IllegalValue(flag, text.status().message());
  return text;
}

absl::Status CheckRate(const absl::Flag<double>& flag) {
  const double rate = absl::GetFlag(flag);
  if (rate >= 0 && rate <= 1e9) return absl::OkStatus();
  return IllegalValue(flag, "expected a rate in 0..1e9 (per second)");
}

// The flags, checked one by one and together; errors name the flag (base/flags.h).
absl::StatusOr<Options> OptionsFromFlags() {
  for (const absl::Status& s :
       {CheckPositive(FLAGS_duration), CheckPositive(FLAGS_sync_wait),
        CheckRange(FLAGS_adders, 0, 64), CheckRate(FLAGS_add_rate),
        CheckRange(FLAGS_add_batch, 1, 10000), CheckRange(FLAGS_priorities, 0, 100),
        CheckRange(FLAGS_keys, 1, 100000000),
        CheckRange(FLAGS_batch, 1, 100000), CheckRange(FLAGS_subscribers, 0, 10000),
        CheckRate(FLAGS_get_rate), CheckRange(FLAGS_lists, 0, 100000), CheckRate(FLAGS_change_rate),
        CheckRange(FLAGS_change_objects, 1, 1000000), CheckRange(FLAGS_change_threads, 1, 64)}) {
    if (!s.ok()) return s;
  }
  Options o;
  o.target = absl::GetFlag(FLAGS_target);
  absl::StatusOr<std::string> tls_ca = ReadFlagFile(FLAGS_tls_ca);
  if (!tls_ca.ok()) return tls_ca.status();
  o.tls_ca = *std::move(tls_ca);
  absl::StatusOr<std::string> token = ReadFlagFile(FLAGS_token_file);
  if (!token.ok()) return token.status();
  o.token = std::string(absl::StripAsciiWhitespace(*token));
  o.duration = absl::GetFlag(FLAGS_duration);
  o.sync_wait = absl::GetFlag(FLAGS_sync_wait);
  o.queue = absl::GetFlag(FLAGS_queue);
  o.adders = absl::GetFlag(FLAGS_adders);
  o.add_rate = absl::GetFlag(FLAGS_add_rate);
  o.add_batch = absl::GetFlag(FLAGS_add_batch);
  o.priorities = absl::GetFlag(FLAGS_priorities);
  o.keys = absl::GetFlag(FLAGS_keys);
  o.prefill = absl::GetFlag(FLAGS_prefill);
  // Without a queue the default worker is not wanted (an explicit --workers still needs one).
  o.workers = absl::GetFlag(FLAGS_workers).value_or(o.queue.empty() ? 0 : 1);
  if (o.workers < 0 || o.workers > 1000) return IllegalValue(FLAGS_workers, "expected 0..1000");
  o.batch = absl::GetFlag(FLAGS_batch);
  o.in_flight = absl::GetFlag(FLAGS_in_flight).value_or(o.batch);
  if (o.in_flight < o.batch || o.in_flight > 100000) {
    return IllegalValue(FLAGS_in_flight, "must be at least --batch (and at most 100000)");
  }
  o.delete_queue = absl::GetFlag(FLAGS_delete_queue);
  o.objects = absl::GetFlag(FLAGS_objects);
  o.informer = absl::GetFlag(FLAGS_informer);
  o.resource = absl::GetFlag(FLAGS_resource);
  o.namespace_ = absl::GetFlag(FLAGS_namespace);
  o.cluster = absl::GetFlag(FLAGS_cluster);
  o.bind = absl::GetFlag(FLAGS_bind);
  o.subscribers = absl::GetFlag(FLAGS_subscribers);
  o.get_rate = absl::GetFlag(FLAGS_get_rate);
  o.get_key = absl::GetFlag(FLAGS_get_key);
  o.lists = absl::GetFlag(FLAGS_lists);
  o.apiserver = absl::GetFlag(FLAGS_apiserver);
  o.change_rate = absl::GetFlag(FLAGS_change_rate);
  o.change_objects = absl::GetFlag(FLAGS_change_objects);
  o.change_threads = absl::GetFlag(FLAGS_change_threads);
  o.churn = absl::GetFlag(FLAGS_churn);
  o.compress = absl::GetFlag(FLAGS_compress);
  o.json = absl::GetFlag(FLAGS_json);

  if (o.target.empty()) return MissingFlag(FLAGS_target, "informerd's host:port or unix:///path");
  if (!o.token.empty() && o.tls_ca.empty()) {
    return IllegalValue(FLAGS_token_file, "needs --tls_ca (tokens travel over TLS only)");
  }
  if (o.queue.empty() && (o.workers > 0 || o.prefill)) {
    return MissingFlag(FLAGS_queue,
                       "required with --workers > 0 or --prefill (or pass --workers=0 --adders=0)");
  }
  if (o.queue.empty()) o.adders = 0;
  if (!o.informer.empty() && !o.resource.empty()) {
    return IllegalValue(FLAGS_informer, "give --informer or --resource, not both");
  }
  const bool has_informer = !o.informer.empty() || !o.resource.empty();
  if ((o.subscribers > 0 || o.get_rate > 0 || !o.get_key.empty() || o.lists > 0 || o.bind ||
       o.objects) &&
      !has_informer) {
    return MissingFlag(FLAGS_informer,
                       "--subscribers, --get_rate, --get_key, --lists, --bind and --objects need "
                       "--informer or --resource");
  }
  if (o.get_rate > 0 && o.get_key.empty()) {
    return MissingFlag(FLAGS_get_key, "--get_rate needs --get_key=NAMESPACE/NAME");
  }
  if (o.bind && o.queue.empty()) return MissingFlag(FLAGS_queue, "--bind needs --queue");
  if (o.compress && o.resource.empty()) {
    return MissingFlag(FLAGS_resource, "--compress needs --resource (it is the informer's spec)");
  }
  if (o.change_rate > 0 && o.apiserver.empty()) {
    return MissingFlag(FLAGS_apiserver, "--change_rate needs --apiserver=http://HOST:PORT");
  }
  if (o.churn && (o.change_rate <= 0 || o.bind)) {
    return IllegalValue(FLAGS_churn,
                        "needs --change_rate, and times Watch events only (not with --bind)");
  }
  if (!o.apiserver.empty()) {
    if (!absl::StartsWith(o.apiserver, "http://")) {
      return IllegalValue(FLAGS_apiserver, "expected http://HOST:PORT");
    }
    if (o.namespace_.empty()) {
      return MissingFlag(FLAGS_namespace, "--apiserver needs --namespace for its ConfigMaps");
    }
  }
  return o;
}

// ---- Shared state ---------------------------------------------------------------------------

// A latency histogram one thread records into and the reporter merges from.
struct Recorder {
  absl::Mutex mu;
  LatencyHistogram histogram ABSL_GUARDED_BY(mu);

  void Record(int64_t ns) {
    absl::MutexLock lock(&mu);
    histogram.Record(ns);
  }
  // Merges a thread's local samples in and clears them (threads flush every 50 ms).
  void Take(LatencyHistogram* local) {
    absl::MutexLock lock(&mu);
    histogram.Merge(*local);
    local->Clear();
  }
};

LatencyHistogram MergeAll(const std::vector<std::unique_ptr<Recorder>>& recorders) {
  LatencyHistogram total;
  for (const auto& r : recorders) {
    absl::MutexLock lock(&r->mu);
    total.Merge(r->histogram);
  }
  return total;
}

// Key → time of its first pending add or change, sharded to keep adders and workers apart.
class PendingTimes {
 public:
  // Keeps the earlier time when the key is already pending.
  void Mark(const std::string& key, int64_t ns) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    s.first_ns.try_emplace(key, ns);
  }
  // The key's pending time, forgetting it; nullopt when the key was not marked.
  std::optional<int64_t> Take(const std::string& key) {
    Shard& s = ShardOf(key);
    absl::MutexLock lock(&s.mu);
    auto it = s.first_ns.find(key);
    if (it == s.first_ns.end()) return std::nullopt;
    const int64_t ns = it->second;
    s.first_ns.erase(it);
    return ns;
  }

 private:
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, int64_t> first_ns ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(const std::string& key) {
    return shards_[absl::HashOf(key) % kShards];
  }
  static constexpr size_t kShards = 64;
  Shard shards_[kShards];
};

struct Counters {
  std::atomic<uint64_t> added{0};
  std::atomic<uint64_t> add_errors{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> refusals{0};
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> resnapshots{0};
  std::atomic<uint64_t> gets{0};
  std::atomic<uint64_t> get_errors{0};
  std::atomic<uint64_t> changes{0};
  std::atomic<uint64_t> change_errors{0};
};

// The first error of each kind, for the summary.
class Errors {
 public:
  void Add(const std::string& what) {
    absl::MutexLock lock(&mu_);
    if (seen_.size() < 20 && !seen_.contains(what)) seen_[what] = true;
  }
  std::vector<std::string> List() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& [k, v] : seen_) out.push_back(k);
    return out;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> seen_ ABSL_GUARDED_BY(mu_);
};

std::string KeyName(int i) { return absl::StrFormat("load/key-%08d", i); }
std::string ObjectName(int i) { return absl::StrFormat("load-%06d", i); }

// `address`: where to connect ("": --target). Over TLS a followed leader's certificate is checked
// for --target's host name, as the SDKs do.
std::shared_ptr<grpc::Channel> NewChannel(const Options& o, int index,
                                          const std::string& address = "") {
  grpc::ChannelArguments args;
  if (!address.empty() && address != o.target && !o.tls_ca.empty()) {
    args.SetSslTargetNameOverride(o.target.substr(0, o.target.rfind(':')));
  }
  // A distinct argument gives each channel its own connection (as separate worker processes
  // would have).
  args.SetInt("informerd.load.channel", index);
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty()) {
    creds = grpc::SslCredentials(grpc::SslCredentialsOptions{.pem_root_certs = o.tls_ca});
    if (!o.token.empty()) {
      creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(o.token));
    }
  }
  return grpc::CreateCustomChannel(address.empty() ? o.target : address, creds, args);
}

// The leader named by a NOT_LEADER error ({leader_address} metadata; "" when none is known), or
// nullopt when `s` is not NOT_LEADER.
std::optional<std::string> NotLeaderAddress(const grpc::Status& s) {
  if (s.error_code() != grpc::UNAVAILABLE || s.error_details().empty()) return std::nullopt;
  google::rpc::Status details;
  if (!details.ParseFromString(s.error_details())) return std::nullopt;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (!any.UnpackTo(&info) || info.reason() != "NOT_LEADER") continue;
    auto it = info.metadata().find("leader_address");
    return it == info.metadata().end() ? "" : it->second;
  }
  return std::nullopt;
}

// ---- The load ---------------------------------------------------------------------------------

class Load {
 public:
  explicit Load(Options options) : o_(std::move(options)) {}

  int Run() {
    channel_ = NewChannel(o_, 0);
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      return Fail(absl::StrCat("cannot connect to --target=", o_.target, " within 10s"));
    }
    if (!o_.queue.empty()) {
      if (absl::Status s = FollowLeader(); !s.ok()) return Fail(s.ToString());
    }
    if (absl::Status s = Setup(); !s.ok()) return Fail(s.ToString());
    Measure();
    if (o_.delete_queue && !o_.queue.empty()) {
      grpc::ClientContext ctx;
      v1::DeleteQueueRequest req;
      req.set_queue(o_.queue);
      v1::DeleteQueueResponse res;
      v1::Queues::NewStub(QueueChannel())->DeleteQueue(&ctx, req, &res).IgnoreError();
    }
    PrintSummary();
    return 0;
  }

 private:
  int Fail(const std::string& message) {
    std::fprintf(stderr, "load: %s\n", message.c_str());
    return 1;
  }

  static absl::Status FromGrpc(const std::string& what, const grpc::Status& s) {
    if (s.ok()) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat(what, ": ", s.error_message()));
  }

  absl::Status Setup() {
    if (!o_.apiserver.empty()) {
      if (absl::Status s = EnsureNamespace(); !s.ok()) return s;
      if (absl::Status s = o_.churn ? SeedObjects() : CreateObjects(); !s.ok()) return s;
    }
    const int64_t sync_start = NowNs();
    if (!o_.resource.empty()) {
      if (absl::Status s = EnsureInformer(); !s.ok()) return s;
    }
    if (!o_.informer.empty()) {
      auto stub = v1::Informers::NewStub(channel_);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      v1::WaitForSyncRequest req;
      req.set_informer_id(o_.informer);
      req.set_timeout_ms(110000);
      v1::InformerInfo info;
      if (absl::Status s = FromGrpc("WaitForSync", stub->WaitForSync(&ctx, req, &info)); !s.ok()) {
        return s;
      }
      objects_ = info.state().objects();
      sync_seconds_ = static_cast<double>(NowNs() - sync_start) / 1e9;
      for (int i = 0; i < o_.lists; ++i) {
        if (absl::Status s = TimedList(); !s.ok()) return s;
      }
    }
    if (!o_.queue.empty()) {
      if (absl::Status s = EnsureQueue(); !s.ok()) return s;
      if (o_.prefill) {
        if (absl::Status s = Prefill(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // --churn: the fake API server's own ConfigMaps, with the payload its churn stamps.
  absl::Status SeedObjects() {
    if (ChurnResource() != "configmaps") return absl::OkStatus();  // they exist already
    httplib::Client http(o_.apiserver);
    http.set_connection_timeout(5);
    const std::string body =
        absl::StrFormat(R"({"resource":"configmaps","namespace":"%s","count":%d,"bytes":400})",
                        o_.namespace_, o_.change_objects);
    auto res = http.Post("/_fake/seed", body, "application/json");
    if (!res || res->status != 200) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--churn: POST /_fake/seed: ",
          res ? absl::StrCat("HTTP ", res->status, ": ", res->body.substr(0, 200))
              : httplib::to_string(res.error())));
    }
    return absl::OkStatus();
  }

  // --churn: the resource the server changes (--resource's, ConfigMaps without one).
  std::string ChurnResource() const {
    if (o_.resource.empty()) return "configmaps";
    return std::string(absl::string_view(o_.resource).substr(o_.resource.rfind('/') + 1));
  }

  // --churn: starts the server's change generator for the run; its id, or 0 after an error.
  int StartChurn() {
    httplib::Client http(o_.apiserver);
    const std::string body = absl::StrFormat(
        R"({"resource":"%s","namespace":"%s","rate":%d,"durationMs":%d,"stamp":"time"})",
        ChurnResource(), o_.namespace_, static_cast<int>(o_.change_rate),
        static_cast<int>(absl::ToInt64Milliseconds(o_.duration)));
    auto res = http.Post("/_fake/churn", body, "application/json");
    int id = 0;
    if (!res || res->status != 200 || !absl::SimpleAtoi(JsonNumber(res->body, "id"), &id)) {
      errors_.Add(res ? absl::StrCat("POST /_fake/churn: HTTP ", res->status, ": ", res->body)
                      : absl::StrCat("POST /_fake/churn: ", httplib::to_string(res.error())));
    }
    return id;
  }

  // --churn: the changes generator `id` made.
  uint64_t ChurnOps(int id) {
    httplib::Client http(o_.apiserver);
    auto res = http.Get("/_fake/churn");
    if (!res || res->status != 200) return 0;
    // [{"id":1,...,"ops":N,...},...]
    const size_t at = res->body.find(absl::StrCat("{\"id\":", id, ","));
    uint64_t ops = 0;
    if (at == std::string::npos ||
        !absl::SimpleAtoi(JsonNumber(res->body.substr(at), "ops"), &ops)) {
      return 0;
    }
    return ops;
  }

  // The digits of the first number field `name` in `json` ("" when there is none).
  static std::string JsonNumber(const std::string& json, const std::string& name) {
    const size_t at = json.find(absl::StrCat("\"", name, "\":"));
    if (at == std::string::npos) return "";
    size_t end = at + name.size() + 3;
    const size_t begin = end;
    while (end < json.size() && json[end] >= '0' && json[end] <= '9') ++end;
    return json.substr(begin, end - begin);
  }

  // --apiserver: creates --namespace unless it exists (its objects' POSTs would get 404).
  absl::Status EnsureNamespace() {
    httplib::Client http(o_.apiserver);
    http.set_connection_timeout(5);
    const std::string body = absl::StrCat(
        R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")", o_.namespace_, R"("}})");
    auto res = http.Post("/api/v1/namespaces", body, "application/json");
    if (!res) {
      return absl::UnavailableError(absl::StrCat("--apiserver: POST /api/v1/namespaces: ",
                                                 httplib::to_string(res.error())));
    }
    if (res->status != 201 && res->status != 200 && res->status != 409) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--apiserver: namespace ", o_.namespace_, " could not be created (HTTP ", res->status,
          ": ", res->body.substr(0, 200), "); create it first, e.g. kubectl create namespace ",
          o_.namespace_));
    }
    if (res->status != 409) std::fprintf(stderr, "load: created namespace %s\n", o_.namespace_.c_str());
    return absl::OkStatus();
  }

  absl::Status CreateObjects() {
    httplib::Client http(o_.apiserver);
    http.set_connection_timeout(5);
    http.set_tcp_nodelay(true);
    const std::string path = absl::StrCat("/api/v1/namespaces/", o_.namespace_, "/configmaps");
    for (int i = 0; i < o_.change_objects; ++i) {
      const std::string body = absl::StrCat(
          R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", ObjectName(i),
          R"("},"data":{"ts":"0"}})");
      auto res = http.Post(path.c_str(), body, "application/json");
      if (!res) {
        return absl::UnavailableError(absl::StrCat("--apiserver: POST ", path, ": ",
                                                   httplib::to_string(res.error())));
      }
      if (res->status != 201 && res->status != 200 && res->status != 409) {
        return absl::FailedPreconditionError(absl::StrCat("--apiserver: POST ", path, ": HTTP ",
                                                          res->status, ": ",
                                                          res->body.substr(0, 200)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status EnsureInformer() {
    std::vector<std::string> parts = absl::StrSplit(o_.resource, '/');
    v1::EnsureInformerRequest req;
    v1::GroupVersionResource* gvr = req.mutable_spec()->mutable_resource();
    if (parts.size() == 2) {
      gvr->set_version(parts[0]);
      gvr->set_resource(parts[1]);
    } else if (parts.size() == 3) {
      gvr->set_group(parts[0]);
      gvr->set_version(parts[1]);
      gvr->set_resource(parts[2]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--resource: expected [GROUP/]VERSION/RESOURCE such as v1/configmaps, got \"",
          o_.resource, "\""));
    }
    req.mutable_spec()->set_cluster(o_.cluster);
    req.mutable_spec()->set_namespace_(o_.namespace_);
    if (o_.compress) {
      req.mutable_spec()->mutable_storage()->set_compression(v1::StorageSpec::COMPRESSION_ZSTD);
    }
    auto stub = v1::Informers::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::InformerInfo info;
    if (absl::Status s = FromGrpc("EnsureInformer", stub->EnsureInformer(&ctx, req, &info));
        !s.ok()) {
      return s;
    }
    o_.informer = info.id();
    return absl::OkStatus();
  }

  absl::Status TimedList() {
    auto stub = v1::Informers::NewStub(channel_);
    grpc::ClientContext ctx;
    v1::ListRequest req;
    req.set_informer_id(o_.informer);
    const int64_t start = NowNs();
    auto reader = stub->List(&ctx, req);
    v1::ListResponse res;
    uint64_t n = 0;
    uint64_t bytes = 0;
    while (reader->Read(&res)) {
      n += static_cast<uint64_t>(res.objects_size());
      for (const v1::Object& object : res.objects()) bytes += object.json().size();
    }
    if (absl::Status s = FromGrpc("List", reader->Finish()); !s.ok()) return s;
    list_.Record(NowNs() - start);
    listed_ = n;
    listed_bytes_ = bytes;
    return absl::OkStatus();
  }

  // Where Queues and Work calls go: --target, or the leader it names.
  std::string QueueTarget() {
    absl::MutexLock l(&leader_mu_);
    return queue_target_;
  }
  std::shared_ptr<grpc::Channel> QueueChannel() {
    absl::MutexLock l(&leader_mu_);
    return queue_channel_;
  }

  // Finds the replica that serves Queues and Work (see the header comment), for up to 60 s.
  absl::Status FollowLeader() {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::Duration backoff = absl::Milliseconds(100);
    std::string address = o_.target;
    for (;;) {
      std::shared_ptr<grpc::Channel> channel = address == o_.target ? channel_ : NewChannel(o_, 0, address);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::GetQueueRequest req;
      req.set_queue(o_.queue);
      v1::QueueInfo info;
      grpc::Status s = v1::Queues::NewStub(channel)->GetQueue(&ctx, req, &info);
      std::optional<std::string> leader = NotLeaderAddress(s);
      if (!leader.has_value() && s.error_code() != grpc::UNAVAILABLE) {
        absl::MutexLock l(&leader_mu_);
        if (queue_target_ != address) {
          if (!queue_target_.empty()) ++leader_changes_;
          std::printf("load: Queues and Work go to %s%s\n", address.c_str(),
                      address == o_.target ? "" : " (the leader --target named)");
        }
        queue_target_ = address;
        queue_channel_ = channel;
        return absl::OkStatus();
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat("no leader found within 60s: ", s.error_message()));
      }
      if (leader.has_value() && !leader->empty() && *leader != address) {
        address = *leader;
        continue;
      }
      // No leader known yet, or the named one is not serving yet: ask --target again.
      address = o_.target;
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(backoff));
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  }

  absl::Status EnsureQueue() {
    auto stub = v1::Queues::NewStub(QueueChannel());
    {
      grpc::ClientContext ctx;
      v1::GetQueueRequest req;
      req.set_queue(o_.queue);
      v1::QueueInfo info;
      grpc::Status s = stub->GetQueue(&ctx, req, &info);
      if (s.ok()) {
        if (o_.bind && info.spec().sources_size() == 0) {
          std::fprintf(stderr, "load: queue %s exists without sources; --bind ignored\n",
                       o_.queue.c_str());
        }
        return absl::OkStatus();
      }
      if (s.error_code() != grpc::NOT_FOUND) return FromGrpc("GetQueue", s);
    }
    grpc::ClientContext ctx;
    v1::CreateQueueRequest req;
    req.mutable_spec()->set_name(o_.queue);
    if (o_.bind) req.mutable_spec()->add_sources()->set_informer_id(o_.informer);
    v1::QueueInfo info;
    return FromGrpc("CreateQueue", stub->CreateQueue(&ctx, req, &info));
  }

  absl::Status Prefill() {
    auto stub = v1::Queues::NewStub(QueueChannel());
    v1::AddRequest req;
    req.set_queue(o_.queue);
    for (int i = 0, n = 0; i < o_.keys; ++n) {
      req.clear_keys();
      SetPriority(n, &req);
      for (int j = 0; j < 5000 && i < o_.keys; ++j, ++i) req.add_keys(KeyName(i));
      grpc::ClientContext ctx;
      v1::AddResponse res;
      if (absl::Status s = FromGrpc("Add (prefill)", stub->Add(&ctx, req, &res)); !s.ok()) {
        return s;
      }
    }
    prefilled_ = static_cast<uint64_t>(o_.keys);
    return absl::OkStatus();
  }

  // --priorities: the n-th add request's priority.
  void SetPriority(int n, v1::AddRequest* req) const {
    if (o_.priorities > 0) req->set_priority(-10 * (n % o_.priorities));
  }

  // -- Threads --

  void Adder(int index) {
    auto stub = v1::Queues::NewStub(NewChannel(o_, 1000 + index, QueueTarget()));
    const double rate = o_.add_rate / o_.adders;
    // At a set rate, batches hold at most 10 ms of keys so that batching adds little latency.
    int batch = o_.add_batch;
    if (rate > 0) batch = std::clamp(static_cast<int>(rate / 100), 1, o_.add_batch);
    v1::AddRequest req;
    req.set_queue(o_.queue);
    int next_key = index;
    uint64_t sent = 0;
    const int64_t start = NowNs();
    while (!stop_.load(std::memory_order_relaxed)) {
      if (rate > 0) {
        SleepUntilNs(start + static_cast<int64_t>(static_cast<double>(sent) / rate * 1e9));
        if (stop_.load(std::memory_order_relaxed)) break;
      }
      req.clear_keys();
      SetPriority(static_cast<int>(sent / static_cast<uint64_t>(batch)), &req);
      const int64_t now = NowNs();
      for (int j = 0; j < batch; ++j) {
        std::string* key = req.add_keys();
        *key = KeyName(next_key);
        pending_.Mark(*key, now);
        next_key = (next_key + o_.adders) % o_.keys;
      }
      grpc::ClientContext ctx;
      v1::AddResponse res;
      grpc::Status s = stub->Add(&ctx, req, &res);
      sent += static_cast<uint64_t>(batch);
      if (s.ok()) {
        counters_.added += static_cast<uint64_t>(batch);
      } else {
        ++counters_.add_errors;
        errors_.Add(absl::StrCat("Add: ", s.error_message()));
        if (LeaderMayHaveChanged(s) && FollowLeader().ok()) {
          stub = v1::Queues::NewStub(NewChannel(o_, 1000 + index, QueueTarget()));
        } else if (rate == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
  }

  // One Work stream after another: a stream its leader ends with NOT_LEADER is started again on
  // the new leader. `ctx` cancels the first; later ones get their own, cancelled with it.
  void Worker(int index, grpc::ClientContext* ctx, Recorder* recorder) {
    grpc::Status s = WorkStream(index, ctx, recorder);
    while (!stop_.load() && LeaderMayHaveChanged(s)) {
      if (absl::Status f = FollowLeader(); !f.ok()) {
        errors_.Add(absl::StrCat("Work.Process: ", f.message()));
        return;
      }
      grpc::ClientContext next;
      {
        absl::MutexLock l(&leader_mu_);
        if (stop_.load()) return;
        restarted_.push_back(&next);
      }
      s = WorkStream(index, &next, recorder);
      absl::MutexLock l(&leader_mu_);
      restarted_.erase(std::find(restarted_.begin(), restarted_.end(), &next));
    }
    if (!s.ok() && !stop_.load()) errors_.Add(absl::StrCat("Work.Process: ", s.error_message()));
  }

  // NOT_LEADER, or the connection to the leader is gone (it was killed or stopped).
  static bool LeaderMayHaveChanged(const grpc::Status& s) {
    return NotLeaderAddress(s).has_value() || s.error_code() == grpc::UNAVAILABLE;
  }

  grpc::Status WorkStream(int index, grpc::ClientContext* ctx, Recorder* recorder) {
    auto stub = v1::Work::NewStub(NewChannel(o_, index + 1, QueueTarget()));
    auto stream = stub->Process(ctx);
    v1::ProcessRequest start;
    start.mutable_start()->set_queue(o_.queue);
    start.mutable_start()->set_max_in_flight(static_cast<uint32_t>(o_.in_flight));
    start.mutable_start()->set_max_batch(static_cast<uint32_t>(o_.batch));
    start.mutable_start()->set_worker_name(absl::StrCat("load-", index));
    if (o_.objects) start.mutable_start()->set_object_informer_id(o_.informer);
    v1::ProcessResponse res;
    if (!stream->Write(start) || !stream->Read(&res) || !res.has_started()) {
      return stream->Finish();
    }
    v1::ProcessRequest answer;
    LatencyHistogram local;
    int64_t last_flush = NowNs();
    // Each message is read into a fresh one on a reset arena, as the daemon reads outcomes: a
    // reused message would free and rebuild its `leases` on every parse (a cleared oneof is
    // deleted), and this tool shares the machine with the daemon it measures.
    constexpr size_t kArenaBlock = 32 << 10;
    std::unique_ptr<char[]> block(new char[kArenaBlock]);
    google::protobuf::Arena arena(block.get(), kArenaBlock);
    auto next = [&]() -> v1::ProcessResponse* {
      arena.Reset();
      v1::ProcessResponse* m = google::protobuf::Arena::CreateMessage<v1::ProcessResponse>(&arena);
      return stream->Read(m) ? m : nullptr;
    };
    while (const v1::ProcessResponse* in = next()) {
      const v1::ProcessResponse& res = *in;
      if (res.has_refusals()) {
        counters_.refusals += static_cast<uint64_t>(res.refusals().refusals_size());
        for (const v1::Refusal& r : res.refusals().refusals()) {
          errors_.Add(absl::StrCat("refusal: ", r.message()));
        }
        continue;
      }
      if (!res.has_leases()) continue;
      const int64_t now = NowNs();
      v1::Outcomes* outcomes = answer.mutable_outcomes();
      outcomes->clear_outcomes();
      for (const v1::Lease& lease : res.leases().leases()) {
        if (tracking_) {
          if (std::optional<int64_t> t = pending_.Take(lease.key())) local.Record(now - *t);
        }
        v1::Outcome* o = outcomes->add_outcomes();
        o->set_key(lease.key());
        o->set_token(lease.token());
        o->set_result(v1::Outcome::SUCCESS);
      }
      counters_.completed += static_cast<uint64_t>(res.leases().leases_size());
      if (!stream->Write(answer)) break;
      if (now - last_flush > 50'000'000) {
        recorder->Take(&local);
        last_flush = now;
      }
    }
    recorder->Take(&local);
    return stream->Finish();
  }

  // The data.ts stamp of a change made by this tool (0: none).
  static int64_t StampOf(const std::string& json) {
    const size_t at = json.find("\"ts\":\"");
    if (at == std::string::npos) return 0;
    int64_t v = 0;
    for (size_t i = at + 6; i < json.size() && json[i] >= '0' && json[i] <= '9'; ++i) {
      v = v * 10 + (json[i] - '0');
    }
    return v;
  }

  // --churn: how long ago, before `now_unix_ns`, the server stamped this object (its payload's
  // first 8 hex digits, or those of its churn annotation when it has no payload: Unix µs mod
  // 2^32); -1 when it has no such stamp.
  static int64_t ChurnDelayNs(const std::string& json, int64_t now_unix_ns) {
    size_t at = std::string::npos;
    for (std::string_view field : {"\"payload\":\"", "\"fake.informerd.io/churn\":\""}) {
      if (const size_t found = json.find(field); found != std::string::npos) {
        at = found + field.size();
        break;
      }
    }
    if (at == std::string::npos || at + 8 > json.size()) return -1;
    uint32_t stamp = 0;
    for (size_t i = at; i < at + 8; ++i) {
      const char c = json[i];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return -1;
      stamp = (stamp << 4) | static_cast<uint32_t>(digit);
    }
    const uint32_t now_us = static_cast<uint32_t>(now_unix_ns / 1000);
    return static_cast<int64_t>(static_cast<uint32_t>(now_us - stamp)) * 1000;
  }

  void Subscriber(int index, grpc::ClientContext* ctx, Recorder* recorder) {
    auto stub = v1::Informers::NewStub(
        subscriber_channels_[static_cast<size_t>(index) % subscriber_channels_.size()]);
    v1::WatchRequest req;
    req.set_informer_id(o_.informer);
    auto reader = stub->Watch(ctx, req);
    v1::WatchResponse res;
    LatencyHistogram local;
    int64_t last_flush = NowNs();
    while (reader->Read(&res)) {
      const int64_t now = NowNs();
      const int64_t now_unix = o_.churn ? absl::GetCurrentTimeNanos() : 0;
      uint64_t live = 0;
      for (const v1::WatchEvent& e : res.events()) {
        if (e.type() == v1::WatchEvent::RESNAPSHOT) ++counters_.resnapshots;
        if (e.type() == v1::WatchEvent::SYNCED) ++synced_subscribers_;
        if (e.initial() || (e.type() != v1::WatchEvent::ADDED &&
                            e.type() != v1::WatchEvent::UPDATED &&
                            e.type() != v1::WatchEvent::DELETED)) {
          continue;
        }
        ++live;
        if (o_.churn) {
          if (const int64_t d = ChurnDelayNs(e.object().json(), now_unix); d >= 0) local.Record(d);
        } else if (const int64_t t = StampOf(e.object().json()); t > 0) {
          local.Record(now - t);
        }
      }
      counters_.events += live;
      if (now - last_flush > 50'000'000) {
        recorder->Take(&local);
        last_flush = now;
      }
    }
    recorder->Take(&local);
    grpc::Status s = reader->Finish();
    if (!s.ok() && !stop_.load()) errors_.Add(absl::StrCat("Watch: ", s.error_message()));
  }

  void Getter(Recorder* recorder) {
    auto stub = v1::Informers::NewStub(NewChannel(o_, 2000));
    v1::GetRequest req;
    req.set_informer_id(o_.informer);
    req.set_key(o_.get_key);
    v1::GetResponse res;
    uint64_t sent = 0;
    const int64_t start = NowNs();
    while (!stop_.load(std::memory_order_relaxed)) {
      if (o_.get_rate > 0) {
        SleepUntilNs(start + static_cast<int64_t>(static_cast<double>(sent) / o_.get_rate * 1e9));
      }
      grpc::ClientContext ctx;
      const int64_t before = NowNs();
      grpc::Status s = stub->Get(&ctx, req, &res);
      const int64_t after = NowNs();
      ++sent;
      if (s.ok()) {
        ++counters_.gets;
        recorder->Record(after - before);
        if (!res.found()) errors_.Add(absl::StrCat("Get: ", o_.get_key, " not found"));
      } else {
        ++counters_.get_errors;
        errors_.Add(absl::StrCat("Get: ", s.error_message()));
      }
    }
  }

  void Changer(int index) {
    httplib::Client http(o_.apiserver);
    http.set_keep_alive(true);
    // httplib writes headers and body separately; without this, Nagle and delayed ACKs add 40 ms.
    http.set_tcp_nodelay(true);
    const double rate = o_.change_rate / o_.change_threads;
    uint64_t sent = 0;
    int object = index;
    const int64_t start = NowNs();
    while (!stop_.load(std::memory_order_relaxed)) {
      SleepUntilNs(start + static_cast<int64_t>(static_cast<double>(sent) / rate * 1e9));
      if (stop_.load(std::memory_order_relaxed)) break;
      const std::string name = ObjectName(object);
      object = (object + o_.change_threads) % o_.change_objects;
      const std::string path =
          absl::StrCat("/api/v1/namespaces/", o_.namespace_, "/configmaps/", name);
      const int64_t now = NowNs();
      pending_.Mark(absl::StrCat(o_.namespace_, "/", name), now);
      const std::string body = absl::StrCat(R"({"data":{"ts":")", now, R"("}})");
      auto res = http.Patch(path.c_str(), body, "application/merge-patch+json");
      ++sent;
      if (res && res->status == 200) {
        ++counters_.changes;
      } else {
        ++counters_.change_errors;
        errors_.Add(res ? absl::StrCat("PATCH: HTTP ", res->status)
                        : absl::StrCat("PATCH: ", httplib::to_string(res.error())));
      }
    }
  }

  void Measure() {
    tracking_ = o_.adders > 0 || o_.change_rate > 0;
    for (int i = 0; i < std::min(o_.subscribers, 8); ++i) {
      subscriber_channels_.push_back(NewChannel(o_, 3000 + i));
    }
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    for (int i = 0; i < o_.workers && !o_.queue.empty(); ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      delivery_.push_back(std::make_unique<Recorder>());
      threads.emplace_back(&Load::Worker, this, i, contexts.back().get(), delivery_.back().get());
    }
    for (int i = 0; i < o_.subscribers; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      event_.push_back(std::make_unique<Recorder>());
      threads.emplace_back(&Load::Subscriber, this, i, contexts.back().get(),
                           event_.back().get());
    }
    if (!o_.get_key.empty()) {
      get_.push_back(std::make_unique<Recorder>());
      threads.emplace_back(&Load::Getter, this, get_.back().get());
    }
    for (int i = 0; i < o_.adders; ++i) threads.emplace_back(&Load::Adder, this, i);
    if (o_.subscribers > 0 && o_.change_rate > 0) {
      // Changes start once every subscriber has its initial objects: the initial flood (100
      // subscribers of 1000 objects: 100k events) is not what change → event latency measures.
      const int64_t give_up = NowNs() + absl::ToInt64Nanoseconds(o_.sync_wait);
      while (synced_subscribers_.load() < o_.subscribers && NowNs() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (const int synced = synced_subscribers_.load(); synced < o_.subscribers) {
        // Their live events queue behind the initial ones: the latency would measure the flood.
        errors_.Add(absl::StrCat(synced, " of ", o_.subscribers, " subscribers had their initial ",
                                 "objects after --sync_wait=", absl::FormatDuration(o_.sync_wait),
                                 "; changes started anyway"));
      }
    }
    for (int i = 0; i < o_.change_threads && o_.change_rate > 0 && !o_.churn; ++i) {
      threads.emplace_back(&Load::Changer, this, i);
    }
    const int churn = o_.churn ? StartChurn() : 0;

    start_ns_ = NowNs();
    const int64_t end = start_ns_ + absl::ToInt64Nanoseconds(o_.duration);
    const bool drain = o_.prefill && o_.adders == 0 && o_.change_rate == 0 && o_.workers > 0;
    int64_t next_report = start_ns_ + 1'000'000'000;
    uint64_t last_completed = 0;
    uint64_t last_events = 0;
    int64_t last_report = start_ns_;
    while (true) {
      const int64_t now = NowNs();
      if (now >= end) break;
      if (drain && counters_.completed.load() >= prefilled_) break;
      if (now >= next_report) {
        const double dt = static_cast<double>(now - last_report) / 1e9;
        const uint64_t completed = counters_.completed.load();
        const uint64_t events = counters_.events.load();
        const LatencyHistogram d = MergeAll(delivery_);
        const LatencyHistogram e = MergeAll(event_);
        std::fprintf(stderr,
                     "\r[%3.0fs] %9.0f keys/s  add→delivery p50 %7.3f ms p99 %7.3f ms  "
                     "%9.0f events/s  event p99 %7.3f ms  gets %llu   ",
                     static_cast<double>(now - start_ns_) / 1e9,
                     static_cast<double>(completed - last_completed) / dt,
                     d.Percentile(50) / 1e6, d.Percentile(99) / 1e6,
                     static_cast<double>(events - last_events) / dt, e.Percentile(99) / 1e6,
                     static_cast<unsigned long long>(counters_.gets.load()));
        last_completed = completed;
        last_events = events;
        last_report = now;
        next_report += 1'000'000'000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(drain ? 1 : 20));
    }
    end_ns_ = NowNs();
    completed_at_end_ = counters_.completed.load();
    events_at_end_ = counters_.events.load();
    if (churn != 0) counters_.changes = ChurnOps(churn);
    stop_ = true;
    for (auto& ctx : contexts) ctx->TryCancel();
    {
      absl::MutexLock l(&leader_mu_);
      for (grpc::ClientContext* ctx : restarted_) ctx->TryCancel();
    }
    for (std::thread& t : threads) t.join();
    std::fprintf(stderr, "\n");
  }

  // -- Report --

  static std::string LatencyJson(const LatencyHistogram& h) {
    return absl::StrFormat(
        R"({"count":%d,"p50_us":%.1f,"p90_us":%.1f,"p99_us":%.1f,"max_us":%.1f})", h.count(),
        h.Percentile(50) / 1e3, h.Percentile(90) / 1e3, h.Percentile(99) / 1e3, h.max() / 1e3);
  }

  void PrintSummary() {
    const double seconds = static_cast<double>(end_ns_ - start_ns_) / 1e9;
    const LatencyHistogram delivery = MergeAll(delivery_);
    const LatencyHistogram event = MergeAll(event_);
    const LatencyHistogram get = MergeAll(get_);
    const double keys_per_second = static_cast<double>(completed_at_end_) / seconds;
    const double events_per_second = static_cast<double>(events_at_end_) / seconds;
    std::vector<std::string> errors = errors_.List();
    if (o_.json) {
      std::vector<std::string> quoted;
      for (const std::string& e : errors) {
        std::string q;
        for (char c : e) {
          if (c == '"' || c == '\\') q.push_back('\\');
          if (static_cast<unsigned char>(c) >= 0x20) q.push_back(c);
        }
        quoted.push_back(absl::StrCat("\"", q, "\""));
      }
      absl::PrintF(
          "{\"seconds\":%.3f,\"workers\":%d,\"batch\":%d,\"completed\":%llu,"
          "\"keys_per_second\":%.1f,\"added\":%llu,\"add_errors\":%llu,\"refusals\":%llu,"
          "\"delivery_latency\":%s,\"subscribers\":%d,\"events\":%llu,\"events_per_second\":%.1f,"
          "\"event_latency\":%s,\"resnapshots\":%llu,\"gets\":%llu,\"get_errors\":%llu,"
          "\"get_latency\":%s,\"changes\":%llu,\"change_errors\":%llu,"
          "\"changes_per_second\":%.1f,\"informer\":\"%s\",\"informer_objects\":%llu,"
          "\"list_objects\":%llu,\"list_bytes\":%llu,\"sync_seconds\":%.3f,"
          "\"list_latency\":%s,\"subscribers_synced\":%d,\"errors\":[%s]}\n",
          seconds, o_.workers, o_.batch, static_cast<unsigned long long>(completed_at_end_),
          keys_per_second, static_cast<unsigned long long>(counters_.added.load()),
          static_cast<unsigned long long>(counters_.add_errors.load()),
          static_cast<unsigned long long>(counters_.refusals.load()), LatencyJson(delivery),
          o_.subscribers, static_cast<unsigned long long>(events_at_end_), events_per_second,
          LatencyJson(event), static_cast<unsigned long long>(counters_.resnapshots.load()),
          static_cast<unsigned long long>(counters_.gets.load()),
          static_cast<unsigned long long>(counters_.get_errors.load()), LatencyJson(get),
          static_cast<unsigned long long>(counters_.changes.load()),
          static_cast<unsigned long long>(counters_.change_errors.load()),
          static_cast<double>(counters_.changes.load()) / seconds, o_.informer,
          static_cast<unsigned long long>(objects_), static_cast<unsigned long long>(listed_),
          static_cast<unsigned long long>(listed_bytes_), sync_seconds_,
          LatencyJson(list_), synced_subscribers_.load(), absl::StrJoin(quoted, ","));
      return;
    }
    std::printf("load: %.2f s against %s\n", seconds, o_.target.c_str());
    {
      absl::MutexLock l(&leader_mu_);
      if (!queue_target_.empty() && queue_target_ != o_.target) {
        std::printf("  Queues and Work on the leader %s (leader changes during the run: %d)\n",
                    queue_target_.c_str(), leader_changes_);
      }
    }
    if (!o_.queue.empty()) {
      std::printf("  queue %s: %d workers, batch %d, in flight %d; %llu keys added%s\n",
                  o_.queue.c_str(), o_.workers, o_.batch, o_.in_flight,
                  static_cast<unsigned long long>(counters_.added.load()),
                  prefilled_ > 0 ? absl::StrCat(" (and ", prefilled_, " before the run)").c_str()
                                 : "");
    }
    if (!o_.informer.empty()) {
      std::printf("  informer %s: %llu objects\n", o_.informer.c_str(),
                  static_cast<unsigned long long>(objects_));
    }
    if (o_.subscribers > 0) std::printf("  watch: %d subscribers\n", o_.subscribers);
    // One row per kind of work: how many, how fast, its latency, what went wrong.
    std::vector<std::vector<std::string>> rows = {
        {"", "count", "per second", "latency", "p50", "p90", "p99", "max", "notes"}};
    const auto row = [&](std::string what, uint64_t count, const LatencyHistogram* latency,
                         std::string latency_name, std::string notes) {
      std::vector<std::string> r = {std::move(what), absl::StrCat(count),
                                    absl::StrFormat("%.0f", static_cast<double>(count) / seconds),
                                    std::move(latency_name)};
      for (double p : {50.0, 90.0, 99.0, -1.0}) {
        if (latency == nullptr || latency->count() == 0) {
          r.push_back("-");
        } else {
          r.push_back(absl::StrFormat("%.3f ms",
                                      (p < 0 ? latency->max() : latency->Percentile(p)) / 1e6));
        }
      }
      r.push_back(std::move(notes));
      rows.push_back(std::move(r));
    };
    if (!o_.queue.empty()) {
      row("keys completed", completed_at_end_, &delivery, "add -> delivery",
          absl::StrCat(counters_.add_errors.load(), " add errors, ", counters_.refusals.load(),
                       " refusals"));
    }
    if (o_.change_rate > 0) {
      row("changes", counters_.changes.load(), nullptr, "",
          absl::StrCat(counters_.change_errors.load(), " errors"));
    }
    if (o_.subscribers > 0) {
      row("watch events", events_at_end_, &event, "change -> event",
          absl::StrCat(counters_.resnapshots.load(), " re-snapshots"));
    }
    if (get.count() > 0 || counters_.get_errors.load() > 0) {
      row("Get calls", counters_.gets.load(), &get, "call",
          absl::StrCat(counters_.get_errors.load(), " errors"));
    }
    if (list_.count() > 0) {
      row("List calls", list_.count(), &list_, "call",
          absl::StrCat(listed_, " objects, ", listed_bytes_, " bytes"));
    }
    if (rows.size() > 1) {
      std::vector<size_t> widths(rows[0].size(), 0);
      for (const auto& r : rows) {
        for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
      }
      std::printf("\n");
      for (const auto& r : rows) {
        std::string line = " ";
        for (size_t i = 0; i < r.size(); ++i) {
          // Names and words left-aligned, numbers right-aligned.
          const bool left = i == 0 || i == 3 || i + 1 == r.size();
          const std::string pad(widths[i] - r[i].size(), ' ');
          absl::StrAppend(&line, " ", left ? r[i] + pad : pad + r[i], " ");
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        std::printf("%s\n", line.c_str());
      }
    }
    for (const std::string& e : errors) std::printf("  error: %s\n", e.c_str());
  }

  Options o_;
  std::shared_ptr<grpc::Channel> channel_;
  absl::Mutex leader_mu_;
  std::string queue_target_ ABSL_GUARDED_BY(leader_mu_);
  std::shared_ptr<grpc::Channel> queue_channel_ ABSL_GUARDED_BY(leader_mu_);
  int leader_changes_ ABSL_GUARDED_BY(leader_mu_) = 0;
  // Contexts of Work streams started again after a failover (cancelled at the end of the run).
  std::vector<grpc::ClientContext*> restarted_ ABSL_GUARDED_BY(leader_mu_);
  std::vector<std::shared_ptr<grpc::Channel>> subscriber_channels_;
  std::atomic<bool> stop_{false};
  // Subscribers that have their initial objects (SYNCED).
  std::atomic<int> synced_subscribers_{0};
  bool tracking_ = false;  // set before the threads start
  PendingTimes pending_;
  Counters counters_;
  Errors errors_;
  std::vector<std::unique_ptr<Recorder>> delivery_;
  std::vector<std::unique_ptr<Recorder>> event_;
  std::vector<std::unique_ptr<Recorder>> get_;
  LatencyHistogram list_;
  uint64_t listed_ = 0;
  uint64_t listed_bytes_ = 0;  // the compact JSON of the objects the last List returned
  double sync_seconds_ = 0;    // EnsureInformer (or WaitForSync of --informer) until synced
  uint64_t objects_ = 0;
  uint64_t prefilled_ = 0;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  uint64_t completed_at_end_ = 0;
  uint64_t events_at_end_ = 0;
};

}  // namespace
}  // namespace informerd::bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  informerd::ParseFlags(
      argc, argv,
      "a load generator for a running informerd: adds keys to a queue and drains them through "
      "Work streams, watches and reads an informer, makes changes on the API server; prints a "
      "progress line each second and a summary table (or --json).\n\n"
      "  load --target=127.0.0.1:7470 --queue=load --duration=30s --add_rate=50000 --workers=4\n"
      "  load --target=127.0.0.1:7470 --resource=v1/configmaps --namespace=demo --subscribers=100");
  absl::StatusOr<informerd::bench::Options> options = informerd::bench::OptionsFromFlags();
  if (!options.ok()) return informerd::FlagError(options.status());
  return informerd::bench::Load(*std::move(options)).Run();
}
