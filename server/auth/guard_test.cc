// The daemon with authentication and authorization on, end to end: a real informerd process over
// TLS and a unix socket, the fake API server answering its TokenReviews and SubjectAccessReviews
// from tokens and RBAC-like rules set over its control API (testing/apiserver), and gRPC clients
// presenting tokens, client certificates or their uid. The real kube-apiserver's run of the same
// rules is sdk/python/tests/test_auth_kube.py.
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "client/fake_apiserver.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "informerd/v1/queues.grpc.pb.h"
#include "informerd/v1/work.grpc.pb.h"
#include "server/service/status.h"
#include "server/testing/daemon_process.h"
#include "server/testing/subprocess.h"
#include "server/testing/test_pki.h"

namespace informerd {
namespace {

using ::informerd::testing::DaemonProcess;
using ::informerd::testing::SharedApiServer;
using ::informerd::testing::TestPki;
using ::informerd::testing::WriteConfig;
using ::testing::HasSubstr;

const TestPki& Pki() {
  static const TestPki* pki = new TestPki(TestPki::Create("pki").value());
  return *pki;
}

void Control(absl::string_view method, absl::string_view path, const std::string& body) {
  absl::StatusOr<std::string> r = SharedApiServer()->Control(method, path, body);
  ASSERT_TRUE(r.ok()) << path << ": " << r.status();
}

// The fake API server's RBAC: `revocable` may read namespace authz-a and use queue authz-r
// while `with_revocable`.
void SetRules(bool with_revocable) {
  Control("PUT", "/_fake/authz/rules", absl::StrCat(R"({"rules":[)", with_revocable ? R"(
      {"users":["revocable"],"verbs":["list","watch"],"apiGroups":[""],
       "resources":["configmaps"],"namespaces":["authz-a"]},
      {"users":["revocable"],"verbs":["work","create","update","get"],
       "apiGroups":["informerd.io"],"resources":["queues"],"resourceNames":["authz-r"]},)" : "",
      R"(
      {"users":["alice","bounded"],"verbs":["list","watch"],"apiGroups":[""],
       "resources":["configmaps"],"namespaces":["authz-a"]},
      {"users":["alice"],"verbs":["get","work","update","create"],"apiGroups":["informerd.io"],
       "resources":["queues"],"resourceNames":["authz-q"]},
      {"users":["bounded","rotator"],"verbs":["list","watch"],"apiGroups":[""],
       "resources":["configmaps"]},
      {"users":["rotator"],"verbs":["create","get","update"],"apiGroups":["informerd.io"],
       "resources":["queues"]},
      {"users":["local-user"],"verbs":["admin"],"apiGroups":["informerd.io"],"resources":["daemon"]},
      {"groups":["cert-group"],"verbs":["admin"],"apiGroups":["informerd.io"],"resources":["daemon"]}
    ]})"));
}

// Tokens and rules of the fake API server, set once per test binary.
void SetUpCluster() {
  static bool done = [] {
    for (const char* user : {"alice", "nobody", "bounded", "revocable"}) {
      Control("POST", "/_fake/tokens",
              absl::StrCat(R"({"token":"t-)", user, R"(","user":{"username":")", user,
                           R"(","groups":["dev"]}})"));
    }
    SetRules(true);
    EXPECT_TRUE(::informerd::testing::SeedConfigMaps("authz-a", 3).ok());
    EXPECT_TRUE(::informerd::testing::SeedConfigMaps("authz-b", 3).ok());
    return true;
  }();
  (void)done;
}

struct SecureDaemon {
  DaemonProcess process;
  std::string socket;
};

// informerd with authentication on: TLS with client CA on TCP, a unix socket whose peer uid maps
// to "local-user", decisions cached for `ttl`.
SecureDaemon Start(const std::string& name, absl::string_view extra_yaml = "",
                   absl::Duration ttl = absl::Seconds(1),
                   absl::Duration review_timeout = absl::Seconds(1),
                   absl::string_view authorization_extra = "",
                   const std::vector<std::string>& extra_flags = {},
                   const std::string& clusters_yaml = "") {
  SetUpCluster();
  // Short: a unix socket path has at most 107 bytes, and TEST_TMPDIR is deep.
  const std::string socket = absl::StrCat("/tmp/informerd-auth-", getpid(), "-", name, ".sock");
  const std::string ttl_text = absl::FormatDuration(ttl);
  const std::string config = WriteConfig(
      name, absl::StrCat(clusters_yaml.empty() ? ::informerd::testing::ClusterConfigYaml()
                                               : clusters_yaml,
                         "authentication:\n",
                         "  cacheTTL: ", ttl_text, "\n  unixPeers: [{uid: ", getuid(),
                         ", user: local-user}]\n", "authorization: {allowTTL: ", ttl_text,
                         ", denyTTL: ", ttl_text, ", reviewTimeout: ",
                         absl::FormatDuration(review_timeout), authorization_extra, "}\n",
                         extra_yaml));
  std::vector<std::string> flags = {"--config=" + config,
                                    "--listen=127.0.0.1:0,unix://" + socket,
                                    "--tls_cert=" + Pki().server_cert,
                                    "--tls_key=" + Pki().server_key,
                                    "--tls_client_ca=" + Pki().ca};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<DaemonProcess> d = DaemonProcess::Start(flags, /*secure=*/true);
  EXPECT_TRUE(d.ok()) << d.status();
  return {*std::move(d), socket};
}

std::shared_ptr<grpc::Channel> Tls(const SecureDaemon& d, const TestPki::Pem* client = nullptr) {
  grpc::SslCredentialsOptions o{.pem_root_certs = Pki().ca_pem};
  if (client != nullptr) {
    o.pem_private_key = client->key;
    o.pem_cert_chain = client->cert;
  }
  return grpc::CreateChannel(d.process.grpc, grpc::SslCredentials(o));
}

void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

std::string Reason(const grpc::Status& s) {
  std::optional<google::rpc::ErrorInfo> info = service::GetErrorInfo(service::FromGrpc(s));
  return info.has_value() ? info->reason() : "";
}

absl::StatusOr<v1::InformerInfo> Ensure(grpc::Channel* ch, const std::string& token,
                                        const std::string& resource, const std::string& ns,
                                        const std::string& labels = "") {
  auto stub = v1::Informers::NewStub(std::shared_ptr<grpc::Channel>(ch, [](auto*) {}));
  grpc::ClientContext ctx;
  Authorize(&ctx, token);
  v1::EnsureInformerRequest req;
  req.mutable_spec()->mutable_resource()->set_version("v1");
  req.mutable_spec()->mutable_resource()->set_resource(resource);
  req.mutable_spec()->set_namespace_(ns);
  req.mutable_spec()->set_label_selector(labels);
  v1::InformerInfo info;
  grpc::Status s = stub->EnsureInformer(&ctx, req, &info);
  if (!s.ok()) return service::FromGrpc(s);
  return info;
}

grpc::Status Get(grpc::Channel* ch, const std::string& token, const std::string& id,
                 const std::string& key) {
  auto stub = v1::Informers::NewStub(std::shared_ptr<grpc::Channel>(ch, [](auto*) {}));
  grpc::ClientContext ctx;
  Authorize(&ctx, token);
  v1::GetRequest req;
  req.set_informer_id(id);
  req.set_key(key);
  v1::GetResponse resp;
  return stub->Get(&ctx, req, &resp);
}

grpc::Status CreateQueue(grpc::Channel* ch, const std::string& token, const std::string& name) {
  auto stub = v1::Queues::NewStub(std::shared_ptr<grpc::Channel>(ch, [](auto*) {}));
  grpc::ClientContext ctx;
  Authorize(&ctx, token);
  v1::CreateQueueRequest req;
  req.mutable_spec()->set_name(name);
  v1::QueueInfo info;
  return stub->CreateQueue(&ctx, req, &info);
}

grpc::Status ListClusters(grpc::Channel* ch, const std::string& token) {
  auto stub = v1::Admin::NewStub(std::shared_ptr<grpc::Channel>(ch, [](auto*) {}));
  grpc::ClientContext ctx;
  Authorize(&ctx, token);
  v1::ListClustersResponse resp;
  return stub->ListClusters(&ctx, v1::ListClustersRequest(), &resp);
}

// A count of the fake API server's /_fake/stats ("subjectAccessReviews", "tokenReviews").
int64_t Stat(absl::string_view name) {
  absl::StatusOr<std::string> stats = SharedApiServer()->Control("GET", "/_fake/stats", "");
  if (!stats.ok()) return -1;
  const std::string field = absl::StrCat("\"", name, "\":");
  const size_t at = stats->find(field);
  if (at == std::string::npos) return -1;
  int64_t n = -1;
  std::string digits;
  for (size_t i = at + field.size(); i < stats->size() && isdigit((*stats)[i]); ++i) {
    digits += (*stats)[i];
  }
  return absl::SimpleAtoi(digits, &n) ? n : -1;
}

int64_t SubjectAccessReviews() { return Stat("subjectAccessReviews"); }

TEST(AuthTest, CallsWithoutAcceptedCredentialsAreRefusedBeforeAnythingIsServed) {
  SecureDaemon d = Start("unauthenticated");
  auto ch = Tls(d);
  grpc::Status s = Get(ch.get(), "", "configmaps-0000000000000000", "authz-a/x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Reason(s), "NOT_AUTHENTICATED");
  EXPECT_THAT(s.error_message(), HasSubstr("no credentials"));
  // An unknown informer id is not revealed to an unauthenticated caller.
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("does not exist")));
  s = Get(ch.get(), "t-forged", "configmaps-0000000000000000", "authz-a/x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("invalid bearer token"));
  // A malformed authorization header names what is accepted.
  auto stub = v1::Admin::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Basic YWxpY2U6cHc=");
  v1::ListClustersResponse resp;
  s = stub->ListClusters(&ctx, v1::ListClustersRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("Bearer"));
}

TEST(AuthTest, ACallerReadsWhatItsRbacAllowsAndNothingElse) {
  SecureDaemon d = Start("rbac");
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> a = Ensure(ch.get(), "t-alice", "configmaps", "authz-a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());

  // Another user with no binding reads nothing, although the objects are cached.
  grpc::Status s = Get(ch.get(), "t-nobody", a->id(), "authz-a/x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Reason(s), "FORBIDDEN");
  EXPECT_THAT(s.error_message(), HasSubstr("user \"nobody\""));
  EXPECT_THAT(s.error_message(), HasSubstr("list configmaps in namespace \"authz-a\""));

  // Not Secrets, and not another namespace's ConfigMaps.
  absl::StatusOr<v1::InformerInfo> secrets = Ensure(ch.get(), "t-alice", "secrets", "authz-a");
  EXPECT_EQ(secrets.status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<v1::InformerInfo> b = Ensure(ch.get(), "t-alice", "configmaps", "authz-b");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kPermissionDenied);

  // A cluster-wide informer (made by a user allowed everywhere): alice reads namespace a's slice
  // only.
  absl::StatusOr<v1::InformerInfo> all = Ensure(ch.get(), "t-bounded", "configmaps", "");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(Get(ch.get(), "t-alice", all->id(), "authz-a/x").ok());
  EXPECT_EQ(Get(ch.get(), "t-alice", all->id(), "authz-b/x").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  auto stub = v1::Informers::NewStub(ch);
  {
    // EnsureInformer answers before the first list: wait for the cache (as its creator, who may).
    grpc::ClientContext ctx;
    Authorize(&ctx, "t-bounded");
    v1::WaitForSyncRequest req;
    req.set_informer_id(all->id());
    v1::InformerInfo info;
    grpc::Status s = stub->WaitForSync(&ctx, req, &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  for (const char* ns : {"authz-a", "authz-b", ""}) {
    grpc::ClientContext ctx;
    Authorize(&ctx, "t-alice");
    v1::ListRequest req;
    req.set_informer_id(all->id());
    req.set_namespace_(ns);
    auto reader = stub->List(&ctx, req);
    v1::ListResponse resp;
    int objects = 0;
    while (reader->Read(&resp)) {
      for (const v1::Object& o : resp.objects()) {
        EXPECT_EQ(o.metadata().namespace_(), "authz-a");
        ++objects;
      }
    }
    s = reader->Finish();
    if (std::string(ns) == "authz-a") {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(objects, 3);
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << ns;
      EXPECT_EQ(objects, 0);
    }
  }
}

TEST(AuthTest, DecisionsAreCachedForTheirTtlThenAskedAgain) {
  SecureDaemon d = Start("cache", "", absl::Seconds(2));
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> a = Ensure(ch.get(), "t-alice", "configmaps", "authz-a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  const int64_t before = SubjectAccessReviews();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  const int64_t cached = SubjectAccessReviews();
  // At most one refresh of list and watch if the TTL ran out during the loop.
  EXPECT_LE(cached - before, 2);
  absl::SleepFor(absl::Seconds(2.2));
  ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  EXPECT_GE(SubjectAccessReviews() - cached, 2);  // list and watch asked again
}

TEST(AuthTest, AnApiServerThatCannotBeAskedMeansRefusalOnceCachedDecisionsExpire) {
  SecureDaemon d = Start("outage", "", absl::Seconds(1));
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> a = Ensure(ch.get(), "t-alice", "configmaps", "authz-a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  for (const char* resource : {"subjectaccessreviews", "tokenreviews"}) {
    Control("POST", "/_fake/faults",
            absl::StrCat(R"({"type":"internal-error","resource":")", resource,
                         R"(","count":-1})"));
  }
  // Until the cache expires the decision stands (the faults are armed: a review now would fail)…
  const absl::Time armed = absl::Now();
  grpc::Status cached = Get(ch.get(), "t-alice", a->id(), "authz-a/x");
  if (absl::Now() - armed < absl::Milliseconds(500)) {  // well within the 1 s TTL
    EXPECT_TRUE(cached.ok()) << cached.error_message();
  }
  // …then every call is refused, none allowed.
  ASSERT_TRUE(Eventually(
      [&] {
        return Get(ch.get(), "t-alice", a->id(), "authz-a/x").error_code() ==
               grpc::StatusCode::UNAVAILABLE;
      },
      absl::Seconds(10)));
  for (int i = 0; i < 5; ++i) {
    grpc::Status s = Get(ch.get(), "t-alice", a->id(), "authz-a/x");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(Reason(s), "AUTHORIZATION_UNAVAILABLE");
  }
  Control("DELETE", "/_fake/faults", "");
  EXPECT_TRUE(Eventually(
      [&] { return Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok(); }, absl::Seconds(10)));
}

TEST(AuthTest, UnixSocketPeersAndClientCertificatesAreIdentities) {
  SecureDaemon d = Start("identities");
  // The test's own uid is mapped to local-user, who may administer.
  auto unix_channel =
      grpc::CreateChannel("unix://" + d.socket, grpc::InsecureChannelCredentials());
  EXPECT_TRUE(ListClusters(unix_channel.get(), "").ok());
  // A token on the socket takes precedence over the uid: nobody may not.
  EXPECT_EQ(ListClusters(unix_channel.get(), "t-nobody").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  absl::StatusOr<TestPki::Pem> carol = Pki().Client("/CN=carol/O=cert-group");
  ASSERT_TRUE(carol.ok()) << carol.status();
  EXPECT_TRUE(ListClusters(Tls(d, &*carol).get(), "").ok());
  absl::StatusOr<TestPki::Pem> dave = Pki().Client("/CN=dave/O=other");
  ASSERT_TRUE(dave.ok());
  grpc::Status s = ListClusters(Tls(d, &*dave).get(), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("user \"dave\" (groups: other, system:authenticated)"));

  // A certificate of another CA fails the handshake: the call never reaches the daemon.
  absl::StatusOr<TestPki> other = TestPki::Create("other-pki");
  ASSERT_TRUE(other.ok());
  absl::StatusOr<TestPki::Pem> mallory = other->Client("/CN=mallory/O=cert-group");
  ASSERT_TRUE(mallory.ok());
  s = ListClusters(Tls(d, &*mallory).get(), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Watch streams a test holds open, each with its caller's token.
struct Watches {
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader;
    bool finished = false;
    grpc::Status Finish() {
      finished = true;
      return reader->Finish();
    }
  };
  explicit Watches(std::shared_ptr<grpc::Channel> ch) : stub(v1::Informers::NewStub(ch)) {}
  ~Watches() {
    for (auto& w : open) {
      if (w->finished) continue;
      w->ctx.TryCancel();
      w->Finish();
    }
  }
  Watch* Open(const std::string& token, const std::string& informer_id) {
    open.push_back(std::make_unique<Watch>());
    Watch* w = open.back().get();
    w->ctx.AddMetadata("authorization", "Bearer " + token);
    v1::WatchRequest req;
    req.set_informer_id(informer_id);
    w->reader = stub->Watch(&w->ctx, req);
    return w;
  }
  std::unique_ptr<v1::Informers::Stub> stub;
  std::vector<std::unique_ptr<Watch>> open;
};

TEST(AuthTest, OneCallerCannotHoldMoreThanItsLimits) {
  SecureDaemon d = Start("limits", "callerLimits: {informers: 1, streams: 2}\n");
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> first =
      Ensure(ch.get(), "t-bounded", "configmaps", "authz-a", "limit=one");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<v1::InformerInfo> second =
      Ensure(ch.get(), "t-bounded", "configmaps", "authz-a", "limit=two");
  ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service::GetErrorInfo(second.status())->reason(), "CALLER_LIMIT");
  EXPECT_EQ(service::GetErrorInfo(second.status())->metadata().at("limit"), "informers");
  // Its own informer again is no new one; another user is not limited by it.
  EXPECT_TRUE(Ensure(ch.get(), "t-bounded", "configmaps", "authz-a", "limit=one").ok());
  EXPECT_TRUE(Ensure(ch.get(), "t-alice", "configmaps", "authz-a", "limit=two").ok());

  Watches watches(ch);
  auto open = [&] { return watches.Open("t-bounded", first->id()); };
  v1::WatchResponse resp;
  ASSERT_TRUE(open()->reader->Read(&resp));
  ASSERT_TRUE(open()->reader->Read(&resp));
  Watches::Watch* third = open();
  EXPECT_FALSE(third->reader->Read(&resp));
  grpc::Status s = third->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("callerLimits.streams"));
  // Alice's streams are hers.
  EXPECT_TRUE(Get(ch.get(), "t-alice", first->id(), "authz-a/x").ok());
  // Closing one gives the slot back.
  watches.open[0]->ctx.TryCancel();
  watches.open[0]->Finish();
  EXPECT_TRUE(Eventually([&] {
    Watches::Watch* again = open();
    if (again->reader->Read(&resp)) return true;
    again->Finish();
    return false;
  }));
}

// A shared informer's Watch slots are not one tenant's: past its share, one principal's next
// watcher is refused (naming the limit) while another principal still gets one.
TEST(AuthTest, OnePrincipalHoldsAtMostItsShareOfAnInformersWatchers) {
  SecureDaemon d = Start("watchers", "callerLimits: {watchersPerInformer: 2}\n");
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> shared =
      Ensure(ch.get(), "t-alice", "configmaps", "authz-a", "share=watchers");
  ASSERT_TRUE(shared.ok()) << shared.status();
  Watches watches(ch);
  auto open = [&](const std::string& token) { return watches.Open(token, shared->id()); };
  v1::WatchResponse resp;
  ASSERT_TRUE(open("t-alice")->reader->Read(&resp));
  ASSERT_TRUE(open("t-alice")->reader->Read(&resp));
  Watches::Watch* third = open("t-alice");
  EXPECT_FALSE(third->reader->Read(&resp));
  grpc::Status s = third->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Reason(s), "SUBSCRIBER_LIMIT");
  EXPECT_THAT(s.error_message(), HasSubstr("callerLimits.watchersPerInformer"));
  // Another principal is not refused by alice's watchers.
  ASSERT_TRUE(open("t-bounded")->reader->Read(&resp));
}

TEST(AuthTest, OpenStreamsEndWhenTheirCallerLosesAccess) {
  SecureDaemon d = Start("revoke", "", absl::Seconds(1));
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> a = Ensure(ch.get(), "t-revocable", "configmaps", "authz-a");
  ASSERT_TRUE(a.ok()) << a.status();
  {
    grpc::Status s = CreateQueue(ch.get(), "t-revocable", "authz-r");
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  auto stub = v1::Informers::NewStub(ch);
  grpc::ClientContext watch_ctx;
  watch_ctx.AddMetadata("authorization", "Bearer t-revocable");
  v1::WatchRequest req;
  req.set_informer_id(a->id());
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> watch = stub->Watch(&watch_ctx, req);
  v1::WatchResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  auto work = v1::Work::NewStub(ch);
  grpc::ClientContext work_ctx;
  work_ctx.AddMetadata("authorization", "Bearer t-revocable");
  auto stream = work->Process(&work_ctx);
  v1::ProcessRequest start;
  start.mutable_start()->set_queue("authz-r");
  start.mutable_start()->set_max_in_flight(1);
  ASSERT_TRUE(stream->Write(start));
  v1::ProcessResponse started;
  ASSERT_TRUE(stream->Read(&started));
  ASSERT_TRUE(started.has_started());

  SetRules(false);
  const absl::Time revoked_at = absl::Now();
  while (watch->Read(&resp)) {
  }
  grpc::Status s = watch->Finish();
  const absl::Duration watch_ended = absl::Now() - revoked_at;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Reason(s), "FORBIDDEN");
  v1::ProcessResponse more;
  while (stream->Read(&more)) {
  }
  s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("work queues.informerd.io \"authz-r\""));
  // Within the TTL (1 s) and the re-check period (half of it), with room for a loaded machine.
  EXPECT_LT(watch_ended, absl::Seconds(10));
  SetRules(true);
}

// A Work stream's object informer that does not exist is refused when the stream is authorized,
// not left out of the check and bound later: here the informer (namespace authz-b, which alice may
// not read) is made by another user while alice's review is held up by the API server.
TEST(AuthTest, AnInformerThatDoesNotExistYetIsRefusedNotBoundAfterTheCheck) {
  std::string hidden_id;
  {
    // The id the informer will have (ids are the same in every daemon of one cluster).
    SecureDaemon first = Start("failclosed-id");
    absl::StatusOr<v1::InformerInfo> b = Ensure(Tls(first).get(), "t-bounded", "configmaps", "authz-b");
    ASSERT_TRUE(b.ok()) << b.status();
    hidden_id = b->id();
  }
  // Reviews may take 10 s: the stalled one is answered, late, rather than timing out.
  SecureDaemon d = Start("failclosed", "", absl::Seconds(1), absl::Seconds(10));
  auto ch = Tls(d);
  {
    grpc::Status s = CreateQueue(ch.get(), "t-alice", "authz-q");
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const int64_t reviews = SubjectAccessReviews();
  Control("POST", "/_fake/faults",
          R"({"type":"stall","resource":"subjectaccessreviews","durationMs":3000,"count":1})");
  auto work = v1::Work::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer t-alice");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = work->Process(&ctx);
  v1::ProcessRequest start;
  start.mutable_start()->set_queue("authz-q");
  start.mutable_start()->set_max_in_flight(1);
  start.mutable_start()->set_object_informer_id(hidden_id);
  ASSERT_TRUE(stream->Write(start));
  std::atomic<bool> ended{false};
  bool started = false;
  std::thread reader([&] {
    v1::ProcessResponse r;
    while (stream->Read(&r)) started = started || r.has_started();
    ended = true;
  });
  // The stream is refused at once, or its review reaches the (stalled) API server: then the
  // informer is made while the review waits.
  EXPECT_TRUE(Eventually([&] { return ended || SubjectAccessReviews() > reviews; },
                         absl::Seconds(20)));
  Control("DELETE", "/_fake/faults", "");  // a review already held stays held
  absl::StatusOr<v1::InformerInfo> b = Ensure(ch.get(), "t-bounded", "configmaps", "authz-b");
  EXPECT_TRUE(b.ok()) << b.status();
  reader.join();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->id(), hidden_id);
  grpc::Status s = stream->Finish();
  EXPECT_FALSE(started);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(Reason(s), "INFORMER_NOT_FOUND");
  EXPECT_THAT(s.error_message(), HasSubstr("start.object_informer_id"));
  // Now that it exists, the check names it: alice may not read authz-b.
  grpc::ClientContext again_ctx;
  Authorize(&again_ctx, "t-alice");
  auto again = work->Process(&again_ctx);
  ASSERT_TRUE(again->Write(start));
  v1::ProcessResponse r;
  while (again->Read(&r)) EXPECT_FALSE(r.has_started());
  s = again->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("authz-b"));
  // (That check read attributes out of a temporary, and the daemon died of it: still alive.)
  EXPECT_FALSE(d.process.process->Wait(absl::ZeroDuration()).ok());
}

// A queue's source informer that does not exist is refused the same way (it would be bound by
// the create after the check).
TEST(AuthTest, AQueueSourceInformerThatDoesNotExistIsRefusedByName) {
  SecureDaemon d = Start("failclosed-queue");
  auto ch = Tls(d);
  auto queues = v1::Queues::NewStub(ch);
  grpc::ClientContext ctx;
  Authorize(&ctx, "t-alice");
  v1::CreateQueueRequest req;
  req.mutable_spec()->set_name("authz-q");
  req.mutable_spec()->add_sources()->set_informer_id("configmaps-00000000000000aa");
  v1::QueueInfo info;
  grpc::Status s = queues->CreateQueue(&ctx, req, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(Reason(s), "INFORMER_NOT_FOUND");
  EXPECT_THAT(s.error_message(), HasSubstr("spec.sources[0].informer_id"));
}

// A flood of bearer tokens nobody issued, and of names nobody may use, fills the caches with
// refusals; the entries a legitimate caller uses stay (before, a full cache was wiped and every
// caller's token and decisions were reviewed again).
TEST(AuthTest, AFloodOfRefusalsDoesNotPushOutTheEntriesOthersUse) {
  SecureDaemon d = Start("flood", "", absl::Seconds(60), absl::Seconds(1), ", cacheSize: 40");
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> a = Ensure(ch.get(), "t-alice", "configmaps", "authz-a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  const int64_t token_reviews = Stat("tokenReviews");
  const int64_t access_reviews = SubjectAccessReviews();
  for (int i = 0; i < 100; ++i) {
    grpc::Status s = Get(ch.get(), absl::StrCat("t-forged-", i), a->id(), "authz-a/x");
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // And an authenticated caller asking about queues that do not exist (each a denied review).
  auto queues = v1::Queues::NewStub(ch);
  for (int i = 0; i < 60; ++i) {
    grpc::ClientContext ctx;
    Authorize(&ctx, "t-nobody");
    v1::GetQueueRequest req;
    req.set_queue(absl::StrCat("nothing-", i));
    v1::QueueInfo info;
    ASSERT_EQ(queues->GetQueue(&ctx, req, &info).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Stat("tokenReviews"), token_reviews + 101);  // the forged ones, and nobody's
  const int64_t flooded = SubjectAccessReviews();
  EXPECT_GE(flooded, access_reviews + 60);
  // alice is still known: no review of her token or her decisions.
  ASSERT_TRUE(Get(ch.get(), "t-alice", a->id(), "authz-a/x").ok());
  EXPECT_EQ(Stat("tokenReviews"), token_reviews + 101);
  EXPECT_EQ(SubjectAccessReviews(), flooded);
}

// One client address cannot take every place in the review queue: past maxPendingPerPeer of its
// calls waiting, the next are refused at once, naming the address.
TEST(AuthTest, OneClientAddressHoldsAtMostItsShareOfTheWaitingReviews) {
  // The review timeout is far above the stall: a review that times out on a loaded machine
  // (sanitizers, a busy CI runner) would be refused for another reason than the one under test.
  SecureDaemon d = Start("per-peer", "", absl::Seconds(1), absl::Seconds(20),
                         ", maxPendingPerPeer: 2");
  auto ch = Tls(d);
  Control("POST", "/_fake/faults",
          R"({"type":"stall","resource":"tokenreviews","durationMs":2000,"count":-1})");
  std::vector<grpc::Status> results(16);
  std::vector<std::thread> callers;
  for (size_t i = 0; i < results.size(); ++i) {
    callers.emplace_back([&, i] {
      results[i] = Get(ch.get(), absl::StrCat("t-unknown-", i), "configmaps-0000000000000000",
                       "authz-a/x");
    });
  }
  for (std::thread& t : callers) t.join();
  Control("DELETE", "/_fake/faults", "");
  int refused = 0;
  for (const grpc::Status& s : results) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      EXPECT_THAT(s.error_message(), HasSubstr("calls from ipv4:127.0.0.1"));
      ++refused;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    }
  }
  // 4 review threads take 4, 2 wait: the other 10 are refused (some may arrive after a review
  // thread is free again, so at least most of them).
  EXPECT_GE(refused, 6);
}

// The limits count a user, not a token: a bound service-account token carries its own
// credential id in `extra`, so a rotated token is another identity of the same user — it gets
// no fresh limits (it did). And creations at once cannot all take the last place.
TEST(AuthTest, LimitsCountTheUserAcrossTokensAndAdmitCreationsAtOnceAtomically) {
  for (int i = 0; i < 2; ++i) {
    Control("POST", "/_fake/tokens",
            absl::StrCat(R"({"token":"t-rotator-)", i,
                         R"(","user":{"username":"rotator","uid":"r1","groups":["dev"],)",
                         R"("extra":{"authentication.kubernetes.io/credential-id":["JTI=)", i,
                         R"("]}}})"));
  }
  SecureDaemon d = Start("principal", "callerLimits: {informers: 1, queues: 2}\n");
  auto ch = Tls(d);
  absl::StatusOr<v1::InformerInfo> first = Ensure(ch.get(), "t-rotator-0", "configmaps", "authz-a");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<v1::InformerInfo> second =
      Ensure(ch.get(), "t-rotator-1", "configmaps", "authz-b");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("callerLimits.informers"));

  std::vector<grpc::Status> results(8);
  std::vector<std::thread> creators;
  for (size_t i = 0; i < results.size(); ++i) {
    creators.emplace_back([&, i] {
      results[i] = CreateQueue(ch.get(), absl::StrCat("t-rotator-", i % 2),
                               absl::StrCat("principal-", i));
    });
  }
  for (std::thread& t : creators) t.join();
  int created = 0;
  for (const grpc::Status& s : results) {
    if (s.ok()) {
      ++created;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    }
  }
  EXPECT_EQ(created, 2);
}

// callerLimits.inFlight: calls that wait (here WaitForSync on an informer whose list the API
// server holds) count until they are answered; past the limit the next call is refused.
TEST(AuthTest, CallsWaitingCountAgainstInFlight) {
  SecureDaemon d = Start("inflight", "callerLimits: {inFlight: 2}\n");
  auto ch = Tls(d);
  Control("POST", "/_fake/faults",
          R"({"type":"stall","resource":"configmaps","namespace":"authz-inflight",)"
          R"("durationMs":6000,"count":-1})");
  absl::StatusOr<v1::InformerInfo> held =
      Ensure(ch.get(), "t-bounded", "configmaps", "authz-inflight");
  ASSERT_TRUE(held.ok()) << held.status();
  auto stub = v1::Informers::NewStub(ch);
  auto wait_for_sync = [&](int64_t timeout_ms) {
    grpc::ClientContext ctx;
    Authorize(&ctx, "t-bounded");
    v1::WaitForSyncRequest req;
    req.set_informer_id(held->id());
    req.set_timeout_ms(timeout_ms);
    v1::InformerInfo info;
    return stub->WaitForSync(&ctx, req, &info);
  };
  std::vector<grpc::Status> waited(2);
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < waited.size(); ++i) {
    waiters.emplace_back([&, i] {
      // Refused while a probe below holds a place for a moment: ask again.
      do {
        waited[i] = wait_for_sync(4000);
      } while (waited[i].error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    });
  }
  grpc::Status refused;
  EXPECT_TRUE(Eventually(
      [&] {
        refused = wait_for_sync(1);
        return refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      absl::Seconds(10)));
  EXPECT_EQ(Reason(refused), "CALLER_LIMIT");
  EXPECT_THAT(refused.error_message(), HasSubstr("callerLimits.inFlight"));
  for (std::thread& t : waiters) t.join();
  Control("DELETE", "/_fake/faults", "");
  for (const grpc::Status& s : waited) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  }
  // Answered: their places are free again.
  EXPECT_NE(wait_for_sync(1).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// A known caller's calls waiting for their SubjectAccessReviews hold its inFlight places too:
// with reviews stalled, one principal cannot park more than its limit in the review queue (each
// call there costs a review of the daemon's few review threads). On the code before, the third
// call queued behind the others like them.
TEST(AuthTest, CallsWaitingForAReviewCountAgainstInFlight) {
  // Tokens stay cached through the test (60 s): the calls are of a known caller throughout.
  SecureDaemon d = Start("inflight-review", "callerLimits: {inFlight: 2}\n", absl::Seconds(60),
                         absl::Seconds(20));
  auto ch = Tls(d);
  auto queues = v1::Queues::NewStub(ch);
  auto get_queue = [&](const std::string& name) {
    grpc::ClientContext ctx;
    Authorize(&ctx, "t-bounded");
    v1::GetQueueRequest req;
    req.set_queue(name);
    v1::QueueInfo info;
    return queues->GetQueue(&ctx, req, &info);
  };
  // The token is reviewed (and cached) before the stall: the calls below are of a known caller.
  ASSERT_NE(get_queue("inflight-warm").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  Control("POST", "/_fake/faults",
          R"({"type":"stall","resource":"subjectaccessreviews","durationMs":3000,"count":-1})");
  // Two waiters keep a call waiting for its review each, one after another, until the probe
  // below has been refused. Each names another queue: another decision, another review.
  std::atomic<bool> stop{false};
  std::vector<std::thread> waiters;
  std::atomic<int> unavailable{0};
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] {
      for (int n = 0; !stop.load(); ++n) {
        const grpc::Status s = get_queue(absl::StrCat("inflight-", i, "-", n));
        if (s.error_code() == grpc::StatusCode::UNAVAILABLE) ++unavailable;
      }
    });
  }
  grpc::Status refused;
  int probe = 0;
  EXPECT_TRUE(Eventually(
      [&] {
        refused = get_queue(absl::StrCat("inflight-probe-", probe++));
        return refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      absl::Seconds(30)));
  EXPECT_EQ(Reason(refused), "CALLER_LIMIT");
  EXPECT_THAT(refused.error_message(), HasSubstr("callerLimits.inFlight"));
  stop = true;
  for (std::thread& t : waiters) t.join();
  Control("DELETE", "/_fake/faults", "");
  EXPECT_EQ(unavailable.load(), 0) << "reviews timed out: the calls were refused for that";
  // Answered: their places are free again.
  EXPECT_NE(get_queue("inflight-after").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// The status page shows what Admin needs `admin` RBAC for: with authentication on it is not on
// the metrics listener (which deploy/ exposes behind the Service), only on statusListen's.
TEST(AuthTest, TheStatusPageIsNotServedBesideTheMetricsWithAuthenticationOn) {
  {
    SecureDaemon d = Start("status-off");
    for (const char* path : {"/", "/status.json"}) {
      int status = 0;
      const std::string body = ::informerd::testing::HttpGet(d.process.metrics, path, &status);
      EXPECT_EQ(status, 404) << path;
      EXPECT_THAT(body, HasSubstr("statusListen")) << path;
      EXPECT_THAT(body, ::testing::Not(HasSubstr("informers"))) << path;
    }
    int status = 0;
    ::informerd::testing::HttpGet(d.process.metrics, "/metrics", &status);
    EXPECT_EQ(status, 200);
  }
  SecureDaemon d = Start("status-on", "", absl::Seconds(1), absl::Seconds(1), "",
                         {"--status_listen=127.0.0.1:0"});
  absl::StatusOr<std::string> address = d.process.process->ReadUntil("status: ", absl::Seconds(20));
  ASSERT_TRUE(address.ok()) << address.status();
  int status = 0;
  const std::string body = ::informerd::testing::HttpGet(*address, "/status.json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("\"informers\""));
  ::informerd::testing::HttpGet(d.process.metrics, "/status.json", &status);
  EXPECT_EQ(status, 404);
}

// Two clusters: a read of the second's objects is decided by the second's RBAC, not the
// default's (alice may read namespace authz-a of the default cluster, nothing of the second).
TEST(AuthTest, EachClusterDecidesReadsOfItsOwnObjects) {
  SetUpCluster();
  absl::StatusOr<std::unique_ptr<client::testing::FakeApiServer>> second =
      client::testing::FakeApiServer::Start({});
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)
                  ->Control("PUT", "/_fake/authz/rules",
                            R"({"rules":[{"users":["bounded"],"verbs":["list","watch"],)"
                            R"("apiGroups":[""],"resources":["configmaps"]}]})")
                  .ok());
  ASSERT_TRUE((*second)
                  ->Control("POST", "/_fake/seed",
                            R"({"resource":"configmaps","namespace":"authz-a","count":2})")
                  .ok());
  SecureDaemon d = Start(
      "clusters", "", absl::Seconds(1), absl::Seconds(1), "", {},
      absl::StrCat("clusters: [{name: fake, kubeconfig: \"",
                   ::informerd::testing::SharedApiServer()->kubeconfig_path(),
                   "\"}, {name: second, kubeconfig: \"", (*second)->kubeconfig_path(), "\"}]\n"));
  auto ch = Tls(d);
  auto stub = v1::Informers::NewStub(ch);
  auto ensure = [&](const std::string& token, const std::string& cluster,
                    v1::InformerInfo* info) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::EnsureInformerRequest req;
    req.mutable_spec()->set_cluster(cluster);
    req.mutable_spec()->mutable_resource()->set_version("v1");
    req.mutable_spec()->mutable_resource()->set_resource("configmaps");
    req.mutable_spec()->set_namespace_("authz-a");
    return stub->EnsureInformer(&ctx, req, info);
  };
  v1::InformerInfo info;
  grpc::Status s = ensure("t-alice", "second", &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("in cluster \"second\""));
  // Allowed there: bounded's informer of the second cluster, which alice may not read either.
  v1::InformerInfo theirs;
  s = ensure("t-bounded", "second", &theirs);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Get(ch.get(), "t-alice", theirs.id(), "authz-a/x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // The default cluster's RBAC still lets alice read its namespace.
  s = ensure("t-alice", "fake", &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(AuthTest, ATcpListenerWithoutTlsRefusesToStartWhenAuthenticationIsOn) {
  absl::StatusOr<std::unique_ptr<::informerd::testing::Subprocess>> p =
      ::informerd::testing::Subprocess::Start(
          {"/bin/sh", "-c",
           absl::StrCat("exec '", ::informerd::testing::Runfile("server/informerd"),
                        "' --listen=127.0.0.1:0 --metrics_listen= 2>&1")});
  ASSERT_TRUE(p.ok());
  absl::StatusOr<std::string> out = (*p)->ReadUntil("informerd: ", absl::Seconds(20));
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("needs TLS"));
  EXPECT_THAT(*out, HasSubstr("--insecure-allow-unauthenticated"));
}

}  // namespace
}  // namespace informerd
