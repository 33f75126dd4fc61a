// InCluster: the RestConfig of a pod's service account (client-go's rest.InClusterConfig).
//
// The API server is https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; trust is the
// ca.crt of the service-account directory; the identity is its token file, which the kubelet
// rotates (a projected token is replaced about every hour), so the RestConfig carries the
// token's path and Credentials re-reads it whenever it changes; the namespace is its namespace
// file ("default" when absent).
//
//   absl::StatusOr<RestConfig> config = LoadInClusterConfig({});
//
// Thread safety: reentrant; reads the environment and files.
#ifndef INFORMERD_CLIENT_IN_CLUSTER_H_
#define INFORMERD_CLIENT_IN_CLUSTER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/rest_config.h"

namespace informerd::client {

struct InClusterOptions {
  // Holds token, ca.crt and namespace.
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  // For tests: the values of KUBERNETES_SERVICE_HOST and _PORT (nullopt: the environment).
  std::optional<std::string> service_host;
  std::optional<std::string> service_port;
};

// FailedPrecondition when not running in a cluster (the variables are unset); NotFound or
// PermissionDenied naming the file when the token or CA cannot be read.
absl::StatusOr<RestConfig> LoadInClusterConfig(const InClusterOptions& options);

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_IN_CLUSTER_H_
