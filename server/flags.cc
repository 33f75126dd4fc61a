#include "server/flags.h"

#include "absl/flags/flag.h"
#include "base/flags.h"
#include "base/log.h"

ABSL_FLAG(std::string, config, "",
          "The YAML config file (server/config.h documents it), read first; the other flags "
          "given apply over it.");
ABSL_FLAG(bool, check_config, false,
          "Read and validate the configuration (--config's file and the other flags), print "
          "\"config: valid\" and exit 0, or the error naming the key and exit 1; start "
          "nothing.");
ABSL_FLAG(std::optional<std::vector<std::string>>, listen, std::nullopt,
          "gRPC addresses, host:port or unix:///path, comma-separated (default 127.0.0.1:7470).");
ABSL_FLAG(informerd::MetricsListenFlag, metrics_listen, {},
          "HTTP address of /metrics, /healthz and /readyz (\"\" turns it off; default "
          "127.0.0.1:7471); also of the status page in local-development mode.");
ABSL_FLAG(std::optional<std::string>, status_listen, std::nullopt,
          "HTTP address of the status page (/ and /status.json), which shows what Admin shows to "
          "anyone who reaches it (default: none with authentication on).");
ABSL_FLAG(std::optional<std::string>, kubeconfig, std::nullopt,
          "One cluster named \"default\" from this kubeconfig (replaces the file's clusters).");
ABSL_FLAG(std::optional<std::string>, context, std::nullopt,
          "The kubeconfig context (default: its current-context).");
ABSL_FLAG(bool, in_cluster, false,
          "One cluster named \"default\" from the pod's service account (replaces the file's "
          "clusters).");
ABSL_FLAG(std::optional<std::string>, tls_cert, std::nullopt,
          "TLS certificate (PEM) for the TCP listeners; with --tls-key.");
ABSL_FLAG(std::optional<std::string>, tls_key, std::nullopt, "TLS private key (PEM).");
ABSL_FLAG(std::optional<std::string>, tls_client_ca, std::nullopt,
          "Require client certificates signed by this CA (mTLS); needs --tls-cert.");
ABSL_FLAG(std::optional<absl::Duration>, shutdown_grace, std::nullopt,
          "On SIGTERM, how long in-flight keys may take (default 30s).");
ABSL_FLAG(std::optional<absl::Duration>, idle_timeout, std::nullopt,
          "Free informers and queues created over the API after this long with no user "
          "(default 10m; 0: never).");
ABSL_FLAG(std::optional<std::string>, log_level, std::nullopt,
          "trace, debug, info, warn or error (default info).");
ABSL_FLAG(std::optional<std::string>, log_format, std::nullopt,
          "text (default) or json: one object per line, with queue, key, token and informer "
          "fields.");
ABSL_FLAG(bool, insecure_allow_unauthenticated, false,
          "Serve every call with no authentication or authorization, TCP without TLS allowed: "
          "local development only.");
ABSL_FLAG(bool, leader_elect, false,
          "Run as one replica of a set: a Lease of the default cluster elects the leader, which "
          "alone serves Queues and Work.");
ABSL_FLAG(std::optional<std::string>, leader_elect_resource_namespace, std::nullopt,
          "The Lease's namespace (default: the pod's namespace, or \"default\").");
ABSL_FLAG(std::optional<std::string>, leader_elect_resource_name, std::nullopt,
          "The Lease's name (default informerd).");
ABSL_FLAG(std::optional<std::string>, leader_elect_identity, std::nullopt,
          "The Lease's holderIdentity (default <hostname>_<random>).");
ABSL_FLAG(std::optional<std::string>, advertise_address, std::nullopt,
          "Where clients reach this replica's gRPC, host:port.");
ABSL_FLAG(std::optional<absl::Duration>, leader_elect_lease_duration, std::nullopt,
          "client-go's LeaseDuration (default 15s).");
ABSL_FLAG(std::optional<absl::Duration>, leader_elect_renew_deadline, std::nullopt,
          "client-go's RenewDeadline (default 10s).");
ABSL_FLAG(std::optional<absl::Duration>, leader_elect_retry_period, std::nullopt,
          "client-go's RetryPeriod (default 2s).");

namespace informerd {

const char kFlagsUsage[] =
    "shares Kubernetes informers and work queues with controllers over gRPC.\n"
    "\n"
    "  informerd --config=/etc/informerd/config.yaml\n"
    "  informerd --kubeconfig=$HOME/.kube/config --insecure-allow-unauthenticated\n"
    "\n"
    "On start it prints \"grpc: ADDR\" per listener, \"metrics: ADDR\" and \"status: ADDR\" on "
    "stdout.";

bool AbslParseFlag(absl::string_view text, MetricsListenFlag* flag, std::string* /*error*/) {
  flag->address = std::string(text);
  return true;
}

std::string AbslUnparseFlag(const MetricsListenFlag& flag) { return flag.address.value_or(""); }

namespace {

// A duration flag's value if it was given, checked as the file's durations are.
absl::Status ApplyDuration(const absl::Flag<std::optional<absl::Duration>>& flag,
                           absl::Duration* out) {
  const std::optional<absl::Duration> d = absl::GetFlag(flag);
  if (!d) return absl::OkStatus();
  if (*d < absl::ZeroDuration() || *d == absl::InfiniteDuration()) {
    return IllegalValue(flag, "must be a finite duration, 0 or more");
  }
  *out = *d;
  return absl::OkStatus();
}

void ApplyString(const absl::Flag<std::optional<std::string>>& flag, std::string* out) {
  if (std::optional<std::string> v = absl::GetFlag(flag)) *out = *std::move(v);
}

}  // namespace

absl::StatusOr<DaemonConfig> ConfigFromFlags() {
  DaemonConfig config;
  const std::string path = absl::GetFlag(FLAGS_config);
  if (!path.empty()) {
    absl::StatusOr<DaemonConfig> loaded = LoadConfigFile(path);
    if (!loaded.ok()) return loaded.status();
    config = *std::move(loaded);
  }
  if (std::optional<std::vector<std::string>> listen = absl::GetFlag(FLAGS_listen)) {
    if (listen->empty()) return IllegalValue(FLAGS_listen, "needs at least one address");
    config.listen = *std::move(listen);
  }
  if (std::optional<std::string> m = absl::GetFlag(FLAGS_metrics_listen).address) {
    config.metrics_listen = *std::move(m);
  }
  if (std::optional<std::string> s = absl::GetFlag(FLAGS_status_listen)) {
    config.status_listen = *std::move(s);
  }
  std::optional<std::string> kubeconfig = absl::GetFlag(FLAGS_kubeconfig);
  std::optional<std::string> context = absl::GetFlag(FLAGS_context);
  const bool in_cluster = absl::GetFlag(FLAGS_in_cluster);
  if (in_cluster && kubeconfig) {
    return IllegalValue(FLAGS_in_cluster, "cannot be combined with --kubeconfig");
  }
  if (kubeconfig || context || in_cluster) {
    config.clusters = {ClusterConfig{.name = "default",
                                     .kubeconfig = kubeconfig.value_or(""),
                                     .context = context.value_or(""),
                                     .in_cluster = in_cluster,
                                     .is_default = true}};
  }
  ApplyString(FLAGS_tls_cert, &config.tls.cert_file);
  ApplyString(FLAGS_tls_key, &config.tls.key_file);
  ApplyString(FLAGS_tls_client_ca, &config.tls.client_ca_file);
  if (absl::Status s = ApplyDuration(FLAGS_shutdown_grace, &config.shutdown_grace_period);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ApplyDuration(FLAGS_idle_timeout, &config.idle_timeout); !s.ok()) return s;
  if (std::optional<std::string> level = absl::GetFlag(FLAGS_log_level)) {
    if (absl::StatusOr<spdlog::level::level_enum> l = ParseLogLevel(*level); !l.ok()) {
      return IllegalValue(FLAGS_log_level, l.status().message());
    }
    config.log_level = *std::move(level);
  }
  if (std::optional<std::string> format = absl::GetFlag(FLAGS_log_format)) {
    if (absl::StatusOr<LogFormat> f = ParseLogFormat(*format); !f.ok()) {
      return IllegalValue(FLAGS_log_format, f.status().message());
    }
    config.log_format = *std::move(format);
  }
  if (absl::GetFlag(FLAGS_insecure_allow_unauthenticated)) {
    config.auth.insecure_allow_unauthenticated = true;
  }
  LeaderElectionConfig& le = config.leader_election;
  if (absl::GetFlag(FLAGS_leader_elect)) le.enabled = true;
  ApplyString(FLAGS_leader_elect_resource_namespace, &le.lease_namespace);
  ApplyString(FLAGS_leader_elect_resource_name, &le.lease_name);
  ApplyString(FLAGS_leader_elect_identity, &le.identity);
  ApplyString(FLAGS_advertise_address, &le.advertise_address);
  for (const auto& [flag, out] :
       {std::pair{&FLAGS_leader_elect_lease_duration, &le.lease_duration},
        std::pair{&FLAGS_leader_elect_renew_deadline, &le.renew_deadline},
        std::pair{&FLAGS_leader_elect_retry_period, &le.retry_period}}) {
    if (absl::Status s = ApplyDuration(*flag, out); !s.ok()) return s;
  }
  if (absl::Status s = ValidateConfig(&config, "flags"); !s.ok()) return s;
  return config;
}

}  // namespace informerd
