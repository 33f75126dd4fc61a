// End-to-end tests of the informerd binary: a real daemon process, real gRPC and HTTP, the fake
// API server (testing/apiserver) as its cluster, and worker processes that can be SIGKILLed.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "base/mutex.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"
#include "server/testing/subprocess.h"

namespace informerd {
namespace {

using ::informerd::testing::Runfile;
using ::informerd::testing::Subprocess;
using ::testing::HasSubstr;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

client::testing::FakeApiServer* ApiServer() {
  static client::testing::FakeApiServer* server = [] {
    auto started = client::testing::FakeApiServer::Start({});
    if (!started.ok()) {
      std::fprintf(stderr, "fake API server: %s\n", started.status().ToString().c_str());
      std::abort();
    }
    return started->release();
  }();
  return server;
}

// A running informerd.
struct Daemon {
  std::unique_ptr<Subprocess> process;
  std::string grpc;     // host:port
  std::string metrics;  // host:port
  std::shared_ptr<grpc::Channel> channel;
};

std::string WriteConfig(const std::string& name, const std::string& yaml) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".yaml");
  std::ofstream(path) << yaml;
  return path;
}

absl::StatusOr<Daemon> StartDaemon(std::vector<std::string> flags) {
  std::vector<std::string> argv = {Runfile("server/informerd"), "--metrics-listen=127.0.0.1:0"};
  bool listen_given = false;
  for (const std::string& f : flags) listen_given |= absl::StartsWith(f, "--listen");
  if (!listen_given) argv.push_back("--listen=127.0.0.1:0");
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  Daemon d;
  d.process = *std::move(p);
  absl::StatusOr<std::string> grpc = d.process->ReadUntil("grpc: ", kStartTimeout);
  if (!grpc.ok()) return grpc.status();
  absl::StatusOr<std::string> metrics = d.process->ReadUntil("metrics: ", kStartTimeout);
  if (!metrics.ok()) return metrics.status();
  d.grpc = *grpc;
  d.metrics = *metrics;
  d.channel = grpc::CreateChannel(d.grpc, grpc::InsecureChannelCredentials());
  return d;
}

std::string HttpGet(const std::string& address, const std::string& path, int* status) {
  httplib::Client c("http://" + address);
  auto res = c.Get(path.c_str());
  *status = res ? res->status : -1;
  return res ? res->body : "";
}

// A Work stream driven from the test.
class Worker {
 public:
  Worker(grpc::Channel* channel, const std::string& queue, uint32_t max_in_flight)
      : stub_(v1::Work::NewStub(std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}))) {
    stream_ = stub_->Process(&context_);
    v1::ProcessRequest start;
    start.mutable_start()->set_queue(queue);
    start.mutable_start()->set_max_in_flight(max_in_flight);
    start.mutable_start()->set_worker_name("daemon-test");
    stream_->Write(start);
    v1::ProcessResponse started;
    ok_ = stream_->Read(&started) && started.has_started();
  }
  ~Worker() {
    context_.TryCancel();
    stream_->Finish().IgnoreError();
  }
  bool ok() const { return ok_; }
  // The next batch of leases (blocks; empty at the stream's end).
  std::vector<v1::Lease> Next() {
    v1::ProcessResponse r;
    while (stream_->Read(&r)) {
      if (r.has_leases()) return {r.leases().leases().begin(), r.leases().leases().end()};
    }
    return {};
  }
  bool Answer(const std::vector<v1::Lease>& leases, v1::Outcome::Result result) {
    v1::ProcessRequest req;
    for (const v1::Lease& l : leases) {
      v1::Outcome* o = req.mutable_outcomes()->add_outcomes();
      o->set_key(l.key());
      o->set_token(l.token());
      o->set_result(result);
    }
    return stream_->Write(req);
  }
  grpc::ClientContext& context() { return context_; }

 private:
  std::unique_ptr<v1::Work::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ProcessRequest, v1::ProcessResponse>> stream_;
  bool ok_ = false;
};

// The workers Admin lists for `queue` (none if the call fails or there is no such queue).
std::vector<v1::WorkerInfo> QueueWorkers(const std::shared_ptr<grpc::Channel>& channel,
                                         const std::string& queue) {
  auto admin = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ListQueuesResponse res;
  if (!admin->ListQueues(&ctx, {}, &res).ok()) return {};
  for (const v1::QueueDetails& q : res.queues()) {
    if (q.queue().spec().name() == queue) return {q.workers().begin(), q.workers().end()};
  }
  return {};
}

// The state of `queue`, from Queues.GetQueue.
absl::StatusOr<v1::QueueState> QueueStateOf(const std::shared_ptr<grpc::Channel>& channel,
                                            const std::string& queue) {
  auto queues = v1::Queues::NewStub(channel);
  grpc::ClientContext ctx;
  v1::GetQueueRequest req;
  req.set_queue(queue);
  v1::QueueInfo info;
  grpc::Status s = queues->GetQueue(&ctx, req, &info);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return info.state();
}

std::string ClusterConfig() {
  return absl::StrCat("clusters: [{name: fake, kubeconfig: \"", ApiServer()->kubeconfig_path(),
                      "\"}]\n");
}

absl::Status Seed(const std::string& ns, int count) {
  return ApiServer()
      ->Control("POST", "/_fake/seed",
                absl::StrCat(R"({"resource":"configmaps","namespace":")", ns, R"(","count":)",
                             count, "}"))
      .status();
}

TEST(DaemonTest, WithoutAClusterItServesHealthAdminAndSaysWhyInformersFail) {
  absl::StatusOr<Daemon> d = StartDaemon({});
  ASSERT_TRUE(d.ok()) << d.status();
  {
    auto health = grpc::health::v1::Health::NewStub(d->channel);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse res;
    ASSERT_TRUE(health->Check(&ctx, {}, &res).ok());
    EXPECT_EQ(res.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    auto admin = v1::Admin::NewStub(d->channel);
    grpc::ClientContext ctx;
    v1::ListClustersResponse res;
    ASSERT_TRUE(admin->ListClusters(&ctx, {}, &res).ok());
    EXPECT_EQ(res.clusters_size(), 0);
  }
  {
    auto informers = v1::Informers::NewStub(d->channel);
    grpc::ClientContext ctx;
    v1::EnsureInformerRequest req;
    req.mutable_spec()->mutable_resource()->set_version("v1");
    req.mutable_spec()->mutable_resource()->set_resource("pods");
    v1::InformerInfo res;
    grpc::Status s = informers->EnsureInformer(&ctx, req, &res);
    EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("no cluster is configured"));
  }
  int status = 0;
  EXPECT_EQ(HttpGet(d->metrics, "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  HttpGet(d->metrics, "/readyz", &status);
  EXPECT_EQ(status, 200);
  const std::string metrics = HttpGet(d->metrics, "/metrics", &status);
  EXPECT_THAT(metrics, HasSubstr("grpc_server_handled_total{grpc_service=\"informerd.v1.Informers\","
                                 "grpc_method=\"EnsureInformer\",grpc_type=\"unary\","
                                 "grpc_code=\"FailedPrecondition\"} 1"));
  d->process->Signal(SIGTERM);
  absl::StatusOr<int> code = d->process->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

TEST(DaemonTest, ABadConfigStopsStartUpNamingTheKey) {
  const std::string path = WriteConfig("bad", "listen: [\"127.0.0.1:0\"]\nlimits: {maxSubscribrs: 3}\n");
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({Runfile("server/informerd"), "--config=" + path});
  ASSERT_TRUE(p.ok());
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);

  // A cluster whose kubeconfig cannot be read: start-up fails naming it.
  const std::string cluster = WriteConfig(
      "nocluster", "clusters: [{name: gone, kubeconfig: /nonexistent/kubeconfig}]\n");
  p = Subprocess::Start({Runfile("server/informerd"), "--config=" + cluster,
                         "--listen=127.0.0.1:0", "--metrics-listen="});
  ASSERT_TRUE(p.ok());
  code = (*p)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
}

// The configured informer feeds the configured queue: objects on the API server become keys
// delivered to a worker; readiness follows the informer's sync; metrics carry client-go's names.
TEST(DaemonTest, AnInformerBoundQueueDeliversTheClustersChangesToAWorker) {
  ASSERT_TRUE(Seed("daemon-bound", 5).ok());
  const std::string config = WriteConfig(
      "bound", absl::StrCat(ClusterConfig(), R"(
informers:
  - name: cms
    resource: {version: v1, resource: configmaps}
    namespace: daemon-bound
queues:
  - name: cm-queue
    sources: [{informerId: cms}]
)"));
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config});
  ASSERT_TRUE(d.ok()) << d.status();
  int status = 0;
  ASSERT_TRUE(Eventually([&] {
    HttpGet(d->metrics, "/readyz", &status);
    return status == 200;
  }, absl::Seconds(20)));

  Worker worker(d->channel.get(), "cm-queue", 100);
  ASSERT_TRUE(worker.ok());
  std::set<std::string> seen;
  while (seen.size() < 5) {
    std::vector<v1::Lease> leases = worker.Next();
    ASSERT_FALSE(leases.empty());
    for (const v1::Lease& l : leases) seen.insert(l.key());
    ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));
  }
  EXPECT_TRUE(seen.count("daemon-bound/seed-0000000")) << *seen.begin();

  // A change on the API server becomes a key.
  ASSERT_TRUE(ApiServer()
                  ->Control("POST", "/_fake/seed",
                            R"({"resource":"configmaps","namespace":"daemon-bound","count":1,"prefix":"late"})")
                  .ok());
  std::vector<v1::Lease> leases = worker.Next();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_THAT(leases[0].key(), HasSubstr("daemon-bound/"));
  EXPECT_FALSE(seen.count(leases[0].key()));
  ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));

  const std::string metrics = HttpGet(d->metrics, "/metrics", &status);
  EXPECT_THAT(metrics, HasSubstr("workqueue_adds_total{name=\"cm-queue\"} 6"));
  EXPECT_THAT(metrics, HasSubstr("grpc_server_started_total{grpc_service=\"informerd.v1.Work\""));

  auto admin = v1::Admin::NewStub(d->channel);
  grpc::ClientContext ctx;
  v1::ListQueuesResponse queues;
  ASSERT_TRUE(admin->ListQueues(&ctx, {}, &queues).ok());
  ASSERT_EQ(queues.queues_size(), 1);
  EXPECT_EQ(queues.queues(0).workers_size(), 1);
  grpc::ClientContext ctx2;
  v1::ListInformersResponse informers;
  ASSERT_TRUE(admin->ListInformers(&ctx2, {}, &informers).ok());
  ASSERT_EQ(informers.informers_size(), 1);
  EXPECT_TRUE(informers.informers(0).state().synced());
  EXPECT_EQ(informers.informers(0).state().objects(), 6u);
}

// A worker process killed mid-item: the keys it held go to another worker within seconds, and
// no key is ever held by both.
TEST(DaemonTest, KeysOfAKilledWorkerProcessAreRedelivered) {
  absl::StatusOr<Daemon> d = StartDaemon({});
  ASSERT_TRUE(d.ok()) << d.status();
  auto queues = v1::Queues::NewStub(d->channel);
  {
    grpc::ClientContext ctx;
    v1::CreateQueueRequest req;
    req.mutable_spec()->set_name("kill");
    v1::QueueInfo info;
    ASSERT_TRUE(queues->CreateQueue(&ctx, req, &info).ok());
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> holder =
      Subprocess::Start({Runfile("server/testing/hold_worker"), "--target=" + d->grpc,
                         "--queue=kill", "--max_in_flight=3"});
  ASSERT_TRUE(holder.ok());
  ASSERT_TRUE((*holder)->ReadUntil("started: ", absl::Seconds(20)).ok());
  {
    grpc::ClientContext ctx;
    v1::AddRequest req;
    req.set_queue("kill");
    for (int i = 0; i < 3; ++i) req.add_keys(absl::StrCat("ns/k", i));
    v1::AddResponse res;
    ASSERT_TRUE(queues->Add(&ctx, req, &res).ok());
  }
  std::set<std::string> held;
  while (held.size() < 3) {
    absl::StatusOr<std::string> line = (*holder)->ReadUntil("held: ", absl::Seconds(20));
    ASSERT_TRUE(line.ok()) << line.status();
    held.insert(std::string(absl::StrSplit(*line, ' ').begin()->data(), line->find(' ')));
  }
  // Another worker gets nothing while the keys are held: once the daemon shows its stream
  // attached next to the holder of all three, a probe key added now goes to it, and only that.
  Worker other(d->channel.get(), "kill", 10);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(Eventually([&] {
    const std::vector<v1::WorkerInfo> workers = QueueWorkers(d->channel, "kill");
    return workers.size() == 2 &&
           std::any_of(workers.begin(), workers.end(),
                       [](const v1::WorkerInfo& w) { return w.in_flight() == 3; });
  }, absl::Seconds(20)));
  {
    grpc::ClientContext ctx;
    v1::AddRequest req;
    req.set_queue("kill");
    req.add_keys("ns/probe");
    v1::AddResponse res;
    ASSERT_TRUE(queues->Add(&ctx, req, &res).ok());
  }
  const std::vector<v1::Lease> probe = other.Next();
  ASSERT_EQ(probe.size(), 1u) << "a key went to a second worker while the first held it";
  EXPECT_EQ(probe[0].key(), "ns/probe") << "a key went to a second worker while the first held it";
  std::atomic<bool> got_any{false};
  std::set<std::string> redelivered;
  std::thread reader([&] {
    while (redelivered.size() < 3) {
      std::vector<v1::Lease> leases = other.Next();
      if (leases.empty()) return;
      got_any = true;
      for (const v1::Lease& l : leases) redelivered.insert(l.key());
    }
  });
  // ... and all of them once the holder is SIGKILLed.
  const absl::Time killed = absl::Now();
  (*holder)->Signal(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return got_any.load(); }, absl::Seconds(10)));
  reader.join();
  EXPECT_EQ(redelivered, held);
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
}

// SIGTERM: the daemon stops handing out keys, lets the held one be answered, then exits 0.
TEST(DaemonTest, SigtermLetsInFlightKeysFinish) {
  absl::StatusOr<Daemon> d = StartDaemon({"--shutdown-grace=10s"});
  ASSERT_TRUE(d.ok()) << d.status();
  auto queues = v1::Queues::NewStub(d->channel);
  {
    grpc::ClientContext ctx;
    v1::CreateQueueRequest req;
    req.mutable_spec()->set_name("term");
    v1::QueueInfo info;
    ASSERT_TRUE(queues->CreateQueue(&ctx, req, &info).ok());
    grpc::ClientContext ctx2;
    v1::AddRequest add;
    add.set_queue("term");
    add.add_keys("ns/a");
    add.add_keys("ns/b");
    v1::AddResponse res;
    ASSERT_TRUE(queues->Add(&ctx2, add, &res).ok());
  }
  Worker worker(d->channel.get(), "term", 1);
  ASSERT_TRUE(worker.ok());
  std::vector<v1::Lease> first = worker.Next();
  ASSERT_EQ(first.size(), 1u);
  const absl::Time term = absl::Now();
  d->process->Signal(SIGTERM);
  // The daemon has begun its graceful shutdown (the queue shuts down, the key still held) and
  // is still running: the held key may be answered.
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<v1::QueueState> state = QueueStateOf(d->channel, "term");
    return state.ok() && state->shutting_down() && state->in_flight() == 1;
  }, absl::Seconds(20)));
  EXPECT_FALSE(d->process->Wait(absl::ZeroDuration()).ok());
  ASSERT_TRUE(worker.Answer(first, v1::Outcome::SUCCESS));
  // The second key is not handed out during shutdown; the stream ends and the daemon exits
  // well before the grace period.
  EXPECT_TRUE(worker.Next().empty());
  absl::StatusOr<int> code = d->process->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_LT(absl::Now() - term, absl::Seconds(8));
}

// Level-driven recovery: after a daemon restart, a worker reconnects (same address) and every
// object of the configured informer is reconciled.
TEST(DaemonTest, WorkersFinishAfterTheDaemonRestarts) {
  ASSERT_TRUE(Seed("daemon-restart", 20).ok());
  // Unix socket paths are limited to 107 bytes: TempDir() can be longer.
  const std::string socket = absl::StrCat("unix:///tmp/informerd-restart-", getpid(), ".sock");
  const std::string config = WriteConfig(
      "restart", absl::StrCat(ClusterConfig(), R"(
informers:
  - name: cms
    resource: {version: v1, resource: configmaps}
    namespace: daemon-restart
queues:
  - name: restart-queue
    sources: [{informerId: cms}]
)"));
  std::set<std::string> reconciled;
  {
    absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config, "--listen=" + socket});
    ASSERT_TRUE(d.ok()) << d.status();
    Worker worker(d->channel.get(), "restart-queue", 5);
    ASSERT_TRUE(worker.ok());
    std::vector<v1::Lease> leases = worker.Next();
    ASSERT_FALSE(leases.empty());
    for (const v1::Lease& l : leases) reconciled.insert(l.key());
    ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));
    d->process->Signal(SIGKILL);  // a crash, not a graceful stop
    ASSERT_TRUE(d->process->Wait(absl::Seconds(10)).ok());
  }
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config, "--listen=" + socket});
  ASSERT_TRUE(d.ok()) << d.status();
  Worker worker(d->channel.get(), "restart-queue", 5);
  ASSERT_TRUE(worker.ok());
  while (reconciled.size() < 20) {
    std::vector<v1::Lease> leases = worker.Next();
    ASSERT_FALSE(leases.empty());
    for (const v1::Lease& l : leases) reconciled.insert(l.key());
    ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));
  }
  EXPECT_EQ(reconciled.size(), 20u);
}

// What two worker processes printed (hold_worker --hold_ms): per key, the reconciles' intervals.
class ReconcileLog {
 public:
  void Add(const std::string& line) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    MutexLock lock(&mu_);
    if (f[0] == "refused:") refusals_.push_back(line);
    if (f.size() != 4 || (f[0] != "begin:" && f[0] != "end:")) return;
    int64_t ns = 0;
    if (!absl::SimpleAtoi(f[3], &ns)) return;
    Interval& i = intervals_[f[1]][f[2]];  // key, token
    (f[0] == "begin:" ? i.begin : i.end) = ns;
  }
  // Keys whose every reconcile has ended, at least once.
  size_t Finished(const std::set<std::string>& keys) const {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const std::string& k : keys) {
      auto it = intervals_.find(k);
      if (it == intervals_.end()) continue;
      bool all_ended = true;
      for (const auto& [token, i] : it->second) all_ended &= i.end != 0;
      n += all_ended ? 1 : 0;
    }
    return n;
  }
  size_t begins() const {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& [k, by_token] : intervals_) n += by_token.size();
    return n;
  }
  // The exclusion oracle: no key in two reconciles at once, whichever processes ran them.
  std::vector<std::string> Overlaps() const {
    MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& [key, by_token] : intervals_) {
      std::vector<Interval> v;
      for (const auto& [token, i] : by_token) v.push_back(i);
      std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
      for (size_t i = 1; i < v.size(); ++i) {
        if (v[i].begin < v[i - 1].end) out.push_back(key);
      }
    }
    return out;
  }
  std::vector<std::string> refusals() const {
    MutexLock lock(&mu_);
    return refusals_;
  }

 private:
  struct Interval {
    int64_t begin = 0;
    int64_t end = 0;
  };
  mutable Mutex mu_;
  std::map<std::string, std::map<std::string, Interval>> intervals_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> refusals_ ABSL_GUARDED_BY(mu_);
};

// A rolling upgrade: two worker processes share a queue; "version 2" updates the queue's spec
// (a new source, another limiter, a lease timeout) while keys are held; the churn goes on. Every
// object is reconciled, none twice at once, no outcome is refused.
TEST(DaemonTest, ARollingUpgradeUpdatesTheQueueWhileKeysAreHeldAndLosesOrDoublesNoKey) {
  const std::string ns = "daemon-upgrade";
  ASSERT_TRUE(Seed(ns, 40).ok());
  ASSERT_TRUE(ApiServer()
                  ->Control("POST", "/_fake/seed",
                            absl::StrCat(R"({"resource":"deployments.apps","namespace":")", ns,
                                         R"(","count":10,"prefix":"dep"})"))
                  .ok());
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + WriteConfig("upgrade", ClusterConfig())});
  ASSERT_TRUE(d.ok()) << d.status();
  auto informers = v1::Informers::NewStub(d->channel);
  auto ensure = [&](const std::string& group, const std::string& resource) {
    grpc::ClientContext ctx;
    v1::EnsureInformerRequest req;
    req.mutable_spec()->mutable_resource()->set_group(group);
    req.mutable_spec()->mutable_resource()->set_version("v1");
    req.mutable_spec()->mutable_resource()->set_resource(resource);
    req.mutable_spec()->set_namespace_(ns);
    v1::InformerInfo info;
    EXPECT_TRUE(informers->EnsureInformer(&ctx, req, &info).ok());
    grpc::ClientContext wait_ctx;
    v1::WaitForSyncRequest wait;
    wait.set_informer_id(info.id());
    wait.set_timeout_ms(30000);
    EXPECT_TRUE(informers->WaitForSync(&wait_ctx, wait, &info).ok());
    return info.id();
  };
  const std::string cms = ensure("", "configmaps");
  const std::string deps = ensure("apps", "deployments");
  auto queues = v1::Queues::NewStub(d->channel);
  v1::QueueSpec v1_spec;
  v1_spec.set_name("upgrade");
  v1_spec.add_sources()->set_informer_id(cms);
  {
    grpc::ClientContext ctx;
    v1::CreateQueueRequest req;
    *req.mutable_spec() = v1_spec;
    v1::QueueInfo info;
    ASSERT_TRUE(queues->CreateQueue(&ctx, req, &info).ok());
  }
  ReconcileLog log;
  std::vector<std::unique_ptr<Subprocess>> workers;
  std::vector<std::thread> readers;
  std::atomic<bool> stop{false};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Subprocess>> w =
        Subprocess::Start({Runfile("server/testing/hold_worker"), "--target=" + d->grpc,
                           "--queue=upgrade", "--max_in_flight=4", "--answer", "--hold_ms=50"});
    ASSERT_TRUE(w.ok()) << w.status();
    workers.push_back(*std::move(w));
  }
  for (auto& w : workers) {
    readers.emplace_back([&, p = w.get()] {
      while (!stop.load()) {
        absl::StatusOr<std::string> line = p->ReadLine(absl::Milliseconds(200));
        if (line.ok()) log.Add(*line);
      }
    });
  }
  // Version 2 while keys are held: Deployments too, another limiter, a lease timeout.
  ASSERT_TRUE(Eventually([&] { return log.begins() >= 8; }, absl::Seconds(30)));
  v1::QueueSpec v2_spec = v1_spec;
  v2_spec.add_sources()->set_informer_id(deps);
  v2_spec.mutable_rate_limiter()->mutable_exponential()->set_base_delay_ms(10);
  v2_spec.mutable_rate_limiter()->mutable_exponential()->set_max_delay_ms(10000);
  v2_spec.set_lease_timeout_ms(30000);
  {
    grpc::ClientContext ctx;
    v1::UpdateQueueRequest req;
    *req.mutable_spec() = v2_spec;
    v1::QueueInfo info;
    grpc::Status st = queues->UpdateQueue(&ctx, req, &info);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(info.spec().sources_size(), 2);
  }
  // Churn after the update: new ConfigMaps.
  ASSERT_TRUE(ApiServer()
                  ->Control("POST", "/_fake/seed",
                            absl::StrCat(R"({"resource":"configmaps","namespace":")", ns,
                                         R"(","count":10,"prefix":"late"})"))
                  .ok());
  std::set<std::string> want;
  {
    auto list = [&](const std::string& id, int n) {
      grpc::ClientContext ctx;
      v1::ListRequest req;
      req.set_informer_id(id);
      auto reader = informers->List(&ctx, req);
      v1::ListResponse batch;
      while (reader->Read(&batch)) {
        for (const v1::Object& o : batch.objects()) want.insert(o.metadata().key());
      }
      EXPECT_TRUE(reader->Finish().ok());
    };
    ASSERT_TRUE(Eventually([&] {
      want.clear();
      list(cms, 50);
      list(deps, 10);
      return want.size() == 60;
    }, absl::Seconds(30)));
  }
  EXPECT_TRUE(Eventually([&] { return log.Finished(want) == want.size(); }, absl::Seconds(60)))
      << log.Finished(want) << " of " << want.size() << " reconciled";
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_THAT(log.Overlaps(), ::testing::IsEmpty());
  EXPECT_THAT(log.refusals(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace informerd
