// QueueRegistry: the daemon's named workqueues — what the Queues service creates and feeds, what
// Work streams drain, what Admin lists.
//
//   QueueRegistry queues(&informers, {.metrics = &metrics_registry});
//   absl::StatusOr<std::shared_ptr<NamedQueue>> q = queues.Create(spec);   // v1::QueueSpec
//   (*q)->Add({"default/web-0"});
//   ...
//   queues.ShutDownAll(absl::Seconds(10));   // daemon shutdown: stop, let in-flight keys finish
//
// A NamedQueue is a workqueue::RateLimitingQueue plus what the server adds around it:
//   * Sources: informer bindings evaluated here. Each source registers an event handler on its
//     informer that maps every event's object (filtered by a label selector) to keys — the
//     object's own key, its controller owner's key, or the keys another informer's index holds
//     for it — and adds them. A resync timer re-adds every source object's keys periodically.
//   * Workers: Work streams attach a Worker (a lease table with a credit of max_in_flight keys).
//     One dispatcher thread per queue waits until some worker has credit, takes up to that many
//     ready keys with Queue::GetBatch and hands them to that worker (round robin among workers
//     with credit) through its LeaseSink. Outcomes are applied through the Worker, which refuses
//     keys it does not hold and stale fencing tokens. Detaching a worker (its stream ended for
//     any reason) ends every hand-out it held and adds the key again, so no key is lost; the
//     queue's one-processor-per-key rule plus the tokens keep a key with one worker at a time.
//
// Errors name the offending field: INVALID_ARGUMENT ("spec.name: ..."), NOT_FOUND for unknown
// queues and informers, FAILED_PRECONDITION for a re-create with a different spec.
//
// Lock order: NamedQueue::mu_ before the workqueue's own lock. Sinks and close callbacks are
// called without any lock held.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
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
#include "base/metrics.h"
#include "base/mutex.h"
#include "informerd/v1/queues.pb.h"
#include "informerd/v1/work.pb.h"
#include "server/informer/shared_informer.h"
#include "server/workqueue/prometheus_metrics.h"
#include "server/workqueue/rate_limiting_queue.h"

namespace informerd::service {

class InformerRegistry;  // informer_registry.h

// A batch of keys as requests carry them.
using Keys = google::protobuf::RepeatedPtrField<std::string>;
// Keys longer than this are refused (INVALID_ARGUMENT).
inline constexpr size_t kMaxKeyBytes = 1024;
// "": valid; else why `key` is not a valid queue key.
std::string InvalidKeyReason(absl::string_view key);

struct QueueRegistryOptions {
  // nullptr: no metrics. Must outlive the registry.
  MetricsRegistry* metrics = nullptr;
  // nullptr: Clock::Real(). Must outlive the registry.
  Clock* clock = nullptr;
};

// Where a Worker's leases go: a Work stream. Deliver is called on the queue's dispatcher thread
// (never more leases than the worker's free credit) and must not block.
class LeaseSink {
 public:
  virtual ~LeaseSink() = default;
  virtual void Deliver(std::vector<workqueue::Lease> leases) = 0;
  // The queue is gone or shut down: end the stream with `status`. Called at most once.
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
};

class NamedQueue;

// One worker stream's hold on a queue. Created by NamedQueue::Attach; Detach (or destruction)
// gives back every key it holds.
class Worker {
 public:
  ~Worker();  // Detaches.
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::string& stream_id() const { return stream_id_; }

  // Applies outcomes (see work.proto); returns the ones refused, with why. Never blocks on I/O.
  std::vector<v1::Refusal> Apply(const v1::Outcomes& outcomes);
  // Ends every held hand-out and adds its key again, and lets go of the sink: no delivery starts
  // after it returns (one already running may finish; the sink is shared for that). Never
  // blocks on the sink. Idempotent.
  void Detach();

 private:
  friend class NamedQueue;
  Worker(NamedQueue* queue, std::string stream_id, WorkerOptions options,
         std::shared_ptr<LeaseSink> sink);

  NamedQueue* const queue_;  // outlives: the attacher holds a shared_ptr to the queue
  const std::string stream_id_;
  const WorkerOptions options_;
  // All guarded by queue_->mu_.
  std::shared_ptr<LeaseSink> sink_;  // null once detached
  bool attached_ = true;
  bool close_sent_ = false;
  absl::flat_hash_map<std::string, workqueue::Lease> held_;
};

class NamedQueue {
 public:
  ~NamedQueue();  // Closes.
  NamedQueue(const NamedQueue&) = delete;
  NamedQueue& operator=(const NamedQueue&) = delete;

  const std::string& name() const { return spec_.name(); }
  const v1::QueueSpec& spec() const { return spec_; }
  v1::QueueState State() const;
  std::vector<WorkerInfo> Workers() const;

  // Client calls (keys must be valid: see InvalidKeyReason). FAILED_PRECONDITION after shutdown.
  absl::Status Add(const Keys& keys);
  absl::Status AddAfter(const Keys& keys, absl::Duration delay);
  absl::Status AddRateLimited(const Keys& keys);
  void Forget(const Keys& keys);
  int64_t NumRequeues(absl::string_view key);
  size_t Len() const;
  // Stops handing out keys (Add is refused from now on). Workers keep applying outcomes; each is
  // closed (OK) once it holds nothing.
  void ShutDown();
  // As ShutDown, then waits until no key is handed out, or `deadline`. Returns whether drained.
  bool ShutDownAndDrain(absl::Time deadline);
  bool ShuttingDown() const;
  // Deleted, or closed by ShutDownAll.
  bool closed() const;

  // Registers a worker stream; the Worker holds `sink` until it is detached (so a sink that owns
  // its Worker must Detach it to break the cycle). FAILED_PRECONDITION when shut down.
  absl::StatusOr<std::unique_ptr<Worker>> Attach(WorkerOptions options,
                                                 std::shared_ptr<LeaseSink> sink);

  // For tests: keys held by workers (exclusive of the dispatcher's hand-off in progress).
  size_t HeldByWorkers() const;

 private:
  friend class QueueRegistry;
  friend class Worker;
  struct Binding;

  NamedQueue(v1::QueueSpec spec, std::shared_ptr<workqueue::RateLimitingQueue> queue,
             Clock* clock);
  // Starts the dispatcher thread and the bindings' handlers and resync timer.
  absl::Status Start(std::vector<std::unique_ptr<Binding>> bindings);
  // Shuts the queue down, unregisters the bindings, stops the dispatcher and closes every
  // worker with `status`. Idempotent.
  void Close(const absl::Status& status);
  void Dispatch();
  void OnResync();
  void DetachLocked(Worker* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells (outside the lock) the workers the queue is done: all, or only those holding nothing.
  void CloseWorkers(const absl::Status& status, bool idle_only);

  const v1::QueueSpec spec_;
  Clock* const clock_;
  const std::shared_ptr<workqueue::RateLimitingQueue> queue_;
  // Counted here for QueueState (the Prometheus series count the same things).
  const std::shared_ptr<std::atomic<uint64_t>> adds_;
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> next_stream_{1};

  mutable Mutex mu_;
  std::vector<Worker*> workers_ ABSL_GUARDED_BY(mu_);
  size_t next_worker_ ABSL_GUARDED_BY(mu_) = 0;  // round-robin start
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;   // shut down: dispatch no more
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Binding>> bindings_;  // set by Start, cleared by Close
  std::unique_ptr<Timer> resync_timer_;
  std::thread dispatcher_;
};

class QueueRegistry {
 public:
  // Resolves an informer id (InformerRegistry::Find); nullptr when there is none.
  using InformerLookup =
      std::function<std::shared_ptr<informer::SharedInformer>(absl::string_view id)>;

  QueueRegistry(InformerLookup informers, QueueRegistryOptions options);
  // Over the daemon's InformerRegistry. A template only so that this header need not include
  // informer_registry.h (and its cluster client): it is instantiated where the registry is known.
  template <typename Registry = InformerRegistry>
  QueueRegistry(Registry* informers, QueueRegistryOptions options)
      : QueueRegistry(
            InformerLookup([informers](absl::string_view id) { return informers->Find(id); }),
            options) {}
  ~QueueRegistry();  // Closes every queue (no drain).

  // Creates the queue (see the header comment for errors); an equal spec returns the existing one.
  absl::StatusOr<std::shared_ptr<NamedQueue>> Create(const v1::QueueSpec& spec);
  // NOT_FOUND naming the queue.
  absl::StatusOr<std::shared_ptr<NamedQueue>> Get(absl::string_view name) const;
  // Shuts the queue down without draining, unregisters its sources, ends its worker streams.
  absl::Status Delete(absl::string_view name);
  std::vector<std::shared_ptr<NamedQueue>> List() const;
  // Graceful shutdown: every queue stops handing out keys; waits until in-flight keys are done or
  // `drain_deadline` passes; then ends every worker stream (UNAVAILABLE) and closes the queues.
  void ShutDownAll(absl::Duration drain_deadline);

 private:
  InformerLookup informers_;
  const QueueRegistryOptions options_;
  std::unique_ptr<workqueue::PrometheusMetricsProvider> metrics_provider_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<NamedQueue>> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_REGISTRY_H_
