// ProcessorListener: one handler's view of a shared informer (client-go's processorListener) —
// the ordered buffer of notifications between the informer, which pushes them as it updates its
// cache, and the handler, which takes them at its own pace.
//
// Every notification reaches the handler in the order the cache changed. A slow handler never
// blocks the informer or other handlers: the informer only appends to this buffer. The buffer is
// bounded (client-go's grows without limit): when a handler falls buffer_size notifications
// behind, the listener stops keeping events and keeps only which keys changed (and what the
// handler last saw of each). When the handler catches up it is told to re-snapshot — an
// OnResnapshot(n) followed by n notifications, one per changed key, carrying the net change from
// what it last saw to the current cache state (an Add, an Update(old, new), or a Delete). So
// nothing is silently dropped: per key, the handler still sees its changes in order and ends at
// the cache's state; only intermediate states are skipped. Overflows are counted (metric).
//
// A listener added to a running informer first gets the whole cache as Adds with
// is_in_initial_list (held as a snapshot of the cache, object_snapshot.h, not counted against the
// bound), then live
// notifications. HasSynced is per listener: the informer has synced and every notification of
// the initial list has been handled (client-go's per-handler HasSynced). It never goes back to
// false.
//
// Two ways to consume: give the listener a ResourceEventHandler and it runs it on a thread of its
// own (Start), or take notifications with Pop/Done (a gRPC subscriber, which pops when its
// stream can take more and is told through on_ready when there is something to take).
//
// Thread safety: every method may be called from any thread. Push, SetInitial and FinishOverflow
// are called by the informer with its distribution lock held; handler callbacks run on the
// listener's thread without any lock.
#ifndef INFORMERD_SERVER_INFORMER_PROCESSOR_LISTENER_H_
#define INFORMERD_SERVER_INFORMER_PROCESSOR_LISTENER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "base/hash.h"
#include "base/mutex.h"
#include "server/informer/index.h"
#include "server/informer/object_snapshot.h"

namespace informerd::informer {

struct Notification {
  enum class Type { kAdd, kUpdate, kDelete, kResnapshot };
  Type type = Type::kAdd;
  // kAdd, kUpdate: the new state. kDelete: the deleted object (its last known state).
  ObjectPtr object;
  // kUpdate: the previous state.
  ObjectPtr old_object;
  // kAdd: part of the initial list (client-go's isInInitialList).
  bool is_in_initial_list = false;
  // kDelete: the deletion was missed and `object` may be stale (DeletedFinalStateUnknown).
  bool final_state_unknown = false;
  // kResnapshot: how many notifications of the re-snapshot follow.
  size_t resnapshot_keys = 0;

  // Internal bookkeeping: counts towards this listener's HasSynced.
  bool counts_for_sync = false;
};

// client-go's ResourceEventHandler, plus the informerd re-snapshot signal.
class ResourceEventHandler {
 public:
  virtual ~ResourceEventHandler() = default;
  virtual void OnAdd(const ObjectPtr& object, bool is_in_initial_list) = 0;
  virtual void OnUpdate(const ObjectPtr& old_object, const ObjectPtr& new_object) = 0;
  virtual void OnDelete(const ObjectPtr& object, bool final_state_unknown) = 0;
  // The handler fell behind by more than its buffer: the next `keys` calls carry the net change
  // of each key that changed meanwhile, instead of every event.
  virtual void OnResnapshot(size_t keys) {}
};

// A ResourceEventHandler from functions (client-go's ResourceEventHandlerFuncs); unset ones do
// nothing.
struct ResourceEventHandlerFuncs : ResourceEventHandler {
  std::function<void(const ObjectPtr&, bool)> add;
  std::function<void(const ObjectPtr&, const ObjectPtr&)> update;
  std::function<void(const ObjectPtr&, bool)> del;
  std::function<void(size_t)> resnapshot;

  void OnAdd(const ObjectPtr& o, bool initial) override {
    if (add) add(o, initial);
  }
  void OnUpdate(const ObjectPtr& o, const ObjectPtr& n) override {
    if (update) update(o, n);
  }
  void OnDelete(const ObjectPtr& o, bool unknown) override {
    if (del) del(o, unknown);
  }
  void OnResnapshot(size_t keys) override {
    if (resnapshot) resnapshot(keys);
  }
};

class ProcessorListener {
 public:
  struct Options {
    std::string name;
    // Live notifications held before the listener falls back to tracking changed keys.
    size_t buffer_size = 4096;
    // The same in bytes: of the objects the held notifications reference (counted whole, also
    // where the cache shares them; 0: no bound). One notification is always held, however big.
    size_t buffer_bytes = 0;
    // Re-deliver the cache as Updates this often (0: never); at least 1 s.
    absl::Duration resync_period = absl::ZeroDuration();
    // Run on a thread of the listener's own (Start); null for Pop/Done consumers.
    std::shared_ptr<ResourceEventHandler> handler;
    // Pop/Done consumers: called (with the informer's distribution lock held: must not block or
    // call back into the informer) when notifications become available after Pop found none.
    std::function<void()> on_ready;
  };

  // Finds the current state of keys whose events were coalesced; the informer calls
  // FinishOverflow from it with its distribution paused.
  class OverflowResolver {
   public:
    virtual ~OverflowResolver() = default;
    virtual void ResolveOverflow(ProcessorListener* listener) = 0;
  };

  // `upstream_synced`: whether the informer has synced. `resolver` must outlive the listener.
  ProcessorListener(Options options, OverflowResolver* resolver,
                    std::function<bool()> upstream_synced);
  ~ProcessorListener();  // Stops.
  ProcessorListener(const ProcessorListener&) = delete;
  ProcessorListener& operator=(const ProcessorListener&) = delete;

  const std::string& name() const { return options_.name; }
  absl::Duration resync_period() const { return options_.resync_period; }

  // ---- informer side (distribution lock held) ----

  // The cache at registration, delivered before anything pushed later. At most once, first.
  // Objects are taken from the snapshot as they are popped (a compressed one unpacks them then).
  void SetInitial(std::unique_ptr<ObjectSnapshot> objects);
  void SetInitial(std::vector<ObjectPtr> objects) {
    SetInitial(std::make_unique<VectorSnapshot>(std::move(objects)));
  }
  // Appends a notification and wakes the consumer; never blocks.
  void Push(Notification notification) { Push(std::move(notification), /*wake=*/true); }
  // Appends a notification; the consumer is woken by a later Push or Wake (the informer wakes its
  // listeners once per batch of changes rather than once per notification).
  void PushDeferred(Notification notification) { Push(std::move(notification), /*wake=*/false); }
  // Wakes the consumer if it waits and something was pushed since.
  void Wake();
  // Ends an overflow: `lookup` gives a key's current object (null when absent).
  void FinishOverflow(absl::FunctionRef<ObjectPtr(absl::string_view key)> lookup);
  // Resync bookkeeping (client-go's shouldResync): whether a resync is due at `now` for this
  // listener; if so the next one is scheduled. Also records the answer (is_syncing).
  bool ShouldResync(absl::Time now);
  bool is_syncing() const { return syncing_.load(std::memory_order_relaxed); }
  // When the next resync is due (InfiniteFuture without a period).
  absl::Time next_resync() const;
  void ScheduleFirstResync(absl::Time now);

  // ---- consumer side ----

  // Starts the handler thread (Options::handler).
  void Start();
  // Stops the handler thread (waiting for a callback in progress) and drops what is buffered.
  // Pop then returns false. REQUIRES: not called from the handler's own callbacks.
  void Stop();
  // Moves up to `max` notifications into *out (appending). With `wait`, blocks until at least
  // one is available or the listener stops. Returns false when stopped.
  bool Pop(size_t max, std::vector<Notification>* out, bool wait);
  // Marks notifications taken by Pop as handled (for HasSynced).
  void Done(const std::vector<Notification>& handled);

  bool HasSynced() const;
  // Notifications waiting (live ones, initial list and coalesced keys).
  size_t pending() const;
  // Bytes of the objects the live notifications waiting reference (Options::buffer_bytes).
  size_t pending_bytes() const;
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }
  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }

 private:
  // What the listener remembers of a key while overflowed.
  struct Dirty {
    ObjectPtr seen;          // what the handler last saw (null: nothing, or it saw a deletion)
    ObjectPtr last;          // the newest object of the discarded notifications
    bool last_deleted = false;
    bool last_final_state_unknown = false;
  };

  void Run();
  void Push(Notification notification, bool wake);
  void CoalesceLocked(Notification notification) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  OverflowResolver* const resolver_;
  const std::function<bool()> upstream_synced_;

  mutable Mutex mu_;
  CondVar cv_;
  std::unique_ptr<ObjectSnapshot> initial_ ABSL_GUARDED_BY(mu_);
  size_t initial_next_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Notification> pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of pending_'s objects (BytesOf)
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  // A notification of the initial list was coalesced: the re-snapshot belongs to it.
  bool initial_coalesced_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Dirty, StringHash, StringEq> dirty_ ABSL_GUARDED_BY(mu_);
  // Notifications counting for HasSynced that are buffered or being handled.
  size_t sync_pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // a Pop found nothing: on_ready is due
  bool wake_due_ ABSL_GUARDED_BY(mu_) = false;  // pushed while waiting_, not yet woken
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_resync_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  mutable std::atomic<bool> synced_latch_{false};
  std::atomic<bool> syncing_{false};
  std::atomic<uint64_t> overflows_{0};
  std::atomic<uint64_t> delivered_{0};
  std::thread thread_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_PROCESSOR_LISTENER_H_
