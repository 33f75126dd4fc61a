// Replica: one informerd of a replica set (docs/high-availability.md). It runs the LeaderElector
// and turns its terms into what the services serve:
//
//   * elected: the queue registry begins a term (tokens after Term::epoch); the config's queues
//     and the stored ones (QueueStore) are created, their sources enqueueing every object once;
//     then the LeaderGate opens and Queues and Work are served. Restoring runs on the replica's
//     own thread, never the elector's, so renewals go on meanwhile.
//   * renewed: the gate's deadline moves.
//   * term over (renew deadline passed, another holder, or Stop): the gate closes at once, then
//     every queue is closed and its Work streams end with NOT_LEADER. Keys are not kept.
//   * another leader observed: the gate names it in its NOT_LEADER errors.
//   * the stored queues cannot be listed: /readyz says why (NotReadyReason), NOT_LEADER names
//     this replica (the leader, not serving yet), and after restore_timeout it resigns: the
//     Lease goes to another replica, which may be able to.
//
//   Replica replica(client, {.elector = ..., .cluster = "prod", .config_queues = specs},
//                   &queues, &gate, &store);
//   replica.Start();
//   ... admin: replica.Info() ...
//   replica.Stop();   // graceful shutdown: steps down, releases the Lease
//
// Thread safety: Start and Stop from one thread; Info from any.
#ifndef INFORMERD_SERVER_HA_REPLICA_H_
#define INFORMERD_SERVER_HA_REPLICA_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "client/client.h"
#include "informerd/v1/admin.pb.h"
#include "informerd/v1/informers.pb.h"
#include "informerd/v1/queues.pb.h"
#include "server/ha/leader_elector.h"
#include "server/ha/queue_store.h"
#include "server/service/leader_gate.h"
#include "server/service/queue_registry.h"

namespace informerd::ha {

struct ReplicaOptions {
  ElectorOptions elector;
  // The cluster holding the Lease and the stored queues (Admin shows it).
  std::string cluster;
  // The config's queues (sources resolved), created and pinned at every term.
  std::vector<v1::QueueSpec> config_queues;
  // Ensures a stored queue's informer on this replica (before the queue is created); nullptr:
  // stored informer specs are ignored.
  std::function<absl::Status(const v1::InformerSpec&)> ensure_informer;
  // A leader that cannot list its stored queues for this long (a missing Queue CRD, missing
  // RBAC) resigns: it releases the Lease and leaves it to the others for as long again.
  // 0: twice the lease duration.
  absl::Duration restore_timeout = absl::ZeroDuration();
};

class Replica {
 public:
  // All must outlive the replica; `store` may be nullptr (API-created queues are then not kept).
  Replica(client::Client* client, ReplicaOptions options, service::QueueRegistry* queues,
          service::LeaderGate* gate, QueueStore* store);
  ~Replica();  // Stop()
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  void Start();
  void Stop();

  v1::ReplicaInfo Info() const;
  // Why this replica cannot serve as leader now ("" when it can, or follows): the restore's
  // last error while it leads without having restored its queues, or the resignation after.
  std::string NotReadyReason() const;

 private:
  void OnStarted(const Term& term);
  void OnStopped();
  void Restore(uint64_t seq, const Term& term);
  void RunRestores();

  const ReplicaOptions options_;
  service::QueueRegistry* const queues_;
  service::LeaderGate* const gate_;
  QueueStore* const store_;

  mutable Mutex mu_;
  // Counts terms begun and ended; a restore opens the gate only if its term is still current.
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool restoring_done_ ABSL_GUARDED_BY(mu_) = false;
  SteadyTime deadline_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, Term>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string not_ready_ ABSL_GUARDED_BY(mu_);
  absl::Time not_ready_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::thread restorer_;

  // Declared last: its thread calls back into the members above.
  std::unique_ptr<LeaderElector> elector_;
};

}  // namespace informerd::ha

#endif  // INFORMERD_SERVER_HA_REPLICA_H_
