#include "server/config.h"

#include <limits>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "client/read_file.h"
#include "google/protobuf/util/json_util.h"
#include "server/ha/timings.h"
#include "yaml-cpp/yaml.h"

namespace informerd {
namespace {

using Path = std::string;

absl::Status Bad(absl::string_view origin, absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", path, ": ", what));
}

// Keys of a map node, checked against the known ones (a typo is an error, not a silent default).
absl::Status CheckKeys(const YAML::Node& node, absl::string_view origin, absl::string_view path,
                       const std::set<std::string>& known) {
  if (!node.IsMap()) return Bad(origin, path, "must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return Bad(origin, absl::StrCat(path, path.empty() ? "" : ".", key),
                 absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::string Join(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

absl::StatusOr<std::string> String(const YAML::Node& node, absl::string_view origin,
                                   absl::string_view path) {
  if (!node.IsScalar()) return Bad(origin, path, "must be a string");
  return node.Scalar();
}

absl::StatusOr<bool> Bool(const YAML::Node& node, absl::string_view origin,
                          absl::string_view path) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  return Bad(origin, path, "must be true or false");
}

absl::StatusOr<int64_t> Int(const YAML::Node& node, absl::string_view origin,
                            absl::string_view path, int64_t min, int64_t max) {
  int64_t v = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v)) {
    return Bad(origin, path, "must be an integer");
  }
  if (v < min || v > max) return Bad(origin, path, absl::StrCat("must be in [", min, ", ", max, "]"));
  return v;
}

absl::StatusOr<double> Double(const YAML::Node& node, absl::string_view origin,
                              absl::string_view path) {
  double v = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &v) || v < 0) {
    return Bad(origin, path, "must be a number >= 0");
  }
  return v;
}

absl::StatusOr<absl::Duration> Duration(absl::string_view text, absl::string_view origin,
                                        absl::string_view path) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return Bad(origin, path, absl::StrCat("\"", text, "\" is not a duration like 30s or 1m30s"));
  }
  return d;
}

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                    absl::string_view origin,
                                                    absl::string_view path) {
  std::vector<std::string> out;
  if (node.IsScalar()) {
    out.push_back(node.Scalar());
    return out;
  }
  if (!node.IsSequence()) return Bad(origin, path, "must be a list of strings");
  for (size_t i = 0; i < node.size(); ++i) {
    absl::StatusOr<std::string> s = String(node[i], origin, absl::StrCat(path, "[", i, "]"));
    if (!s.ok()) return s.status();
    out.push_back(*s);
  }
  return out;
}

// YAML → JSON text, so that the API's own messages (InformerSpec, QueueSpec) are read with the
// proto JSON mapping and their field names. Plain scalars that look like booleans or numbers are
// written as such; quoted scalars stay strings.
void AppendJson(const YAML::Node& node, std::string* out) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      out->push_back('{');
      bool first = true;
      for (const auto& kv : node) {
        if (!first) out->push_back(',');
        first = false;
        AppendJson(YAML::Node(kv.first.as<std::string>()), out);
        out->push_back(':');
        AppendJson(kv.second, out);
      }
      out->push_back('}');
      return;
    }
    case YAML::NodeType::Sequence: {
      out->push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendJson(node[i], out);
      }
      out->push_back(']');
      return;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      double number = 0;
      if (node.Tag() != "!" && (s == "true" || s == "false")) {
        absl::StrAppend(out, s);
        return;
      }
      if (node.Tag() != "!" && !s.empty() && absl::SimpleAtod(s, &number) &&
          s.find_first_not_of("0123456789+-.eE") == std::string::npos) {
        absl::StrAppend(out, s);
        return;
      }
      out->push_back('"');
      for (char c : s) {
        switch (c) {
          case '"': absl::StrAppend(out, "\\\""); break;
          case '\\': absl::StrAppend(out, "\\\\"); break;
          case '\n': absl::StrAppend(out, "\\n"); break;
          case '\t': absl::StrAppend(out, "\\t"); break;
          case '\r': absl::StrAppend(out, "\\r"); break;
          default:
            if (static_cast<unsigned char>(c) < 0x20) {
              absl::StrAppend(out, absl::StrFormat("\\u%04x", c));
            } else {
              out->push_back(c);
            }
        }
      }
      out->push_back('"');
      return;
    }
    default:
      absl::StrAppend(out, "null");
  }
}

absl::Status ToMessage(const YAML::Node& node, absl::string_view origin, absl::string_view path,
                       google::protobuf::Message* message) {
  if (!node.IsMap()) return Bad(origin, path, "must be a mapping");
  std::string json;
  AppendJson(node, &json);
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto s = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!s.ok()) return Bad(origin, path, std::string(s.message()));
  return absl::OkStatus();
}

absl::Status ParseClusters(const YAML::Node& node, absl::string_view origin, DaemonConfig* config) {
  if (!node.IsSequence()) return Bad(origin, "clusters", "must be a list");
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = absl::StrCat("clusters[", i, "]");
    const YAML::Node& c = node[i];
    if (absl::Status s = CheckKeys(c, origin, path,
                                   {"name", "kubeconfig", "context", "inCluster", "default", "qps",
                                    "burst"});
        !s.ok()) {
      return s;
    }
    ClusterConfig cluster;
    cluster.name = absl::StrCat("cluster-", i);
    if (c["name"]) {
      absl::StatusOr<std::string> v = String(c["name"], origin, Join(path, "name"));
      if (!v.ok()) return v.status();
      cluster.name = *v;
    }
    if (c["kubeconfig"]) {
      absl::StatusOr<std::string> v = String(c["kubeconfig"], origin, Join(path, "kubeconfig"));
      if (!v.ok()) return v.status();
      cluster.kubeconfig = *v;
    }
    if (c["context"]) {
      absl::StatusOr<std::string> v = String(c["context"], origin, Join(path, "context"));
      if (!v.ok()) return v.status();
      cluster.context = *v;
    }
    if (c["inCluster"]) {
      absl::StatusOr<bool> v = Bool(c["inCluster"], origin, Join(path, "inCluster"));
      if (!v.ok()) return v.status();
      cluster.in_cluster = *v;
    }
    if (c["default"]) {
      absl::StatusOr<bool> v = Bool(c["default"], origin, Join(path, "default"));
      if (!v.ok()) return v.status();
      cluster.is_default = *v;
    }
    if (c["qps"]) {
      absl::StatusOr<double> v = Double(c["qps"], origin, Join(path, "qps"));
      if (!v.ok()) return v.status();
      cluster.qps = *v;
    }
    if (c["burst"]) {
      absl::StatusOr<int64_t> v = Int(c["burst"], origin, Join(path, "burst"), 0, 1000000);
      if (!v.ok()) return v.status();
      cluster.burst = static_cast<int>(*v);
    }
    if (cluster.in_cluster && !cluster.kubeconfig.empty()) {
      return Bad(origin, Join(path, "inCluster"), "cannot be combined with kubeconfig");
    }
    for (const ClusterConfig& other : config->clusters) {
      if (other.name == cluster.name) {
        return Bad(origin, Join(path, "name"), absl::StrCat("\"", cluster.name, "\" is used twice"));
      }
    }
    config->clusters.push_back(std::move(cluster));
  }
  return absl::OkStatus();
}

absl::Status ParseInformers(const YAML::Node& node, absl::string_view origin,
                            DaemonConfig* config) {
  if (!node.IsSequence()) return Bad(origin, "informers", "must be a list");
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = absl::StrCat("informers[", i, "]");
    if (!node[i].IsMap()) return Bad(origin, path, "must be a mapping");
    YAML::Node spec = YAML::Clone(node[i]);
    InformerConfig informer;
    if (spec["name"]) {
      absl::StatusOr<std::string> v = String(spec["name"], origin, Join(path, "name"));
      if (!v.ok()) return v.status();
      informer.alias = *v;
      spec.remove("name");
      for (const InformerConfig& other : config->informers) {
        if (other.alias == informer.alias) {
          return Bad(origin, Join(path, "name"),
                     absl::StrCat("\"", informer.alias, "\" is used twice"));
        }
      }
    }
    if (absl::Status s = ToMessage(spec, origin, path, &informer.spec); !s.ok()) return s;
    config->informers.push_back(std::move(informer));
  }
  return absl::OkStatus();
}

absl::Status ParseQueues(const YAML::Node& node, absl::string_view origin, DaemonConfig* config) {
  if (!node.IsSequence()) return Bad(origin, "queues", "must be a list");
  for (size_t i = 0; i < node.size(); ++i) {
    v1::QueueSpec spec;
    if (absl::Status s = ToMessage(node[i], origin, absl::StrCat("queues[", i, "]"), &spec);
        !s.ok()) {
      return s;
    }
    config->queues.push_back(std::move(spec));
  }
  return absl::OkStatus();
}

// A duration key of `node` into *out (if present).
absl::Status DurationKey(const YAML::Node& node, absl::string_view origin, absl::string_view path,
                         const char* key, absl::Duration* out) {
  if (!node[key]) return absl::OkStatus();
  const std::string p = Join(path, key);
  absl::StatusOr<std::string> text = String(node[key], origin, p);
  if (!text.ok()) return text.status();
  absl::StatusOr<absl::Duration> d = Duration(*text, origin, p);
  if (!d.ok()) return d.status();
  *out = *d;
  return absl::OkStatus();
}

absl::Status ParseAuth(const YAML::Node& root, absl::string_view origin,
                       auth::GuardOptions* auth) {
  if (root["insecureAllowUnauthenticated"]) {
    absl::StatusOr<bool> v =
        Bool(root["insecureAllowUnauthenticated"], origin, "insecureAllowUnauthenticated");
    if (!v.ok()) return v.status();
    auth->insecure_allow_unauthenticated = *v;
  }
  if (const YAML::Node& n = root["authentication"]) {
    if (absl::Status s = CheckKeys(n, origin, "authentication",
                                   {"audiences", "cacheTTL", "unixPeers"});
        !s.ok()) {
      return s;
    }
    if (n["audiences"]) {
      absl::StatusOr<std::vector<std::string>> v =
          StringList(n["audiences"], origin, "authentication.audiences");
      if (!v.ok()) return v.status();
      auth->audiences = *v;
    }
    if (absl::Status s = DurationKey(n, origin, "authentication", "cacheTTL", &auth->token_ttl);
        !s.ok()) {
      return s;
    }
    if (const YAML::Node& peers = n["unixPeers"]) {
      if (!peers.IsSequence()) return Bad(origin, "authentication.unixPeers", "must be a list");
      for (size_t i = 0; i < peers.size(); ++i) {
        const std::string path = absl::StrCat("authentication.unixPeers[", i, "]");
        if (absl::Status s = CheckKeys(peers[i], origin, path, {"uid", "user", "groups"});
            !s.ok()) {
          return s;
        }
        auth::UnixPeerMapping m;
        if (!peers[i]["uid"]) return Bad(origin, Join(path, "uid"), "required");
        absl::StatusOr<int64_t> uid = Int(peers[i]["uid"], origin, Join(path, "uid"), 0,
                                          std::numeric_limits<uint32_t>::max());
        if (!uid.ok()) return uid.status();
        m.uid = static_cast<uint32_t>(*uid);
        if (!peers[i]["user"]) return Bad(origin, Join(path, "user"), "required");
        absl::StatusOr<std::string> user = String(peers[i]["user"], origin, Join(path, "user"));
        if (!user.ok()) return user.status();
        if (user->empty()) return Bad(origin, Join(path, "user"), "must not be empty");
        m.user = *user;
        if (peers[i]["groups"]) {
          absl::StatusOr<std::vector<std::string>> g =
              StringList(peers[i]["groups"], origin, Join(path, "groups"));
          if (!g.ok()) return g.status();
          m.groups = *g;
        }
        auth->unix_peers.push_back(std::move(m));
      }
    }
  }
  if (const YAML::Node& n = root["authorization"]) {
    if (absl::Status s = CheckKeys(n, origin, "authorization",
                                   {"allowTTL", "denyTTL", "cacheSize", "reviewTimeout",
                                    "maxPendingPerPeer"});
        !s.ok()) {
      return s;
    }
    for (const auto& [key, field] : std::vector<std::pair<const char*, absl::Duration*>>{
             {"allowTTL", &auth->allow_ttl},
             {"denyTTL", &auth->deny_ttl},
             {"reviewTimeout", &auth->review_timeout}}) {
      if (absl::Status s = DurationKey(n, origin, "authorization", key, field); !s.ok()) return s;
    }
    if (auth->review_timeout < absl::Milliseconds(100)) {
      return Bad(origin, "authorization.reviewTimeout", "must be at least 100ms");
    }
    if (n["cacheSize"]) {
      absl::StatusOr<int64_t> v =
          Int(n["cacheSize"], origin, "authorization.cacheSize", 1, 10000000);
      if (!v.ok()) return v.status();
      auth->cache_size = static_cast<size_t>(*v);
    }
    if (n["maxPendingPerPeer"]) {
      absl::StatusOr<int64_t> v = Int(n["maxPendingPerPeer"], origin,
                                      "authorization.maxPendingPerPeer", 1, 10000000);
      if (!v.ok()) return v.status();
      auth->max_pending_per_peer = static_cast<size_t>(*v);
    }
  }
  if (const YAML::Node& n = root["callerLimits"]) {
    if (absl::Status s = CheckKeys(n, origin, "callerLimits",
                                   {"informers", "queues", "streams", "inFlight", "watchersPerInformer"});
        !s.ok()) {
      return s;
    }
    for (const auto& [key, field] : std::vector<std::pair<const char*, int*>>{
             {"informers", &auth->limits.informers},
             {"queues", &auth->limits.queues},
             {"streams", &auth->limits.streams},
             {"inFlight", &auth->limits.in_flight},
             {"watchersPerInformer", &auth->limits.watchers_per_informer}}) {
      if (!n[key]) continue;
      absl::StatusOr<int64_t> v = Int(n[key], origin, Join("callerLimits", key), 1, 1000000);
      if (!v.ok()) return v.status();
      *field = static_cast<int>(*v);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLeaderElection(const YAML::Node& n, absl::string_view origin,
                                 LeaderElectionConfig* le) {
  const std::string path = "leaderElection";
  if (absl::Status s = CheckKeys(n, origin, path,
                                 {"enabled", "lease", "identity", "advertiseAddress",
                                  "leaseDuration", "renewDeadline", "retryPeriod"});
      !s.ok()) {
    return s;
  }
  if (n["enabled"]) {
    absl::StatusOr<bool> v = Bool(n["enabled"], origin, Join(path, "enabled"));
    if (!v.ok()) return v.status();
    le->enabled = *v;
  }
  if (const YAML::Node& lease = n["lease"]) {
    if (absl::Status s = CheckKeys(lease, origin, "leaderElection.lease", {"namespace", "name"});
        !s.ok()) {
      return s;
    }
    for (const auto& [key, field] : std::vector<std::pair<const char*, std::string*>>{
             {"namespace", &le->lease_namespace}, {"name", &le->lease_name}}) {
      if (!lease[key]) continue;
      absl::StatusOr<std::string> v = String(lease[key], origin, Join("leaderElection.lease", key));
      if (!v.ok()) return v.status();
      *field = *v;
    }
  }
  for (const auto& [key, field] : std::vector<std::pair<const char*, std::string*>>{
           {"identity", &le->identity}, {"advertiseAddress", &le->advertise_address}}) {
    if (!n[key]) continue;
    absl::StatusOr<std::string> v = String(n[key], origin, Join(path, key));
    if (!v.ok()) return v.status();
    *field = *v;
  }
  for (const auto& [key, field] : std::vector<std::pair<const char*, absl::Duration*>>{
           {"leaseDuration", &le->lease_duration},
           {"renewDeadline", &le->renew_deadline},
           {"retryPeriod", &le->retry_period}}) {
    if (absl::Status s = DurationKey(n, origin, path, key, field); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateLeaderElection(const LeaderElectionConfig& le, absl::string_view origin) {
  if (auto e = ha::ElectionTimingsError(le.lease_duration, le.renew_deadline, le.retry_period)) {
    return Bad(origin, absl::StrCat("leaderElection.", e->key), e->why);
  }
  if (!le.advertise_address.empty() && le.advertise_address.find(':') == std::string::npos) {
    return Bad(origin, "leaderElection.advertiseAddress",
               absl::StrCat("\"", le.advertise_address, "\" is not host:port"));
  }
  return absl::OkStatus();
}

absl::Status ParseRoot(const YAML::Node& root, absl::string_view origin, DaemonConfig* config) {
  if (!root || root.IsNull()) return absl::OkStatus();  // an empty file: all defaults
  if (absl::Status s = CheckKeys(root, origin, "",
                                 {"listen", "metricsListen", "statusListen", "tls", "shutdownGracePeriod", "idleTimeout",
                                  "limits", "keepalive", "clusters", "informers", "queues",
                                  "logLevel", "logFormat", "insecureAllowUnauthenticated",
                                  "authentication",
                                  "authorization", "callerLimits", "leaderElection"});
      !s.ok()) {
    return s;
  }
  if (root["listen"]) {
    absl::StatusOr<std::vector<std::string>> v = StringList(root["listen"], origin, "listen");
    if (!v.ok()) return v.status();
    config->listen = *v;
  }
  if (root["metricsListen"]) {
    const YAML::Node& n = root["metricsListen"];
    if (n.IsNull()) {
      config->metrics_listen.clear();
    } else {
      absl::StatusOr<std::string> v = String(n, origin, "metricsListen");
      if (!v.ok()) return v.status();
      config->metrics_listen = *v;
    }
  }
  if (root["statusListen"]) {
    absl::StatusOr<std::string> v = String(root["statusListen"], origin, "statusListen");
    if (!v.ok()) return v.status();
    config->status_listen = *v;
  }
  if (root["logLevel"]) {
    absl::StatusOr<std::string> v = String(root["logLevel"], origin, "logLevel");
    if (!v.ok()) return v.status();
    config->log_level = *v;
  }
  if (root["logFormat"]) {
    absl::StatusOr<std::string> v = String(root["logFormat"], origin, "logFormat");
    if (!v.ok()) return v.status();
    config->log_format = *v;
  }
  if (const YAML::Node& tls = root["tls"]) {
    if (absl::Status s = CheckKeys(tls, origin, "tls", {"cert", "key", "clientCa"}); !s.ok()) {
      return s;
    }
    for (const auto& [key, field] :
         std::vector<std::pair<const char*, std::string*>>{{"cert", &config->tls.cert_file},
                                                           {"key", &config->tls.key_file},
                                                           {"clientCa", &config->tls.client_ca_file}}) {
      if (!tls[key]) continue;
      absl::StatusOr<std::string> v = String(tls[key], origin, Join("tls", key));
      if (!v.ok()) return v.status();
      *field = *v;
    }
  }
  if (root["shutdownGracePeriod"]) {
    absl::StatusOr<std::string> text =
        String(root["shutdownGracePeriod"], origin, "shutdownGracePeriod");
    if (!text.ok()) return text.status();
    absl::StatusOr<absl::Duration> d = Duration(*text, origin, "shutdownGracePeriod");
    if (!d.ok()) return d.status();
    config->shutdown_grace_period = *d;
  }
  if (root["idleTimeout"]) {
    absl::StatusOr<std::string> text = String(root["idleTimeout"], origin, "idleTimeout");
    if (!text.ok()) return text.status();
    absl::StatusOr<absl::Duration> d = Duration(*text, origin, "idleTimeout");
    if (!d.ok()) return d.status();
    config->idle_timeout = *d;
  }
  if (const YAML::Node& limits = root["limits"]) {
    if (absl::Status s = CheckKeys(limits, origin, "limits",
                                   {"maxMessageBytes", "maxConcurrentStreams", "maxSubscribers"});
        !s.ok()) {
      return s;
    }
    if (limits["maxMessageBytes"]) {
      absl::StatusOr<int64_t> v = Int(limits["maxMessageBytes"], origin, "limits.maxMessageBytes",
                                      4096, int64_t{1} << 30);
      if (!v.ok()) return v.status();
      config->max_message_bytes = *v;
    }
    if (limits["maxConcurrentStreams"]) {
      absl::StatusOr<int64_t> v = Int(limits["maxConcurrentStreams"], origin,
                                      "limits.maxConcurrentStreams", 1, 1000000);
      if (!v.ok()) return v.status();
      config->max_concurrent_streams = static_cast<int>(*v);
    }
    if (limits["maxSubscribers"]) {
      absl::StatusOr<int64_t> v =
          Int(limits["maxSubscribers"], origin, "limits.maxSubscribers", 1, 10000000);
      if (!v.ok()) return v.status();
      config->max_subscribers = static_cast<int>(*v);
    }
  }
  if (const YAML::Node& keepalive = root["keepalive"]) {
    if (absl::Status s = CheckKeys(keepalive, origin, "keepalive", {"time", "timeout"}); !s.ok()) {
      return s;
    }
    for (const auto& [key, field] : std::vector<std::pair<const char*, absl::Duration*>>{
             {"time", &config->keepalive_time}, {"timeout", &config->keepalive_timeout}}) {
      if (!keepalive[key]) continue;
      const std::string path = Join("keepalive", key);
      absl::StatusOr<std::string> text = String(keepalive[key], origin, path);
      if (!text.ok()) return text.status();
      absl::StatusOr<absl::Duration> d = Duration(*text, origin, path);
      if (!d.ok()) return d.status();
      if (*d < absl::Seconds(1)) return Bad(origin, path, "must be at least 1s");
      *field = *d;
    }
  }
  if (absl::Status s = ParseAuth(root, origin, &config->auth); !s.ok()) return s;
  if (root["leaderElection"]) {
    if (absl::Status s = ParseLeaderElection(root["leaderElection"], origin,
                                             &config->leader_election);
        !s.ok()) {
      return s;
    }
  }
  if (root["clusters"]) {
    if (absl::Status s = ParseClusters(root["clusters"], origin, config); !s.ok()) return s;
  }
  if (root["informers"]) {
    if (absl::Status s = ParseInformers(root["informers"], origin, config); !s.ok()) return s;
  }
  if (root["queues"]) {
    if (absl::Status s = ParseQueues(root["queues"], origin, config); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(DaemonConfig* config, absl::string_view origin) {
  if (absl::StatusOr<spdlog::level::level_enum> l = ParseLogLevel(config->log_level); !l.ok()) {
    return Bad(origin, "logLevel", l.status().message());
  }
  if (absl::StatusOr<LogFormat> f = ParseLogFormat(config->log_format); !f.ok()) {
    return Bad(origin, "logFormat", f.status().message());
  }
  if (config->listen.empty()) config->listen.push_back("127.0.0.1:7470");
  for (size_t i = 0; i < config->listen.size(); ++i) {
    const std::string& a = config->listen[i];
    const bool unix_socket = absl::StartsWith(a, "unix:");
    if (a.empty() || (!unix_socket && a.find(':') == std::string::npos)) {
      return Bad(origin, absl::StrCat("listen[", i, "]"),
                 absl::StrCat("\"", a, "\" is not host:port or unix:///path"));
    }
  }
  if (config->tls.cert_file.empty() != config->tls.key_file.empty()) {
    return Bad(origin, "tls", "cert and key go together");
  }
  if (!config->tls.client_ca_file.empty() && config->tls.cert_file.empty()) {
    return Bad(origin, "tls.clientCa", "needs tls.cert and tls.key");
  }
  int defaults = 0;
  for (const ClusterConfig& c : config->clusters) defaults += c.is_default;
  if (defaults > 1) return Bad(origin, "clusters", "more than one is the default");
  if (config->leader_election.enabled) {
    if (absl::Status s = ValidateLeaderElection(config->leader_election, origin); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseConfig(absl::string_view yaml, absl::string_view origin) {
  DaemonConfig config;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
    if (absl::Status s = ParseRoot(root, origin, &config); !s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (absl::Status s = ValidateConfig(&config, origin); !s.ok()) return s;
  return config;
}

absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = client::ReadFile(path, /*max_bytes=*/16 << 20);
  if (!text.ok()) return text.status();
  return ParseConfig(*text, path);
}

}  // namespace informerd
