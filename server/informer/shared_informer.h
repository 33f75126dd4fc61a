// SharedInformer: client-go's SharedIndexInformer — one reflector, one DeltaFIFO and one indexed
// cache for a resource (one (cluster, GVR, namespace, selectors, transform)), shared by any
// number of handlers, each with its own ordered, bounded buffer (processor_listener.h).
//
//   auto informer = SharedInformer::Create({.name = "v1/pods",
//                                          .lister_watcher = std::move(lw),
//                                          .indexers = {IndexSpec::Field("by-node",
//                                                                        "spec.nodeName")}}).value();
//   auto handle = informer->AddEventHandler(my_handler, {.name = "queue-binding"}).value();
//   informer->Start();
//   ... handle->HasSynced() ... informer->lister().List(selector) ...
//   informer->Stop();  // frees the cache and every buffer
//
// Pipeline: the reflector (reflector.h) queues what it lists and watches in the DeltaFIFO; the
// informer's consumer (a SerialTask on the processing executor, informer_threads.h: no thread
// of its own, and one informer's deltas in order) pops each key's deltas, transforms their objects (transform.h;
// managedFields stripped by default; listed objects were transformed by the reflector already),
// applies them to the cache (ThreadSafeStore) and only then notifies the handlers
// (client-go's HandleDeltas): an Added/Updated/Replaced/Sync delta is an Add when the key was not
// cached, else an Update(old, new) — which goes only to handlers being resynced when the
// resourceVersion did not change (a resync, or a relist that found the object unchanged); a
// Deleted delta is a Delete. Cache and notifications stay consistent: nothing is distributed
// between a cache update and its notification, and a handler registered on a running informer
// gets the cache at that instant, then everything after.
//
// Resync (per handler, default off): every resync_period the cached objects are re-delivered as
// Update(obj, obj) to the handlers that are due, through the FIFO (client-go's Resync). It is not
// a relist. The resync timer runs on the clock's timer thread.
//
// Memory: memory() reports the cache (objects, bytes), queued FIFO items and buffered
// notifications; with a MetricsRegistry they are exported every metrics_period as
//   informer_objects{informer}, informer_object_bytes{informer}, informer_fifo_items{informer},
//   informer_handler_pending{informer,handler}, informer_handler_overflows_total{informer,handler},
//   informer_synced{informer}.
// A handler's series leave /metrics when it is removed, all of the informer's when it stops.
//
// Lifecycle: Start once; Stop once (from any thread but a handler's own callback) stops the
// reflector, the FIFO's consumer and every handler, then empties the cache and buffers. A
// stopped informer cannot be restarted; create a new one.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_INFORMER_SHARED_INFORMER_H_
#define INFORMERD_SERVER_INFORMER_SHARED_INFORMER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/executor.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "server/informer/delta_fifo.h"
#include "server/informer/lister.h"
#include "server/informer/lister_watcher.h"
#include "server/informer/processor_listener.h"
#include "server/informer/reflector.h"
#include "server/informer/thread_safe_store.h"
#include "server/informer/transform.h"

namespace informerd::informer {

struct SharedInformerOptions {
  // Names the informer in metrics and logs, e.g. "v1/pods" or "v1/pods@team-a".
  std::string name;
  // Required: the resource (with namespace and selectors bound in).
  std::unique_ptr<ListerWatcher> lister_watcher;
  // Events of another kind are dropped ("" accepts any).
  std::string expected_kind;
  std::vector<IndexSpec> indexers;
  // How the cache keeps objects (thread_safe_store.h: compression).
  StoreCompression compression = StoreCompression::kNone;
  TransformOptions transform;
  // Reflector settings (reflector.h).
  int64_t page_size = 500;
  bool use_streaming_list = true;
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration stall_timeout = absl::Minutes(3);
  BackoffOptions backoff;
  // Buffer of handlers that do not choose their own.
  size_t default_buffer_size = 4096;
  absl::Duration metrics_period = absl::Seconds(10);
  // nullptr: Clock::Real(). Must outlive the informer.
  Clock* clock = nullptr;
  // nullptr: no metrics. Must outlive the informer.
  MetricsRegistry* metrics = nullptr;
  uint64_t seed = 0;
  // Where the informer's work runs (informer_threads.h); nullptr: the process's executors.
  // Must outlive the informer.
  Executor* executor = nullptr;
  Executor* reflector_executor = nullptr;
};

struct HandlerOptions {
  // Metric label; "" gives "handler-N".
  std::string name;
  // 0: never resync. Otherwise at least 1 s.
  absl::Duration resync_period = absl::ZeroDuration();
  // 0: SharedInformerOptions::default_buffer_size.
  size_t buffer_size = 0;
  // See ProcessorListener::Options::buffer_bytes (0: no bound in bytes).
  size_t buffer_bytes = 0;
  // Pop/Done listeners (AddListener) only: see ProcessorListener::Options::on_ready.
  std::function<void()> on_ready;
};

struct InformerMemory {
  MemoryUsage store;
  size_t fifo_items = 0;
  size_t pending_notifications = 0;
};

class SharedInformer : public ProcessorListener::OverflowResolver {
 public:
  static absl::StatusOr<std::unique_ptr<SharedInformer>> Create(SharedInformerOptions options);
  ~SharedInformer() override;  // Stops.
  SharedInformer(const SharedInformer&) = delete;
  SharedInformer& operator=(const SharedInformer&) = delete;

  // FailedPrecondition when already started or stopped.
  absl::Status Start();
  void Stop();
  bool HasSynced() const;

  // Registers a handler, run on a thread of its own. The returned listener is the registration
  // (HasSynced, pending, overflows) and the argument of RemoveEventHandler.
  absl::StatusOr<std::shared_ptr<ProcessorListener>> AddEventHandler(
      std::shared_ptr<ResourceEventHandler> handler, HandlerOptions options = {});
  // Registers a listener consumed with Pop/Done (no thread).
  absl::StatusOr<std::shared_ptr<ProcessorListener>> AddListener(HandlerOptions options = {});
  // Stops the listener and frees its buffer. NotFound if it is not registered here.
  absl::Status RemoveEventHandler(const std::shared_ptr<ProcessorListener>& listener);

  const ThreadSafeStore& store() const { return *store_; }
  Lister lister() const { return Lister(store_.get()); }
  absl::Status AddIndexers(std::vector<IndexSpec> indexers);
  ReflectorStatus reflector_status() const { return reflector_->status(); }
  InformerMemory memory() const;
  const std::string& name() const { return name_; }
  // The transform this informer applies: the declared one less what its source already does
  // (ListerWatcher::drops_managed_fields).
  const Transform& transform() const { return *transform_; }

  // ProcessorListener::OverflowResolver:
  void ResolveOverflow(ProcessorListener* listener) override;

 private:
  class StoreKnownObjects;
  struct ListenerMetrics {
    // Shared: handlers of one name share their series, and removing it from the registry with
    // the first of them must not free what the others still write.
    std::shared_ptr<Gauge> pending;
    std::shared_ptr<Counter> overflows;
    uint64_t overflows_reported = 0;
  };

  explicit SharedInformer(SharedInformerOptions& options);
  absl::StatusOr<std::shared_ptr<ProcessorListener>> Register(
      std::shared_ptr<ResourceEventHandler> handler, HandlerOptions options);
  // One turn of the FIFO's consumer on the processing executor: a few batches, then another
  // turn when more is queued (so that informers sharing the threads take turns).
  void ProcessStep();
  absl::Status Process(Deltas& deltas, const PopContext& context);
  void Distribute(const Notification& notification, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(distribute_mu_);
  void WakeListenersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(distribute_mu_);
  // Keys processed between listener wake-ups while the queue is not drained.
  static constexpr int kWakeEvery = 64;
  void OnResyncTimer();
  void RearmResyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(distribute_mu_);
  void UpdateMetrics();
  // Removes the informer_handler_* series of the handler named `handler`.
  void RemoveListenerSeries(const std::string& handler);

  const std::string name_;
  Clock* const clock_;
  MetricsRegistry* const metrics_;
  const size_t default_buffer_size_;
  const absl::Duration metrics_period_;

  std::unique_ptr<ListerWatcher> lister_watcher_;
  std::unique_ptr<Transform> transform_;
  std::unique_ptr<ThreadSafeStore> store_;
  std::unique_ptr<StoreKnownObjects> known_objects_;
  std::unique_ptr<DeltaFIFO> fifo_;
  std::unique_ptr<Reflector> reflector_;

  // Taken while the cache is updated and the matching notifications are pushed, while a handler
  // is registered, and while a listener's coalesced keys are resolved. Taken after the FIFO's
  // process lock; before the store's and listeners' locks.
  mutable Mutex distribute_mu_;
  std::vector<std::shared_ptr<ProcessorListener>> listeners_ ABSL_GUARDED_BY(distribute_mu_);
  std::vector<ListenerMetrics> listener_metrics_ ABSL_GUARDED_BY(distribute_mu_);
  // The reflector's counters as last added to informer_*_total.
  struct ReflectorCounters {
    uint64_t events = 0;
    uint64_t errors = 0;
    uint64_t lists = 0;
    uint64_t watches = 0;
  };
  ReflectorCounters reflector_reported_ ABSL_GUARDED_BY(distribute_mu_);
  bool started_ ABSL_GUARDED_BY(distribute_mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(distribute_mu_) = false;
  int handlers_named_ ABSL_GUARDED_BY(distribute_mu_) = 0;
  // Keys processed since listeners were last woken.
  int undelivered_ ABSL_GUARDED_BY(distribute_mu_) = 0;

  std::atomic<bool> started_processing_{false};
  std::atomic<bool> stopping_{false};
  std::unique_ptr<SerialTask> process_task_;
  std::unique_ptr<Timer> resync_timer_;
  std::unique_ptr<Timer> metrics_timer_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_SHARED_INFORMER_H_
