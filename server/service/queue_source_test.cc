// Queue sources end to end, over real gRPC against the fake API server: informers built by the
// InformerRegistry from specs (with discovery), queues bound to them through the daemon's
// InformerSourceLookups, keys taken by Work streams. Predicates, owner mapping (group, kind, all
// owners, cluster-scoped owners), keys of two clusters, leases that carry their object, and
// byte-capped lease batches of large objects read by a client with default limits.
#include "server/service/queue_source.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/apiserver_fixture.h"
#include "server/service/source_test_util.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using informer::testing::ApiServerFixture;
using testing::CreateDeployment;
using testing::PatchDeploymentStatus;
using testing::QueueServer;
using testing::ScaleDeployment;
using testing::SourceHarness;
using testing::Spec;
using testing::WorkerStream;

const client::GroupVersionResource kConfigMaps{"", "v1", "configmaps"};

class QueueSourceTest : public ::testing::Test {
 protected:
  // Two clusters on the one fake API server: "test" (the default) and "east".
  void SetUpClusters(const std::string& ns) {
    fixture_ = std::make_unique<ApiServerFixture>(ns);
    ASSERT_TRUE(fixture_->Seed(0).ok());  // the namespace
    std::vector<ClusterOptions> clusters;
    for (const char* name : {"test", "east"}) {
      clusters.push_back({.name = name,
                          .config = ApiServerFixture::Server()->config(),
                          .user_agent = fixture_->user_agent()});
    }
    harness_ = std::make_unique<SourceHarness>(std::move(clusters));
    server_ = &harness_->server();
  }

  // An informer of this test's namespace.
  std::string Informer(const std::string& resource, const std::string& group = "",
                       const std::string& cluster = "") {
    return harness_->Informer(group, resource, resource == "namespaces" ? "" : ns(), cluster);
  }
  client::Client& kube() { return fixture_->verify_client(); }
  const std::string& ns() const { return fixture_->ns(); }
  static std::vector<std::string> TakeUntil(WorkerStream& w, const std::string& want) {
    return SourceHarness::TakeUntil(w, want);
  }
  static void TakeInitial(WorkerStream& w, size_t n) { SourceHarness::TakeInitial(w, n); }

  std::unique_ptr<ApiServerFixture> fixture_;
  std::unique_ptr<SourceHarness> harness_;
  QueueServer* server_ = nullptr;
};

TEST_F(QueueSourceTest, TheGenerationPredicateDropsStatusOnlyWritesAndPassesSpecChanges) {
  SetUpClusters("source-generation");
  ASSERT_TRUE(CreateDeployment(kube(), ns(), "web").ok());
  ASSERT_TRUE(CreateDeployment(kube(), ns(), "sentinel").ok());
  const std::string deployments = Informer("deployments", "apps");
  v1::QueueSpec spec = Spec("deploys");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(deployments);
  src->add_predicates()->mutable_generation_changed();
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "deploys", 8);
  ASSERT_NE(w.ReadStarted(), "");
  const std::string web = ns() + "/web";
  const std::string sentinel = ns() + "/sentinel";
  TakeInitial(w, 2);
  constexpr int kWrites = 20;
  // Status-only writes of web, then a spec change of the sentinel. Events reach the queue in the
  // order the cache changed, so once the sentinel's key arrives every status write of web has
  // been looked at; none may have enqueued web.
  for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(PatchDeploymentStatus(kube(), ns(), "web", i).ok());
  ASSERT_TRUE(ScaleDeployment(kube(), ns(), "sentinel", 2).ok());
  EXPECT_THAT(TakeUntil(w, sentinel), ::testing::ElementsAre(sentinel));
  // Every spec change passes.
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(ScaleDeployment(kube(), ns(), "web", 3 + i).ok());
    EXPECT_THAT(TakeUntil(w, web), ::testing::ElementsAre(web)) << "spec change " << i;
  }
}

TEST_F(QueueSourceTest, LabelAndFieldPredicatesPassOnlyTheChangesTheyName) {
  SetUpClusters("source-labels");
  auto create = [&](const std::string& name) {
    return kube().Create(kConfigMaps, ns(),
                         absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")",
                                      name, R"(","labels":{"a":"1"}},"data":{"k":"0","other":"0"}})"));
  };
  ASSERT_TRUE(create("cm").ok());
  ASSERT_TRUE(create("sentinel").ok());
  const std::string cms = Informer("configmaps");
  v1::QueueSpec spec = Spec("cms");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(cms);
  src->add_predicates()->mutable_labels_changed();
  src->add_predicates()->mutable_fields_changed()->add_field_paths("data.k");
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "cms", 8);
  ASSERT_NE(w.ReadStarted(), "");
  const std::string cm = ns() + "/cm";
  const std::string sentinel = ns() + "/sentinel";
  TakeInitial(w, 2);
  auto patch = [&](const std::string& name, const std::string& body) {
    return kube().Patch(kConfigMaps, ns(), name, client::PatchType::kMerge, body).status();
  };
  // Neither a label nor data.k: dropped (the sentinel's label change shows the pump went past).
  ASSERT_TRUE(patch("cm", R"({"data":{"other":"1"}})").ok());
  ASSERT_TRUE(patch("sentinel", R"({"metadata":{"labels":{"a":"2"}}})").ok());
  EXPECT_THAT(TakeUntil(w, sentinel), ::testing::ElementsAre(sentinel));
  // A label change passes (labels_changed), and so does data.k (fields_changed): OR-ed.
  ASSERT_TRUE(patch("cm", R"({"metadata":{"labels":{"a":"2"}}})").ok());
  EXPECT_THAT(TakeUntil(w, cm), ::testing::ElementsAre(cm));
  ASSERT_TRUE(patch("cm", R"({"data":{"k":"1"}})").ok());
  EXPECT_THAT(TakeUntil(w, cm), ::testing::ElementsAre(cm));
  // Deletes always pass.
  ASSERT_TRUE(kube().Delete(kConfigMaps, ns(), "cm").ok());
  EXPECT_THAT(TakeUntil(w, cm), ::testing::ElementsAre(cm));
}

TEST_F(QueueSourceTest, TheAnnotationsPredicatePassesAnnotationChangesOnly) {
  SetUpClusters("source-annotations");
  ASSERT_TRUE(fixture_->Create("cm").ok());
  ASSERT_TRUE(fixture_->Create("sentinel").ok());
  const std::string cms = Informer("configmaps");
  v1::QueueSpec spec = Spec("anns");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(cms);
  src->add_predicates()->mutable_annotations_changed();
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "anns", 8);
  ASSERT_NE(w.ReadStarted(), "");
  TakeInitial(w, 2);
  auto patch = [&](const std::string& name, const std::string& body) {
    return kube().Patch(kConfigMaps, ns(), name, client::PatchType::kMerge, body).status();
  };
  const std::string cm = ns() + "/cm";
  const std::string sentinel = ns() + "/sentinel";
  ASSERT_TRUE(patch("cm", R"({"data":{"v":"changed"},"metadata":{"labels":{"l":"1"}}})").ok());
  ASSERT_TRUE(patch("sentinel", R"({"metadata":{"annotations":{"a":"1"}}})").ok());
  EXPECT_THAT(TakeUntil(w, sentinel), ::testing::ElementsAre(sentinel));
  ASSERT_TRUE(patch("cm", R"({"metadata":{"annotations":{"a":"1"}}})").ok());
  EXPECT_THAT(TakeUntil(w, cm), ::testing::ElementsAre(cm));
}

TEST_F(QueueSourceTest, OwnerSourcesMatchGroupAndKindAllOwnersAndClusterScopedOwners) {
  SetUpClusters("source-owners");
  // One ConfigMap with three owners: a Deployment (controller), a Deployment of another group,
  // a Namespace (cluster-scoped, not the controller).
  ASSERT_TRUE(kube()
                  .Create(kConfigMaps, ns(),
                          absl::StrCat(
                              R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owned",)",
                              R"("ownerReferences":[)",
                              R"({"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u1","controller":true},)",
                              R"({"apiVersion":"example.com/v1","kind":"Deployment","name":"imposter","uid":"u2"},)",
                              R"({"apiVersion":"v1","kind":"Namespace","name":")", ns(), R"(","uid":"u3"}]}})"))
                  .ok());
  const std::string cms = Informer("configmaps");
  auto owner_queue = [&](const std::string& name, const std::string& kind,
                         std::optional<std::string> group, bool all) {
    v1::QueueSpec spec = Spec(name);
    v1::QueueSource* src = spec.add_sources();
    src->set_informer_id(cms);
    src->mutable_owner()->set_kind(kind);
    if (group.has_value()) src->mutable_owner()->set_group(*group);
    src->mutable_owner()->set_all_owners(all);
    return server_->CreateQueue(spec);
  };
  auto keys_of = [&](const std::string& queue, size_t n) {
    WorkerStream w(server_->work(), queue, 8);
    EXPECT_NE(w.ReadStarted(), "");
    std::set<std::string> keys;
    while (keys.size() < n) {
      std::vector<v1::Lease> l = w.ReadLeases();
      if (l.empty()) break;
      for (const v1::Lease& x : l) keys.insert(x.key());
    }
    return keys;
  };
  // Group apps, controller only: the apps Deployment.
  ASSERT_TRUE(owner_queue("apps-controller", "Deployment", "apps", false).ok());
  EXPECT_THAT(keys_of("apps-controller", 1), ::testing::ElementsAre(ns() + "/web"));
  // Any group, all owners: both Deployments.
  ASSERT_TRUE(owner_queue("any-all", "Deployment", std::nullopt, true).ok());
  EXPECT_THAT(keys_of("any-all", 2),
              ::testing::UnorderedElementsAre(ns() + "/web", ns() + "/imposter"));
  // Namespace, controller only: nothing (that reference is not the controller).
  ASSERT_TRUE(owner_queue("namespace-controller", "Namespace", "", false).ok());
  // A Namespace owner: cluster-scoped (discovery says so), so its key is the bare name.
  ASSERT_TRUE(owner_queue("namespaces", "Namespace", "", true).ok());
  EXPECT_THAT(keys_of("namespaces", 1), ::testing::ElementsAre(ns()));
  // The pump maps bindings' initial objects in the order they were bound: namespace-controller's
  // were looked at before namespaces' key arrived.
  EXPECT_EQ(server_->State("namespace-controller").adds(), 0u);
  // An owner kind the cluster does not serve is named.
  grpc::Status st = owner_queue("unknown", "Gizmo", "example.com", false);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.sources[0].owner"));
  EXPECT_THAT(st.error_message(), HasSubstr("Gizmo"));
}

TEST_F(QueueSourceTest, KeysOfTwoClustersStayDistinctAndLeasesSayTheirCluster) {
  SetUpClusters("source-clusters");
  ASSERT_TRUE(fixture_->Create("same-name").ok());
  const std::string local = Informer("configmaps");
  const std::string east = Informer("configmaps", "", "east");
  v1::QueueSpec spec = Spec("both");
  spec.add_sources()->set_informer_id(local);
  spec.add_sources()->set_informer_id(east);
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "both", 8);
  ASSERT_NE(w.ReadStarted(), "");
  std::map<std::string, v1::Lease> leases;
  while (leases.size() < 2) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty());
    for (const v1::Lease& x : l) leases[x.key()] = x;
  }
  const std::string key = ns() + "/same-name";
  ASSERT_EQ(leases.count(key), 1u);
  ASSERT_EQ(leases.count("east//" + key), 1u);
  EXPECT_EQ(leases[key].cluster(), "");
  EXPECT_EQ(leases[key].object_key(), key);
  EXPECT_EQ(leases["east//" + key].cluster(), "east");
  EXPECT_EQ(leases["east//" + key].object_key(), key);
}

TEST_F(QueueSourceTest, LeasesCarryTheCurrentObjectOrSayItIsGone) {
  SetUpClusters("source-objects");
  ASSERT_TRUE(fixture_->Create("present").ok());
  const std::string cms = Informer("configmaps");
  ASSERT_TRUE(server_->CreateQueue(Spec("q")).ok());
  ASSERT_TRUE(server_->Add("q", {ns() + "/present", ns() + "/absent", "east//" + ns() + "/present"})
                  .ok());
  v1::Start start = WorkerStream::StartOf("q", 8);
  start.set_object_informer_id(cms);
  WorkerStream w(server_->work(), start);
  ASSERT_NE(w.ReadStarted(), "");
  std::map<std::string, v1::Lease> leases;
  while (leases.size() < 3) {
    for (const v1::Lease& x : w.ReadLeases()) leases[x.key()] = x;
  }
  const v1::Lease& present = leases[ns() + "/present"];
  ASSERT_TRUE(present.has_object());
  EXPECT_TRUE(present.object().found());
  EXPECT_EQ(present.object().object().metadata().name(), "present");
  EXPECT_THAT(present.object().object().json(), HasSubstr("\"present\""));
  EXPECT_FALSE(leases[ns() + "/absent"].object().found());
  // The informer is of the default cluster: a key of another cluster carries no object.
  EXPECT_FALSE(leases["east//" + ns() + "/present"].object().found());
  // An unknown informer is named.
  start.set_object_informer_id("configmaps-0000000000000000");
  WorkerStream bad(server_->work(), start);
  grpc::Status st = bad.AwaitEnd();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("start.object_informer_id"));
}

TEST_F(QueueSourceTest, LeaseBatchesOfLargeObjectsFitAClientsDefaultReceiveLimit) {
  SetUpClusters("source-large");
  constexpr int kObjects = 8;
  ASSERT_TRUE(fixture_->Seed(kObjects, 1 << 20).ok());  // about 1 MiB each
  const std::string cms = Informer("configmaps");
  v1::QueueSpec spec = Spec("large");
  spec.add_sources()->set_informer_id(cms);
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  // A fresh channel with gRPC's defaults (4 MiB receive limit).
  v1::Start start = WorkerStream::StartOf("large", kObjects);
  start.set_object_informer_id(cms);
  WorkerStream w(server_->work(), start);
  ASSERT_NE(w.ReadStarted(), "");
  std::set<std::string> got;
  int batches = 0;
  while (got.size() < kObjects) {
    std::vector<v1::Lease> l = w.ReadLeases();
    ASSERT_FALSE(l.empty()) << "the stream ended after " << got.size() << " objects";
    ++batches;
    EXPECT_LE(l.size(), 2u);  // 2 MiB per batch at most: one or two 1 MiB objects
    for (const v1::Lease& x : l) {
      EXPECT_TRUE(x.object().found());
      EXPECT_GE(x.object().object().json().size(), size_t{1000000});
      got.insert(x.key());
    }
  }
  EXPECT_GE(batches, kObjects / 2);
}

TEST_F(QueueSourceTest, ResyncEnqueuesEveryObjectAgainWhateverThePredicatesSay) {
  SetUpClusters("source-resync");
  ASSERT_TRUE(CreateDeployment(kube(), ns(), "web").ok());
  const std::string deployments = Informer("deployments", "apps");
  v1::QueueSpec spec = Spec("resync");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(deployments);
  src->add_predicates()->mutable_generation_changed();
  spec.set_resync_period_ms(1000);
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "resync", 1);
  ASSERT_NE(w.ReadStarted(), "");
  const absl::Time start = absl::Now();
  EXPECT_THAT(TakeUntil(w, ns() + "/web"), ::testing::ElementsAre(ns() + "/web"));
  // Nothing changes; the resync brings the key back (twice, to see the timer re-armed).
  EXPECT_THAT(TakeUntil(w, ns() + "/web"), ::testing::ElementsAre(ns() + "/web"));
  EXPECT_THAT(TakeUntil(w, ns() + "/web"), ::testing::ElementsAre(ns() + "/web"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1900));
}

// QueueSource.priorities: a binding's first enqueue of every object (the informer's initial list)
// waits at initial_list, a change at changed, the queue's resync of unchanged objects at
// unchanged; and a changed object is handed out before the initial list it was added after.
// Leases of the initial list say so (is_in_initial_list), the others do not.
TEST_F(QueueSourceTest, SourcePrioritiesRankTheInitialListChangesAndResyncs) {
  SetUpClusters("source-priorities");
  ASSERT_TRUE(fixture_->Create("a").ok());
  ASSERT_TRUE(fixture_->Create("b").ok());
  const std::string configmaps = Informer("configmaps");
  v1::QueueSpec spec = Spec("prio");
  v1::QueueSource* src = spec.add_sources();
  src->set_informer_id(configmaps);
  src->mutable_priorities()->set_initial_list(-100);
  src->mutable_priorities()->set_unchanged(-50);
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  ASSERT_TRUE(Eventually([&] { return server_->State("prio").depth() == 2; }));
  ASSERT_TRUE(fixture_->Create("late").ok());
  ASSERT_TRUE(Eventually([&] { return server_->State("prio").depth() == 3; }));
  {
    v1::QueueState st = server_->State("prio");
    ASSERT_EQ(st.depth_by_priority_size(), 2);
    EXPECT_EQ(st.depth_by_priority(0).priority(), 0);
    EXPECT_EQ(st.depth_by_priority(1).priority(), -100);
    EXPECT_EQ(st.depth_by_priority(1).depth(), 2u);
  }
  {
    WorkerStream w(server_->work(), "prio", 1);
    ASSERT_NE(w.ReadStarted(), "");
    const std::vector<v1::Lease> leases = w.TakeLeases(3);
    ASSERT_EQ(leases.size(), 3u);
    std::vector<std::pair<std::string, int32_t>> got;
    for (const v1::Lease& l : leases) {
      got.emplace_back(l.key(), l.priority());
      // client-go's isInInitialList: the replay's objects, not the one created later.
      EXPECT_EQ(l.is_in_initial_list(), l.key() != ns() + "/late") << l.key();
    }
    // The replay's order is the store's; the change goes before both.
    EXPECT_EQ(got[0], std::make_pair(ns() + "/late", 0));
    const std::vector<std::pair<std::string, int32_t>> rest(got.begin() + 1, got.end());
    EXPECT_THAT(rest, ::testing::UnorderedElementsAre(::testing::Pair(ns() + "/a", -100),
                                                      ::testing::Pair(ns() + "/b", -100)));
    // Ends once the outcomes sent are applied (a cancel could give the last key back).
    ASSERT_TRUE(w.Drain());
    EXPECT_TRUE(w.AwaitEnd().ok());
  }

  // The queue's resync: every object again, unchanged, at -50.
  spec.set_resync_period_ms(1000);
  ASSERT_TRUE(server_->UpdateQueue(spec).ok());
  WorkerStream again(server_->work(), "prio", 1);
  ASSERT_NE(again.ReadStarted(), "");
  std::set<std::string> resynced;
  while (resynced.size() < 3) {
    std::vector<v1::Lease> l = again.ReadLeases();
    ASSERT_FALSE(l.empty());
    for (const v1::Lease& x : l) {
      EXPECT_EQ(x.priority(), -50) << x.key();
      EXPECT_FALSE(x.is_in_initial_list()) << x.key();
      resynced.insert(x.key());
      ASSERT_TRUE(again.Send(x, v1::Outcome::SUCCESS));
    }
  }
}

TEST_F(QueueSourceTest, UpdateQueueAddsASourceWhileAKeyIsHeld) {
  SetUpClusters("source-update");
  ASSERT_TRUE(fixture_->Create("cm").ok());
  ASSERT_TRUE(CreateDeployment(kube(), ns(), "web").ok());
  const std::string cms = Informer("configmaps");
  const std::string deployments = Informer("deployments", "apps");
  v1::QueueSpec spec = Spec("grow");
  spec.add_sources()->set_informer_id(cms);
  ASSERT_TRUE(server_->CreateQueue(spec).ok());
  WorkerStream w(server_->work(), "grow", 8);
  ASSERT_NE(w.ReadStarted(), "");
  std::vector<v1::Lease> held = w.ReadLeases();
  ASSERT_EQ(held.size(), 1u);
  // Version 2 of the controller also watches Deployments: the update enqueues them once.
  spec.add_sources()->set_informer_id(deployments);
  // CreateQueue with the changed spec fails and says to update instead.
  grpc::Status st = server_->CreateQueue(spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("UpdateQueue"));
  ASSERT_TRUE(server_->UpdateQueue(spec).ok());
  EXPECT_THAT(TakeUntil(w, ns() + "/web"), ::testing::Contains(ns() + "/web"));
  // The lease held across the update is still the stream's: its outcome is applied.
  ASSERT_TRUE(w.Send(held[0], v1::Outcome::SUCCESS));
  EXPECT_TRUE(Eventually([&] { return server_->State("grow").in_flight() == 0; }));
}

}  // namespace
}  // namespace informerd::service
