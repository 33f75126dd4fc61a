// Clusters: see clusters.h.
#include "server/service/clusters.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/names.h"
#include "server/service/status.h"

namespace informerd::service {

Clusters::Clusters() = default;
Clusters::~Clusters() = default;

absl::Status Clusters::Add(ClusterOptions options) {
  // Cluster names appear in informer ids and metric labels.
  if (std::string reason = Dns1123LabelError(options.name); !reason.empty()) {
    return InvalidField("cluster name", reason);
  }
  for (const auto& cluster : clusters_) {
    if (cluster->name == options.name) {
      return InvalidField("cluster name",
                          absl::StrCat("\"", options.name, "\" is configured twice"));
    }
  }
  const std::string server = options.config.host;
  absl::StatusOr<std::unique_ptr<client::Client>> created = client::Client::Create(
      {.config = std::move(options.config),
       .user_agent = options.user_agent,
       .qps = options.qps,
       .burst = options.burst});
  if (!created.ok()) {
    return Prefixed(absl::StrCat("cluster ", options.name, ": "), created.status());
  }
  auto cluster = std::make_unique<Cluster>();
  cluster->name = options.name;
  cluster->server = server;
  cluster->client = *std::move(created);
  if (clusters_.empty() || options.is_default) default_name_ = cluster->name;
  clusters_.push_back(std::move(cluster));
  return absl::OkStatus();
}

absl::StatusOr<Clusters::Cluster*> Clusters::Find(absl::string_view name) {
  if (clusters_.empty()) {
    return Error(absl::StatusCode::kFailedPrecondition, v1::NO_CLUSTER,
                 "no cluster is configured: start informerd with a kubeconfig (--kubeconfig or a "
                 "`clusters` entry in the config file) or in a pod (in-cluster)");
  }
  const absl::string_view wanted = name.empty() ? absl::string_view(default_name_) : name;
  for (const auto& cluster : clusters_) {
    if (cluster->name == wanted) return cluster.get();
  }
  std::string known;
  for (const auto& cluster : clusters_) absl::StrAppend(&known, known.empty() ? "" : ", ", cluster->name);
  return Error(absl::StatusCode::kNotFound, v1::CLUSTER_NOT_FOUND,
               absl::StrCat("cluster \"", wanted, "\" is not configured (configured: ", known, ")"),
               {{"cluster", wanted}});
}

Executor* Clusters::Cluster::reflector_executor() {
  MutexLock lock(&mu_);
  if (reflector_executor_ == nullptr) {
    // Two: a cluster's informers mostly wait for watch events, which need no thread; lists come
    // in bursts (at start, after a 410) and are paced by the client-side rate limit anyway.
    reflector_executor_ =
        std::make_unique<Executor>(Executor::Options{.threads = 2, .name = "reflectors"});
  }
  return reflector_executor_.get();
}

void Clusters::Cluster::RecordError(const absl::Status& error, absl::Time when) {
  if (error.ok()) return;
  MutexLock lock(&mu_);
  last_error_ = error;
  last_error_time_ = when;
}

std::pair<absl::Status, absl::Time> Clusters::Cluster::last_error() const {
  MutexLock lock(&mu_);
  return {last_error_, last_error_time_};
}

std::vector<Clusters::Cluster*> Clusters::List() {
  std::vector<Cluster*> out;
  out.reserve(clusters_.size());
  for (const auto& cluster : clusters_) out.push_back(cluster.get());
  return out;
}

}  // namespace informerd::service
