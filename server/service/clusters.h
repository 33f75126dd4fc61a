// Clusters: the API servers the daemon talks to, by name — one client (HTTP/2 connection pool,
// auth, rate limits, discovery cache) per cluster, shared by all its informers.
//
//   Clusters clusters;
//   clusters.Add({.name = "prod", .config = LoadKubeconfig({...}).value()});
//   absl::StatusOr<Clusters::Cluster*> c = clusters.Find("");   // the default cluster
//
// The first cluster added is the default unless one is added with is_default. With no cluster,
// Find fails with FAILED_PRECONDITION (reason NO_CLUSTER) saying that none is configured (the
// daemon still serves health, reflection and admin calls).
//
// Each cluster remembers the last error talking to it (RecordError: discovery failures), which
// Admin reports beside its informers' reflector errors.
//
// Thread safety: Add before serving; Find, List and a Cluster's methods from any thread.
#ifndef INFORMERD_SERVER_SERVICE_CLUSTERS_H_
#define INFORMERD_SERVER_SERVICE_CLUSTERS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/executor.h"
#include "base/mutex.h"
#include "client/client.h"

namespace informerd::service {

struct ClusterOptions {
  // A DNS-1123 label (names.h): [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
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

    // Where the reflectors of this cluster's informers run (informer_threads.h): their list
    // requests block an executor thread until answered, so a cluster whose API server hangs
    // delays only its own informers' lists. Made on first use; outlives the informers, as the
    // client does.
    Executor* reflector_executor();

    // Remembers `error` (not OK) as the last error talking to this cluster, at `when`.
    void RecordError(const absl::Status& error, absl::Time when = absl::Now());
    // The last recorded error (OK if none) and when.
    std::pair<absl::Status, absl::Time> last_error() const;

   private:
    mutable Mutex mu_;
    std::unique_ptr<Executor> reflector_executor_ ABSL_GUARDED_BY(mu_);
    absl::Status last_error_ ABSL_GUARDED_BY(mu_);
    absl::Time last_error_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  };

  Clusters();
  ~Clusters();

  // INVALID_FIELD ("cluster name: ...") for a bad or duplicate name; errors creating the client.
  absl::Status Add(ClusterOptions options);
  // "" is the default cluster. NOT_FOUND (CLUSTER_NOT_FOUND, metadata `cluster`) naming an
  // unknown cluster; FAILED_PRECONDITION (NO_CLUSTER) when none is configured.
  absl::StatusOr<Cluster*> Find(absl::string_view name);
  std::vector<Cluster*> List();
  const std::string& default_name() const { return default_name_; }

 private:
  std::vector<std::unique_ptr<Cluster>> clusters_;
  std::string default_name_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_CLUSTERS_H_
