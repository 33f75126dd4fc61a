// Queue sources on the real kube-apiserver (testing/kube), where discovery, owners and the
// status subresource are the real ones: the generation predicate measured over 100 status-only
// writes and 100 spec changes of a Deployment, an owner of a cluster-scoped kind, and leases that
// carry their object; source priorities putting a change ahead of the initial backlog.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/eventually.h"
#include "client/client.h"
#include "client/kube_apiserver.h"
#include "client/kubeconfig.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/source_test_util.h"

namespace informerd::service {
namespace {

using client::testing::KubeApiServer;
using testing::CreateDeployment;
using testing::PatchDeploymentStatus;
using testing::QueueServer;
using testing::ScaleDeployment;
using testing::SourceHarness;
using testing::Spec;
using testing::WorkerStream;

const client::GroupVersionResource kConfigMaps{"", "v1", "configmaps"};

class QueueSourceKubeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = KubeApiServer::Start().release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "testing/kube/start failed (see the log)";
    absl::StatusOr<client::RestConfig> config =
        client::LoadKubeconfig({.paths = {server_->kubeconfig()}});
    ASSERT_TRUE(config.ok()) << config.status();
    kube_ = client::Client::Create({.config = *config}).value();
    harness_ = std::make_unique<SourceHarness>(
        std::vector<ClusterOptions>{{.name = "kube", .config = *config}});
  }
  void TearDown() override { harness_.reset(); }

  client::Client& kube() { return *kube_; }

  static KubeApiServer* server_;
  std::unique_ptr<client::Client> kube_;
  std::unique_ptr<SourceHarness> harness_;
};

KubeApiServer* QueueSourceKubeTest::server_ = nullptr;

TEST_F(QueueSourceKubeTest, NoneOf100StatusWritesAndAllOf100SpecChangesEnqueueTheDeployment) {
  const std::string ns = "kube-generation";
  ASSERT_TRUE(client::testing::CreateNamespace(kube(), ns).ok());
  ASSERT_TRUE(CreateDeployment(kube(), ns, "web").ok());
  ASSERT_TRUE(CreateDeployment(kube(), ns, "sentinel").ok());
  const std::string deployments = harness_->Informer("apps", "deployments", ns);
  v1::QueueSpec spec = Spec("deploys");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(deployments);
  src->add_predicates()->mutable_generation_changed();
  ASSERT_TRUE(harness_->server().CreateQueue(spec).ok());
  WorkerStream w(harness_->server().work(), "deploys", 8);
  ASSERT_NE(w.ReadStarted(), "");
  SourceHarness::TakeInitial(w, 2);
  const std::string web = ns + "/web";
  const std::string sentinel = ns + "/sentinel";
  constexpr int kWrites = 100;
  // Status-only writes, then a spec change of the sentinel: the queue sees events in the order
  // the cache changed, so by the sentinel's key every status write has been looked at.
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(PatchDeploymentStatus(kube(), ns, "web", i + 1).ok());
  }
  ASSERT_TRUE(ScaleDeployment(kube(), ns, "sentinel", 2).ok());
  const std::vector<std::string> after_status = SourceHarness::TakeUntil(w, sentinel);
  const int status_enqueued =
      static_cast<int>(std::count(after_status.begin(), after_status.end(), web));
  int spec_enqueued = 0;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(ScaleDeployment(kube(), ns, "web", 2 + i).ok());
    const std::vector<std::string> seen = SourceHarness::TakeUntil(w, web);
    spec_enqueued += seen == std::vector<std::string>{web} ? 1 : 0;
  }
  std::printf("generation predicate on kube-apiserver: %d of %d status writes enqueued, "
              "%d of %d spec changes\n",
              status_enqueued, kWrites, spec_enqueued, kWrites);
  EXPECT_EQ(status_enqueued, 0);
  EXPECT_EQ(spec_enqueued, kWrites);
}

TEST_F(QueueSourceKubeTest, AnOwnerOfAClusterScopedKindIsEnqueuedByItsName) {
  const std::string ns = "kube-owners";
  ASSERT_TRUE(client::testing::CreateNamespace(kube(), ns).ok());
  absl::StatusOr<std::shared_ptr<const client::Object>> owner =
      kube().Get({"", "v1", "namespaces"}, "", ns);
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_TRUE(kube()
                  .Create(kConfigMaps, ns,
                          absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{)",
                                       R"("name":"owned","ownerReferences":[{"apiVersion":"v1",)",
                                       R"("kind":"Namespace","name":")", ns, R"(","uid":")",
                                       (*owner)->uid(), R"(","controller":true}]}})"))
                  .ok());
  const std::string cms = harness_->Informer("", "configmaps", ns);
  v1::QueueSpec spec = Spec("namespaces");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(cms);
  src->mutable_owner()->set_kind("Namespace");
  src->mutable_owner()->set_group("");
  ASSERT_TRUE(harness_->server().CreateQueue(spec).ok());
  WorkerStream w(harness_->server().work(), "namespaces", 1);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key(), ns);  // not "<ns>/<ns>": discovery says Namespace is cluster-scoped
  EXPECT_EQ(l[0].object_key(), ns);
}

TEST_F(QueueSourceKubeTest, LeasesCarryTheObjectAsTheCacheHoldsIt) {
  const std::string ns = "kube-objects";
  ASSERT_TRUE(client::testing::CreateNamespace(kube(), ns).ok());
  ASSERT_TRUE(CreateDeployment(kube(), ns, "web").ok());
  const std::string deployments = harness_->Informer("apps", "deployments", ns);
  v1::QueueSpec spec = Spec("with-objects");
  spec.add_sources()->set_informer_id(deployments);
  ASSERT_TRUE(harness_->server().CreateQueue(spec).ok());
  v1::Start start = WorkerStream::StartOf("with-objects", 1);
  start.set_object_informer_id(deployments);
  WorkerStream w(harness_->server().work(), start);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> l = w.ReadLeases();
  ASSERT_EQ(l.size(), 1u);
  ASSERT_TRUE(l[0].object().found());
  const v1::Object& o = l[0].object().object();
  EXPECT_EQ(o.metadata().kind(), "Deployment");
  EXPECT_EQ(o.metadata().generation(), 1);
  EXPECT_THAT(o.json(), ::testing::HasSubstr("\"replicas\":1"));
  // The informer strips managedFields, which the real server writes.
  EXPECT_THAT(o.json(), ::testing::Not(::testing::HasSubstr("managedFields")));
}

// controller-runtime's priority default, per source here: a controller starting on 20 objects has
// them all waiting at the initial list's low priority when one of them changes; the changed one
// goes first (raised to `changed`, 0), the rest keep their order.
TEST_F(QueueSourceKubeTest, AChangeDuringTheInitialBacklogIsHandedOutFirst) {
  const std::string ns = "kube-priorities";
  ASSERT_TRUE(client::testing::CreateNamespace(kube(), ns).ok());
  auto configmap = [&](int i, const std::string& value) {
    return absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-)", i,
                        R"("},"data":{"v":")", value, R"("}})");
  };
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(kube().Create(kConfigMaps, ns, configmap(i, "a")).ok());
  const std::string cms = harness_->Informer("", "configmaps", ns);
  v1::QueueSpec spec = Spec("backlog");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(cms);
  src->mutable_priorities()->set_initial_list(-100);
  QueueServer& server = harness_->server();
  ASSERT_TRUE(server.CreateQueue(spec).ok());
  ASSERT_TRUE(Eventually([&] { return server.State("backlog").depth() == 20; }));
  ASSERT_TRUE(kube().Update(kConfigMaps, ns, "cm-13", configmap(13, "b")).ok());
  ASSERT_TRUE(Eventually([&] {
    v1::QueueState st = server.State("backlog");
    return st.depth_by_priority_size() == 2 && st.depth_by_priority(0).priority() == 0;
  }));
  WorkerStream w(server.work(), "backlog", 1);
  ASSERT_NE(w.ReadStarted(), "");
  const std::vector<std::pair<std::string, int32_t>> got = w.TakePriorities(20);
  ASSERT_EQ(got.size(), 20u);
  EXPECT_EQ(got[0], std::make_pair(ns + "/cm-13", 0));
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i].second, -100) << got[i].first;
}

}  // namespace
}  // namespace informerd::service
