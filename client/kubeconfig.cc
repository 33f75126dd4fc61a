#include "client/kubeconfig.h"

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/read_file.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

namespace informerd::client {
namespace {

std::string Dir(absl::string_view file) {
  size_t slash = file.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(file.substr(0, slash));
}

// Resolves a file reference made in `file` (client-go's ResolvePaths).
std::string Resolve(const std::string& path, absl::string_view file) {
  if (path.empty() || path[0] == '/') return path;
  return absl::StrCat(Dir(file), "/", path);
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

// Reading YAML nodes with errors that name the field instead of yaml-cpp exceptions.
class Reader {
 public:
  explicit Reader(absl::string_view file) : file_(file) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", file_, ": ", field, ": ", what));
  }

  // A scalar as a string; absent or null leaves `out` unchanged.
  absl::Status String(const YAML::Node& map, const char* key, absl::string_view path,
                      std::string* out) const {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsScalar()) return Error(absl::StrCat(path, ".", key), "expected a string");
    *out = n.Scalar();
    return absl::OkStatus();
  }

  absl::Status Bool(const YAML::Node& map, const char* key, absl::string_view path,
                    bool* out) const {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    const std::string field = absl::StrCat(path, ".", key);
    if (!n.IsScalar()) return Error(field, "expected true or false");
    const std::string& v = n.Scalar();
    if (v == "true" || v == "True" || v == "TRUE") {
      *out = true;
    } else if (v == "false" || v == "False" || v == "FALSE") {
      *out = false;
    } else {
      return Error(field, absl::StrCat("expected true or false, got ", Quote(v)));
    }
    return absl::OkStatus();
  }

  // A base64 *-data field, decoded.
  absl::Status Data(const YAML::Node& map, const char* key, absl::string_view path,
                    std::string* out) const {
    std::string encoded;
    if (absl::Status s = String(map, key, path, &encoded); !s.ok()) return s;
    if (encoded.empty()) return absl::OkStatus();
    if (!absl::Base64Unescape(encoded, out)) {
      return Error(absl::StrCat(path, ".", key), "not valid base64");
    }
    return absl::OkStatus();
  }

  absl::Status StringList(const YAML::Node& map, const char* key, absl::string_view path,
                          std::vector<std::string>* out) const {
    YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    const std::string field = absl::StrCat(path, ".", key);
    if (!n.IsSequence()) return Error(field, "expected a list of strings");
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar()) return Error(absl::StrCat(field, "[", i, "]"), "expected a string");
      out->push_back(n[i].Scalar());
    }
    return absl::OkStatus();
  }

  // A list of {name: N, KEY: {...}} entries; calls `f(name, body, path)` for each.
  template <typename F>
  absl::Status NamedList(const YAML::Node& root, const char* list, const char* key, F f) const {
    YAML::Node n = root[list];
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsSequence()) return Error(list, "expected a list");
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node item = n[i];
      const std::string at = absl::StrCat(list, "[", i, "]");
      if (!item.IsMap()) return Error(at, "expected a map with name and " + std::string(key));
      std::string name;
      if (absl::Status s = String(item, "name", at, &name); !s.ok()) return s;
      if (name.empty()) return Error(at + ".name", "missing");
      const std::string path = absl::StrCat(list, "[", Quote(name), "]");
      YAML::Node body = item[key];
      if (!body.IsDefined() || body.IsNull()) {
        body = YAML::Node(YAML::NodeType::Map);
      } else if (!body.IsMap()) {
        return Error(absl::StrCat(path, ".", key), "expected a map");
      }
      if (absl::Status s = f(name, body, absl::StrCat(path, ".", key)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::string file_;
};

absl::Status ParseExec(const Reader& r, const YAML::Node& node, const std::string& path,
                       absl::string_view file, ExecConfig* exec) {
  if (!node.IsMap()) return r.Error(path, "expected a map");
  absl::Status s = r.String(node, "command", path, &exec->command);
  if (s.ok()) s = r.StringList(node, "args", path, &exec->args);
  if (s.ok()) s = r.String(node, "apiVersion", path, &exec->api_version);
  if (s.ok()) s = r.String(node, "installHint", path, &exec->install_hint);
  if (s.ok()) s = r.Bool(node, "provideClusterInfo", path, &exec->provide_cluster_info);
  if (s.ok()) s = r.String(node, "interactiveMode", path, &exec->interactive_mode);
  if (!s.ok()) return s;
  if (exec->command.empty()) return r.Error(path + ".command", "missing");
  if (exec->api_version.empty()) return r.Error(path + ".apiVersion", "missing");
  if (exec->api_version != "client.authentication.k8s.io/v1" &&
      exec->api_version != "client.authentication.k8s.io/v1beta1") {
    return r.Error(path + ".apiVersion",
                   absl::StrCat("unsupported ", Quote(exec->api_version),
                                " (client.authentication.k8s.io/v1 or v1beta1)"));
  }
  if (!exec->interactive_mode.empty() && exec->interactive_mode != "Never" &&
      exec->interactive_mode != "IfAvailable" && exec->interactive_mode != "Always") {
    return r.Error(path + ".interactiveMode",
                   absl::StrCat("must be Never, IfAvailable or Always, not ",
                                Quote(exec->interactive_mode)));
  }
  if (exec->command.find('/') != std::string::npos) exec->command = Resolve(exec->command, file);
  YAML::Node env = node["env"];
  if (env.IsDefined() && !env.IsNull()) {
    if (!env.IsSequence()) return r.Error(path + ".env", "expected a list of {name, value}");
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string at = absl::StrCat(path, ".env[", i, "]");
      if (!env[i].IsMap()) return r.Error(at, "expected a map with name and value");
      std::string name, value;
      if (absl::Status es = r.String(env[i], "name", at, &name); !es.ok()) return es;
      if (absl::Status es = r.String(env[i], "value", at, &value); !es.ok()) return es;
      if (name.empty()) return r.Error(at + ".name", "missing");
      exec->env.emplace_back(std::move(name), std::move(value));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Kubeconfig> ParseDocument(const YAML::Node& root, absl::string_view file) {
  Reader r(file);
  Kubeconfig config;
  const std::string file_str(file);
  if (root.IsNull() || !root.IsDefined()) return config;  // an empty file is an empty config
  if (!root.IsMap()) return r.Error("(top level)", "expected a map");
  if (absl::Status s = r.String(root, "current-context", "(top level)", &config.current_context);
      !s.ok()) {
    return s;
  }
  absl::Status s = r.NamedList(root, "clusters", "cluster", [&](const std::string& name,
                                                               const YAML::Node& n,
                                                               const std::string& path) {
    Kubeconfig::Cluster c;
    absl::Status cs = r.String(n, "server", path, &c.server);
    if (cs.ok()) cs = r.String(n, "certificate-authority", path, &c.certificate_authority);
    if (cs.ok()) cs = r.Data(n, "certificate-authority-data", path, &c.certificate_authority_data);
    if (cs.ok()) cs = r.String(n, "tls-server-name", path, &c.tls_server_name);
    if (cs.ok()) cs = r.Bool(n, "insecure-skip-tls-verify", path, &c.insecure_skip_tls_verify);
    if (cs.ok()) cs = r.String(n, "proxy-url", path, &c.proxy_url);
    if (cs.ok()) cs = r.Bool(n, "disable-compression", path, &c.disable_compression);
    if (!cs.ok()) return cs;
    c.certificate_authority = Resolve(c.certificate_authority, file);
    config.clusters.try_emplace(name, Kubeconfig::Entry<Kubeconfig::Cluster>{c, file_str});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  s = r.NamedList(root, "users", "user", [&](const std::string& name, const YAML::Node& n,
                                             const std::string& path) {
    Kubeconfig::User u;
    absl::Status us = r.String(n, "token", path, &u.token);
    if (us.ok()) us = r.String(n, "tokenFile", path, &u.token_file);
    if (us.ok()) us = r.String(n, "client-certificate", path, &u.client_certificate);
    if (us.ok()) us = r.Data(n, "client-certificate-data", path, &u.client_certificate_data);
    if (us.ok()) us = r.String(n, "client-key", path, &u.client_key);
    if (us.ok()) us = r.Data(n, "client-key-data", path, &u.client_key_data);
    if (us.ok()) us = r.String(n, "username", path, &u.username);
    if (us.ok()) us = r.String(n, "password", path, &u.password);
    if (us.ok()) us = r.String(n, "as", path, &u.impersonate);
    if (us.ok()) us = r.StringList(n, "as-groups", path, &u.impersonate_groups);
    if (us.ok()) us = r.String(n, "as-uid", path, &u.impersonate_uid);
    if (!us.ok()) return us;
    YAML::Node provider = n["auth-provider"];
    if (provider.IsDefined() && !provider.IsNull()) {
      u.auth_provider = "unnamed";
      if (provider.IsMap()) {
        if (absl::Status ps = r.String(provider, "name", path + ".auth-provider", &u.auth_provider);
            !ps.ok()) {
          return ps;
        }
      }
    }
    YAML::Node exec = n["exec"];
    if (exec.IsDefined() && !exec.IsNull()) {
      ExecConfig e;
      if (absl::Status es = ParseExec(r, exec, path + ".exec", file, &e); !es.ok()) return es;
      u.exec = std::move(e);
    }
    u.token_file = Resolve(u.token_file, file);
    u.client_certificate = Resolve(u.client_certificate, file);
    u.client_key = Resolve(u.client_key, file);
    config.users.try_emplace(name, Kubeconfig::Entry<Kubeconfig::User>{std::move(u), file_str});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  s = r.NamedList(root, "contexts", "context", [&](const std::string& name, const YAML::Node& n,
                                                   const std::string& path) {
    Kubeconfig::Context c;
    absl::Status cs = r.String(n, "cluster", path, &c.cluster);
    if (cs.ok()) cs = r.String(n, "user", path, &c.user);
    if (cs.ok()) cs = r.String(n, "namespace", path, &c.namespace_name);
    if (!cs.ok()) return cs;
    config.contexts.try_emplace(name, Kubeconfig::Entry<Kubeconfig::Context>{c, file_str});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return config;
}

// Reads a *-data or file pair into `pem` (data wins, as in client-go).
absl::Status ReadPem(const std::string& data, const std::string& path, absl::string_view field,
                     absl::string_view where, std::string* pem) {
  if (!data.empty()) {
    if (!path.empty()) {
      const std::string f(field);
      spdlog::warn("kubeconfig {}: both {}-data and {} are set; {}-data wins", std::string(where),
                   f, f, f);
    }
    *pem = data;
    return absl::OkStatus();
  }
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) {
    return absl::Status(content.status().code(), absl::StrCat("kubeconfig ", where, ".", field,
                                                              ": ", content.status().message()));
  }
  *pem = *std::move(content);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Kubeconfig> ParseKubeconfig(absl::string_view yaml, absl::string_view file) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    return ParseDocument(root, file);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", file, ": not valid YAML: ", e.what()));
  } catch (const std::exception& e) {  // e.g. std::bad_alloc on absurd input
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", file, ": ", e.what()));
  }
}

void MergeKubeconfig(Kubeconfig next, Kubeconfig* merged) {
  for (auto& [name, e] : next.clusters) merged->clusters.try_emplace(name, std::move(e));
  for (auto& [name, e] : next.users) merged->users.try_emplace(name, std::move(e));
  for (auto& [name, e] : next.contexts) merged->contexts.try_emplace(name, std::move(e));
  if (merged->current_context.empty()) merged->current_context = std::move(next.current_context);
}

absl::StatusOr<RestConfig> RestConfigFromKubeconfig(const Kubeconfig& config,
                                                    absl::string_view context_name) {
  std::string name(context_name.empty() ? config.current_context : std::string(context_name));
  if (name.empty()) {
    return absl::FailedPreconditionError(
        "kubeconfig: current-context is not set and no context was named");
  }
  auto ctx = config.contexts.find(name);
  if (ctx == config.contexts.end()) {
    return absl::NotFoundError(absl::StrCat("kubeconfig: context ", Quote(name), " not found"));
  }
  const Kubeconfig::Context& c = ctx->second.value;
  const std::string ctx_where = absl::StrCat(ctx->second.file, ": contexts[", Quote(name), "]");
  if (c.cluster.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("kubeconfig ", ctx_where, ".context.cluster: missing"));
  }
  auto cluster = config.clusters.find(c.cluster);
  if (cluster == config.clusters.end()) {
    return absl::NotFoundError(absl::StrCat("kubeconfig ", ctx_where, ".context.cluster: cluster ",
                                            Quote(c.cluster), " not found"));
  }
  RestConfig rc;
  rc.source = absl::StrCat("context ", Quote(name), " in ", ctx->second.file);
  if (!c.namespace_name.empty()) rc.namespace_name = c.namespace_name;

  const Kubeconfig::Cluster& cl = cluster->second.value;
  const std::string cl_where =
      absl::StrCat(cluster->second.file, ": clusters[", Quote(c.cluster), "].cluster");
  if (cl.server.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("kubeconfig ", cl_where, ".server: missing"));
  }
  if (!absl::StartsWith(cl.server, "https://") && !absl::StartsWith(cl.server, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", cl_where, ".server: ",
                                                   Quote(cl.server), " is not an http(s) URL"));
  }
  rc.host = cl.server;
  while (rc.host.size() > 8 && rc.host.back() == '/') rc.host.pop_back();
  if (cl.insecure_skip_tls_verify) {
    if (!cl.certificate_authority.empty() || !cl.certificate_authority_data.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kubeconfig ", cl_where,
          ".insecure-skip-tls-verify: not allowed together with a certificate authority"));
    }
    rc.tls.insecure_skip_verify = true;
    spdlog::warn(
        "kubeconfig {}: insecure-skip-tls-verify is set: the API server's certificate will NOT "
        "be verified; anyone on the network path can impersonate the server",
        cl_where);
  }
  if (absl::Status s = ReadPem(cl.certificate_authority_data, cl.certificate_authority,
                               "certificate-authority", cl_where, &rc.tls.ca_pem);
      !s.ok()) {
    return s;
  }
  rc.tls.server_name = cl.tls_server_name;
  rc.proxy_url = cl.proxy_url;
  rc.disable_compression = cl.disable_compression;

  if (c.user.empty()) return rc;  // anonymous
  auto user = config.users.find(c.user);
  if (user == config.users.end()) {
    return absl::NotFoundError(absl::StrCat("kubeconfig ", ctx_where, ".context.user: user ",
                                            Quote(c.user), " not found"));
  }
  const Kubeconfig::User& u = user->second.value;
  const std::string u_where = absl::StrCat(user->second.file, ": users[", Quote(c.user), "].user");
  if (!u.auth_provider.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "kubeconfig ", u_where, ".auth-provider: auth provider ", Quote(u.auth_provider),
        " is not supported (client-go removed them); use an exec credential plugin"));
  }
  std::vector<std::string> methods;
  if (!u.token.empty() || !u.token_file.empty()) methods.push_back("token");
  if (!u.username.empty() || !u.password.empty()) methods.push_back("basic auth");
  if (u.exec) methods.push_back("exec");
  if (methods.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", u_where, ": more than one authentication method (",
                     absl::StrJoin(methods, ", "), "); only one is allowed"));
  }
  if (absl::Status s = ReadPem(u.client_certificate_data, u.client_certificate,
                               "client-certificate", u_where, &rc.tls.client_cert_pem);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadPem(u.client_key_data, u.client_key, "client-key", u_where, &rc.tls.client_key_pem);
      !s.ok()) {
    return s;
  }
  if (rc.tls.client_cert_pem.empty() != rc.tls.client_key_pem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig ", u_where, ": ",
        rc.tls.client_cert_pem.empty() ? "client-key is set without client-certificate"
                                       : "client-certificate is set without client-key"));
  }
  rc.bearer_token = u.token;
  if (u.token.empty() && !u.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadFile(u.token_file);
    if (!token.ok()) {
      return absl::Status(token.status().code(), absl::StrCat("kubeconfig ", u_where,
                                                              ".tokenFile: ", token.status().message()));
    }
    rc.bearer_token_file = u.token_file;
  }
  rc.username = u.username;
  rc.password = u.password;
  rc.exec = u.exec;
  rc.impersonate_user = u.impersonate;
  rc.impersonate_groups = u.impersonate_groups;
  rc.impersonate_uid = u.impersonate_uid;
  return rc;
}

absl::StatusOr<RestConfig> LoadKubeconfig(const KubeconfigOptions& options) {
  std::vector<std::string> files = options.paths;
  bool must_exist = !files.empty();
  if (files.empty()) {
    std::string env;
    if (options.kubeconfig_env) {
      env = *options.kubeconfig_env;
    } else if (const char* e = std::getenv("KUBECONFIG")) {
      env = e;
    }
    for (absl::string_view p : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      files.emplace_back(p);
    }
    if (files.empty()) {
      std::string home;
      if (options.home) {
        home = *options.home;
      } else if (const char* h = std::getenv("HOME")) {
        home = h;
      }
      if (home.empty()) {
        return absl::FailedPreconditionError(
            "kubeconfig: neither KUBECONFIG nor HOME is set, so there is no kubeconfig to load");
      }
      files.push_back(absl::StrCat(home, "/.kube/config"));
      must_exist = true;
    }
  }
  Kubeconfig merged;
  int loaded = 0;
  for (const std::string& file : files) {
    absl::StatusOr<std::string> content = ReadFile(file);
    if (!content.ok()) {
      if (!must_exist && absl::IsNotFound(content.status())) continue;  // as kubectl does
      return absl::Status(content.status().code(),
                          absl::StrCat("kubeconfig: ", content.status().message()));
    }
    absl::StatusOr<Kubeconfig> parsed = ParseKubeconfig(*content, file);
    if (!parsed.ok()) return parsed.status();
    MergeKubeconfig(*std::move(parsed), &merged);
    ++loaded;
  }
  if (loaded == 0) {
    return absl::NotFoundError(absl::StrCat("kubeconfig: none of the files in KUBECONFIG exist (",
                                            absl::StrJoin(files, ":"), ")"));
  }
  return RestConfigFromKubeconfig(merged, options.context);
}

}  // namespace informerd::client
