// DaemonConfig: what informerd runs — listen addresses, TLS, the clusters it talks to, and the
// informers and queues it creates at start-up — read from a YAML file, which the command line
// names and overrides (server/flags.h).
//
//   absl::StatusOr<DaemonConfig> config = LoadConfigFile("/etc/informerd/config.yaml");
//
// The file (every key optional; keys in lowerCamelCase):
//
//   listen: ["127.0.0.1:7470", "unix:///run/informerd/informerd.sock"]
//   metricsListen: "127.0.0.1:7471"           # "" turns the HTTP endpoint off
//   tls: {cert: server.pem, key: server-key.pem, clientCa: ca.pem}   # TCP listeners; clientCa: mTLS
//   shutdownGracePeriod: 30s                  # SIGTERM: in-flight keys get this long to finish
//   idleTimeout: 10m                          # API-created informers/queues unused this long are
//                                             #   freed (0: never; see docs/semantics.md)
//   limits: {maxMessageBytes: 16777216, maxConcurrentStreams: 1000, maxSubscribers: 10000}
//   keepalive: {time: 5s, timeout: 3s}        # how fast a dead worker is noticed
//   clusters:
//     - name: prod                            # the first is the default unless one says default
//       kubeconfig: /home/me/.kube/config     # or inCluster: true
//       context: prod-admin
//       qps: 0                                # client-side rate limit (0: none)
//       burst: 0
//   informers:                                # informerd.v1.InformerSpec in proto JSON, plus
//     - name: pods                            #   an alias queues can refer to
//       resource: {version: v1, resource: pods}
//       namespace: team-a
//       indexes: [{name: by-node, fieldPath: spec.nodeName}]
//   insecureAllowUnauthenticated: false       # true: no authentication, no authorization
//                                             #   (local development only; docs/security.md)
//   authentication:                           # who calls (on by default; TCP needs tls.cert)
//     audiences: [informerd]                  # TokenReview audiences (default: the API server's)
//     cacheTTL: 10s                           # how long a TokenReview result is reused
//     unixPeers: [{uid: 1000, user: alice, groups: [dev]}]   # unix-socket peers by uid
//   authorization:                            # SubjectAccessReviews to the default cluster
//     allowTTL: 10s                           # how long decisions are reused
//     denyTTL: 10s
//     cacheSize: 10000
//     reviewTimeout: 5s
//   callerLimits: {informers: 50, queues: 50, streams: 200, inFlight: 100,   # per identity
//                  watchersPerInformer: 64}
//   leaderElection:                           # replica sets (docs/high-availability.md)
//     enabled: true
//     lease: {namespace: informerd, name: informerd}   # a Lease of the default cluster
//     identity: informerd-0                   # default <hostname>_<random>
//     advertiseAddress: 10.0.0.5:7470         # where clients reach this replica
//     leaseDuration: 15s                      # client-go's defaults
//     renewDeadline: 10s
//     retryPeriod: 2s
//   queues:                                   # informerd.v1.QueueSpec in proto JSON
//     - name: pod-reconciler
//       sources: [{informerId: pods}]          # an informer alias (or id)
//
// Errors name the file, the key and what is wrong ("config.yaml: clusters[0].kubeconfig: ...").
//
// Thread safety: plain values.
#ifndef INFORMERD_SERVER_CONFIG_H_
#define INFORMERD_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "informerd/v1/informers.pb.h"
#include "informerd/v1/queues.pb.h"
#include "server/auth/options.h"

namespace informerd {

struct ClusterConfig {
  std::string name;
  std::string kubeconfig;  // "" with in_cluster false: $KUBECONFIG, else ~/.kube/config
  std::string context;
  bool in_cluster = false;
  bool is_default = false;
  double qps = 0;
  int burst = 0;
};

struct InformerConfig {
  // How queues in the config refer to it ("" if none).
  std::string alias;
  v1::InformerSpec spec;
};

struct TlsConfig {
  std::string cert_file;
  std::string key_file;
  // Set: clients must present a certificate signed by this CA (mTLS).
  std::string client_ca_file;
  bool enabled() const { return !cert_file.empty(); }
};

// Replica sets (docs/high-availability.md): leader election on a Lease of the default cluster.
struct LeaderElectionConfig {
  bool enabled = false;
  // "": the pod's namespace (the service account's namespace file), else "default".
  std::string lease_namespace;
  std::string lease_name = "informerd";
  // The Lease's holderIdentity. "": <hostname>_<random>.
  std::string identity;
  // host:port where clients reach this replica's gRPC (followers name it in NOT_LEADER errors).
  // "": the first TCP listen address, unless it is a wildcard (0.0.0.0, [::]).
  std::string advertise_address;
  // client-go's defaults.
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
};

struct DaemonConfig {
  // "host:port" or "unix:///path". Default: 127.0.0.1:7470.
  std::vector<std::string> listen;
  // Prometheus /metrics, /healthz, /readyz. "" turns it off.
  std::string metrics_listen = "127.0.0.1:7471";
  // The status page (/ and /status.json: what Admin shows, without Admin's authorization) on a
  // listener of its own. "": on the metrics listener in local-development mode
  // (insecure_allow_unauthenticated), nowhere with authentication on.
  std::string status_listen;
  TlsConfig tls;
  absl::Duration shutdown_grace_period = absl::Seconds(30);
  // Informers and queues created over the API with no user for this long are freed (those of the
  // config never are). Zero: never.
  absl::Duration idle_timeout = absl::Minutes(10);
  int64_t max_message_bytes = 16 << 20;
  int max_concurrent_streams = 1000;
  int max_subscribers = 10000;
  absl::Duration keepalive_time = absl::Seconds(5);
  absl::Duration keepalive_timeout = absl::Seconds(3);
  std::vector<ClusterConfig> clusters;
  std::vector<InformerConfig> informers;
  std::vector<v1::QueueSpec> queues;
  // "trace", "debug", "info", "warn", "error".
  std::string log_level = "info";
  // "text" (people) or "json" (one object per line, with queue, key, token and informer fields:
  // base/log.h).
  std::string log_format = "text";
  // Authentication, authorization and per-caller limits (server/auth).
  auth::GuardOptions auth;
  LeaderElectionConfig leader_election;
};

// Parses a config file's text; `origin` names it in errors. INVALID_ARGUMENT naming the key.
absl::StatusOr<DaemonConfig> ParseConfig(absl::string_view yaml, absl::string_view origin);
// Reads and parses a file; NOT_FOUND / PERMISSION_DENIED naming it when it cannot be read.
absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path);

// Checks what ParseConfig checks after reading the keys (and fills the default listener); for a
// config changed after it was parsed (server/flags.h). INVALID_ARGUMENT "<origin>: <key>: ...".
absl::Status ValidateConfig(DaemonConfig* config, absl::string_view origin);

}  // namespace informerd

#endif  // INFORMERD_SERVER_CONFIG_H_
