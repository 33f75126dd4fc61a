// Clusters: see clusters.h.
#include "server/service/clusters.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace informerd::service {
namespace {

// "" when `name` is a valid cluster name ([a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63
// characters), else why not. Cluster names appear in informer ids and metric labels.
std::string InvalidClusterNameReason(absl::string_view name) {
  if (name.empty()) return "required";
  if (name.size() > 63) return "at most 63 characters";
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-') {
      return absl::StrCat("\"", name, "\": only lowercase letters, digits and '-'");
    }
  }
  if (name.front() == '-' || name.back() == '-') {
    return absl::StrCat("\"", name, "\": must start and end with a letter or digit");
  }
  return "";
}

}  // namespace

Clusters::Clusters() = default;
Clusters::~Clusters() = default;

absl::Status Clusters::Add(ClusterOptions options) {
  if (std::string reason = InvalidClusterNameReason(options.name); !reason.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster name: ", reason));
  }
  for (const auto& cluster : clusters_) {
    if (cluster->name == options.name) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster name: \"", options.name, "\" is configured twice"));
    }
  }
  const std::string server = options.config.host;
  absl::StatusOr<std::unique_ptr<client::Client>> created = client::Client::Create(
      {.config = std::move(options.config),
       .user_agent = options.user_agent,
       .qps = options.qps,
       .burst = options.burst});
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat("cluster ", options.name, ": ", created.status().message()));
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
    return absl::FailedPreconditionError(
        "no cluster is configured: start informerd with a kubeconfig (--kubeconfig or a "
        "`clusters` entry in the config file) or in a pod (in-cluster)");
  }
  const absl::string_view wanted = name.empty() ? absl::string_view(default_name_) : name;
  for (const auto& cluster : clusters_) {
    if (cluster->name == wanted) return cluster.get();
  }
  std::string known;
  for (const auto& cluster : clusters_) absl::StrAppend(&known, known.empty() ? "" : ", ", cluster->name);
  return absl::NotFoundError(
      absl::StrCat("cluster \"", wanted, "\" is not configured (configured: ", known, ")"));
}

std::vector<Clusters::Cluster*> Clusters::List() {
  std::vector<Cluster*> out;
  out.reserve(clusters_.size());
  for (const auto& cluster : clusters_) out.push_back(cluster.get());
  return out;
}

}  // namespace informerd::service
