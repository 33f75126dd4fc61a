// LeaseTable: who holds which key of one queue. The worker streams attached to the queue, the
// leases (key + fencing token) each holds, when those leases expire, and the only code that ends
// a lease: an outcome, an expiry, a give-back, or the stream going away.
//
//   LeaseTable table(queue, {.queue_name = "pods", .clock = clock});
//   std::unique_ptr<Worker> w = table.Attach({.max_in_flight = 8}, sink).value();
//   // the queue's dispatcher:
//   while (size_t want = table.AwaitCredit()) {
//     queue->GetBatch(want, &leases);
//     for (auto& d : table.Assign(&leases)) d.sink->Deliver(std::move(d.leases));
//   }
//   // the stream, when outcomes arrive:
//   std::vector<v1::Refusal> refused = w->Apply(outcomes);
//
// Invariants: a key handed out by the queue is in exactly one Worker's table until its lease
// ends, and the queue's own one-processor-per-key rule (a key is not handed out again before
// Done) plus the tokens keep it with one worker at a time. Every lease ends exactly once, with
// the queue's Done for that token: an outcome that names the right token; an expiry (the key is
// added again, so another worker gets it with a new token); a give-back (a draining stream's
// unsent leases, a batch nobody could take); or the worker detaching (every key it holds is
// added again). An expired lease keeps its place in the worker's table, counting against its
// credit (its reconcile is still busy, or hung), until the worker answers it (refused:
// LEASE_EXPIRED) or detaches — also when the queue hands the same key to the same worker again
// meanwhile: the two leases are two entries, each answered by its own token.
//
// Giving a key back (ReturnLocked) is one rule, whoever does it: add the key again, then end its
// hand-out, under mu_ — so the queue sees it dirty before it stops processing it, and every Done
// happens under mu_ (AwaitNoneInFlight's wake-up).
//
// Lock order: LeaseTable::mu_ before the workqueue's lock. Sinks are called without mu_ held.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_SERVICE_LEASE_TABLE_H_
#define INFORMERD_SERVER_SERVICE_LEASE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "informerd/v1/work.pb.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::service {

// Where a Worker's leases go: a Work stream. Deliver is called on the queue's dispatcher thread
// (never more leases than the worker's free credit) and must not block.
class LeaseSink {
 public:
  virtual ~LeaseSink() = default;
  virtual void Deliver(std::vector<workqueue::Lease> leases) = 0;
  // The stream should end with `status`: the queue is gone or shut down (an error), or the
  // worker drained (OK). Called at most once.
  virtual void Close(const absl::Status& status) = 0;
};

struct WorkerOptions {
  std::string peer;
  std::string name;
  // 1 .. kMaxInFlight.
  uint32_t max_in_flight = 1;
  // Keys per delivery at most; 0: max_in_flight.
  uint32_t max_batch = 0;
};
inline constexpr uint32_t kMaxInFlight = 100000;

// Admin's view of one worker stream.
struct WorkerInfo {
  std::string stream_id;
  std::string peer;
  std::string name;
  uint32_t max_in_flight = 0;
  size_t in_flight = 0;
  bool draining = false;
};

class LeaseTable;
class Worker;

// An expiry entry: which worker holds the lease of `key` with `token`.
struct ExpiryRef {
  Worker* worker;
  std::string key;
  uint64_t token;
};

// One worker stream's hold on a queue. Created by LeaseTable::Attach; Detach (or destruction)
// gives back every key it holds.
class Worker {
 public:
  ~Worker();  // Detaches.
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::string& stream_id() const { return stream_id_; }

  // Applies outcomes (see work.proto); returns the ones refused, with why. Never blocks on I/O.
  std::vector<v1::Refusal> Apply(const v1::Outcomes& outcomes);
  // Extends the named leases by the queue's lease timeout; returns the ones refused.
  std::vector<v1::Refusal> Heartbeat(const v1::Heartbeat& heartbeat);
  // Stops deliveries to this worker and gives back `unsent` (leases handed to its sink that the
  // stream has not sent). The sink is closed with OK once the worker holds nothing (at once if it
  // holds nothing now). Idempotent.
  void Drain(const std::vector<workqueue::Lease>& unsent);
  // Gives back leases the sink received but will never send (the stream is draining or ending).
  void GiveBack(const std::vector<workqueue::Lease>& leases);
  // Leases held (expired ones included, until answered): what counts against max_in_flight.
  size_t in_flight() const;
  // Ends every held lease and adds its key again, and lets go of the sink: no delivery starts
  // after it returns (one already running may finish; the sink is shared for that). Never
  // blocks on the sink. Idempotent.
  void Detach();

 private:
  friend class LeaseTable;
  // A live lease; its key is the held_ map's key.
  struct Held {
    uint64_t token = 0;
    uint32_t slot = 0;  // workqueue::Lease::slot
    int32_t priority = workqueue::kDefaultPriority;  // the key's, given back at it
    bool initial_list = false;                        // given back with it too
    // The lease's entry in LeaseTable::expiries_ (end() when leases do not expire).
    std::multimap<absl::Time, ExpiryRef>::iterator expiry;
  };

  Worker(LeaseTable* table, std::string stream_id, WorkerOptions options,
         std::shared_ptr<LeaseSink> sink);
  // The sink to close (outside the lock) when the worker is draining or its queue stopping and
  // it holds nothing now; nullptr otherwise.
  std::shared_ptr<LeaseSink> TakeSinkToCloseLocked();
  // Ends the leases of `leases` this worker still holds with those tokens, adding their keys
  // again; returns TakeSinkToCloseLocked().
  std::shared_ptr<LeaseSink> GiveBackLocked(const std::vector<workqueue::Lease>& leases);
  size_t InFlightLocked() const;
  // Removes the expired lease (key, token); returns whether there was one.
  bool TakeExpiredLocked(absl::string_view key, uint64_t token);

  LeaseTable* const table_;  // outlives: the attacher holds a shared_ptr to the queue
  const std::string stream_id_;
  const WorkerOptions options_;
  // All guarded by table_->mu_.
  std::shared_ptr<LeaseSink> sink_;  // null once detached
  bool attached_ = true;
  bool draining_ = false;
  bool close_sent_ = false;
  absl::flat_hash_map<std::string, Held> held_;
  // Expired leases not yet answered, token -> key (tokens are unique within a queue): their
  // hand-outs ended (the keys went back) but the worker's reconciles may still run, so they keep
  // their credit. Consulted only when an answer names no live lease.
  absl::flat_hash_map<uint64_t, std::string> expired_;
};

class LeaseTable {
 public:
  struct Options {
    std::string queue_name;
    // nullptr: Clock::Real().
    Clock* clock = nullptr;
    // 0: leases do not expire.
    absl::Duration lease_timeout = absl::ZeroDuration();
    // informerd_work_lease_expirations_total{name}; nullptr: not counted.
    Counter* expirations = nullptr;
    // informerd_queue_workers{name}, set to the attached workers; nullptr: not reported.
    Gauge* workers = nullptr;
  };
  // A batch of leases for one worker's sink.
  struct Delivery {
    std::shared_ptr<LeaseSink> sink;
    std::vector<workqueue::Lease> leases;
  };

  LeaseTable(std::shared_ptr<workqueue::RateLimitingQueue> queue, Options options);
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // Registers a worker stream; the Worker holds `sink` until it is detached (so a sink that owns
  // its Worker must Detach it to break the cycle). FAILED_PRECONDITION once stopping.
  absl::StatusOr<std::unique_ptr<Worker>> Attach(WorkerOptions options,
                                                 std::shared_ptr<LeaseSink> sink);

  // The lease timeout for leases handed out or extended from now on (0: none). Leases already
  // held keep their deadline; with 0 they no longer expire.
  void SetLeaseTimeout(absl::Duration timeout);
  absl::Duration lease_timeout() const;

  // Dispatcher: blocks until some worker has credit, then returns the most keys one worker can
  // take now; 0 once stopping.
  size_t AwaitCredit();
  // Dispatcher: hands `*leases` to workers with credit, round robin; keys nobody can take (the
  // workers left meanwhile, or we are stopping) go back to the queue. Returns the deliveries to
  // make, outside any lock.
  std::vector<Delivery> Assign(std::vector<workqueue::Lease>* leases);
  // Dispatcher: gives back leases it got from the queue but may not hand out (the replica's term
  // ended), as any give-back (ReturnLocked).
  void Return(const std::vector<workqueue::Lease>& leases);

  // No more dispatching or attaching; workers keep applying outcomes.
  void Stop();
  bool stopping() const;
  // Tells (outside the lock) the workers the queue is done: all, or only those holding nothing
  // (those holding keys are closed when they answer the last).
  void CloseWorkers(const absl::Status& status, bool idle_only);
  // Waits until the queue has no key handed out, or `deadline`. Returns whether none is.
  bool AwaitNoneInFlight(absl::Time deadline);

  std::vector<WorkerInfo> Workers() const;
  size_t worker_count() const;
  // Keys held by workers (exclusive of the dispatcher's hand-off in progress), expired ones too.
  size_t Held() const;
  uint64_t expired() const { return expired_.load(std::memory_order_relaxed); }
  // Outcomes that asked for a retry (RETRY, REQUEUE_AFTER).
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }

 private:
  friend class Worker;
  // Ends the lease of `key` (the queue's Done for its token); with `requeue`, adds the key first.
  // With `batch`, the Done is appended to it, for one Queue::DoneAll by the caller (still under
  // mu_) — Apply's batch of outcomes; without, it happens now.
  void EndLeaseLocked(absl::string_view key, Worker::Held& held, bool requeue,
                      std::vector<workqueue::HandOut>* batch = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back a hand-out of `key`: adds the key again, then ends the hand-out (see the header
  // comment). The one implementation of giving back.
  void ReturnLocked(absl::string_view key, const workqueue::HandOut& end, int32_t priority,
                    bool initial_list)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmExpiryLocked(Worker* worker, absl::string_view key, Worker::Held& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisarmExpiryLocked(Worker::Held& held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DetachLocked(Worker* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExpiryTimer();

  const std::string queue_name_;
  Clock* const clock_;
  Counter* const expirations_;
  Gauge* const workers_gauge_;
  const std::shared_ptr<workqueue::RateLimitingQueue> queue_;
  std::atomic<uint64_t> next_stream_{1};
  std::atomic<uint64_t> expired_{0};
  std::atomic<uint64_t> retries_{0};

  mutable Mutex mu_;
  absl::Duration lease_timeout_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker*> workers_ ABSL_GUARDED_BY(mu_);
  size_t next_worker_ ABSL_GUARDED_BY(mu_) = 0;  // round-robin start
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Apply's batch of hand-outs to end, kept for its capacity.
  std::vector<workqueue::HandOut> ending_ ABSL_GUARDED_BY(mu_);
  // Deadlines of held, unexpired leases (only when a lease timeout applies).
  std::multimap<absl::Time, ExpiryRef> expiries_ ABSL_GUARDED_BY(mu_);
  // Armed at expiries_'s first deadline. Created first, destroyed first (its callback takes mu_).
  std::unique_ptr<Timer> expiry_timer_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_LEASE_TABLE_H_
