// Tests of the Informers service over real gRPC on loopback (port 0), with real stubs, against
// the fake API server (testing/apiserver) through InformerTestEnv: each test has a namespace of
// its own and a cluster whose client carries the fixture's User-Agent, so faults it arms reach
// only its informers.
#include "server/service/informer_service.h"

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "informerd/v1/informers.grpc.pb.h"
#include "server/informer/apiserver_fixture.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/service/informer_test_env.h"
#include "server/service/object_proto.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using informer::testing::ApiServerFixture;

const client::GroupVersionResource kConfigMaps{"", "v1", "configmaps"};

// The ErrorInfo a client decodes from the call's `grpc-status-details-bin` trailer (empty when
// there is none).
google::rpc::ErrorInfo ErrorInfoOf(const grpc::Status& s) {
  return GetErrorInfo(FromGrpc(s)).value_or(google::rpc::ErrorInfo());
}

// The metadata value `key` of the status's ErrorInfo ("" when absent).
std::string Meta(const grpc::Status& s, const std::string& key) {
  const google::rpc::ErrorInfo info = ErrorInfoOf(s);
  auto it = info.metadata().find(key);
  return it == info.metadata().end() ? "" : it->second;
}

class InformerServiceTest : public ::testing::Test {
 protected:
  // `before_serving` may configure the environment (add clusters) before the server starts.
  void SetUpService(const std::string& ns, InformerServiceOptions options = {},
                    const std::function<void(InformerTestEnv&)>& before_serving = nullptr) {
    env_ = std::make_unique<InformerTestEnv>(ns);
    ASSERT_TRUE(env_->status.ok()) << env_->status;
    if (before_serving) before_serving(*env_);
    fixture_ = env_->fixture.get();
    registry_ = env_->registry.get();
    service_ = std::make_unique<InformerService>(registry_, options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
    grpc::ChannelArguments args;
    // Small flow-control windows, so that a client that does not read blocks the server soon.
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Informers::NewStub(channel_);
  }

  // A Watch of buffer_size that does not read while objects change, then reads: it ends at the
  // server's state, with a RESNAPSHOT on the way.
  void ExpectANonReaderResnapshotted(uint32_t buffer_size);

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    service_.reset();
    env_.reset();
  }

  v1::InformerSpec ConfigMapSpec() const {
    v1::InformerSpec spec;
    spec.mutable_resource()->set_version("v1");
    spec.mutable_resource()->set_resource("configmaps");
    spec.set_namespace_(fixture_->ns());
    return spec;
  }

  grpc::Status Ensure(const v1::InformerSpec& spec, v1::InformerInfo* info) {
    grpc::ClientContext context;
    v1::EnsureInformerRequest request;
    *request.mutable_spec() = spec;
    return stub_->EnsureInformer(&context, request, info);
  }

  // Ensures the spec and waits until it has synced; returns the id.
  std::string EnsureSynced(const v1::InformerSpec& spec) {
    v1::InformerInfo info;
    grpc::Status s = Ensure(spec, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WaitForSyncRequest request;
    request.set_informer_id(info.id());
    v1::InformerInfo synced;
    s = stub_->WaitForSync(&context, request, &synced);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(synced.state().synced());
    return info.id();
  }

  absl::Status CreateLabelled(const std::string& name, const std::string& app) {
    return fixture_->verify_client()
        .Create(kConfigMaps, fixture_->ns(),
                absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", name,
                             R"(","labels":{"app":")", app, R"("}},"data":{"v":"0"}})"))
        .status();
  }

  // Every object a List returns, checking that each batch reports the same resourceVersion.
  std::vector<v1::Object> ListAll(const v1::ListRequest& request, grpc::Status* status,
                                  int* messages = nullptr) {
    grpc::ClientContext context;
    auto reader = stub_->List(&context, request);
    std::vector<v1::Object> objects;
    v1::ListResponse response;
    std::string rv;
    int n = 0;
    while (reader->Read(&response)) {
      if (n++ == 0) rv = response.resource_version();
      EXPECT_EQ(response.resource_version(), rv);
      for (const v1::Object& o : response.objects()) objects.push_back(o);
    }
    if (messages != nullptr) *messages = n;
    *status = reader->Finish();
    return objects;
  }

  std::unique_ptr<InformerTestEnv> env_;
  ApiServerFixture* fixture_ = nullptr;  // env_'s
  InformerRegistry* registry_ = nullptr;  // env_'s
  std::unique_ptr<InformerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Informers::Stub> stub_;
};

// Reads one Watch stream on the test thread.
struct WatchStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader;
  std::vector<v1::WatchEvent> pending;

  // The next event; false when the stream ended.
  bool Next(v1::WatchEvent* event) {
    while (pending.empty()) {
      v1::WatchResponse response;
      if (!reader->Read(&response)) return false;
      for (v1::WatchEvent& e : *response.mutable_events()) pending.push_back(std::move(e));
      std::reverse(pending.begin(), pending.end());
    }
    *event = std::move(pending.back());
    pending.pop_back();
    return true;
  }
};

std::unique_ptr<WatchStream> OpenWatch(v1::Informers::Stub& stub, const v1::WatchRequest& request) {
  auto stream = std::make_unique<WatchStream>();
  stream->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  stream->reader = stub.Watch(&stream->context, request);
  return stream;
}

TEST_F(InformerServiceTest, EnsureIsIdempotentAndNormalizesTheSpec) {
  SetUpService("svc-ensure");
  v1::InformerSpec spec = ConfigMapSpec();
  spec.set_label_selector("b=1,a=2");
  v1::InformerInfo first, second, by_kind;
  ASSERT_TRUE(Ensure(spec, &first).ok());
  EXPECT_THAT(first.id(), ::testing::StartsWith("configmaps-"));
  EXPECT_EQ(first.spec().kind(), "ConfigMap");
  EXPECT_EQ(first.spec().api_version(), "v1");
  EXPECT_EQ(first.spec().cluster(), "test");
  EXPECT_EQ(first.spec().label_selector(), "a=2,b=1");
  EXPECT_TRUE(first.namespaced());
  EXPECT_EQ(first.kind(), "ConfigMap");
  EXPECT_NE(first.state().reflector(), v1::REFLECTOR_STATE_UNSPECIFIED);
  EXPECT_FALSE(first.state().reflector_state().empty());

  spec.set_label_selector("a=2,b=1");
  ASSERT_TRUE(Ensure(spec, &second).ok());
  EXPECT_EQ(second.id(), first.id());

  v1::InformerSpec kind_spec;
  kind_spec.set_api_version("v1");
  kind_spec.set_kind("ConfigMap");
  kind_spec.set_namespace_(fixture_->ns());
  kind_spec.set_label_selector("a=2,b=1");
  ASSERT_TRUE(Ensure(kind_spec, &by_kind).ok());
  EXPECT_EQ(by_kind.id(), first.id());
  EXPECT_EQ(registry_->List().size(), 1u);

  // Another namespace is another informer.
  spec.set_namespace_("elsewhere");
  v1::InformerInfo other;
  ASSERT_TRUE(Ensure(spec, &other).ok());
  EXPECT_NE(other.id(), first.id());
}

// Compression is part of an informer's identity; objects read back whole; `bytes` shrinks.
TEST_F(InformerServiceTest, ACompressedInformerIsAnotherInformerWhoseObjectsRoundTrip) {
  SetUpService("svc-zstd");
  // 2.4 MiB of ConfigMaps: enough for the cache to train its dictionary at the first drain.
  ASSERT_TRUE(fixture_->Seed(600, 4096).ok());
  v1::InformerSpec plain_spec = ConfigMapSpec();
  v1::IndexSpec* index = plain_spec.add_indexes();
  index->set_name("by-bucket");
  index->set_label_key("fake.informerd.io/bucket");
  v1::InformerSpec zstd_spec = plain_spec;
  zstd_spec.mutable_storage()->set_compression(v1::StorageSpec::COMPRESSION_ZSTD);
  v1::InformerSpec none_spec = plain_spec;
  none_spec.mutable_storage()->set_compression(v1::StorageSpec::COMPRESSION_NONE);

  const std::string plain = EnsureSynced(plain_spec);
  const std::string zstd = EnsureSynced(zstd_spec);
  EXPECT_NE(zstd, plain) << "another cache, another informer";
  v1::InformerInfo info;
  ASSERT_TRUE(Ensure(none_spec, &info).ok());
  EXPECT_EQ(info.id(), plain) << "COMPRESSION_NONE is the default";
  EXPECT_FALSE(info.spec().has_storage()) << "normalized away";
  ASSERT_TRUE(Ensure(zstd_spec, &info).ok());
  EXPECT_EQ(info.id(), zstd);
  EXPECT_EQ(info.spec().storage().compression(), v1::StorageSpec::COMPRESSION_ZSTD);

  auto state = [&](const std::string& id) {
    grpc::ClientContext c;
    v1::GetInformerRequest r;
    r.set_informer_id(id);
    v1::InformerInfo i;
    EXPECT_TRUE(stub_->GetInformer(&c, r, &i).ok());
    return i.state();
  };
  // The dictionary is trained once the first list has drained, just after the sync.
  uint64_t plain_bytes = 0, zstd_bytes = 0;
  EXPECT_TRUE(Eventually([&] {
    plain_bytes = state(plain).bytes();
    zstd_bytes = state(zstd).bytes();
    // (With only 600 objects, the digested dictionary's ~0.5 MiB is a third of it.)
    return zstd_bytes * 2 < plain_bytes;
  }, absl::Seconds(30))) << "plain " << plain_bytes << " bytes, zstd " << zstd_bytes;
  EXPECT_EQ(state(zstd).objects(), 600u);

  // Every read returns the objects as the uncompressed informer has them.
  auto list = [&](const std::string& id, const std::string& index_value) {
    v1::ListRequest r;
    r.set_informer_id(id);
    if (!index_value.empty()) {
      r.set_index_name("by-bucket");
      r.set_index_value(index_value);
    }
    grpc::Status s;
    std::map<std::string, std::string> json;
    for (const v1::Object& o : ListAll(r, &s)) json[o.metadata().name()] = o.json();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return json;
  };
  const std::map<std::string, std::string> all = list(plain, "");
  ASSERT_EQ(all.size(), 600u);
  EXPECT_EQ(list(zstd, ""), all);
  EXPECT_EQ(list(zstd, "3").size(), 60u);
  EXPECT_EQ(list(zstd, "3"), list(plain, "3"));
  grpc::ClientContext c;
  v1::GetRequest r;
  r.set_informer_id(zstd);
  r.set_key(absl::StrCat(fixture_->ns(), "/seed-0000042"));
  v1::GetResponse got;
  ASSERT_TRUE(stub_->Get(&c, r, &got).ok());
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.object().json(), all.at("seed-0000042"));
  EXPECT_EQ(got.object().metadata().labels().at("fake.informerd.io/bucket"), "2");
}

TEST_F(InformerServiceTest, EnsureAddsIndexesToTheRunningInformerAndRefusesConflicts) {
  SetUpService("svc-indexes");
  v1::InformerSpec spec = ConfigMapSpec();
  v1::InformerInfo a, b;
  ASSERT_TRUE(Ensure(spec, &a).ok());
  v1::IndexSpec* index = spec.add_indexes();
  index->set_name("by-app");
  index->set_label_key("app");
  ASSERT_TRUE(Ensure(spec, &b).ok());
  EXPECT_EQ(b.id(), a.id());
  ASSERT_EQ(b.spec().indexes_size(), 1);
  index->set_label_key("tier");
  grpc::Status s = Ensure(spec, &b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ErrorInfoOf(s).reason(), "INDEX_CONFLICT");
  EXPECT_EQ(Meta(s, "field"), "spec.indexes[0].name");
  EXPECT_EQ(Meta(s, "index"), "by-app");
  EXPECT_EQ(Meta(s, "informer_id"), a.id());
}

TEST_F(InformerServiceTest, EnsureRejectsEachBadFieldByNameInTheErrorDetails) {
  SetUpService("svc-bad-input");
  struct Case {
    std::function<void(v1::InformerSpec&)> change;
    grpc::StatusCode code;
    std::string reason;
    std::string field;  // ErrorInfo.metadata["field"]
  };
  const std::vector<Case> cases = {
      {[](v1::InformerSpec& s) { s.clear_resource(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "INVALID_FIELD", "spec.resource"},
      {[](v1::InformerSpec& s) { s.mutable_resource()->clear_version(); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.resource.version"},
      {[](v1::InformerSpec& s) { s.mutable_resource()->set_resource("Config/Maps"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.resource.resource"},
      {[](v1::InformerSpec& s) { s.mutable_resource()->set_group("a..b"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.resource.group"},
      {[](v1::InformerSpec& s) { s.set_kind("ConfigMap"); }, grpc::StatusCode::INVALID_ARGUMENT,
       "INVALID_FIELD", "spec.api_version"},
      {[](v1::InformerSpec& s) { s.set_namespace_("Not_A_Namespace"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.namespace"},
      {[](v1::InformerSpec& s) { s.set_label_selector("app in (web"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.label_selector"},
      {[](v1::InformerSpec& s) { s.set_field_selector("no-operator"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.field_selector"},
      {[](v1::InformerSpec& s) { s.add_indexes()->set_name("by-nothing"); },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.indexes[0]"},
      {[](v1::InformerSpec& s) {
         auto* i = s.add_indexes();
         i->set_name("Bad_Name");
         i->set_label_key("app");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.indexes[0].name"},
      {[](v1::InformerSpec& s) {
         auto* i = s.add_indexes();
         i->set_name("by-path");
         i->set_field_path("spec..x[");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.indexes[0].field_path"},
      {[](v1::InformerSpec& s) {
         s.mutable_transform()->add_keep_paths("spec");
         s.mutable_transform()->set_metadata_only(true);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.transform"},
      {[](v1::InformerSpec& s) {
         // A value from a newer API than this daemon's.
         s.mutable_storage()->set_compression(static_cast<v1::StorageSpec::Compression>(7));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "INVALID_FIELD", "spec.storage.compression"},
      {[](v1::InformerSpec& s) { s.mutable_resource()->set_resource("nopes"); },
       grpc::StatusCode::NOT_FOUND, "RESOURCE_NOT_FOUND", "spec.resource"},
      {[](v1::InformerSpec& s) {
         s.clear_resource();
         s.set_api_version("v1");
         s.set_kind("Nope");
       },
       grpc::StatusCode::NOT_FOUND, "RESOURCE_NOT_FOUND", "spec.kind"},
      {[](v1::InformerSpec& s) { s.set_cluster("nowhere"); }, grpc::StatusCode::NOT_FOUND,
       "CLUSTER_NOT_FOUND", ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::InformerSpec spec = ConfigMapSpec();
    cases[i].change(spec);
    v1::InformerInfo info;
    grpc::Status s = Ensure(spec, &info);
    EXPECT_EQ(s.error_code(), cases[i].code) << "case " << i << ": " << s.error_message();
    EXPECT_EQ(ErrorInfoOf(s).reason(), cases[i].reason) << "case " << i;
    EXPECT_EQ(ErrorInfoOf(s).domain(), "informerd.io") << "case " << i;
    EXPECT_EQ(Meta(s, "field"), cases[i].field) << "case " << i;
    if (cases[i].code == grpc::StatusCode::INVALID_ARGUMENT) {
      // The standard BadRequest names the same field.
      std::optional<google::rpc::BadRequest> bad = GetBadRequest(FromGrpc(s));
      ASSERT_TRUE(bad.has_value()) << "case " << i;
      ASSERT_EQ(bad->field_violations_size(), 1) << "case " << i;
      EXPECT_EQ(bad->field_violations(0).field(), cases[i].field) << "case " << i;
    }
  }
  {
    v1::InformerSpec spec = ConfigMapSpec();
    spec.set_cluster("nowhere");
    v1::InformerInfo info;
    EXPECT_EQ(Meta(Ensure(spec, &info), "cluster"), "nowhere");
    spec = ConfigMapSpec();
    spec.mutable_resource()->set_resource("nopes");
    grpc::Status s = Ensure(spec, &info);
    EXPECT_EQ(Meta(s, "resource"), "nopes");
    EXPECT_EQ(Meta(s, "cluster"), "test");
  }
  grpc::ClientContext context;
  v1::InformerInfo info;
  grpc::Status s = stub_->EnsureInformer(&context, v1::EnsureInformerRequest(), &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Meta(s, "field"), "spec");
  EXPECT_TRUE(registry_->List().empty());
}

TEST_F(InformerServiceTest, EnsureNamingClustersThatAreNotConfiguredCostsNoThreadAndKeepsNoName) {
  SetUpService("svc-unknown-cluster");
  // An authenticated caller sending names of clusters that do not exist: each is refused at once,
  // and no lane (a thread, and the name as its key) is made for any of them.
  for (int i = 0; i < 300; ++i) {
    v1::InformerSpec spec = ConfigMapSpec();
    spec.set_cluster(absl::StrCat("nowhere-", i));
    v1::InformerInfo info;
    grpc::Status s = Ensure(spec, &info);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    ASSERT_EQ(ErrorInfoOf(s).reason(), "CLUSTER_NOT_FOUND");
  }
  EXPECT_EQ(service_->api_call_lanes(), 0u);
  // A name that is no cluster name at all (a megabyte) is an invalid field, not echoed back.
  v1::InformerSpec spec = ConfigMapSpec();
  spec.set_cluster(std::string(1 << 20, 'a'));
  v1::InformerInfo info;
  grpc::Status s = Ensure(spec, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Meta(s, "field"), "spec.cluster");
  EXPECT_LT(s.error_message().size(), 1024u);
  // The configured cluster, by its name or as the default, runs on one lane.
  spec = ConfigMapSpec();
  ASSERT_TRUE(Ensure(spec, &info).ok());
  spec.set_cluster("test");
  ASSERT_TRUE(Ensure(spec, &info).ok());
  EXPECT_EQ(service_->api_call_lanes(), 1u);
  EXPECT_EQ(registry_->List().size(), 1u);
}

TEST(InformerRegistryTest, EnsureWithoutAnyClusterIsAFailedPrecondition) {
  Clusters clusters;
  InformerRegistry registry(&clusters, {});
  v1::InformerSpec spec;
  spec.mutable_resource()->set_version("v1");
  spec.mutable_resource()->set_resource("configmaps");
  absl::StatusOr<InformerRegistry::Entry> entry = registry.Ensure(spec);
  EXPECT_EQ(entry.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(entry.status().message(), HasSubstr("no cluster is configured"));
  ASSERT_TRUE(GetErrorInfo(entry.status()).has_value());
  EXPECT_EQ(GetErrorInfo(entry.status())->reason(), "NO_CLUSTER");
}

TEST_F(InformerServiceTest, CallsNamingAnUnknownInformerAreInformerNotFound) {
  SetUpService("svc-unknown");
  // Every call answers the same: NOT_FOUND, INFORMER_NOT_FOUND naming the id.
  auto expect_not_found = [](const grpc::Status& s, const std::string& id, const char* call) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << call;
    EXPECT_EQ(ErrorInfoOf(s).reason(), "INFORMER_NOT_FOUND") << call;
    EXPECT_EQ(Meta(s, "informer_id"), id) << call;
  };
  {
    grpc::ClientContext c;
    v1::GetInformerRequest r;
    r.set_informer_id("configmaps-0000000000000000");
    v1::InformerInfo info;
    expect_not_found(stub_->GetInformer(&c, r, &info), r.informer_id(), "GetInformer");
  }
  {
    grpc::ClientContext c;
    v1::GetInformerRequest r;
    v1::InformerInfo info;
    grpc::Status s = stub_->GetInformer(&c, r, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ErrorInfoOf(s).reason(), "INVALID_FIELD");
    EXPECT_EQ(Meta(s, "field"), "informer_id");
  }
  {
    grpc::ClientContext c;
    v1::DeleteInformerRequest r;
    r.set_informer_id("nope");
    v1::DeleteInformerResponse response;
    expect_not_found(stub_->DeleteInformer(&c, r, &response), "nope", "DeleteInformer");
  }
  {
    grpc::ClientContext c;
    v1::WaitForSyncRequest r;
    r.set_informer_id("nope");
    v1::InformerInfo info;
    expect_not_found(stub_->WaitForSync(&c, r, &info), "nope", "WaitForSync");
  }
  {
    grpc::ClientContext c;
    v1::GetRequest r;
    r.set_informer_id("nope");
    r.set_key("a/b");
    v1::GetResponse response;
    expect_not_found(stub_->Get(&c, r, &response), "nope", "Get");
  }
  {
    v1::ListRequest r;
    r.set_informer_id("nope");
    grpc::Status s;
    ListAll(r, &s);
    expect_not_found(s, "nope", "List");
  }
  {
    v1::WatchRequest r;
    r.set_informer_id("nope");
    auto watch = OpenWatch(*stub_, r);
    v1::WatchEvent e;
    EXPECT_FALSE(watch->Next(&e));
    expect_not_found(watch->reader->Finish(), "nope", "Watch");
  }
}

TEST_F(InformerServiceTest, WaitForSyncEndsAtItsTimeoutOrTheCallDeadline) {
  SetUpService("svc-wait");
  // Lists and watches of this test's client hang: the informer cannot sync.
  ASSERT_TRUE(fixture_->Fault(R"("type":"stall","verb":"list","count":-1)").ok());
  ASSERT_TRUE(fixture_->Fault(R"("type":"stall","verb":"watch","count":-1)").ok());
  v1::InformerInfo info;
  ASSERT_TRUE(Ensure(ConfigMapSpec(), &info).ok());
  {
    grpc::ClientContext c;
    v1::WaitForSyncRequest r;
    r.set_informer_id(info.id());
    r.set_timeout_ms(200);
    v1::InformerInfo synced;
    const absl::Time start = absl::Now();
    grpc::Status s = stub_->WaitForSync(&c, r, &synced);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_EQ(ErrorInfoOf(s).reason(), "NOT_SYNCED");
    EXPECT_EQ(Meta(s, "informer_id"), info.id());
    EXPECT_FALSE(Meta(s, "reflector_state").empty());
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  }
  {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    v1::WaitForSyncRequest r;
    r.set_informer_id(info.id());
    v1::InformerInfo synced;
    EXPECT_EQ(stub_->WaitForSync(&c, r, &synced).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  grpc::ClientContext c;
  v1::GetInformerRequest r;
  r.set_informer_id(info.id());
  v1::InformerInfo state;
  ASSERT_TRUE(stub_->GetInformer(&c, r, &state).ok());
  EXPECT_FALSE(state.state().synced());
}

TEST_F(InformerServiceTest, AClusterWhoseListsHangDelaysOnlyItsOwnInformers) {
  // A second cluster on the same server whose lists and watches stall for 8 s: its reflectors
  // hold their cluster's executor threads in blocking lists (clusters.h).
  std::string hung_agent;
  SetUpService("svc-hung-cluster", {}, [&](InformerTestEnv& env) {
    hung_agent = absl::StrCat("hung-", env.fixture->user_agent());
    ASSERT_TRUE(env.clusters
                    .Add({.name = "hung",
                          .config = informer::testing::ApiServerFixture::Server()->config(),
                          .user_agent = hung_agent})
                    .ok());
  });
  ASSERT_TRUE(fixture_->Seed(2).ok());
  for (const char* verb : {"list", "watch"}) {
    ASSERT_TRUE(fixture_
                    ->Immediate(absl::StrCat(R"({"type":"stall","verb":")", verb,
                                             R"(","count":-1,"durationMs":8000,"userAgent":")",
                                             hung_agent, R"("})"))
                    .ok());
  }
  // As many hung informers as a process-wide executor of four threads would have had.
  std::vector<std::string> hung;
  for (int i = 0; i < 4; ++i) {
    v1::InformerSpec spec = ConfigMapSpec();
    spec.set_cluster("hung");
    spec.set_namespace_(absl::StrCat(fixture_->ns(), "-", i));
    v1::InformerInfo info;
    ASSERT_TRUE(Ensure(spec, &info).ok());
    hung.push_back(info.id());
  }
  // Each gives up its stalled streaming list (the stall timeout, 3 s) and lists instead.
  for (const std::string& id : hung) {
    ASSERT_TRUE(Eventually(
        [&] {
          grpc::ClientContext c;
          v1::GetInformerRequest r;
          r.set_informer_id(id);
          v1::InformerInfo state;
          return stub_->GetInformer(&c, r, &state).ok() && state.state().lists() >= 1;
        },
        absl::Seconds(30)))
        << id;
  }
  // The healthy cluster's informer syncs meanwhile, well before any stalled list ends.
  v1::InformerInfo info;
  ASSERT_TRUE(Ensure(ConfigMapSpec(), &info).ok());
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(6));
  v1::WaitForSyncRequest r;
  r.set_informer_id(info.id());
  v1::InformerInfo synced;
  grpc::Status s = stub_->WaitForSync(&c, r, &synced);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(synced.state().objects(), 2u);
  // (Stopping the hung informers waits for their lists: two at a time, 8 s each.)
}

TEST_F(InformerServiceTest, GetAndListReadTheCacheBySelectorAndIndex) {
  SetUpService("svc-reads");
  ASSERT_TRUE(fixture_->Seed(0).ok());  // creates the namespace
  ASSERT_TRUE(CreateLabelled("web-1", "web").ok());
  ASSERT_TRUE(CreateLabelled("web-2", "web").ok());
  ASSERT_TRUE(CreateLabelled("api-1", "api").ok());
  ASSERT_TRUE(fixture_->verify_client()
                  .Create(kConfigMaps, fixture_->ns(),
                          R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held",)"
                          R"("labels":{"app":"held"},"annotations":{"team":"platform",)"
                          R"("note":"line\nnext"},)"
                          R"("finalizers":["example.com/hold","example.com/b"]}})")
                  .ok());
  v1::InformerSpec spec = ConfigMapSpec();
  v1::IndexSpec* index = spec.add_indexes();
  index->set_name("by-app");
  index->set_label_key("app");
  const std::string id = EnsureSynced(spec);

  {
    grpc::ClientContext c;
    v1::GetRequest r;
    r.set_informer_id(id);
    r.set_key(absl::StrCat(fixture_->ns(), "/web-1"));
    v1::GetResponse response;
    ASSERT_TRUE(stub_->Get(&c, r, &response).ok());
    ASSERT_TRUE(response.found());
    EXPECT_EQ(response.object().metadata().name(), "web-1");
    EXPECT_EQ(response.object().metadata().labels().at("app"), "web");
    EXPECT_EQ(response.object().metadata().kind(), "ConfigMap");
    EXPECT_FALSE(response.object().metadata().uid().empty());
    EXPECT_THAT(response.object().json(), HasSubstr("\"web-1\""));
    EXPECT_FALSE(response.resource_version().empty());
    EXPECT_FALSE(response.object().metadata().creation_timestamp().empty());
    EXPECT_TRUE(response.object().metadata().annotations().empty());
    EXPECT_TRUE(response.object().metadata().finalizers().empty());
  }
  {
    grpc::ClientContext c;
    v1::GetRequest r;
    r.set_informer_id(id);
    r.set_key(absl::StrCat(fixture_->ns(), "/held"));
    v1::GetResponse response;
    ASSERT_TRUE(stub_->Get(&c, r, &response).ok());
    ASSERT_TRUE(response.found());
    const v1::ObjectMeta& meta = response.object().metadata();
    EXPECT_EQ(meta.annotations().at("team"), "platform");
    EXPECT_EQ(meta.annotations().at("note"), "line\nnext");
    EXPECT_THAT(meta.finalizers(), ::testing::ElementsAre("example.com/hold", "example.com/b"));
    EXPECT_THAT(meta.creation_timestamp(), ::testing::MatchesRegex("[0-9-]+T[0-9:]+Z"));
  }
  {
    grpc::ClientContext c;
    v1::GetRequest r;
    r.set_informer_id(id);
    r.set_key(absl::StrCat(fixture_->ns(), "/missing"));
    v1::GetResponse response;
    ASSERT_TRUE(stub_->Get(&c, r, &response).ok());
    EXPECT_FALSE(response.found());
  }
  grpc::Status s;
  v1::ListRequest r;
  r.set_informer_id(id);
  int messages = 0;
  r.set_batch_size(1);
  EXPECT_EQ(ListAll(r, &s, &messages).size(), 4u);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(messages, 4);
  r.set_batch_size(0);
  r.set_label_selector("app=web");
  EXPECT_EQ(ListAll(r, &s).size(), 2u);
  r.set_label_selector("");
  r.set_field_selector("metadata.name=api-1");
  EXPECT_EQ(ListAll(r, &s).size(), 1u);
  r.set_field_selector("");
  r.set_namespace_(fixture_->ns());
  EXPECT_EQ(ListAll(r, &s).size(), 4u);
  r.set_namespace_("elsewhere");
  EXPECT_EQ(ListAll(r, &s).size(), 0u);
  EXPECT_TRUE(s.ok());
  r.set_namespace_("");
  r.set_index_name("by-app");
  r.set_index_value("api");
  std::vector<v1::Object> api = ListAll(r, &s);
  ASSERT_EQ(api.size(), 1u);
  EXPECT_EQ(api[0].metadata().name(), "api-1");

  // Bad input names the field.
  r.set_index_name("by-nothing");
  ListAll(r, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("index_name"));
  r.set_index_name("");
  ListAll(r, &s);
  EXPECT_THAT(s.error_message(), HasSubstr("index_name: required"));
  r.clear_index_value();
  r.set_label_selector("app in (");
  ListAll(r, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("label_selector"));
  r.clear_label_selector();
  r.set_batch_size(100000);
  ListAll(r, &s);
  EXPECT_EQ(Meta(s, "field"), "batch_size");
  r.set_batch_size(0);
  r.set_max_batch_bytes(1u << 30);
  ListAll(r, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Meta(s, "field"), "max_batch_bytes");

  // A byte cap smaller than any object: each object comes alone.
  r.set_max_batch_bytes(1);
  EXPECT_EQ(ListAll(r, &s, &messages).size(), 4u);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(messages, 4);
}

TEST_F(InformerServiceTest, WatchSendsTheSnapshotThenSyncedThenLiveEvents) {
  SetUpService("svc-watch");
  ASSERT_TRUE(fixture_->Seed(5).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  v1::WatchRequest request;
  request.set_informer_id(id);
  request.set_include_old_object(true);
  auto watch = OpenWatch(*stub_, request);
  v1::WatchEvent e;
  int initial = 0;
  for (;;) {
    ASSERT_TRUE(watch->Next(&e));
    if (e.type() == v1::WatchEvent::SYNCED) break;
    EXPECT_EQ(e.type(), v1::WatchEvent::ADDED);
    EXPECT_TRUE(e.initial());
    ++initial;
  }
  EXPECT_EQ(initial, 5);

  ASSERT_TRUE(fixture_->Create("live").ok());
  ASSERT_TRUE(watch->Next(&e));
  EXPECT_EQ(e.type(), v1::WatchEvent::ADDED);
  EXPECT_FALSE(e.initial());
  EXPECT_EQ(e.object().metadata().name(), "live");
  const std::string created_rv = e.object().metadata().resource_version();

  ASSERT_TRUE(fixture_->Update("live").ok());
  ASSERT_TRUE(watch->Next(&e));
  EXPECT_EQ(e.type(), v1::WatchEvent::UPDATED);
  EXPECT_EQ(e.old_object().metadata().resource_version(), created_rv);
  EXPECT_NE(e.object().metadata().resource_version(), created_rv);

  ASSERT_TRUE(fixture_->Delete("live").ok());
  ASSERT_TRUE(watch->Next(&e));
  EXPECT_EQ(e.type(), v1::WatchEvent::DELETED);
  EXPECT_EQ(e.object().metadata().name(), "live");
  EXPECT_FALSE(e.tombstone());

  grpc::ClientContext c;
  v1::GetInformerRequest r;
  r.set_informer_id(id);
  v1::InformerInfo info;
  ASSERT_TRUE(stub_->GetInformer(&c, r, &info).ok());
  EXPECT_EQ(info.state().subscribers(), 1u);
  EXPECT_EQ(info.state().objects(), 5u);
}

TEST_F(InformerServiceTest, ASubscriberThatDoesNotReadIsResnapshotted) {
  SetUpService("svc-resnapshot");
  ExpectANonReaderResnapshotted(/*buffer_size=*/1);
}

// The buffer is bounded in bytes too: a subscriber that asked for a buffer of a million events
// and does not read re-snapshots once the objects it holds pass max_buffer_bytes (on the code
// before, it held every event, however big, up to its buffer_size).
TEST_F(InformerServiceTest, ASubscribersBufferIsBoundedInBytes) {
  SetUpService("svc-resnapshot-bytes", {.max_buffer_bytes = 64 << 10});
  ExpectANonReaderResnapshotted(/*buffer_size=*/1 << 20);
}

void InformerServiceTest::ExpectANonReaderResnapshotted(uint32_t buffer_size) {
  // About 2 MB of initial objects: far more than the stream's flow-control window.
  ASSERT_TRUE(fixture_->Seed(100, 20000).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  v1::WatchRequest request;
  request.set_informer_id(id);
  request.set_buffer_size(buffer_size);
  request.set_max_batch(1);
  auto watch = OpenWatch(*stub_, request);
  // The first event: the subscriber is registered (changes made before it would only be part
  // of its initial list). From here on not reading: the server's writes stall while these
  // changes arrive.
  std::map<std::string, std::string> seen;  // key -> resourceVersion
  v1::WatchEvent e;
  ASSERT_TRUE(watch->Next(&e));
  ASSERT_EQ(e.type(), v1::WatchEvent::ADDED);
  seen[e.object().metadata().key()] = e.object().metadata().resource_version();
  absl::StatusOr<informer::testing::State> before = fixture_->ServerState();
  ASSERT_TRUE(before.ok());
  int changed = 0;
  for (const auto& [key, state] : *before) {
    if (++changed > 10) break;
    ASSERT_TRUE(fixture_->Update(key.substr(key.find('/') + 1)).ok());
  }
  ASSERT_TRUE(fixture_->Create("extra").ok());
  ASSERT_TRUE(fixture_->WaitConverged(*registry_->Find(id)).ok());

  // Now read everything: the end state must be the server's, with a RESNAPSHOT on the way.
  bool resnapshot = false, synced = false;
  absl::StatusOr<informer::testing::State> want = fixture_->ServerState();
  ASSERT_TRUE(want.ok());
  auto matches = [&] {
    if (seen.size() != want->size()) return false;
    for (const auto& [key, state] : *want) {
      auto it = seen.find(key);
      if (it == seen.end() || it->second != state.resource_version) return false;
    }
    return true;
  };
  while (!(synced && resnapshot && matches())) {
    ASSERT_TRUE(watch->Next(&e)) << "stream ended: " << watch->reader->Finish().error_message()
                                 << "; synced " << synced << " resnapshot "
                                 << resnapshot << " seen " << seen.size();
    switch (e.type()) {
      case v1::WatchEvent::ADDED:
      case v1::WatchEvent::UPDATED:
        seen[e.object().metadata().key()] = e.object().metadata().resource_version();
        break;
      case v1::WatchEvent::DELETED:
        seen.erase(e.object().metadata().key());
        break;
      case v1::WatchEvent::RESNAPSHOT:
        EXPECT_GT(e.resnapshot_keys(), 0u);
        resnapshot = true;
        break;
      case v1::WatchEvent::SYNCED:
        synced = true;
        break;
      default:
        ADD_FAILURE() << "unexpected event type " << e.type();
    }
  }
}

TEST_F(InformerServiceTest, DeleteInformerEndsItsWatchesWithUnavailable) {
  SetUpService("svc-delete");
  ASSERT_TRUE(fixture_->Seed(2).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  v1::WatchRequest request;
  request.set_informer_id(id);
  auto watch = OpenWatch(*stub_, request);
  v1::WatchEvent e;
  do {
    ASSERT_TRUE(watch->Next(&e));
  } while (e.type() != v1::WatchEvent::SYNCED);

  grpc::ClientContext c;
  v1::DeleteInformerRequest r;
  r.set_informer_id(id);
  v1::DeleteInformerResponse response;
  ASSERT_TRUE(stub_->DeleteInformer(&c, r, &response).ok());
  EXPECT_FALSE(watch->Next(&e));
  const grpc::Status ended = watch->reader->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ErrorInfoOf(ended).reason(), "INFORMER_DELETED");
  EXPECT_EQ(registry_->Find(id), nullptr);
}

TEST_F(InformerServiceTest, StreamsBeyondTheSubscriberLimitAreRefused) {
  SetUpService("svc-limits", {.max_subscribers_per_informer = 3, .max_subscribers = 4});
  ASSERT_TRUE(fixture_->Seed(1).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  v1::WatchRequest request;
  request.set_informer_id(id);
  // Opened and never read.
  std::vector<std::unique_ptr<WatchStream>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(OpenWatch(*stub_, request));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (service_->subscribers(id) < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(service_->subscribers(id), 3u);

  auto refused = OpenWatch(*stub_, request);
  v1::WatchEvent e;
  EXPECT_FALSE(refused->Next(&e));
  grpc::Status s = refused->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ErrorInfoOf(s).reason(), "SUBSCRIBER_LIMIT");
  EXPECT_EQ(Meta(s, "limit"), "3");
  EXPECT_EQ(Meta(s, "scope"), "informer");

  // A client that goes away frees its place.
  idle[0]->context.TryCancel();
  while (service_->subscribers(id) > 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(service_->subscribers(id), 2u);
  auto again = OpenWatch(*stub_, request);
  do {
    ASSERT_TRUE(again->Next(&e));
  } while (e.type() != v1::WatchEvent::SYNCED);
}

TEST_F(InformerServiceTest, WaitForSyncOnAResourceTheServerRefusesSaysWhyReadably) {
  SetUpService("svc-refused");
  ASSERT_TRUE(fixture_->Seed(1).ok());
  // Every list and watch of this test's configmaps fails with the API server's 500.
  ASSERT_TRUE(fixture_
                  ->Fault(R"("type":"internal-error","count":-1,)"
                          R"("message":"configmaps are unavailable to this test")")
                  .ok());
  v1::InformerInfo info;
  ASSERT_TRUE(Ensure(ConfigMapSpec(), &info).ok());
  // The code, the API server's message and its Kubernetes reason; no payload bytes.
  const std::string readable =
      "INTERNAL: Internal error occurred: configmaps are unavailable to this test (InternalError)";
  // Once the reflector's list has failed (a streaming list's failure may come first).
  grpc::Status s;
  ASSERT_TRUE(Eventually([&] {
    grpc::ClientContext c;
    v1::WaitForSyncRequest r;
    r.set_informer_id(info.id());
    r.set_timeout_ms(50);
    v1::InformerInfo synced;
    s = stub_->WaitForSync(&c, r, &synced);
    return Meta(s, "last_error") == readable;
  })) << s.error_message();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ErrorInfoOf(s).reason(), "NOT_SYNCED");
  EXPECT_EQ(Meta(s, "kubernetes_reason"), "InternalError");
  EXPECT_EQ(Meta(s, "last_error"), readable);
  EXPECT_THAT(s.error_message(), HasSubstr("configmaps are unavailable to this test"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("informerd.io/client")));

  // The informer's state says the same, without payload bytes (the reflector may have failed
  // again meanwhile, perhaps in its streaming list).
  grpc::ClientContext c;
  v1::GetInformerRequest r;
  r.set_informer_id(info.id());
  v1::InformerInfo state;
  ASSERT_TRUE(stub_->GetInformer(&c, r, &state).ok());
  EXPECT_THAT(state.state().last_error(),
              ::testing::AllOf(::testing::StartsWith("INTERNAL: "),
                               HasSubstr("configmaps are unavailable to this test"),
                               ::testing::EndsWith(" (InternalError)")));
  EXPECT_GT(state.state().last_error_unix_ms(), 0);
  EXPECT_FALSE(state.state().synced());
}

TEST_F(InformerServiceTest, AWatchMessageHoldsAtMostMaxBatchBytesOfEventsButAtLeastOne) {
  SetUpService("svc-watch-bytes");
  ASSERT_TRUE(fixture_->Seed(5).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  v1::WatchRequest request;
  request.set_informer_id(id);
  request.set_max_batch_bytes(1);  // smaller than any event: one object per message
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub_->Watch(&c, request);
  int added = 0;
  bool synced = false;
  v1::WatchResponse response;
  while (!synced && reader->Read(&response)) {
    int objects = 0;
    for (const v1::WatchEvent& e : response.events()) {
      if (e.type() == v1::WatchEvent::ADDED) ++objects;
      // SYNCED follows the last initial object, in its message or after it.
      if (e.type() == v1::WatchEvent::SYNCED) synced = true;
    }
    EXPECT_LE(objects, 1);
    added += objects;
  }
  EXPECT_TRUE(synced);
  EXPECT_EQ(added, 5);
  c.TryCancel();
  reader->Finish().IgnoreError();

  request.set_max_batch_bytes(1u << 30);
  auto refused = OpenWatch(*stub_, request);
  v1::WatchEvent e;
  EXPECT_FALSE(refused->Next(&e));
  const grpc::Status s = refused->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Meta(s, "field"), "max_batch_bytes");
}

// Reads a Watch stream's messages as the bytes that arrive (a raw reader), for checking them with
// the regular parser.
class RawWatch {
 public:
  RawWatch(const std::shared_ptr<grpc::Channel>& channel, const grpc::ByteBuffer& request) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    reader_.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
        channel.get(),
        grpc::internal::RpcMethod("/informerd.v1.Informers/Watch",
                                  grpc::internal::RpcMethod::SERVER_STREAMING),
        &context_, request));
  }
  ~RawWatch() {
    if (finished_) return;
    context_.TryCancel();
    reader_->Finish().IgnoreError();
  }

  // The next event, parsed from the message bytes by v1::WatchResponse's parser.
  bool Next(v1::WatchEvent* event) {
    while (pending_.empty()) {
      grpc::ByteBuffer message;
      if (!reader_->Read(&message)) return false;
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(message.Dump(&slices).ok());
      std::string bytes;
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      v1::WatchResponse response;
      EXPECT_TRUE(response.ParseFromString(bytes));
      EXPECT_EQ(bytes.size(), response.ByteSizeLong());  // nothing unknown, nothing repeated
      for (v1::WatchEvent& e : *response.mutable_events()) pending_.push_back(std::move(e));
      std::reverse(pending_.begin(), pending_.end());
    }
    *event = std::move(pending_.back());
    pending_.pop_back();
    return true;
  }
  grpc::Status Finish() {
    finished_ = true;
    return reader_->Finish();
  }

 private:
  bool finished_ = false;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader_;
  std::vector<v1::WatchEvent> pending_;
};

grpc::ByteBuffer Serialized(const v1::WatchRequest& request) {
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_F(InformerServiceTest, SubscribersGetTheConvertedEventsFromOneEncodingOfEachObject) {
  SetUpService("svc-watch-bytes-shared");
  ASSERT_TRUE(fixture_->Seed(3).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  std::shared_ptr<informer::SharedInformer> informer = registry_->Find(id);
  ASSERT_NE(informer, nullptr);
  // The cached object of `name` as ObjectToProto converts it.
  auto converted = [&](const std::string& name) {
    v1::Object o;
    const informer::GetResult got = informer->lister().Get(absl::StrCat(fixture_->ns(), "/", name));
    EXPECT_NE(got.object, nullptr) << name;
    if (got.object != nullptr) ObjectToProto(*got.object, &o);
    return o;
  };
  auto same = [](const v1::Object& a, const v1::Object& b) {
    return google::protobuf::util::MessageDifferencer::Equals(a, b);
  };

  const uint64_t before = ObjectWireEncodings();
  v1::WatchRequest plain;
  plain.set_informer_id(id);
  v1::WatchRequest with_old = plain;
  with_old.set_include_old_object(true);
  RawWatch a(channel_, Serialized(plain));
  RawWatch b(channel_, Serialized(with_old));
  v1::WatchEvent e;
  for (RawWatch* w : {&a, &b}) {
    int initial = 0;
    for (;;) {
      ASSERT_TRUE(w->Next(&e));
      if (e.type() == v1::WatchEvent::SYNCED) break;
      EXPECT_EQ(e.type(), v1::WatchEvent::ADDED);
      EXPECT_TRUE(e.initial());
      EXPECT_TRUE(same(e.object(), converted(e.object().metadata().name())));
      ++initial;
    }
    EXPECT_EQ(initial, 3);
  }
  // Both streams sent each initial object from one encoding of it.
  EXPECT_EQ(ObjectWireEncodings() - before, 3u);

  ASSERT_TRUE(fixture_->Create("live").ok());
  v1::Object created;
  for (RawWatch* w : {&a, &b}) {
    ASSERT_TRUE(w->Next(&e));
    EXPECT_EQ(e.type(), v1::WatchEvent::ADDED);
    EXPECT_FALSE(e.initial());
    created = converted("live");
    EXPECT_TRUE(same(e.object(), created));
  }
  EXPECT_EQ(ObjectWireEncodings() - before, 4u);

  ASSERT_TRUE(fixture_->Update("live").ok());
  v1::Object updated;
  for (RawWatch* w : {&a, &b}) {
    ASSERT_TRUE(w->Next(&e));
    EXPECT_EQ(e.type(), v1::WatchEvent::UPDATED);
    updated = converted("live");
    EXPECT_TRUE(same(e.object(), updated));
    EXPECT_EQ(e.has_old_object(), w == &b);
    if (w == &b) {
      EXPECT_TRUE(same(e.old_object(), created));
    }
  }
  // The old object was encoded when it was created.
  EXPECT_EQ(ObjectWireEncodings() - before, 5u);

  // The deleted state is the API server's DELETED object, a new one: encoded once for both.
  ASSERT_TRUE(fixture_->Delete("live").ok());
  v1::Object deleted;
  for (RawWatch* w : {&a, &b}) {
    ASSERT_TRUE(w->Next(&e));
    EXPECT_EQ(e.type(), v1::WatchEvent::DELETED);
    EXPECT_FALSE(e.tombstone());
    EXPECT_EQ(e.object().metadata().key(), updated.metadata().key());
    if (w == &a) deleted = e.object();
    EXPECT_TRUE(same(e.object(), deleted));
  }
  EXPECT_EQ(ObjectWireEncodings() - before, 6u);
}

TEST_F(InformerServiceTest, AMalformedWatchRequestIsInvalidArgumentNamingTheField) {
  SetUpService("svc-watch-malformed");
  struct Case {
    std::string bytes;
    std::string field;
  };
  const std::vector<Case> cases = {
      {std::string("\x0a\x05" "ab", 4), "informer_id"},               // shorter than its length
      {std::string("\x0a\x02\xff\xfe", 4), "informer_id"},           // not UTF-8
      {std::string("\x0a\x01x\x32\x01\xff", 6), "namespace"},         // not UTF-8
      {std::string("\x0a\x01x\x10\xff", 5), "buffer_size"},           // a varint cut short
      {std::string("\x0a\x01x\x7a\x05", 5), "field 15"},              // unknown, cut short
      {std::string("\x00", 1), "request"},                            // tag 0
      {std::string("\xff", 1), "request"},                            // a tag cut short
  };
  for (const Case& c : cases) {
    grpc::Slice slice(c.bytes);
    RawWatch w(channel_, grpc::ByteBuffer(&slice, 1));
    v1::WatchEvent e;
    EXPECT_FALSE(w.Next(&e));
    const grpc::Status s = w.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.field << ": " << s.error_message();
    EXPECT_EQ(Meta(s, "field"), c.field) << s.error_message();
    EXPECT_EQ(ErrorInfoOf(s).reason(), "INVALID_FIELD");
  }
  // Well formed, unknown fields and all: parsed and checked as before.
  v1::WatchRequest r;
  r.set_informer_id("nope");
  std::string bytes = r.SerializeAsString() + std::string("\x78\x01", 2);  // field 15 = 1
  grpc::Slice slice(bytes);
  RawWatch w(channel_, grpc::ByteBuffer(&slice, 1));
  v1::WatchEvent e;
  EXPECT_FALSE(w.Next(&e));
  const grpc::Status s = w.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

TEST_F(InformerServiceTest, ObjectsOfAMebibyteReachAClientWithDefaultChannelSettings) {
  SetUpService("svc-large");
  // 6 MiB in all: a count-only batch would be beyond gRPC's default 4 MiB receive limit. (Kept
  // small: under ThreadSanitizer every MiB through the informer and the streams costs seconds,
  // and minutes wherever TSan cannot see how gRPC orders its threads: base/tsan.h.)
  ASSERT_TRUE(fixture_->Seed(6, 1 << 20).ok());
  const std::string id = EnsureSynced(ConfigMapSpec());
  // No raised receive limit, no custom arguments.
  std::unique_ptr<v1::Informers::Stub> plain =
      v1::Informers::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));

  {
    grpc::ClientContext c;
    v1::ListRequest r;
    r.set_informer_id(id);
    auto reader = plain->List(&c, r);
    v1::ListResponse response;
    size_t objects = 0;
    while (reader->Read(&response)) {
      for (const v1::Object& o : response.objects()) EXPECT_GT(o.json().size(), 1000000u);
      objects += response.objects_size();
    }
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(objects, 6u);
  }
  {
    v1::WatchRequest r;
    r.set_informer_id(id);
    auto watch = OpenWatch(*plain, r);
    v1::WatchEvent e;
    int added = 0;
    for (;;) {
      ASSERT_TRUE(watch->Next(&e)) << watch->reader->Finish().error_message();
      if (e.type() == v1::WatchEvent::SYNCED) break;
      EXPECT_EQ(e.type(), v1::WatchEvent::ADDED);
      EXPECT_GT(e.object().json().size(), 1000000u);
      ++added;
    }
    EXPECT_EQ(added, 6);
    watch->context.TryCancel();
  }
}

}  // namespace
}  // namespace informerd::service
