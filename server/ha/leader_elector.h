// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics
// (k8s.io/client-go/tools/leaderelection) and defaults, for a replica set of informerd daemons.
//
//   LeaderElector elector(client, {.lease_namespace = "informerd", .lease_name = "informerd",
//                                  .identity = "informerd-0", .address = "10.0.0.5:7470"},
//                         {.started_leading = [&](const Term& t) { ... },
//                          .renewed = [&](SteadyTime until) { ... },
//                          .stopped_leading = [&] { ... },
//                          .new_leader = [&](const std::string& id, const std::string& addr) {}});
//   elector.Start();
//   ...
//   elector.Stop();     // stops leading (stopped_leading runs) and releases the Lease
//
// The algorithm (one thread):
//   * Acquire: every retry_period (jittered by up to 20%), and right after another holder's lease
//     would run out, read the Lease. A record that changed
//     (its resourceVersion) since the last read is "observed" at that local time. While another
//     holder's lease has not run out — observed time + its leaseDurationSeconds, on this
//     replica's steady clock, never on the record's timestamps — do nothing. Otherwise write the
//     record as holder (create it if missing), with the read resourceVersion, so of two replicas
//     trying at once one gets 409 Conflict.
//   * Lead: renew every retry_period. A renew that succeeds moves the deadline to (when its
//     request was SENT, before any wait of the client's) + renew_deadline; `renewed` gets it.
//     When the deadline passes without one, leadership is lost at that moment: a watchdog thread
//     of its own, which never waits on the API server, runs stopped_leading at the deadline
//     whatever request the elector's thread is still waiting for. A renew that succeeds after
//     its term's deadline does not revive the term: the replica takes the Lease again as a new
//     term (a higher epoch). Losing it sooner: a renew that finds another holder.
//   * Stop (graceful shutdown): if leading, stopped_leading runs at once (not after a request
//     in flight returns), then the Lease is released — holderIdentity "", leaseDurationSeconds
//     1 — so another replica takes it at its next try.
//
// What informerd adds to client-go's record:
//   * the annotation informerd.io/leader-address: where the holder serves gRPC, so followers
//     can point clients at it;
//   * leaseTransitions also counts a new term of the same holder (client-go counts only holder
//     changes): a replica that lost the Lease and takes it again starts a new term, and its
//     fencing tokens (Term::epoch) must be above those of its last term.
//
// Every request has its own timeout (min(renew_deadline / 2, retry_period + 1 s)), which bounds
// how long Stop waits for the elector's thread. The client should be the elector's own (its own
// connection, no client-side rate limit, as kube-controller-manager gives its elector): a
// request that waits behind other traffic still cannot hold a term past its deadline (the
// watchdog ends it), but it can keep a replica from renewing at all.
//
// Thread safety: Start and Stop from one thread; the callbacks run one at a time, in order, on
// the elector's thread or (stopped_leading at a deadline, or in Stop) the watchdog's or Stop's.
// The accessors may be called from any thread.
#ifndef INFORMERD_SERVER_HA_LEADER_ELECTOR_H_
#define INFORMERD_SERVER_HA_LEADER_ELECTOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "client/client.h"

namespace informerd::ha {

using SteadyTime = std::chrono::steady_clock::time_point;

// Epochs (Term::epoch; work.proto's Started.epoch): every fencing token of a term is above its
// epoch, and a term hands out fewer than kEpochSpacing tokens per queue. A new term's epoch is
//   max(floor + kEpochSpacing, the wall clock in Unix ns)
// where floor is the highest epoch recorded anywhere this replica can see: the Lease's
// informerd.io/epoch annotation, this replica's last term, the ElectorOptions::epoch_floor
// callback (the stored queues' epochs: they survive the Lease's deletion) and, for a Lease an
// older informerd wrote, (leaseTransitions + 1) << 40. The epoch is written into the Lease by
// the same conditional write that takes it. The wall clock orders terms after a standalone
// daemon's (whose epoch is its start time) and after a Lease deleted with nothing stored; the
// floor orders them when the clock steps back.
inline constexpr uint64_t kEpochSpacing = uint64_t{1} << 40;
// The Lease annotation with the epoch of the term that holds it.
inline constexpr absl::string_view kLeaseEpochAnnotation = "informerd.io/epoch";

// The Lease annotation with the holder's gRPC address.
inline constexpr absl::string_view kLeaderAddressAnnotation = "informerd.io/leader-address";

struct ElectorOptions {
  std::string lease_namespace = "default";
  std::string lease_name = "informerd";
  // holderIdentity while leading; unique per process (DefaultIdentity()).
  std::string identity;
  // host:port where this replica serves gRPC (advertised to followers); may be "".
  std::string address;
  // client-go's defaults.
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  // nullptr: no metrics. Must outlive the elector.
  MetricsRegistry* metrics = nullptr;
  // The highest epoch recorded outside the Lease (the stored queues'), read before a new term
  // is taken; an error means no term is taken on that try. nullptr: none.
  std::function<absl::StatusOr<uint64_t>()> epoch_floor;
};

// Checks ElectorOptions as client-go does (lease_duration > renew_deadline > retry_period * 1.2,
// all positive, names valid); errors name the config key (leaderElection.<key>).
absl::Status ValidateElectorOptions(const ElectorOptions& options);

// <hostname>_<8 random hex digits>, like client-go users' hostname + "_" + uuid.
std::string DefaultIdentity();

// One term of this replica's leadership.
struct Term {
  // The Lease's leaseTransitions as written by this replica when it took the Lease.
  int64_t transitions = 0;
  // Fencing tokens of this term are greater (see kEpochSpacing); above every earlier term's.
  uint64_t epoch = 0;
  absl::Time since;
  // Leading until this (the renew deadline on the steady clock) unless renewed.
  SteadyTime deadline;
};

// The Lease as last read or written.
struct LeaseRecord {
  std::string holder;
  std::string holder_address;
  int64_t lease_duration_seconds = 0;
  int64_t transitions = 0;
  uint64_t epoch = 0;  // the informerd.io/epoch annotation (0: none)
  std::string acquire_time;  // MicroTime strings as stored
  std::string renew_time;
  std::string resource_version;
};

// The Lease's JSON for `record` in namespace/name (resourceVersion included when not empty).
std::string LeaseJson(absl::string_view lease_namespace, absl::string_view name,
                      const LeaseRecord& record);
// Parses a Lease; INVALID_ARGUMENT naming the field (e.g. "spec.leaseTransitions"), also for
// values out of range (leaseDurationSeconds and leaseTransitions beyond int32, the API's type)
// and an informerd.io/epoch annotation that is not an unsigned decimal integer.
absl::StatusOr<LeaseRecord> ParseLease(absl::string_view json);

struct ElectorCallbacks {
  std::function<void(const Term&)> started_leading;
  std::function<void(SteadyTime deadline)> renewed;
  std::function<void()> stopped_leading;
  // The observed holder changed (identity "" when the Lease is free or unknown).
  std::function<void(const std::string& identity, const std::string& address)> new_leader;
};

class LeaderElector {
 public:
  // `client` talks to the cluster holding the Lease; must outlive the elector.
  LeaderElector(client::Client* client, ElectorOptions options, ElectorCallbacks callbacks);
  ~LeaderElector();  // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Stops the thread; if leading, runs stopped_leading and releases the Lease (one attempt,
  // bounded by the request timeout). Idempotent.
  void Stop();
  // Gives up leading: ends the term (stopped_leading runs), releases the Lease so that another
  // replica takes it, and tries to acquire it again only after `pause`. For a leader that
  // cannot serve (its queues cannot be restored).
  void Resign(absl::Duration pause);

  const ElectorOptions& options() const { return options_; }
  bool leading() const;
  // The holder and its address as last observed ("" when none).
  std::string leader() const;
  std::string leader_address() const;
  int64_t observed_transitions() const;
  std::optional<Term> term() const;

 private:
  void Run();
  // The watchdog: ends the term when its deadline passes.
  void Watch();
  // Ends the term if there is one. REQUIRES: callbacks_mu_ held (callbacks run one at a time).
  void LoseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(callbacks_mu_);
  // One try; returns whether this replica holds the Lease after it. `sent` is when the write
  // that succeeded was sent.
  bool TryAcquireOrRenew(SteadyTime* sent);
  // Updates observed_* from `record` (read at `now`) and reports a new holder.
  void Observe(const LeaseRecord& record, SteadyTime now);
  // leaseTransitions for a new term over a Lease that shows `current`: above it and above this
  // replica's last term (a Lease deleted and made again starts its count anew).
  int64_t NextTransitions(int64_t current) const;
  // The epoch of a new term over `current` (nullptr: no Lease); see kEpochSpacing.
  absl::StatusOr<uint64_t> NextEpoch(const LeaseRecord* current) const;
  void Release();
  absl::StatusOr<LeaseRecord> Read();
  absl::StatusOr<LeaseRecord> Write(const LeaseRecord& record, bool create);
  // Waits up to `d` or until Stop; returns false when stopping.
  bool Sleep(absl::Duration d);

  client::Client* const client_;
  const ElectorOptions options_;
  const ElectorCallbacks callbacks_;
  const absl::Duration request_timeout_;
  std::string path_;  // the Lease's URL path

  Gauge* leader_gauge_ = nullptr;
  Counter* transitions_counter_ = nullptr;
  Counter* renew_failures_ = nullptr;

  // Held while a callback runs (and while the decision to run it is made); taken before mu_.
  Mutex callbacks_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Term> term_ ABSL_GUARDED_BY(mu_);
  // Bumped whenever the term or its deadline changes (wakes the watchdog).
  uint64_t term_changes_ ABSL_GUARDED_BY(mu_) = 0;
  // leaseTransitions of the last term begun: a Lease still showing it after that term ended
  // (a late renew) is not a new term.
  int64_t last_term_transitions_ ABSL_GUARDED_BY(mu_) = -1;
  // The epoch of the last term begun: a Lease showing it or less is not a new term, and the next
  // term's epoch is above it.
  uint64_t last_term_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // After Resign: no acquiring before this.
  SteadyTime resigned_until_ ABSL_GUARDED_BY(mu_);
  // Held by this thread only, read by accessors under mu_.
  std::optional<LeaseRecord> observed_ ABSL_GUARDED_BY(mu_);
  SteadyTime observed_time_ ABSL_GUARDED_BY(mu_);
  std::string reported_leader_;  // elector thread only
  // When the other holder's lease, as last observed, runs out (elector thread only).
  std::optional<SteadyTime> others_expire_;
  std::thread thread_;
  std::thread watchdog_;
};

}  // namespace informerd::ha

#endif  // INFORMERD_SERVER_HA_LEADER_ELECTOR_H_
