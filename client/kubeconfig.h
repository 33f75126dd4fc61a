// Kubeconfig: loading a RestConfig from kubeconfig files the way kubectl does.
//
// Files: the explicit paths if given (each must exist), else the $KUBECONFIG list (':'-separated;
// missing files are skipped, as kubectl skips them), else ~/.kube/config. Several files merge
// as in client-go's clientcmd: for clusters, users and contexts the first file that defines a
// name wins; the first non-empty current-context wins. Relative file references
// (certificate-authority, client-certificate, client-key, tokenFile, an exec command with a '/')
// are resolved against the directory of the file that made them.
//
// The context is options.context or current-context. Clusters: server, certificate-authority
// [-data], tls-server-name, insecure-skip-tls-verify (honoured only when the file sets it, with a
// loud warning in the log), proxy-url, disable-compression. Users: token, tokenFile,
// client-certificate[-data], client-key[-data], username/password, exec (ExecCredential
// plugins), as/as-groups/as-uid. A *-data field wins over its file field, as in client-go.
// auth-provider is refused (its plugins were removed from client-go; use exec).
//
// Every error names the file and the field: `kubeconfig /home/u/.kube/config:
// users["dev"].user.client-key: cannot read /home/u/dev.key: No such file or directory`.
//
//   absl::StatusOr<RestConfig> config = LoadKubeconfig({.context = "kind-dev"});
//
// Thread safety: the functions are reentrant; LoadKubeconfig reads the environment and files.
#ifndef INFORMERD_CLIENT_KUBECONFIG_H_
#define INFORMERD_CLIENT_KUBECONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/rest_config.h"

namespace informerd::client {

// One kubeconfig document, as written (file references not yet read).
struct Kubeconfig {
  struct Cluster {
    std::string server;
    std::string certificate_authority;       // path
    std::string certificate_authority_data;  // PEM (base64-decoded)
    std::string tls_server_name;
    bool insecure_skip_tls_verify = false;
    std::string proxy_url;
    bool disable_compression = false;
  };
  struct User {
    std::string token;
    std::string token_file;
    std::string client_certificate;       // path
    std::string client_certificate_data;  // PEM
    std::string client_key;               // path
    std::string client_key_data;          // PEM
    std::string username;
    std::string password;
    std::optional<ExecConfig> exec;
    std::string auth_provider;  // name, if the user has one (refused when used)
    std::string impersonate;
    std::vector<std::string> impersonate_groups;
    std::string impersonate_uid;
  };
  struct Context {
    std::string cluster;
    std::string user;
    std::string namespace_name;
  };
  // Entries keep the path of the file that defined them (for relative references and messages).
  template <typename T>
  struct Entry {
    T value;
    std::string file;
  };
  std::map<std::string, Entry<Cluster>> clusters;
  std::map<std::string, Entry<User>> users;
  std::map<std::string, Entry<Context>> contexts;
  std::string current_context;
};

// Parses one kubeconfig document. `file` names it in errors; relative references are resolved
// against its directory. Fails on YAML that is not a kubeconfig (naming the field); unknown
// fields are ignored.
absl::StatusOr<Kubeconfig> ParseKubeconfig(absl::string_view yaml, absl::string_view file);

// Adds `next` under `merged`: names already in `merged` keep their entry.
void MergeKubeconfig(Kubeconfig next, Kubeconfig* merged);

// The RestConfig of `context_name` (or current-context when empty), reading the files it refers
// to (CA, client certificate and key; the token file is checked for readability).
absl::StatusOr<RestConfig> RestConfigFromKubeconfig(const Kubeconfig& config,
                                                    absl::string_view context_name);

struct KubeconfigOptions {
  // Explicit files (like kubectl --kubeconfig). Empty: $KUBECONFIG, else ~/.kube/config.
  std::vector<std::string> paths;
  // The context to use; empty: current-context.
  std::string context;
  // For tests: the values of $KUBECONFIG and $HOME (nullopt: the process environment).
  std::optional<std::string> kubeconfig_env;
  std::optional<std::string> home;
};

absl::StatusOr<RestConfig> LoadKubeconfig(const KubeconfigOptions& options);

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_KUBECONFIG_H_
