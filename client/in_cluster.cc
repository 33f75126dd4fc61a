#include "client/in_cluster.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/read_file.h"

namespace informerd::client {

absl::StatusOr<RestConfig> LoadInClusterConfig(const InClusterOptions& options) {
  auto env = [](const std::optional<std::string>& value, const char* name) {
    if (value) return *value;
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  const std::string host = env(options.service_host, "KUBERNETES_SERVICE_HOST");
  const std::string port = env(options.service_port, "KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
        "(is this running in a pod?)");
  }
  RestConfig rc;
  rc.source = "in-cluster";
  // An IPv6 address needs brackets in a URL (net.JoinHostPort).
  rc.host = host.find(':') != std::string::npos ? absl::StrCat("https://[", host, "]:", port)
                                                : absl::StrCat("https://", host, ":", port);
  const std::string& dir = options.service_account_dir;
  const std::string token_file = absl::StrCat(dir, "/token");
  absl::StatusOr<std::string> token = ReadFile(token_file);
  if (!token.ok()) {
    return absl::Status(token.status().code(),
                        absl::StrCat("in-cluster config: token: ", token.status().message()));
  }
  if (absl::StripAsciiWhitespace(*token).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("in-cluster config: token: ", token_file, " is empty"));
  }
  rc.bearer_token_file = token_file;
  absl::StatusOr<std::string> ca = ReadFile(absl::StrCat(dir, "/ca.crt"));
  if (!ca.ok()) {
    return absl::Status(ca.status().code(),
                        absl::StrCat("in-cluster config: ca.crt: ", ca.status().message()));
  }
  rc.tls.ca_pem = *std::move(ca);
  absl::StatusOr<std::string> ns = ReadFile(absl::StrCat(dir, "/namespace"));
  if (ns.ok()) {
    std::string trimmed(absl::StripAsciiWhitespace(*ns));
    if (!trimmed.empty()) rc.namespace_name = trimmed;
  } else if (!absl::IsNotFound(ns.status())) {
    return absl::Status(ns.status().code(),
                        absl::StrCat("in-cluster config: namespace: ", ns.status().message()));
  }
  return rc;
}

}  // namespace informerd::client
