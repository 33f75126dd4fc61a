// Queue: client-go's workqueue (k8s.io/client-go/util/workqueue, Typed[string]) in C++.
//
// Items are keys. A key is in one of three places: waiting in the FIFO (dirty), held by a worker
// (processing), or both (processing, and dirty again because it was added while held). Hence:
//   * Add of a key already waiting is a no-op (dedup).
//   * Get hands the oldest waiting key to one worker; while it is held, Add only marks it dirty,
//     and Done puts it back in the FIFO. So a key is never held by two workers at once, while
//     different keys are processed in parallel and finish in any order.
//   * Every Get must be followed by exactly one Done, on success and failure alike.
//
//   auto queue = Queue::Create({.name = "pods"}).value();
//   queue->Add("default/web-0").IgnoreError();
//   if (auto key = queue->Get()) { Reconcile(*key); queue->Done(*key).IgnoreError(); }
//
// Shutdown follows client-go: after ShutDown, Adds are refused; Get still returns the keys
// already waiting, then tells every caller the queue is shut down. ShutDownWithDrain also waits
// until no key is being processed (a later ShutDown cuts that wait short).
//
// Misuse has a defined outcome instead of a crash: an empty key is refused (InvalidArgument),
// an Add after shutdown is refused (FailedPrecondition, nothing is queued), and Done of a key
// that is not being processed changes nothing (FailedPrecondition).
//
// Extensions:
//   * GetBatch(max) hands out up to `max` keys in one call, each under the same rules, so the
//     gRPC layer can batch deliveries.
//   * Priorities (controller-runtime's priorityqueue): Add(key, priority) and the delaying
//     layers' AddAfter/AddRateLimited take a priority (default 0; higher goes first). A key
//     waiting twice keeps the higher of its priorities; keys of one priority leave in the order
//     they joined it (a key whose priority is raised joins the back of its new priority). A key
//     added while it is processed waits, after Done, at the highest priority it was added with
//     meanwhile. Aging bounds starvation: a key that has waited `priority_aging` while keys of a
//     higher priority went first is handed out before them, oldest first.
//   * Leases: Get/GetBatch can return a Lease (key, fencing token) instead of a bare key, and
//     Done(lease) ends exactly that hand-out. Tokens increase with every hand-out, so a Done
//     for an earlier hand-out of the same key is refused (FailedPrecondition) instead of ending
//     the current one. Done(lease) also skips the key lookup, which makes it the fast path.
//
// Thread safety: every method may be called concurrently from any thread.
#ifndef INFORMERD_SERVER_WORKQUEUE_QUEUE_H_
#define INFORMERD_SERVER_WORKQUEUE_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "base/hash.h"
#include "base/mutex.h"
#include "server/workqueue/metrics.h"
#include "server/workqueue/slot_index.h"

namespace informerd::workqueue {

struct QueueOptions {
  // Label of this queue's metrics; empty records no metrics.
  std::string name;
  // Source of time and timers; nullptr means Clock::Real(). Must outlive the queue.
  Clock* clock = nullptr;
  // Where metrics go; nullptr records no metrics. Must outlive the queue.
  MetricsProvider* metrics_provider = nullptr;
  // How often the in-flight work gauges are refreshed (client-go: 500 ms).
  absl::Duration unfinished_work_update_period = absl::Milliseconds(500);
  // Delaying layers: after a timer run, the next run waits at least this long, so that keys
  // whose deadlines are microseconds apart are moved in batches instead of one wake-up each.
  // A key is never made available before its deadline; at most this much after it.
  absl::Duration timer_slack = absl::Microseconds(100);
  // Fencing tokens start after this one: the first hand-out gets first_token + 1. A server that
  // passes a value above every token an earlier process of it could have handed out (e.g. its
  // start time in ns) keeps tokens increasing across its restarts.
  uint64_t first_token = 0;
  // A key that has waited this long (since it was added, or, in a queue without metrics, since
  // keys of another priority began waiting beside it) is handed out before keys of higher
  // priorities, the longest-waiting first: how long a low priority can be starved, at most,
  // beyond the time to hand out the keys already overdue ahead of it. InfiniteDuration: strict
  // priority order. Must be positive.
  absl::Duration priority_aging = absl::Minutes(1);
};

// The priority of an Add that names none (controller-runtime's default).
inline constexpr int32_t kDefaultPriority = 0;

// One hand-out of a key by Get/GetBatch.
// A hand-out to end, named by where the queue keeps its key and its token: a Lease without the
// key (Queue::DoneAll).
struct HandOut {
  uint32_t slot = 0;
  uint64_t token = 0;
};

struct Lease {
  std::string key;
  // Fencing token: strictly increasing across all hand-outs of this queue (hence per key), and
  // greater than QueueOptions::first_token.
  uint64_t token = 0;
  // Where the queue keeps the key; opaque to callers.
  uint32_t slot = 0;
  // The priority the key waited at.
  int32_t priority = kDefaultPriority;
  // Every add the key waited for was marked as from an informer's initial list (client-go's
  // isInInitialList): Add(key, priority, /*initial_list=*/true), and no other add came since.
  bool initial_list = false;
};

class Queue {
 public:
  static absl::StatusOr<std::unique_ptr<Queue>> Create(QueueOptions options);
  virtual ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Marks `key` as needing processing. OK also when it was already waiting (dedup) or is being
  // processed (it will be handed out again after Done).
  absl::Status Add(absl::string_view key);
  // Add at `priority`: a key already waiting keeps the higher of its two priorities.
  absl::Status Add(absl::string_view key, int32_t priority);
  // Add at `priority`, marked as from an informer's initial list (Lease::initial_list) or not.
  absl::Status Add(absl::string_view key, int32_t priority, bool initial_list);

  // Blocks until a key is waiting, then hands it out for processing. nullopt: the queue is shut
  // down and empty.
  std::optional<std::string> Get();
  // As Get, writing the key into `*key` (reusing its buffer); false: shut down and empty.
  bool Get(std::string* key);

  // Blocks like Get, then hands out up to `max` waiting keys (at least one) in FIFO order.
  // Empty: the queue is shut down and empty. max == 0 is treated as 1.
  std::vector<std::string> GetBatch(size_t max);
  // As GetBatch, into `*keys` (replacing its contents, reusing its strings' buffers); returns
  // how many keys it holds, 0 when shut down and empty.
  size_t GetBatch(size_t max, std::vector<std::string>* keys);

  // Lease forms of the above: each key comes with the fencing token of this hand-out.
  bool Get(Lease* lease);
  size_t GetBatch(size_t max, std::vector<Lease>* leases);

  // Non-blocking: appends up to `max` waiting keys to `out`; returns how many.
  size_t TryGetBatch(size_t max, std::vector<std::string>* out);
  size_t TryGetBatch(size_t max, std::vector<Lease>* out);

  // Ends processing of `key`; re-queues it if it was added meanwhile.
  absl::Status Done(absl::string_view key);
  // Ends the hand-out `lease` names; FailedPrecondition if that hand-out already ended.
  absl::Status Done(const Lease& lease);
  // Ends each hand-out of `ends` that is still current (those that are not are skipped, as
  // Done(const Lease&) refuses them); returns how many it ended. One lock for the batch, and the
  // slots and index entries of the batch fetched from memory together rather than one miss after
  // another: what a worker's batch of outcomes costs.
  size_t DoneAll(absl::Span<const HandOut> ends);

  // Number of keys waiting (not counting those only being processed).
  size_t Len() const;
  // Number of keys waiting at each priority, highest first (priorities with none left out): at
  // most `max_entries` (> 0) entries, the last of which, when there are more priorities, sums
  // the rest at the highest of them. O(max_entries), whatever priorities clients used.
  std::vector<std::pair<int32_t, size_t>> LenByPriority(size_t max_entries = SIZE_MAX) const;
  // Number of keys waiting at `priority` (O(log priorities)).
  size_t LenAtPriority(int32_t priority) const;
  // Changes QueueOptions::priority_aging (same rules) for every key from now on.
  absl::Status SetPriorityAging(absl::Duration aging);
  // Number of keys being processed.
  size_t Processing() const;
  // Number of Get/GetBatch callers blocked waiting for a key (tests wait for their getters to
  // park before acting on them).
  int ParkedGetters() const;

  void ShutDown();
  void ShutDownWithDrain();
  bool ShuttingDown() const;

 protected:
  explicit Queue(QueueOptions options);
  static absl::Status Validate(const QueueOptions& options);
  const absl::Duration timer_slack_;

  // Keys live in slots, recycled through a free list so that steady-state traffic allocates
  // nothing. A slot is live (indexed by its key) while it is dirty, processing or, for the
  // delaying layer, waiting for a deadline; otherwise it is free.
  using SlotId = uint32_t;
  static constexpr SlotId kNoSlot = ~SlotId{0};
  struct Slot {
    std::string key;         // buffer kept across lives
    SlotId next = kNoSlot;   // next in its priority's FIFO (dirty, not processing), or free list
    SlotId prev = kNoSlot;   // previous in its priority's FIFO
    bool dirty = false;      // waiting in the FIFO, or added again while processing
    bool processing = false; // handed out by Get and not yet Done
    // While dirty: the priority it waits (or, processing, will wait) at.
    int32_t priority = kDefaultPriority;
    // While dirty: every add since it became dirty was an initial-list one (Lease::initial_list).
    bool initial_list = false;
    // While waiting for a deadline: the priority its delayed add will have.
    int32_t delayed_priority = kDefaultPriority;
    // Delaying layer: the live heap entry for this key, 0 when not waiting for a deadline.
    uint64_t waiting_seq = 0;
    int64_t waiting_until_ns = 0;  // its deadline (unix ns), valid while waiting_seq != 0
    int64_t added_at_ns = 0;       // when it became dirty (metrics, aging); 0: not stamped
    int64_t started_at_ns = 0;     // metrics only: when Get handed it out
    uint64_t token = 0;            // fencing token of the current hand-out, while processing
    uint32_t hash32 = 0;           // Hash32(key)
    uint32_t index_pos = 0;        // where index_ keeps this live slot's entry
  };

  static uint32_t Hash32(absl::string_view key) {
    return static_cast<uint32_t>(HashBytes(key) >> 32);
  }

  // The one lock of this queue and of the layers built on it (delaying, rate limiting).
  mutable Mutex mu_;
  Clock* const clock_;

  // Finds the live slot of `key` or makes one. REQUIRES: !key.empty().
  SlotId SlotForLocked(absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Slot& SlotAt(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[id]; }
  // Frees `id` if it is neither dirty, processing nor waiting.
  void ReleaseIfIdleLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddLocked(absl::string_view key, int32_t priority, bool initial_list = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Add of a live slot at `priority`. REQUIRES: not shutting down.
  void AddSlotLocked(SlotId id, int32_t priority, bool initial_list = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShuttingDownLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_; }
  // nullptr when metrics are off.
  QueueMetrics* metrics() const { return metrics_.get(); }

 private:
  // Unindexes and frees the idle slot `id`.
  void FreeLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live slot of `key`, or kNoSlot.
  SlotId FindLocked(absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The waiting keys of one priority, linked through Slot::next/prev, oldest first.
  struct Fifo {
    SlotId head = kNoSlot;
    SlotId tail = kNoSlot;
    size_t len = 0;
  };
  Fifo& FifoLocked(int32_t priority) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `id` to the FIFO of its priority.
  void PushBackLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `id` out of the FIFO of its priority (dropping that FIFO when it empties).
  void UnlinkLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The FIFO to hand out from: the highest priority's, unless aging says an older key of a
  // lower priority goes first. REQUIRES: len_ > 0.
  Fifo& NextFifoLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands out the next key (NextFifoLocked's head). REQUIRES: len_ > 0.
  SlotId PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillLeaseLocked(SlotId id, Lease* lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends processing of the live slot `id` (found by key or by lease).
  // Whether (slot, token) is a hand-out still being processed.
  bool CurrentLocked(uint32_t slot, uint64_t token) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DoneLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spins briefly, without the lock, for a key to arrive or shutdown; then takes the lock and
  // waits for it. Returns with the lock held and a key waiting or the queue shut down.
  void WaitForWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateUnfinishedWork();

  const std::string name_;
  const std::unique_ptr<QueueMetrics> metrics_;  // null: metrics off
  const absl::Duration unfinished_work_update_period_;

  // Slot storage; a deque so that slots (and the keys the index views) never move.
  std::deque<Slot> slots_ ABSL_GUARDED_BY(mu_);
  SlotId free_head_ ABSL_GUARDED_BY(mu_) = kNoSlot;
  size_t free_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Every live slot, by its key.
  SlotIndex index_ ABSL_GUARDED_BY(mu_);
  // The waiting keys: a slot is in exactly one FIFO, once, iff dirty and not processing. The
  // default priority's FIFO is a member, the others (non-empty only) are in a map, highest
  // first, so a queue without priorities pays one empty() check for them.
  Fifo default_fifo_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int32_t, Fifo, std::greater<int32_t>> other_fifos_ ABSL_GUARDED_BY(mu_);
  // Aging's index: (head's added_at_ns, priority) of every non-empty FIFO but the default one's,
  // oldest first and, of equal waits, the higher priority first, so that the longest-waiting head
  // is found in O(log priorities), not by a walk over every priority a client used.
  struct HeadOrder {
    bool operator()(const std::pair<int64_t, int32_t>& a,
                    const std::pair<int64_t, int32_t>& b) const {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    }
  };
  absl::btree_set<std::pair<int64_t, int32_t>, HeadOrder> heads_ ABSL_GUARDED_BY(mu_);
  size_t len_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t priority_aging_ns_ ABSL_GUARDED_BY(mu_);  // INT64_MAX: no aging
  // Mirrors of len_ and shutting_down_ for the lock-free spin in WaitForWorkLocked.
  std::atomic<size_t> len_hint_{0};
  std::atomic<bool> shutdown_hint_{false};
  size_t processing_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Getters blocked in WaitForWorkLocked, woken one per new key (and all at shutdown).
  int parked_getters_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar work_cv_;
  uint64_t last_token_ ABSL_GUARDED_BY(mu_) = 0;
  // Metrics only: the slots being processed, for the in-flight work gauges.
  absl::flat_hash_set<SlotId> in_flight_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Timer> unfinished_work_timer_;  // null: metrics off
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_QUEUE_H_
