// SourceHarness: the daemon's queue wiring without the daemon, for tests of queue sources against
// the fake or the real API server — Clusters, an InformerRegistry building informers from specs
// (with discovery), and a QueueServer (real gRPC) whose queues find informers through the
// daemon's InformerSourceLookups. Plus the Kubernetes writes those tests make.
#ifndef INFORMERD_SERVER_SERVICE_SOURCE_TEST_UTIL_H_
#define INFORMERD_SERVER_SERVICE_SOURCE_TEST_UTIL_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/eventually.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/service/clusters.h"
#include "server/service/informer_registry.h"
#include "server/service/queue_test_util.h"
#include "server/service/source_lookups.h"

namespace informerd::service::testing {

class SourceHarness {
 public:
  // The first cluster is the default one.
  explicit SourceHarness(std::vector<ClusterOptions> clusters) {
    for (size_t i = 0; i < clusters.size(); ++i) {
      clusters[i].is_default = i == 0;
      absl::Status s = clusters_.Add(std::move(clusters[i]));
      EXPECT_TRUE(s.ok()) << s;
    }
    InformerRegistryOptions options;
    options.backoff.initial = absl::Milliseconds(20);
    options.backoff.max = absl::Milliseconds(400);
    informers_ = std::make_unique<InformerRegistry>(&clusters_, options);
    server_ = std::make_unique<QueueServer>(InformerSourceLookups(informers_.get(), &clusters_));
  }
  ~SourceHarness() {
    server_.reset();  // queues unbind before the informers go
    informers_.reset();
  }

  QueueServer& server() { return *server_; }

  // Ensures an informer of `resource` in namespace `ns` ("" for all) and waits until it has
  // synced; returns its id ("" after a test failure).
  std::string Informer(const std::string& group, const std::string& resource,
                       const std::string& ns, const std::string& cluster = "") {
    v1::InformerSpec spec;
    spec.set_cluster(cluster);
    spec.mutable_resource()->set_group(group);
    spec.mutable_resource()->set_version("v1");
    spec.mutable_resource()->set_resource(resource);
    spec.set_namespace_(ns);
    absl::StatusOr<InformerRegistry::Entry> e = informers_->Ensure(spec);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return "";
    EXPECT_TRUE(Eventually([&] { return e->informer->HasSynced(); }));
    return e->id;
  }

  // Takes leases until `want` is among them, answering each with SUCCESS; the keys seen, in
  // order.
  static std::vector<std::string> TakeUntil(WorkerStream& w, const std::string& want) {
    std::vector<std::string> seen;
    for (;;) {
      std::vector<v1::Lease> l = w.ReadLeases();
      if (l.empty()) {
        ADD_FAILURE() << "stream ended before " << want;
        return seen;
      }
      bool found = false;
      for (const v1::Lease& x : l) {
        seen.push_back(x.key());
        found |= x.key() == want;
        EXPECT_TRUE(w.Send(x, v1::Outcome::SUCCESS));
      }
      if (found) return seen;
    }
  }
  // Takes and answers leases until `n` distinct keys were seen (an informer's initial objects).
  static void TakeInitial(WorkerStream& w, size_t n) {
    std::set<std::string> keys;
    while (keys.size() < n) {
      std::vector<v1::Lease> l = w.ReadLeases();
      ASSERT_FALSE(l.empty());
      for (const v1::Lease& x : l) {
        keys.insert(x.key());
        ASSERT_TRUE(w.Send(x, v1::Outcome::SUCCESS));
      }
    }
  }

 private:
  Clusters clusters_;
  std::unique_ptr<InformerRegistry> informers_;
  std::unique_ptr<QueueServer> server_;
};

inline const client::GroupVersionResource kDeploymentsResource{"apps", "v1", "deployments"};

inline absl::Status CreateDeployment(client::Client& kube, const std::string& ns,
                                     const std::string& name, int replicas = 1) {
  return kube
      .Create(kDeploymentsResource, ns,
              absl::StrCat(R"({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":")",
                           name, R"("},"spec":{"replicas":)", replicas,
                           R"(,"selector":{"matchLabels":{"app":")", name,
                           R"("}},"template":{"metadata":{"labels":{"app":")", name,
                           R"("}},"spec":{"containers":[{"name":"c","image":"i"}]}}}})"))
      .status();
}

// A spec change: metadata.generation moves.
inline absl::Status ScaleDeployment(client::Client& kube, const std::string& ns,
                                    const std::string& name, int replicas) {
  return kube
      .Patch(kDeploymentsResource, ns, name, client::PatchType::kMerge,
             absl::StrCat(R"({"spec":{"replicas":)", replicas, "}}"))
      .status();
}

// A write to the status subresource only: metadata.generation stays.
inline absl::Status PatchDeploymentStatus(client::Client& kube, const std::string& ns,
                                          const std::string& name, int observed) {
  client::HttpRequest request;
  request.method = "PATCH";
  request.path = absl::StrCat("/apis/apps/v1/namespaces/", ns, "/deployments/", name, "/status");
  request.headers = {{"Content-Type", "application/merge-patch+json"}};
  request.body = absl::StrCat(R"({"status":{"observedGeneration":)", observed, "}}");
  return kube.Send(std::move(request)).status();
}

}  // namespace informerd::service::testing

#endif  // INFORMERD_SERVER_SERVICE_SOURCE_TEST_UTIL_H_
