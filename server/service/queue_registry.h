// QueueRegistry: the daemon's named workqueues — what the Queues service creates, updates and
// feeds, what Work streams drain, what Admin lists.
//
//   QueueRegistry queues(lookups, {.metrics = &metrics_registry});
//   absl::StatusOr<std::shared_ptr<NamedQueue>> q = queues.Create(spec);   // v1::QueueSpec
//   (*q)->Add({"default/web-0"});
//   ...
//   queues.ShutDownAll(absl::Seconds(10));   // daemon shutdown: stop, let in-flight keys finish
//
// A NamedQueue is a workqueue::RateLimitingQueue plus what the server adds around it, each in its
// own file:
//   * the spec rules and the limiter it describes (queue_spec.h);
//   * sources: informer bindings that map events to keys, run by the registry's one SourcePump
//     thread (queue_source.h), and a resync timer that re-adds every source object's keys;
//   * the lease table: worker streams, the keys each holds, lease expiry (lease_table.h);
//   * one dispatcher thread per queue that waits until some worker has credit, takes that many
//     ready keys with Queue::GetBatch and hands them to the lease table.
// Update changes a running queue's sources, limiter, resync period and lease timeout in place:
// waiting keys, delays, retry counts, held leases and their tokens are untouched.
//
// Use: Create, Update and Get (every call naming a queue, every Work stream's start) record the
// time as the queue's last use; List does not. A queue is in use while a Work stream is attached.
// NamedQueue::Pin marks one that is never freed for want of use (the config's); FreeIfUnused
// closes one that is not (the IdleReaper).
//
// Tokens: every queue's tokens start after QueueRegistryOptions::epoch (the daemon's start time
// in ns), so they keep increasing across daemon restarts (see work.proto's Started.epoch).
//
// Replica sets (docs/high-availability.md): with a LeaderGate the registry serves only during a
// term. It starts closed: Get, Create, Update and Delete answer the gate's NOT_LEADER and List is
// empty. BeginTerm(epoch) opens a term whose queues take tokens after `epoch`; the daemon restores
// the term's queues (Create with Persist::kNo) before it opens the gate. EndTerm closes every
// queue and ends its Work streams with the given status. With a QueueSpecStore, the specs of
// queues created, updated and deleted over the API (Persist::kYes) are written through to it
// before the call answers, and a queue freed for want of use is removed from it; one queue's
// changes and their writes happen one at a time, in the order the registry made them.
//
// Errors name the offending field: INVALID_ARGUMENT ("spec.name: ..."), NOT_FOUND for unknown
// queues and informers, FAILED_PRECONDITION for a re-create with a different spec.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/keyed_mutex.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "informerd/v1/queues.pb.h"
#include "server/service/lease_table.h"
#include "server/service/queue_source.h"
#include "server/service/queue_spec.h"
#include "server/workqueue/prometheus_metrics.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::service {

// A batch of keys as requests carry them.
using Keys = google::protobuf::RepeatedPtrField<std::string>;

class LeaderGate;

// Where the specs of queues created over the API are kept across leaders (ha/queue_store.h).
// Calls block on the cluster; the registry makes them outside its lock.
class QueueSpecStore {
 public:
  virtual ~QueueSpecStore() = default;
  virtual absl::Status Save(const v1::QueueSpec& spec) = 0;
  // OK when there was nothing to remove.
  virtual absl::Status Remove(const std::string& name) = 0;
};

struct QueueRegistryOptions {
  // nullptr: no metrics. Must outlive the registry.
  MetricsRegistry* metrics = nullptr;
  // nullptr: Clock::Real(). Must outlive the registry.
  Clock* clock = nullptr;
  // Tokens of every queue are greater than this (the daemon's start time in Unix ns). 0: the
  // registry's construction time.
  uint64_t epoch = 0;
  // Replica sets: the registry serves only between BeginTerm and EndTerm; refusals are the gate's
  // NOT_LEADER. nullptr: always serving. Must outlive the registry.
  const LeaderGate* gate = nullptr;
  // nullptr: nothing is persisted. Must outlive the registry.
  QueueSpecStore* store = nullptr;
  // Keys one queue holds waiting or delayed before client adds are refused (queue_spec.h).
  size_t max_queue_keys = kMaxQueueKeys;
};

// Whether a Create or Update is written through to the QueueSpecStore.
enum class Persist { kYes, kNo };

class NamedQueue {
 public:
  ~NamedQueue();  // Closes.
  NamedQueue(const NamedQueue&) = delete;
  NamedQueue& operator=(const NamedQueue&) = delete;

  const std::string& name() const { return name_; }
  v1::QueueSpec spec() const;
  v1::QueueState State() const;
  // Every token of this queue is greater (work.proto's Started.epoch).
  uint64_t epoch() const { return epoch_; }
  std::vector<WorkerInfo> Workers() const { return leases_.Workers(); }
  absl::Duration lease_timeout() const { return leases_.lease_timeout(); }

  // Client calls (keys must be valid: see InvalidKeyReason). FAILED_PRECONDITION after shutdown;
  // RESOURCE_EXHAUSTED when the queue would hold more than kMaxQueueKeys waiting or delayed.
  // `priority` must be in kMinPriority..kMaxPriority (queue_spec.h).
  absl::Status Add(const Keys& keys, int32_t priority = workqueue::kDefaultPriority);
  absl::Status AddAfter(const Keys& keys, absl::Duration delay,
                        int32_t priority = workqueue::kDefaultPriority);
  absl::Status AddRateLimited(const Keys& keys, int32_t priority = workqueue::kDefaultPriority);
  void Forget(const Keys& keys);
  int64_t NumRequeues(absl::string_view key);
  // The queue's limiter now, for NumRequeues of a batch of keys with one load.
  std::shared_ptr<workqueue::RateLimiter> rate_limiter() const { return queue_->rate_limiter(); }
  size_t Len() const;
  // Stops handing out keys (Add is refused from now on). Workers keep applying outcomes; each is
  // closed (OK) once it holds nothing.
  void ShutDown();
  // As ShutDown, then waits until no key is handed out, or `deadline`. Returns whether drained.
  bool ShutDownAndDrain(absl::Time deadline);
  bool ShuttingDown() const;
  // Deleted, or closed by ShutDownAll.
  bool closed() const;

  // Registers a worker stream (lease_table.h). FAILED_PRECONDITION when shut down.
  absl::StatusOr<std::unique_ptr<Worker>> Attach(WorkerOptions options,
                                                 std::shared_ptr<LeaseSink> sink) {
    return leases_.Attach(std::move(options), std::move(sink));
  }

  // When the queue was last used (see the header comment), whether it is pinned.
  absl::Time last_used() const { return absl::FromUnixNanos(last_used_unix_ns_.load()); }
  void Touch(absl::Time now) { last_used_unix_ns_.store(absl::ToUnixNanos(now)); }
  bool pinned() const { return pinned_.load(); }
  void Pin() { pinned_.store(true); }
  // Work streams attached.
  size_t worker_count() const { return leases_.worker_count(); }

  // For tests: keys held by workers (exclusive of the dispatcher's hand-off in progress).
  size_t HeldByWorkers() const { return leases_.Held(); }
  // For tests: the queue itself (to add as a source would, e.g. from an initial list).
  workqueue::RateLimitingQueue& queue_for_testing() { return *queue_; }

 private:
  // OK when `keys` more keys fit under kMaxQueueKeys.
  absl::Status HasRoomFor(size_t keys) const;
  friend class QueueRegistry;
  using Bindings = std::vector<std::unique_ptr<SourceBinding>>;

  // The queue's own /metrics series (besides workqueue_*), shared so that they outlive their
  // removal from /metrics while a stream still holds the queue; null without metrics.
  struct Series {
    // informerd_work_lease_expirations_total{name}
    std::shared_ptr<Counter> expirations;
    // informerd_queue_workers{name}
    std::shared_ptr<Gauge> workers;
  };
  NamedQueue(v1::QueueSpec spec, std::shared_ptr<workqueue::RateLimitingQueue> queue,
             Clock* clock, Series series, uint64_t epoch, const LeaderGate* gate);
  // Starts the dispatcher thread and the resync timer; takes the bindings.
  void Start(Bindings bindings);
  // Applies a new spec (already validated, its limiter and bindings built; a nullptr binding
  // keeps the running binding of an equal source).
  void Update(v1::QueueSpec spec, std::unique_ptr<workqueue::RateLimiter> limiter,
              Bindings bindings);
  // Shuts the queue down, unbinds its sources, stops the dispatcher and closes every worker with
  // `status`. Idempotent.
  void Close(const absl::Status& status);
  void Dispatch();
  void OnResync();
  void ArmResyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  Clock* const clock_;
  const uint64_t epoch_;
  size_t max_keys_ = kMaxQueueKeys;  // set by the registry before the queue is shared
  const LeaderGate* const gate_;
  const std::shared_ptr<workqueue::RateLimitingQueue> queue_;
  // Counted here for QueueState (the Prometheus series count the same things).
  const std::shared_ptr<std::atomic<uint64_t>> adds_;
  std::atomic<uint64_t> retries_{0};
  std::atomic<int64_t> last_used_unix_ns_{0};
  std::atomic<bool> pinned_{false};
  // Declared before leases_, which counts into them.
  const Series series_;
  LeaseTable leases_;

  mutable Mutex mu_;
  v1::QueueSpec spec_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // bindings_[i] feeds the queue from spec_.sources(i).
  Bindings bindings_ ABSL_GUARDED_BY(mu_);
  // informerd_queue_depth_by_priority{name, priority}: one series for each of the first
  // kPrioritySeries priorities the queue had keys at, then one "other" for the rest (bounded
  // label values whatever priorities clients use). Set at scrape time (QueueRegistry::
  // UpdateMetrics), under the registry's lock.
  static constexpr size_t kPrioritySeries = 8;
  std::vector<std::pair<int32_t, Gauge*>> priority_series_;
  Gauge* other_priority_series_ = nullptr;
  std::unique_ptr<Timer> resync_timer_;  // created by Start, destroyed by Close
  std::thread dispatcher_;
};

class QueueRegistry {
 public:
  QueueRegistry(SourceLookups lookups, QueueRegistryOptions options);
  ~QueueRegistry();  // Closes every queue (no drain).

  // Creates the queue (see the header comment for errors); an equal spec returns the existing one.
  // With kYes and a store, a new queue's spec is saved before it returns; if that fails the queue
  // is removed again and the error returned.
  absl::StatusOr<std::shared_ptr<NamedQueue>> Create(const v1::QueueSpec& spec,
                                                     Persist persist = Persist::kYes);
  // Changes the queue named in `spec` in place (see the header comment); NOT_FOUND for an unknown
  // queue unless `allow_missing`, which creates it. With a store the new spec is saved; if that
  // fails the change stays in effect here and the error (UNAVAILABLE) says so: retry it.
  absl::StatusOr<std::shared_ptr<NamedQueue>> Update(const v1::QueueSpec& spec, bool allow_missing);
  // NOT_FOUND naming the queue.
  absl::StatusOr<std::shared_ptr<NamedQueue>> Get(absl::string_view name) const;
  // Shuts the queue down without draining, unbinds its sources, ends its worker streams, removes
  // its /metrics series.
  absl::Status Delete(absl::string_view name);
  std::vector<std::shared_ptr<NamedQueue>> List() const;
  // Sets the series /metrics reads at scrape time (queue depth by priority).
  void UpdateMetrics();
  // Closes and forgets the queue (as Delete) if it is not pinned, was last used at or before
  // `cutoff` and has no Work stream, checked atomically with Get/Create/Update. Its streams and
  // callers then see NOT_FOUND (QUEUE_NOT_FOUND). Returns whether it was freed.
  bool FreeIfUnused(absl::string_view name, absl::Time cutoff);
  // Graceful shutdown: every queue stops handing out keys; waits until in-flight keys are done or
  // `drain_deadline` passes; then ends every worker stream (UNAVAILABLE) and closes the queues.
  void ShutDownAll(absl::Duration drain_deadline);

  // Whether Create would accept `spec` (its fields and the informers it names); creates nothing.
  absl::Status Validate(const v1::QueueSpec& spec) const { return Build(spec).status(); }

  // Replica sets (see the header comment). BeginTerm: queues created from now on take tokens
  // after `epoch`; the registry serves. EndTerm: it stops serving, then closes every queue with
  // `status` (their Work streams end with it) and forgets them.
  void BeginTerm(uint64_t epoch);
  void EndTerm(const absl::Status& status);
  bool persists() const { return options_.store != nullptr; }

  const SourceLookups& lookups() const { return lookups_; }

 private:
  struct Built {
    v1::QueueSpec spec;
    std::unique_ptr<workqueue::RateLimiter> limiter;
    std::vector<std::shared_ptr<const SourceMapper>> mappers;
  };
  // Validates `spec` and resolves everything it names; nothing is created or changed.
  absl::StatusOr<Built> Build(const v1::QueueSpec& spec) const;
  // Binds `built`'s sources to `queue`; with the `running` spec of a queue being updated, a
  // source it already has gets nullptr (NamedQueue::Update keeps its binding).
  absl::StatusOr<NamedQueue::Bindings> Bind(const Built& built, NamedQueue* queue,
                                            const v1::QueueSpec* running);
  absl::StatusOr<std::shared_ptr<NamedQueue>> CreateLocked(Built built)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the /metrics series of the queue `name` (workqueue_*, lease expirations).
  void RemoveMetricsLocked(absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A term is open and the gate (if any) lets this replica hand out keys.
  bool ServingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal of a call while no term is open.
  absl::Status NotServing() const;
  // Saves or removes a spec in the store, if any (outside mu_).
  absl::Status Save(const v1::QueueSpec& spec);
  absl::Status Unsave(absl::string_view name);

  const SourceLookups lookups_;
  const QueueRegistryOptions options_;
  Clock* const clock_;
  std::unique_ptr<workqueue::PrometheusMetricsProvider> metrics_provider_;
  // Declared before the queues: destroyed after every binding.
  SourcePump pump_;
  // One queue's Create, Update, Delete and freeing, each with its write to the store, one at a
  // time: the store ends with the spec the registry has, and a delete is never undone by a
  // write that was under way. Taken before mu_.
  KeyedMutex spec_writes_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<NamedQueue>> queues_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  bool serving_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_
