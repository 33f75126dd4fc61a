// LeaderGate: whether this replica may serve Queues and Work (it leads its replica set), and until
// when it may hand out keys. The services consult it before every Queues call and Work stream;
// each queue's dispatcher consults it before every hand-out (the fence of docs/high-availability.md).
//
//   LeaderGate gate;                                   // a follower until told otherwise
//   gate.Lead(term_deadline);                          // elected, queues restored
//   gate.Renewed(last_send + renew_deadline);          // after each successful renew
//   if (absl::Status s = gate.Check(); !s.ok()) return s;   // NOT_LEADER naming the leader
//   if (!gate.MayDispatch()) { /* give the keys back */ }
//   gate.Follow("informerd-1", "10.0.0.7:7470");       // another replica leads (or "" unknown)
//
// Leading ends on its own at the deadline: MayDispatch turns false when the steady clock reaches
// it, even if nothing called Follow (a replica frozen and thawed past its renew deadline hands out
// nothing before its elector runs again).
//
// A daemon without leader election has no gate (services take nullptr and serve everything).
//
// Thread safety: every method may be called from any thread; Check and MayDispatch take no lock
// on the leading path.
#ifndef INFORMERD_SERVER_SERVICE_LEADER_GATE_H_
#define INFORMERD_SERVER_SERVICE_LEADER_GATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/mutex.h"

namespace informerd::service {

class LeaderGate {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  // This replica leads until `deadline` (on the steady clock) unless renewed.
  void Lead(SteadyTime deadline);
  // Extends the deadline (only forward); no effect when not leading.
  void Renewed(SteadyTime deadline);
  // This replica does not lead; `leader` (identity) and `address` as known, "" when unknown.
  void Follow(std::string leader, std::string address);
  // This replica (`self`, at `address`) holds the Lease but does not serve yet (its queues are
  // being restored): NOT_LEADER names it, saying so.
  void Restoring(std::string self, std::string address);

  // Leading and before the deadline.
  bool MayDispatch() const {
    return leading_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now().time_since_epoch().count() <
               deadline_.load(std::memory_order_acquire);
  }
  // OK when MayDispatch; else UNAVAILABLE, reason NOT_LEADER, with the leader's identity and
  // address in the metadata.
  absl::Status Check() const;

 private:
  void NotDispatching(std::string leader, std::string address, bool restoring);

  std::atomic<bool> leading_{false};
  std::atomic<int64_t> deadline_{0};  // steady_clock ticks
  mutable Mutex mu_;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  bool restoring_ ABSL_GUARDED_BY(mu_) = false;
};

// The NOT_LEADER error (see errors.proto).
absl::Status NotLeaderError(const std::string& leader, const std::string& address);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_LEADER_GATE_H_
