// End-to-end tests of the informerd binary: a real daemon process, real gRPC and HTTP, the fake
// API server (testing/apiserver) as its cluster, and worker processes that can be SIGKILLed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
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
#include "base/sanitizers.h"
#include "base/mutex.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"
#include "server/testing/daemon_process.h"
#include "server/testing/subprocess.h"
#include "server/testing/work_stream.h"

namespace informerd {
namespace {

using ::informerd::testing::Runfile;
using ::informerd::testing::Subprocess;
using ::testing::HasSubstr;
using ::testing::Not;
using ::informerd::testing::HttpGet;
using ::informerd::testing::WriteConfig;
using Daemon = ::informerd::testing::DaemonProcess;

client::testing::FakeApiServer* ApiServer() { return ::informerd::testing::SharedApiServer(); }

absl::StatusOr<Daemon> StartDaemon(std::vector<std::string> flags) { return Daemon::Start(flags); }

using Worker = ::informerd::testing::WorkStream;

std::string ClusterConfig() { return ::informerd::testing::ClusterConfigYaml(); }

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

absl::Status Seed(const std::string& ns, int count) {
  return ::informerd::testing::SeedConfigMaps(ns, count);
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

// A connection to `address` (host:port) from the local address `from` (another loopback
// address: the daemon sees another client); -1 on failure.
int ConnectFrom(const std::string& from, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{.sin_family = AF_INET};
  sockaddr_in remote{.sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port))};
  if (inet_pton(AF_INET, from.c_str(), &local.sin_addr) != 1 ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &remote.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Slow clients (a slow-loris: each sends its request a byte at a time, every byte before the
// read timeout) cannot starve the kubelet's probes: one address holds at most 8 connections
// (more are answered 503 at once), and each held one is closed when its request has not arrived
// within the request timeout. On the code before, 12 of them held every worker of the listener
// and /healthz from another address was not answered.
TEST(DaemonTest, TricklingHttpClientsDoNotStarveTheProbes) {
  absl::StatusOr<Daemon> d = StartDaemon({});
  ASSERT_TRUE(d.ok()) << d.status();
  struct Trickler {
    int fd;
    bool refused = false;  // answered 503
    bool closed = false;   // by the daemon
  };
  std::vector<Trickler> tricklers;
  for (int i = 0; i < 40; ++i) {
    const int fd = ConnectFrom("127.0.0.2", d->metrics);
    ASSERT_GE(fd, 0) << strerror(errno);
    tricklers.push_back({fd});
  }
  std::atomic<bool> stop{false};
  Mutex mu;
  std::thread trickle([&] {
    const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    for (size_t sent = 0; !stop.load(); ++sent) {
      {
        MutexLock lock(&mu);
        for (Trickler& t : tricklers) {
          if (t.closed) continue;
          const char byte = sent < request.size() ? request[sent] : 'a';
          char answer[512];
          const ssize_t got = recv(t.fd, answer, sizeof(answer), MSG_DONTWAIT);
          if (got > 0 && absl::StartsWith(absl::string_view(answer, got), "HTTP/1.1 503")) {
            t.refused = true;
          }
          if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
              send(t.fd, &byte, 1, MSG_NOSIGNAL) < 0) {
            t.closed = true;
          }
        }
      }
      absl::SleepFor(absl::Milliseconds(250));  // each byte well before the 2 s read timeout
    }
  });
  // The trickling connections are taken (or refused) by the daemon first.
  EXPECT_TRUE(Eventually(
      [&] {
        MutexLock lock(&mu);
        return std::count_if(tricklers.begin(), tricklers.end(),
                             [](const Trickler& t) { return t.refused; }) >= 32;
      },
      absl::Seconds(20)));
  for (int i = 0; i < 5; ++i) {
    int status = 0;
    EXPECT_EQ(HttpGet(d->metrics, "/healthz", &status), "ok\n") << "probe " << i;
    EXPECT_EQ(status, 200);
  }
  // Every trickling connection ends: the held ones at their request timeout (10 s).
  EXPECT_TRUE(Eventually(
      [&] {
        MutexLock lock(&mu);
        return std::all_of(tricklers.begin(), tricklers.end(),
                           [](const Trickler& t) { return t.closed; });
      },
      absl::Seconds(40)));
  stop = true;
  trickle.join();
  for (const Trickler& t : tricklers) close(t.fd);
  EXPECT_GE(d->MetricValue(
                "informerd_http_connections_refused_total{listener=\"metricsListen\"}"),
            32);
  d->process->Signal(SIGTERM);
  ASSERT_TRUE(d->process->Wait(absl::Seconds(20)).ok());
}

// Any client may send any method name; the metrics of the calls it makes are bounded by the
// methods the daemon serves, not by the names it is sent (gRPC serves an unknown name as a
// generic bidi stream: it answers UNIMPLEMENTED).
TEST(DaemonTest, CallsOfMethodsThatDoNotExistShareOneSeries) {
  absl::StatusOr<Daemon> d = StartDaemon({});
  ASSERT_TRUE(d.ok()) << d.status();
  auto call = [&](const std::string& name) {
    grpc::internal::RpcMethod method(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::ClientContext ctx;
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        d->channel.get(), method, &ctx, request, &response);
  };
  ASSERT_EQ(call("/informerd.v1.Nothing/Warmup").error_code(), grpc::UNIMPLEMENTED);
  const int before = d->MetricsSeries();
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(call(absl::StrCat("/informerd.v1.Nothing", i, "/Method", i)).error_code(),
              grpc::UNIMPLEMENTED);
  }
  EXPECT_EQ(d->MetricsSeries(), before);
  int status = 0;
  const std::string metrics = HttpGet(d->metrics, "/metrics", &status);
  EXPECT_THAT(metrics, HasSubstr("grpc_server_handled_total{grpc_service=\"unknown\","
                                 "grpc_method=\"unknown\",grpc_type=\"bidi_stream\","
                                 "grpc_code=\"Unimplemented\"} 201"));
  EXPECT_THAT(metrics, Not(HasSubstr("Nothing1")));
  d->process->Signal(SIGTERM);
  ASSERT_TRUE(d->process->Wait(absl::Seconds(20)).ok());
}

using HealthStatus = grpc::health::v1::HealthCheckResponse;

HealthStatus::ServingStatus HealthOf(const std::shared_ptr<grpc::Channel>& channel,
                                     const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse res;
  grpc::Status s = health->Check(&ctx, req, &res);
  return s.ok() ? res.status() : HealthStatus::UNKNOWN;
}

// Until the configured informers have synced, /readyz says which are missing and gRPC health
// has each informerd.v1 service NOT_SERVING (the server itself SERVING); then both turn ready.
// Meanwhile the status page's JSON already shows the informer, unsynced.
// A leader that cannot restore its queues (here the Queue resource is not served: the CRD is
// missing) says so: /readyz names the error, NOT_LEADER names this replica, not a previous
// leader, and after twice the lease duration it resigns the Lease (instead of holding it while
// serving nothing, forever).
TEST(DaemonTest, ALeaderThatCannotRestoreItsQueuesSaysSoAndResigns) {
  std::unique_ptr<client::Client> c =
      client::Client::Create({.config = ::informerd::testing::SharedApiServer()->config()})
          .value();
  c->Create({"", "v1", "namespaces"}, "", R"({"metadata":{"name":"ha-restore"}})")
      .status()
      .IgnoreError();  // made by an earlier run of this binary, perhaps
  absl::StatusOr<Daemon> d = StartDaemon(
      {absl::StrCat("--kubeconfig=", ::informerd::testing::SharedApiServer()->kubeconfig_path()),
       "--leader_elect", "--leader_elect_resource_namespace=ha-restore",
       "--leader_elect_resource_name=restore", "--leader_elect_identity=r0",
       "--leader_elect_lease_duration=2s", "--leader_elect_renew_deadline=1500ms",
       "--leader_elect_retry_period=250ms"});
  ASSERT_TRUE(d.ok()) << d.status();
  int status = 0;
  std::string body;
  ASSERT_TRUE(Eventually(
      [&] {
        body = HttpGet(d->metrics, "/readyz", &status);
        return absl::StrContains(body, "stored queues cannot be listed");
      },
      absl::Seconds(20)))
      << body;
  EXPECT_EQ(status, 503);
  {
    auto queues = v1::Queues::NewStub(d->channel);
    grpc::ClientContext ctx;
    v1::GetQueueRequest req;
    req.set_queue("any");
    v1::QueueInfo info;
    grpc::Status s = queues->GetQueue(&ctx, req, &info);
    EXPECT_EQ(s.error_code(), grpc::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("\"r0\") leads its replica set but has not restored"));
  }
  // Resigned: the Lease is free for another replica.
  ASSERT_TRUE(Eventually(
      [&] {
        auto lease = c->Get({"coordination.k8s.io", "v1", "leases"}, "ha-restore", "restore");
        return lease.ok() && absl::StrContains((*lease)->json(), R"("holderIdentity":"")");
      },
      absl::Seconds(20)));
  body = HttpGet(d->metrics, "/readyz", &status);
  EXPECT_EQ(status, 503);
  EXPECT_THAT(body, HasSubstr("resigned"));
  d->process->Signal(SIGTERM);
  ASSERT_TRUE(d->process->Wait(absl::Seconds(20)).ok());
}

TEST(DaemonTest, HealthPerServiceAndReadyzFollowTheConfiguredInformersSync) {
  ASSERT_TRUE(Seed("daemon-unready", 2).ok());
  // The informer's first list (or streaming list) is answered 20 s late (room for a slow start
  // under the sanitizers before the checks below).
  ASSERT_TRUE(ApiServer()
                  ->Control("POST", "/_fake/faults",
                            R"({"type":"stall","resource":"configmaps",)"
                            R"("namespace":"daemon-unready","durationMs":20000})")
                  .ok());
  const std::string config = WriteConfig(
      "unready", absl::StrCat(ClusterConfig(), R"(
informers:
  - name: slow
    resource: {version: v1, resource: configmaps}
    namespace: daemon-unready
)"));
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config});
  ASSERT_TRUE(d.ok()) << d.status();
  int status = 0;
  EXPECT_THAT(HttpGet(d->metrics, "/readyz", &status), HasSubstr("configmaps-"));
  EXPECT_EQ(status, 503);
  EXPECT_EQ(HealthOf(d->channel, ""), HealthStatus::SERVING);
  for (const char* service : {"informerd.v1.Informers", "informerd.v1.Queues",
                              "informerd.v1.Work", "informerd.v1.Admin"}) {
    EXPECT_EQ(HealthOf(d->channel, service), HealthStatus::NOT_SERVING) << service;
  }
  EXPECT_THAT(HttpGet(d->metrics, "/", &status), HasSubstr("<title>informerd status</title>"));
  EXPECT_EQ(status, 200);
  const std::string json = HttpGet(d->metrics, "/status.json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_THAT(json, HasSubstr(R"("namespace":"daemon-unready")"));
  EXPECT_THAT(json, HasSubstr(R"("synced":false)"));

  ASSERT_TRUE(Eventually([&] { return HealthOf(d->channel, "informerd.v1.Queues") ==
                                      HealthStatus::SERVING; },
                         absl::Seconds(60)));
  HttpGet(d->metrics, "/readyz", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(HealthOf(d->channel, "informerd.v1.Admin"), HealthStatus::SERVING);
  EXPECT_THAT(HttpGet(d->metrics, "/status.json", &status), HasSubstr(R"("synced":true)"));
}

TEST(DaemonTest, ABadConfigStopsStartUpNamingTheKey) {
  const std::string path = WriteConfig("bad", "listen: [\"127.0.0.1:0\"]\nlimits: {maxSubscribrs: 3}\n");
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({Runfile("server/informerd"), "--config=" + path});
  ASSERT_TRUE(p.ok());
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);  // as for a bad flag (base/flags.h): "ERROR: <file>: <key>: ..."

  // A cluster whose kubeconfig cannot be read: start-up fails naming it.
  const std::string cluster = WriteConfig(
      "nocluster", "clusters: [{name: gone, kubeconfig: /nonexistent/kubeconfig}]\n");
  p = Subprocess::Start({Runfile("server/informerd"), "--config=" + cluster,
                         "--listen=127.0.0.1:0", "--metrics_listen=",
                         "--insecure_allow_unauthenticated"});
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
  absl::StatusOr<Daemon> d = StartDaemon({"--shutdown_grace=10s"});
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
  uint64_t last_token = 0;
  {
    absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config, "--listen=" + socket});
    ASSERT_TRUE(d.ok()) << d.status();
    Worker worker(d->channel.get(), "restart-queue", 5);
    ASSERT_TRUE(worker.ok());
    std::vector<v1::Lease> leases = worker.Next();
    ASSERT_FALSE(leases.empty());
    for (const v1::Lease& l : leases) {
      reconciled.insert(l.key());
      last_token = std::max(last_token, l.token());
    }
    ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));
    d->process->Signal(SIGKILL);  // a crash, not a graceful stop
    ASSERT_TRUE(d->process->Wait(absl::Seconds(10)).ok());
  }
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config, "--listen=" + socket});
  ASSERT_TRUE(d.ok()) << d.status();
  Worker worker(d->channel.get(), "restart-queue", 5);
  ASSERT_TRUE(worker.ok());
  // Fencing across the restart: the new process's epoch and tokens are above the old tokens.
  EXPECT_GT(worker.epoch(), last_token);
  while (reconciled.size() < 20) {
    std::vector<v1::Lease> leases = worker.Next();
    ASSERT_FALSE(leases.empty());
    for (const v1::Lease& l : leases) {
      reconciled.insert(l.key());
      EXPECT_GT(l.token(), last_token);
    }
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

// A TCP server for "API servers" that never answer (accept and hold every connection) or answer
// late (accept, wait `delay`, close).
class UnansweringServer {
 public:
  explicit UnansweringServer(absl::Duration delay) : delay_(delay) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 128);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shutdown(fd_) in the destructor
        MutexLock lock(&mu_);
        held_.push_back({c, absl::Now() + delay_});
      }
    });
    if (delay_ != absl::InfiniteDuration()) {
      // Late answers: close what is due (a TLS handshake that fails after `delay`).
      closer_ = std::thread([this] {
        MutexLock lock(&mu_);
        while (!mu_.AwaitWithDeadline([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; },
                                      absl::Now() + absl::Milliseconds(50))) {
          for (auto it = held_.begin(); it != held_.end();) {
            if (it->second <= absl::Now()) {
              close(it->first);
              it = held_.erase(it);
            } else {
              ++it;
            }
          }
        }
      });
    }
  }
  ~UnansweringServer() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    if (closer_.joinable()) closer_.join();
    close(fd_);
    MutexLock lock(&mu_);
    for (auto& [c, due] : held_) close(c);
  }
  // A kubeconfig for it (TLS is never completed, so the CA does not matter).
  std::string Kubeconfig(const std::string& name) const {
    const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".kubeconfig");
    std::ofstream(path) << absl::StrCat(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n",
        "clusters: [{name: c, cluster: {server: \"https://127.0.0.1:", port_,
        "\", insecure-skip-tls-verify: true}}]\n",
        "users: [{name: u, user: {token: t}}]\n",
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n");
    return path;
  }

 private:
  const absl::Duration delay_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::thread closer_;
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<int, absl::Time>> held_ ABSL_GUARDED_BY(mu_);
};


absl::Duration P99(std::vector<absl::Duration> v) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * 99 / 100)];
}

// Item 1 of "a daemon that stays up": 50 EnsureInformer calls wait on API servers that never
// answer or answer late, and meanwhile health, Admin, a Get on an informer of another cluster and
// a Work stream keep their latency; each waiting call ends with a clear status at its deadline.
TEST(DaemonTest, CallsWaitingOnAHungApiServerDoNotSlowAnythingElse) {
  ASSERT_TRUE(Seed("daemon-hung", 3).ok());
  UnansweringServer black_hole(absl::InfiniteDuration());
  UnansweringServer slow(absl::Seconds(2));
  const std::string config = WriteConfig(
      "hung", absl::StrCat("clusters:\n",
                           "  - {name: fake, kubeconfig: \"", ApiServer()->kubeconfig_path(),
                           "\", default: true}\n",
                           "  - {name: black-hole, kubeconfig: \"",
                           black_hole.Kubeconfig("black-hole"), "\"}\n",
                           "  - {name: slow, kubeconfig: \"", slow.Kubeconfig("slow"), "\"}\n",
                           R"(informers:
  - name: cms
    resource: {version: v1, resource: configmaps}
    namespace: daemon-hung
queues:
  - name: hung-queue
)"));
  absl::StatusOr<Daemon> d = StartDaemon({"--config=" + config});
  ASSERT_TRUE(d.ok()) << d.status();
  auto health = grpc::health::v1::Health::NewStub(d->channel);
  auto admin = v1::Admin::NewStub(d->channel);
  auto informers = v1::Informers::NewStub(d->channel);
  auto queues = v1::Queues::NewStub(d->channel);
  std::string cms_id;
  {
    grpc::ClientContext ctx;
    v1::ListInformersResponse res;
    ASSERT_TRUE(admin->ListInformers(&ctx, {}, &res).ok());
    ASSERT_EQ(res.informers_size(), 1);
    cms_id = res.informers(0).id();
  }
  {
    // The probes Get a seeded object: the configured informer must have listed it first.
    grpc::ClientContext ctx;
    v1::WaitForSyncRequest req;
    req.set_informer_id(cms_id);
    req.set_timeout_ms(60'000);
    v1::InformerInfo res;
    grpc::Status s = informers->WaitForSync(&ctx, req, &res);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  Worker worker(d->channel.get(), "hung-queue", 1);
  ASSERT_TRUE(worker.ok());
  auto deadline_in = [](grpc::ClientContext* ctx, absl::Duration d) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
  };
  // One round of every probe; each must succeed within 5 s.
  auto probe = [&](std::vector<absl::Duration>* out) {
    for (int i = 0; i < 50; ++i) {
      absl::Time t = absl::Now();
      {
        grpc::ClientContext ctx;
        deadline_in(&ctx, absl::Seconds(5));
        grpc::health::v1::HealthCheckResponse res;
        ASSERT_TRUE(health->Check(&ctx, {}, &res).ok());
      }
      {
        grpc::ClientContext ctx;
        deadline_in(&ctx, absl::Seconds(5));
        v1::ListQueuesResponse res;
        ASSERT_TRUE(admin->ListQueues(&ctx, {}, &res).ok());
      }
      {
        grpc::ClientContext ctx;
        deadline_in(&ctx, absl::Seconds(5));
        v1::GetRequest req;
        req.set_informer_id(cms_id);
        req.set_key("daemon-hung/seed-0000000");
        v1::GetResponse res;
        ASSERT_TRUE(informers->Get(&ctx, req, &res).ok());
        ASSERT_TRUE(res.found());
      }
      {
        grpc::ClientContext ctx;
        deadline_in(&ctx, absl::Seconds(5));
        v1::AddRequest req;
        req.set_queue("hung-queue");
        req.add_keys(absl::StrCat("k/", i));
        v1::AddResponse res;
        ASSERT_TRUE(queues->Add(&ctx, req, &res).ok());
        std::vector<v1::Lease> leases = worker.Next();
        ASSERT_EQ(leases.size(), 1u);
        ASSERT_TRUE(worker.Answer(leases, v1::Outcome::SUCCESS));
      }
      out->push_back(absl::Now() - t);
    }
  };
  std::vector<absl::Duration> idle;
  probe(&idle);
  // 50 EnsureInformer calls on the two hung clusters, with a 6 s deadline.
  constexpr absl::Duration kDeadline = absl::Seconds(6);
  std::atomic<int> sent{0};
  std::vector<grpc::Status> results(50);
  std::vector<absl::Duration> took(50);
  std::vector<std::thread> waiting;
  for (int i = 0; i < 50; ++i) {
    waiting.emplace_back([&, i] {
      grpc::ClientContext ctx;
      deadline_in(&ctx, kDeadline);
      v1::EnsureInformerRequest req;
      req.mutable_spec()->set_cluster(i % 2 == 0 ? "black-hole" : "slow");
      req.mutable_spec()->mutable_resource()->set_version("v1");
      req.mutable_spec()->mutable_resource()->set_resource("pods");
      v1::InformerInfo res;
      const absl::Time t = absl::Now();
      sent.fetch_add(1);
      results[i] = informers->EnsureInformer(&ctx, req, &res);
      took[i] = absl::Now() - t;
    });
  }
  ASSERT_TRUE(Eventually([&] { return sent.load() == 50; }, absl::Seconds(10)));
  std::vector<absl::Duration> busy;
  probe(&busy);
  // /healthz asks the gRPC server itself, and it answers.
  int status = 0;
  EXPECT_EQ(HttpGet(d->metrics, "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  for (auto& t : waiting) t.join();
  std::printf("probe round p99: idle %s, with 50 calls waiting on hung API servers %s\n",
              absl::FormatDuration(P99(idle)).c_str(), absl::FormatDuration(P99(busy)).c_str());
  // Every probe above succeeded within 5 s: a callback thread blocked on an API server makes
  // them wait until the API server answers, or fail. Under the sanitizers (ten times slower, on a
  // loaded machine) that is what is checked; the latency and the precise statuses below are for
  // the normal build.
  for (int i = 0; i < 50; ++i) {
    EXPECT_NE(results[i].error_code(), grpc::StatusCode::OK) << i;
    EXPECT_LT(took[i], kDeadline + absl::Seconds(kSanitized ? 5 : 2)) << i;
  }
  if (kSanitized) return;
  // A callback thread blocked on a hung API server would hold a probe until that call's 6 s
  // deadline; scheduling noise on a 2-core machine running other tests is tens of ms (CI saw
  // 53 ms beside 33 ms idle). The bound tells the two apart without timing the noise; the
  // latency itself is the benchmarks' to show.
  EXPECT_LT(P99(busy), absl::Seconds(1));
  for (int i = 0; i < 50; ++i) {
    EXPECT_THAT(results[i].error_message(), HasSubstr(i % 2 == 0 ? "black-hole" : "slow")) << i;
  }
}

}  // namespace
}  // namespace informerd
