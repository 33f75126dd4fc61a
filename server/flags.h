// informerd's command-line flags (Abseil flags: base/flags.h), and the DaemonConfig they make
// with the config file they may name. `informerd --help` lists them:
//
//   --config=PATH   the YAML file (server/config.h), read first; every other flag given applies
//                   over it
//   --check-config  validate the file and the flags, print "config: valid", start nothing
//   --listen=ADDR[,ADDR...]  --metrics-listen=ADDR  --kubeconfig=PATH  --context=NAME
//   --in-cluster  --tls-cert/--tls-key/--tls-client-ca=PATH  --shutdown-grace=DURATION
//   --idle-timeout=DURATION  --log-level=LEVEL  --log-format=text|json
//   --insecure-allow-unauthenticated
//   --leader-elect  --leader-elect-resource-namespace/-name=NAME  --leader-elect-identity=ID
//   --advertise-address=HOST:PORT  --leader-elect-lease-duration/-renew-deadline/-retry-period=DUR
//
// A flag left out keeps the file's value (or the default). --kubeconfig/--context/--in-cluster
// replace the file's clusters with one named "default". The boolean flags turn their setting on;
// a file that turns one on is not turned off by `--name=false`. The leader election flags are
// kube-controller-manager's, spelled as it spells them; every flag is also accepted with
// underscores, as Abseil defines them (base/flags.h).
#ifndef INFORMERD_SERVER_FLAGS_H_
#define INFORMERD_SERVER_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/config.h"

namespace informerd {

// --metrics-listen's value: unlike an optional flag's, an empty one is given ("" turns the HTTP
// listener off), so "not given" is its own state.
struct MetricsListenFlag {
  std::optional<std::string> address;
};
bool AbslParseFlag(absl::string_view text, MetricsListenFlag* flag, std::string* error);
std::string AbslUnparseFlag(const MetricsListenFlag& flag);

// The daemon's configuration from the parsed flags: --config's file when given, the other flags
// over it, validated. INVALID_ARGUMENT naming the flag (in Abseil's words, base/flags.h) or the
// file's key; NOT_FOUND naming a file that cannot be read.
absl::StatusOr<DaemonConfig> ConfigFromFlags();

// What `informerd --help` prints above the flags.
extern const char kFlagsUsage[];

}  // namespace informerd

ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(bool, check_config);
ABSL_DECLARE_FLAG(std::optional<std::vector<std::string>>, listen);
ABSL_DECLARE_FLAG(informerd::MetricsListenFlag, metrics_listen);
ABSL_DECLARE_FLAG(std::optional<std::string>, status_listen);
ABSL_DECLARE_FLAG(std::optional<std::string>, kubeconfig);
ABSL_DECLARE_FLAG(std::optional<std::string>, context);
ABSL_DECLARE_FLAG(bool, in_cluster);
ABSL_DECLARE_FLAG(std::optional<std::string>, tls_cert);
ABSL_DECLARE_FLAG(std::optional<std::string>, tls_key);
ABSL_DECLARE_FLAG(std::optional<std::string>, tls_client_ca);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, shutdown_grace);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, idle_timeout);
ABSL_DECLARE_FLAG(std::optional<std::string>, log_level);
ABSL_DECLARE_FLAG(std::optional<std::string>, log_format);
ABSL_DECLARE_FLAG(bool, insecure_allow_unauthenticated);
ABSL_DECLARE_FLAG(bool, leader_elect);
ABSL_DECLARE_FLAG(std::optional<std::string>, leader_elect_resource_namespace);
ABSL_DECLARE_FLAG(std::optional<std::string>, leader_elect_resource_name);
ABSL_DECLARE_FLAG(std::optional<std::string>, leader_elect_identity);
ABSL_DECLARE_FLAG(std::optional<std::string>, advertise_address);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, leader_elect_lease_duration);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, leader_elect_renew_deadline);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, leader_elect_retry_period);

#endif  // INFORMERD_SERVER_FLAGS_H_
