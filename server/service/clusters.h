// Clusters: the API servers the daemon talks to, by name — one client (HTTP/2 connection pool,
// auth, rate limits, discovery cache) per cluster, shared by all its informers.
//
//   Clusters clusters;
//   clusters.Add({.name = "prod", .config = LoadKubeconfig({...}).value()});
//   absl::StatusOr<Clusters::Cluster*> c = clusters.Find("");   // the default cluster
//
// The first cluster added is the default unless one is added with is_default. With no cluster,
// Find fails with FAILED_PRECONDITION saying that none is configured (the daemon still serves
// health, reflection and admin calls).
//
// Thread safety: Add before serving; Find and List from any thread.
#ifndef INFORMERD_SERVER_SERVICE_CLUSTERS_H_
#define INFORMERD_SERVER_SERVICE_CLUSTERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"

namespace informerd::service {

struct ClusterOptions {
  // [a-z0-9]([-a-z0-9]*[a-z0-9])?
  std::string name;
  client::RestConfig config;
  bool is_default = false;
  // Client-side rate limit for this cluster's requests (0: none).
  double qps = 0;
  int burst = 0;
  // Sent with every request (the API server's audit logs and per-client limits see it).
  std::string user_agent = "informerd/0.1";
};

class Clusters {
 public:
  struct Cluster {
    std::string name;
    std::string server;
    // Its discovery(): client->discovery().
    std::unique_ptr<client::Client> client;
  };

  Clusters();
  ~Clusters();

  // INVALID_ARGUMENT for a bad or duplicate name; errors creating the client.
  absl::Status Add(ClusterOptions options);
  // "" is the default cluster. NOT_FOUND naming an unknown cluster; FAILED_PRECONDITION when none
  // is configured.
  absl::StatusOr<Cluster*> Find(absl::string_view name);
  std::vector<Cluster*> List();
  const std::string& default_name() const { return default_name_; }

 private:
  std::vector<std::unique_ptr<Cluster>> clusters_;
  std::string default_name_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_CLUSTERS_H_
