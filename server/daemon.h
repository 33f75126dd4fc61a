// Daemon: informerd's process — the clusters, informers and queues of a DaemonConfig behind one
// gRPC server (Informers, Queues, Work, Admin, grpc.health.v1, server reflection) on every
// listen address, and an HTTP endpoint with Prometheus /metrics, /healthz and /readyz.
//
//   absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(config);
//   ... (*d)->grpc_addresses() ...            // bound addresses, port 0 resolved
//   (*d)->Shutdown();                         // e.g. on SIGTERM
//
// Start-up fails (with the reason) for a cluster whose credentials cannot be loaded, a listen
// address that cannot be bound, unreadable TLS files, or a configured informer or queue the
// registries refuse. With no cluster configured the daemon still starts and serves health,
// reflection and admin calls; informer calls say that no cluster is configured.
//
// Informers and queues created over the API are freed after config.idle_timeout without a user
// (service/idle_reaper.h); the config's are pinned.
//
// Shutdown is graceful: health turns NOT_SERVING, Work streams stop receiving keys and in-flight
// keys get config.shutdown_grace_period to be answered, then streams end (keys still held go
// back to their queues), then informers stop.
//
// Thread safety: Shutdown may be called from any thread, once or more.
#ifndef INFORMERD_SERVER_DAEMON_H_
#define INFORMERD_SERVER_DAEMON_H_

#include <functional>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/heap_trimmer.h"
#include "base/process_stats.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "server/auth/guard.h"
#include "server/auth/unix_peers.h"
#include "server/config.h"

namespace grpc {
class Channel;
class Server;
}  // namespace grpc
namespace httplib {
class Server;
}  // namespace httplib

namespace informerd {

class HttpServer;

namespace service {
class AdminService;
class Clusters;
class IdleReaper;
class InformerRegistry;
class InformerService;
class QueueRegistry;
class QueueService;
class WorkService;
class LeaderGate;
}  // namespace service
namespace ha {
class QueueStore;
class Replica;
}  // namespace ha

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonConfig config);
  ~Daemon();  // Shuts down.
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // The gRPC addresses as bound ("127.0.0.1:40123", "unix:///run/x.sock").
  const std::vector<std::string>& grpc_addresses() const { return grpc_addresses_; }
  // "host:port" of the HTTP endpoint, "" when off.
  const std::string& metrics_address() const { return http_.address; }
  // Where the status page is served on a listener of its own ("" when it is not).
  const std::string& status_address() const { return status_.address; }
  void Shutdown();
  // Blocks until Shutdown has finished.
  void Wait();

 private:
  explicit Daemon(DaemonConfig config);
  absl::Status Init();
  absl::Status StartHttp();
  // Replica sets: the elector, once the gRPC server listens (its address is advertised).
  absl::Status StartReplica(std::vector<v1::QueueSpec> config_queues);
  // Ids of the configured informers that have not synced yet (what /readyz waits for).
  std::vector<std::string> UnsyncedInformers() const;
  // OK when the gRPC server answers a call of ours within 2 s (what /healthz reports).
  absl::Status ProbeGrpc();
  // gRPC health: each informerd.v1 service is NOT_SERVING until the configured informers have
  // synced (as /readyz), then SERVING; checked every 100 ms by readiness_timer_ until then.
  void CheckReadiness();

  const DaemonConfig config_;
  MetricsRegistry metrics_;
  // The process's memory (RSS and malloc's heap), CPU and descriptors, read on each /metrics.
  ProcessMetrics process_metrics_{&metrics_};
  std::unique_ptr<service::Clusters> clusters_;
  std::unique_ptr<service::InformerRegistry> informers_;
  // Replica sets (config_.leader_election): the gate and the store outlive the registry, which
  // outlives the replica.
  std::unique_ptr<service::LeaderGate> gate_;
  std::unique_ptr<ha::QueueStore> queue_store_;
  std::unique_ptr<service::QueueRegistry> queues_;
  // Leader election's own client of the Lease's cluster: its own connections and no client-side
  // rate limit, so that renewals never queue behind reflectors, reviews or the queue store.
  std::unique_ptr<client::Client> elector_client_;
  std::unique_ptr<ha::Replica> replica_;
  // Authenticates and authorizes every call; outlives the services and the server.
  std::unique_ptr<auth::Guard> guard_;
  // Unix sockets informerd accepts itself, to know each peer's uid (with authentication on).
  std::vector<std::unique_ptr<auth::UnixListener>> unix_listeners_;
  // Frees what clients created and left unused (config_.idle_timeout); nullptr when 0.
  std::unique_ptr<service::IdleReaper> idle_reaper_;
  // Gives memory freed after a burst (e.g. a large informer streamed to many subscribers) back to
  // the system.
  std::unique_ptr<HeapTrimmer> heap_trimmer_;
  std::unique_ptr<Timer> readiness_timer_;
  std::unique_ptr<service::InformerService> informer_service_;
  std::unique_ptr<service::QueueService> queue_service_;
  std::unique_ptr<service::WorkService> work_service_;
  std::unique_ptr<service::AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> grpc_addresses_;
  // Ids of the informers of the config (readiness).
  std::vector<std::string> configured_informers_;

  // An HTTP listener of the daemon's (metrics and probes; the status page).
  struct HttpListener {
    std::unique_ptr<HttpServer> server;
    std::thread thread;
    std::string address;  // as bound
  };
  // Binds `address` (config key `key`, for errors) with the daemon's HTTP settings, lets
  // `routes` add its handlers, and serves it on a thread of its own.
  absl::StatusOr<HttpListener> StartHttpListener(
      const std::string& address, absl::string_view key,
      const std::function<void(httplib::Server&)>& routes);
  void AddStatusPage(httplib::Server& server);
  HttpListener http_;    // metrics and probes
  HttpListener status_;  // the status page, when on a listener of its own

  Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // An in-process channel to server_ for ProbeGrpc; released before server_.
  std::shared_ptr<grpc::Channel> probe_channel_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd

#endif  // INFORMERD_SERVER_DAEMON_H_
