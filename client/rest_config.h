// RestConfig: everything needed to reach one API server — where it is, how to trust it, who we
// are — as client-go's rest.Config holds it. Produced by LoadKubeconfig (kubeconfig.h) and
// LoadInClusterConfig (in_cluster.h); consumed by Credentials and the transport.
//
// File references are resolved when the config is loaded: certificate and key files are read
// into the *_pem fields (so a missing file is an error at load time, naming the field), while
// the token file stays a path because Credentials re-reads it when it changes.
//
// Thread safety: a plain value.
#ifndef INFORMERD_CLIENT_REST_CONFIG_H_
#define INFORMERD_CLIENT_REST_CONFIG_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace informerd::client {

struct TlsConfig {
  // PEM of the CAs that sign the server's certificate; empty: the system's trust store.
  std::string ca_pem;
  // PEM of the client certificate and its key (both or neither).
  std::string client_cert_pem;
  std::string client_key_pem;
  // Name to verify the server's certificate against (and send as SNI) instead of the host.
  std::string server_name;
  // Skip verification of the server's certificate. Only ever set from a kubeconfig that says so.
  bool insecure_skip_verify = false;
};

// users[].user.exec: a credential plugin (client.authentication.k8s.io ExecCredential).
struct ExecConfig {
  // A path (resolved against the kubeconfig's directory when relative with a '/') or a name
  // looked up in PATH when the plugin runs.
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  std::string install_hint;
  bool provide_cluster_info = false;
  std::string interactive_mode;  // Never, IfAvailable or Always
};

struct RestConfig {
  // https://host:port, possibly with a path prefix.
  std::string host;
  TlsConfig tls;
  // http://, https:// or socks5:// proxy. Empty: the environment's https_proxy and no_proxy
  // apply, as with client-go.
  std::string proxy_url;
  bool disable_compression = false;

  // Authentication: at most one of bearer token (inline or file), basic auth and exec plugin;
  // a client certificate may come with any of them.
  std::string bearer_token;
  std::string bearer_token_file;
  std::string username;
  std::string password;
  std::optional<ExecConfig> exec;

  // Impersonation (users[].user.as, as-groups, as-uid).
  std::string impersonate_user;
  std::vector<std::string> impersonate_groups;
  std::string impersonate_uid;

  // The namespace of the context (or of the service account); "default" when unset.
  std::string namespace_name = "default";
  // Where this came from, for messages: "context NAME in FILE" or "in-cluster".
  std::string source;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_REST_CONFIG_H_
