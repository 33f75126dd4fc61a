#include "server/daemon.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/in_cluster.h"
#include "client/kubeconfig.h"
#include "client/read_file.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "informerd/v1/admin.grpc.pb.h"
#include "grpcpp/security/server_credentials.h"
#include "httplib.h"
#include "server/http_server.h"
#include "server/ha/queue_store.h"
#include "server/ha/replica.h"
#include "server/service/admin_service.h"
#include "server/service/clusters.h"
#include "server/service/grpc_metrics.h"
#include "server/service/idle_reaper.h"
#include "server/service/informer_registry.h"
#include "server/service/informer_service.h"
#include "server/service/leader_gate.h"
#include "server/service/queue_registry.h"
#include "server/service/queue_service.h"
#include "server/service/source_lookups.h"
#include "server/service/work_service.h"
#include "server/status/status_page.h"
#include "spdlog/spdlog.h"

namespace informerd {
namespace {

// The services whose gRPC health follows readiness.
constexpr absl::string_view kHealthServices[] = {"informerd.v1.Informers", "informerd.v1.Queues",
                                                 "informerd.v1.Work", "informerd.v1.Admin"};

// A TLS file, its error naming the config key.
absl::StatusOr<std::string> ReadTlsFile(const std::string& path, absl::string_view key) {
  absl::StatusOr<std::string> data = client::ReadFile(path, /*max_bytes=*/1 << 20);
  if (!data.ok()) {
    return absl::Status(data.status().code(), absl::StrCat(key, ": ", data.status().message()));
  }
  return data;
}

// With authentication on, a client certificate is one way to authenticate among others (a token
// over TLS needs none), so one is asked for and verified when presented; without, the CA is the
// only check and a certificate is required.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const TlsConfig& tls,
                                                                     bool authenticate) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
      : authenticate             ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                                 : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  absl::StatusOr<std::string> cert = ReadTlsFile(tls.cert_file, "tls.cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadTlsFile(tls.key_file, "tls.key");
  if (!key.ok()) return key.status();
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadTlsFile(tls.client_ca_file, "tls.clientCa");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

// The Lease's namespace: configured, else the pod's (its service account's), else "default".
std::string LeaseNamespace(const LeaderElectionConfig& le) {
  if (!le.lease_namespace.empty()) return le.lease_namespace;
  absl::StatusOr<std::string> ns =
      client::ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace", 253);
  if (ns.ok() && !absl::StripAsciiWhitespace(*ns).empty()) {
    return std::string(absl::StripAsciiWhitespace(*ns));
  }
  return "default";
}

absl::StatusOr<client::RestConfig> ClusterRestConfig(const ClusterConfig& c) {
  if (c.in_cluster) return client::LoadInClusterConfig({});
  client::KubeconfigOptions options;
  if (!c.kubeconfig.empty()) options.paths = {c.kubeconfig};
  options.context = c.context;
  return client::LoadKubeconfig(options);
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonConfig config) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(config)));
  if (absl::Status s = daemon->Init(); !s.ok()) {
    daemon->Shutdown();
    return s;
  }
  return daemon;
}

absl::Status Daemon::Init() {
  clusters_ = std::make_unique<service::Clusters>();
  for (size_t i = 0; i < config_.clusters.size(); ++i) {
    const ClusterConfig& c = config_.clusters[i];
    absl::StatusOr<client::RestConfig> rest = ClusterRestConfig(c);
    if (!rest.ok()) {
      return absl::Status(rest.status().code(),
                          absl::StrCat("clusters[", i, "] (", c.name, "): ", rest.status().message()));
    }
    if (absl::Status s = clusters_->Add({.name = c.name,
                                         .config = *std::move(rest),
                                         .is_default = c.is_default,
                                         .qps = c.qps,
                                         .burst = c.burst});
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("clusters[", i, "]: ", s.message()));
    }
  }
  const bool insecure = config_.auth.insecure_allow_unauthenticated;
  if (!insecure && !config_.tls.enabled()) {
    for (size_t i = 0; i < config_.listen.size(); ++i) {
      if (absl::StartsWith(config_.listen[i], "unix:")) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "listen[", i, "] (", config_.listen[i],
          "): a TCP listener with authentication on needs TLS (bearer tokens must not cross the "
          "network in clear): set tls.cert and tls.key (--tls-cert, --tls-key), or listen on a "
          "unix socket, or pass --insecure-allow-unauthenticated for local development"));
    }
  }
  {
    // TokenReviews and the reviews of informerd's own objects go to the default cluster (none
    // configured: every review fails, so every call that needs one is refused).
    absl::StatusOr<service::Clusters::Cluster*> review_cluster = clusters_->Find("");
    guard_ = std::make_unique<auth::Guard>(
        config_.auth, review_cluster.ok() ? (*review_cluster)->client.get() : nullptr, &metrics_);
    // Reads of a cluster's objects are decided by that cluster's RBAC.
    for (service::Clusters::Cluster* c : clusters_->List()) {
      guard_->AddClusterReviewer(c->name, c->client.get());
    }
  }
  if (insecure) {
    spdlog::warn(
        "--insecure-allow-unauthenticated: every caller may read every cached object (Secrets "
        "included) and use every queue, with no authentication or authorization. Local "
        "development only.");
  }
  informers_ = std::make_unique<service::InformerRegistry>(
      clusters_.get(), service::InformerRegistryOptions{.metrics = &metrics_});
  const LeaderElectionConfig& le = config_.leader_election;
  if (le.enabled) {
    absl::StatusOr<service::Clusters::Cluster*> lease_cluster = clusters_->Find("");
    if (!lease_cluster.ok()) {
      return absl::InvalidArgumentError(
          "leaderElection.enabled: needs a cluster to hold the Lease (configure clusters)");
    }
    gate_ = std::make_unique<service::LeaderGate>();
    queue_store_ = std::make_unique<ha::QueueStore>(
        (*lease_cluster)->client.get(),
        ha::QueueStoreOptions{
            .namespace_name = LeaseNamespace(le),
            .lease_name = le.lease_name,
            .informer_spec = [this](const std::string& id) -> std::optional<v1::InformerSpec> {
              absl::StatusOr<service::InformerRegistry::Entry> e = informers_->Get(id);
              if (!e.ok()) return std::nullopt;
              return e->spec;
            }});
  }
  queues_ = std::make_unique<service::QueueRegistry>(
      service::InformerSourceLookups(informers_.get(), clusters_.get()),
      service::QueueRegistryOptions{
          .metrics = &metrics_, .gate = gate_.get(), .store = queue_store_.get()});

  // Configured informers, then queues (whose sources may name informers by alias).
  absl::flat_hash_map<std::string, std::string> alias_to_id;
  for (size_t i = 0; i < config_.informers.size(); ++i) {
    absl::StatusOr<service::InformerRegistry::Entry> e =
        informers_->Ensure(config_.informers[i].spec);
    if (!e.ok()) {
      return absl::Status(e.status().code(),
                          absl::StrCat("informers[", i, "]: ", e.status().message()));
    }
    configured_informers_.push_back(e->id);
    informers_->Pin(e->id).IgnoreError();  // just ensured
    if (!config_.informers[i].alias.empty()) alias_to_id[config_.informers[i].alias] = e->id;
  }
  std::vector<v1::QueueSpec> config_queues;
  for (size_t i = 0; i < config_.queues.size(); ++i) {
    v1::QueueSpec spec = config_.queues[i];
    for (v1::QueueSource& source : *spec.mutable_sources()) {
      if (auto it = alias_to_id.find(source.informer_id()); it != alias_to_id.end()) {
        source.set_informer_id(it->second);
      }
      if (source.has_index()) {
        if (auto it = alias_to_id.find(source.index().informer_id()); it != alias_to_id.end()) {
          source.mutable_index()->set_informer_id(it->second);
        }
      }
    }
    if (le.enabled) {
      // Created by each term's leader (ha/replica.h); checked now so a bad one stops start-up.
      if (absl::Status s = queues_->Validate(spec); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("queues[", i, "]: ", s.message()));
      }
      config_queues.push_back(std::move(spec));
      continue;
    }
    absl::StatusOr<std::shared_ptr<service::NamedQueue>> q =
        queues_->Create(spec, service::Persist::kNo);
    if (!q.ok()) {
      return absl::Status(q.status().code(),
                          absl::StrCat("queues[", i, "]: ", q.status().message()));
    }
    (*q)->Pin();
  }
  heap_trimmer_ = std::make_unique<HeapTrimmer>(HeapTrimmerOptions{});
  if (config_.idle_timeout > absl::ZeroDuration()) {
    idle_reaper_ = std::make_unique<service::IdleReaper>(
        informers_.get(), queues_.get(),
        service::IdleReaperOptions{.idle_timeout = config_.idle_timeout});
  }

  informer_service_ = std::make_unique<service::InformerService>(
      informers_.get(),
      service::InformerServiceOptions{
          .max_subscribers = static_cast<size_t>(config_.max_subscribers),
          .max_subscribers_per_principal_per_informer =
              static_cast<size_t>(config_.auth.limits.watchers_per_informer),
          .guard = guard_.get()});
  queue_service_ = std::make_unique<service::QueueService>(queues_.get(), absl::Seconds(30),
                                                           guard_.get(), informers_.get());
  work_service_ =
      std::make_unique<service::WorkService>(queues_.get(), guard_.get(), informers_.get());
  admin_service_ = std::make_unique<service::AdminService>(
      clusters_.get(), informers_.get(), queues_.get(), informer_service_.get(), guard_.get(),
      le.enabled ? service::AdminService::ReplicaInfoFn([this] { return replica_->Info(); })
                 : nullptr);

  grpc::EnableDefaultHealthCheckService(true);
  // The built-in health service has no descriptor of its own: linking grpc.health.v1's puts it
  // in the generated pool, where reflection finds it (grpcurl's Health/Check needs it).
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  // Reflection is served to anyone who connects (gRPC's own service, outside the guard): only
  // when nothing else is protected either.
  if (insecure) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tcp_credentials =
      Credentials(config_.tls, !insecure);
  if (!tcp_credentials.ok()) return tcp_credentials.status();
  std::vector<std::unique_ptr<int>> ports;
  for (const std::string& address : config_.listen) {
    const bool unix_socket = absl::StartsWith(address, "unix:");
    ports.push_back(std::make_unique<int>(0));
    // With authentication, unix sockets are accepted by informerd itself (peer credentials).
    if (unix_socket && !insecure) continue;
    builder.AddListeningPort(address,
                             unix_socket ? grpc::InsecureServerCredentials() : *tcp_credentials,
                             ports.back().get());
  }
  builder.RegisterService(informer_service_.get());
  builder.RegisterService(queue_service_.get());
  builder.RegisterService(work_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.max_message_bytes));
  // Dead peers (a worker's host gone, a cable pulled) are noticed within keepalive time +
  // timeout, and their streams end, which returns their keys to the queues.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config_.keepalive_time)));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(config_.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients may ping as often as every second (SDKs use keepalives to notice a dead daemon).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config_.max_concurrent_streams);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(service::NewGrpcMetricsInterceptorFactory(&metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ",
                                               absl::StrJoin(config_.listen, ", "),
                                               " (address in use, bad address or TLS files?)"));
  }
  for (size_t i = 0; i < config_.listen.size(); ++i) {
    const std::string& address = config_.listen[i];
    if (absl::StartsWith(address, "unix:")) {
      if (!insecure) {
        absl::StatusOr<std::unique_ptr<auth::UnixListener>> l =
            auth::UnixListener::Start(address, server_.get(), &guard_->unix_peers());
        if (!l.ok()) return l.status();
        unix_listeners_.push_back(*std::move(l));
      }
      grpc_addresses_.push_back(address);
      continue;
    }
    if (*ports[i] == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
    }
    grpc_addresses_.push_back(
        absl::StrCat(address.substr(0, address.rfind(':')), ":", *ports[i]));
  }
  // Each informerd.v1 service is NOT_SERVING until the daemon is ready (CheckReadiness); the
  // server as a whole ("") is SERVING while it runs.
  for (absl::string_view name : kHealthServices) {
    server_->GetHealthCheckService()->SetServingStatus(std::string(name), false);
  }
  readiness_timer_ = Clock::Real()->CreateTimer([this] { CheckReadiness(); });
  readiness_timer_->ArmAt(absl::Now());
  // The replica before the HTTP listeners: /readyz reads replica_.
  if (le.enabled) {
    if (absl::Status s = StartReplica(std::move(config_queues)); !s.ok()) return s;
  }
  return StartHttp();
}

absl::Status Daemon::StartReplica(std::vector<v1::QueueSpec> config_queues) {
  const LeaderElectionConfig& le = config_.leader_election;
  ha::ElectorOptions options{.lease_namespace = LeaseNamespace(le),
                             .lease_name = le.lease_name,
                             .identity = le.identity.empty() ? ha::DefaultIdentity() : le.identity,
                             .address = le.advertise_address,
                             .lease_duration = le.lease_duration,
                             .renew_deadline = le.renew_deadline,
                             .retry_period = le.retry_period,
                             .metrics = &metrics_};
  if (options.address.empty()) {
    // The first TCP address as bound, unless it is a wildcard nobody can dial.
    for (const std::string& a : grpc_addresses_) {
      if (absl::StartsWith(a, "unix:")) continue;
      const std::string host = a.substr(0, a.rfind(':'));
      if (host != "0.0.0.0" && host != "[::]" && host != "::" && !host.empty()) options.address = a;
      break;
    }
    if (options.address.empty()) {
      spdlog::warn("leaderElection.advertiseAddress is not set and no TCP listen address can be "
                   "dialled: followers will not tell clients where the leader is");
    }
  }
  if (absl::Status s = ha::ValidateElectorOptions(options); !s.ok()) return s;
  service::Clusters::Cluster* cluster = *clusters_->Find("");
  absl::StatusOr<std::unique_ptr<client::Client>> elector_client =
      client::Client::Create({.config = cluster->client->config(),
                              .user_agent = absl::StrCat("informerd/0.1 (leader-election; ",
                                                         options.identity, ")"),
                              .qps = 0});
  if (!elector_client.ok()) {
    return absl::Status(elector_client.status().code(),
                        absl::StrCat("leaderElection: the elector's client: ",
                                     elector_client.status().message()));
  }
  elector_client_ = *std::move(elector_client);
  spdlog::info("leader election: {} on Lease {}/{} of cluster {} (advertising {})",
               options.identity, options.lease_namespace, options.lease_name, cluster->name,
               options.address.empty() ? "nothing" : options.address);
  replica_ = std::make_unique<ha::Replica>(
      elector_client_.get(),
      ha::ReplicaOptions{.elector = std::move(options),
                         .cluster = cluster->name,
                         .config_queues = std::move(config_queues),
                         .ensure_informer =
                             [this](const v1::InformerSpec& spec) {
                               return informers_->Ensure(spec).status();
                             }},
      queues_.get(), gate_.get(), queue_store_.get());
  replica_->Start();
  return absl::OkStatus();
}

void Daemon::CheckReadiness() {
  const bool ready = UnsyncedInformers().empty();
  // Under mu_: Shutdown sets shutting_down_ under it before it destroys the timer and turns
  // health NOT_SERVING, so nothing here re-arms a timer being destroyed or undoes that.
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  if (!ready) {
    readiness_timer_->ArmAt(absl::Now() + absl::Milliseconds(100));
    return;
  }
  for (absl::string_view name : kHealthServices) {
    server_->GetHealthCheckService()->SetServingStatus(std::string(name), true);
  }
}

std::vector<std::string> Daemon::UnsyncedInformers() const {
  std::vector<std::string> unsynced;
  for (const std::string& id : configured_informers_) {
    std::shared_ptr<informer::SharedInformer> informer = informers_->Find(id);
    if (informer == nullptr || !informer->HasSynced()) unsynced.push_back(id);
  }
  return unsynced;
}

absl::StatusOr<Daemon::HttpListener> Daemon::StartHttpListener(
    const std::string& address, absl::string_view key,
    const std::function<void(httplib::Server&)>& routes) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": \"", address, "\" is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) host = host.substr(1, host.size() - 2);
  HttpListener l;
  // A client that sends or reads slowly holds a worker thread only 2 s per read or write and
  // 10 s per request, a kept-alive connection only 2 s idle, and one address at most 8 of the
  // 32 workers (server/http_server.h): the kubelet's probes are answered beside slow clients.
  l.server = std::make_unique<HttpServer>(HttpServerOptions{
      .refused = metrics_.GetCounter(
          "informerd_http_connections_refused_total",
          "HTTP connections refused because their address held its limit of connections",
          {{"listener", std::string(key)}})});
  l.server->set_read_timeout(std::chrono::seconds(2));
  l.server->set_write_timeout(std::chrono::seconds(2));
  routes(*l.server);
  if (port == 0) {
    port = l.server->bind_to_any_port(host);
  } else if (!l.server->bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0 || !l.server->WidenBacklog()) {
    return absl::UnavailableError(absl::StrCat(key, ": cannot listen on ", address));
  }
  l.address = absl::StrCat(host.find(':') != std::string::npos ? "[" + host + "]" : host, ":",
                           port);
  httplib::Server* server = l.server.get();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  l.thread = std::thread([server, ended] {
    server->listen_after_bind();
    ended->store(true);
  });
  // cpp-httplib's stop() does nothing until the server runs: a SIGTERM right after start-up
  // would leave the listener's thread serving for ever and the shutdown waiting for it.
  while (!server->is_running() && !ended->load()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return l;
}

void Daemon::AddStatusPage(httplib::Server& server) {
  // The live status page (server/status/): what Admin shows, for people.
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const absl::string_view html = status::PageHtml();
    res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
  });
  server.Get("/status.json", [this](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(status::StatusJson(*admin_service_, metrics_, absl::Now()),
                    "application/json");
  });
}

absl::Status Daemon::StartHttp() {
  // The status page shows what Admin needs `admin` RBAC for, to anyone who reaches it: beside the
  // metrics only in local-development mode; with authentication on, only where statusListen puts
  // it (a listener operators reach, e.g. through kubectl port-forward).
  const bool insecure = config_.auth.insecure_allow_unauthenticated;
  const bool status_with_metrics = insecure && config_.status_listen.empty();
  if (!config_.metrics_listen.empty()) {
    absl::StatusOr<HttpListener> l = StartHttpListener(
        config_.metrics_listen, "metricsListen", [&](httplib::Server& server) {
          server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            process_metrics_.Update();
            if (queues_ != nullptr) queues_->UpdateMetrics();
            res.set_content(metrics_.Render(), "text/plain; version=0.0.4; charset=utf-8");
          });
          if (status_with_metrics) {
            AddStatusPage(server);
          } else {
            for (const char* path : {"/", "/status.json"}) {
              server.Get(path, [](const httplib::Request&, httplib::Response& res) {
                res.status = 404;
                res.set_content(
                    "the status page is not served here with authentication on: set "
                    "statusListen (--status-listen) to serve it on a listener of its own, or use "
                    "informerctl (Admin, with admin RBAC)\n",
                    "text/plain");
              });
            }
          }
          // Liveness: the gRPC server itself must answer, not only this HTTP thread. A cheap call
          // of our own (Admin.ListClusters) through an in-process channel goes through the same
          // completion queues and callback threads as every client's call.
          server.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
            if (absl::Status s = ProbeGrpc(); !s.ok()) {
              res.status = 503;
              res.set_content(absl::StrCat("gRPC server not answering: ", s.message(), "\n"),
                              "text/plain");
              return;
            }
            res.set_content("ok\n", "text/plain");
          });
          server.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
            bool shutting_down;
            {
              MutexLock lock(&mu_);
              shutting_down = shutting_down_;
            }
            if (shutting_down) {
              res.status = 503;
              res.set_content("shutting down\n", "text/plain");
              return;
            }
            if (replica_ != nullptr) {
              if (std::string why = replica_->NotReadyReason(); !why.empty()) {
                res.status = 503;
                res.set_content(why + "\n", "text/plain");
                return;
              }
            }
            if (std::vector<std::string> unsynced = UnsyncedInformers(); !unsynced.empty()) {
              res.status = 503;
              res.set_content(
                  absl::StrCat("informers not synced yet:\n", absl::StrJoin(unsynced, "\n"), "\n"),
                  "text/plain");
              return;
            }
            res.set_content("ok\n", "text/plain");
          });
        });
    if (!l.ok()) return l.status();
    http_ = *std::move(l);
  }
  if (!config_.status_listen.empty()) {
    absl::StatusOr<HttpListener> l = StartHttpListener(
        config_.status_listen, "statusListen", [this](httplib::Server& server) {
          AddStatusPage(server);
        });
    if (!l.ok()) return l.status();
    status_ = *std::move(l);
  }
  return absl::OkStatus();
}

void Daemon::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shutting_down_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shut_down_; });
      return;
    }
    shutting_down_ = true;
  }
  readiness_timer_.reset();  // a check that runs now sees shutting_down_ and does nothing
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  idle_reaper_.reset();  // frees nothing from now on
  heap_trimmer_.reset();
  // A leader steps down at once and releases the Lease, so a follower takes over within its
  // retry period; its Work streams end with NOT_LEADER and their workers move to the new leader.
  if (replica_ != nullptr) replica_->Stop();
  // Stop handing out keys; let in-flight ones be answered for the grace period.
  if (queues_ != nullptr) queues_->ShutDownAll(config_.shutdown_grace_period);
  unix_listeners_.clear();  // no new connections
  if (server_ != nullptr) {
    // Streams still open are cancelled now; their held keys go back to the queues.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
  // No stream is left to re-authorize, and the services its revocations reach go next.
  if (guard_ != nullptr) guard_->StopRechecks();
  for (HttpListener* l : {&http_, &status_}) {
    if (l->server == nullptr) continue;
    l->server->stop();
    if (l->thread.joinable()) l->thread.join();
  }
  {
    MutexLock lock(&mu_);
    probe_channel_.reset();
  }
  admin_service_.reset();
  work_service_.reset();
  queue_service_.reset();
  informer_service_.reset();
  server_.reset();
  guard_.reset();  // answers calls still waiting for a review
  replica_.reset();
  queues_.reset();
  queue_store_.reset();
  gate_.reset();
  informers_.reset();
  clusters_.reset();
  MutexLock lock(&mu_);
  shut_down_ = true;
}

void Daemon::Wait() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shut_down_; });
}

Daemon::~Daemon() { Shutdown(); }

absl::Status Daemon::ProbeGrpc() {
  std::shared_ptr<grpc::Channel> channel;
  {
    MutexLock lock(&mu_);
    if (probe_channel_ == nullptr && server_ != nullptr) {
      probe_channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    }
    channel = probe_channel_;
  }
  if (channel == nullptr) return absl::UnavailableError("not started");
  auto admin = v1::Admin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListClustersResponse response;
  grpc::Status status = admin->ListClusters(&context, v1::ListClustersRequest(), &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("Admin.ListClusters in process: ",
                                               status.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace informerd
