// DeltaFIFO: client-go's DeltaFIFO (k8s.io/client-go/tools/cache) — the queue between a
// reflector and the informer that applies its changes to the cache.
//
// Changes accumulate per key as Deltas, and a key appears in the FIFO once, in the order it first
// got a pending change: Pop hands out every change of the oldest key at once, so a consumer sees
// each key's changes in order and a key's backlog never jumps ahead of others. It is not "keep
// only the last object": the consumer gets every delta (save the deduplication below).
//
//   auto fifo = DeltaFIFO::Create({.known_objects = &store_objects}).value();
//   fifo->Replace(listed, "100");           // reflector, after a list
//   fifo->Update(obj);                      // reflector, per watch event
//   fifo->TryPop([&](Deltas& deltas, const PopContext& ctx) { Apply(deltas); return absl::OkStatus(); });
//
// Popping never blocks: a consumer learns that the queue stopped being empty from
// Options::on_ready and pops then (the informer schedules its turn on an executor).
//
// Semantics (docs/semantics.md §3, "The delta FIFO"):
//   * Delta types Added, Updated, Deleted, Replaced (Sync when emit_delta_type_replaced is off)
//     and Sync (resync).
//   * Replace(list, rv) queues Replaced for every listed object and, for every key known (to the
//     FIFO or to known_objects) that the list lacks, Deleted with a DeletedFinalStateUnknown
//     tombstone carrying the last known object.
//   * Only two consecutive Deleted deltas are deduplicated: the tombstone one is dropped (or the
//     older one when neither is a tombstone).
//   * A delete of a key neither queued nor known is ignored (the relist already reported it).
//   * Resync queues Sync for known objects that have nothing queued (so never after a queued
//     Deleted, which would recreate the object).
//   * HasSynced: the first Replace (or any first Add/Update/Delete) happened and every item of
//     that first Replace has been popped and processed.
//
// Differences from client-go, none observable by a consumer: the FIFO does not transform objects
// (the reflector transforms what it lists, the consumer what it pops); Pop's process function runs
// without the FIFO's
// queue lock, so producers are never blocked by a slow consumer — instead Delete, Replace and
// Resync, which read known_objects, wait for an in-flight process call, so they never see the
// cache between a Pop and the cache update it leads to.
//
// ResourceVersions: every Add/Update/Delete records its object's RV, Replace its list RV, and
// UpdateResourceVersion a bookmark's RV. A Pop that empties the queue tells its process function
// the latest one (PopContext::drained_resource_version): once that item is processed, the cache
// reflects everything up to it. When the queue is already empty and nothing is being processed,
// Replace and UpdateResourceVersion report the RV through Options::on_idle_resource_version.
//
// Thread safety: every method may be called from any thread; TryPop is meant for one consumer at
// a time (several are safe, but then items are processed in parallel and out of order).
#ifndef INFORMERD_SERVER_INFORMER_DELTA_FIFO_H_
#define INFORMERD_SERVER_INFORMER_DELTA_FIFO_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/hash.h"
#include "base/mutex.h"
#include "client/object.h"
#include "server/informer/index.h"

namespace informerd::informer {

enum class DeltaType { kAdded, kUpdated, kDeleted, kReplaced, kSync };

// "Added", "Updated", "Deleted", "Replaced", "Sync".
absl::string_view DeltaTypeName(DeltaType type);

// One change of one object.
struct Delta {
  DeltaType type = DeltaType::kAdded;
  // The object; for a tombstone, the last state known before the deletion went unobserved.
  // Never null.
  ObjectPtr object;
  // A DeletedFinalStateUnknown tombstone (type is kDeleted): the object was deleted while no
  // watch was open, and `object` may be stale.
  bool final_state_unknown = false;

  bool operator==(const Delta& other) const {
    return type == other.type && object == other.object &&
           final_state_unknown == other.final_state_unknown;
  }
};

// Every pending change of one key, oldest first. Never empty when handed out.
using Deltas = absl::InlinedVector<Delta, 1>;

// The cache behind the FIFO (client-go's KeyListerGetter): lets Delete ignore unknown keys,
// Replace detect deletions and Resync re-deliver objects.
class KnownObjects {
 public:
  virtual ~KnownObjects() = default;
  virtual ObjectPtr GetByKey(absl::string_view key) const = 0;
  // Calls `fn` for every known object. `fn` must not call back into the KnownObjects.
  virtual void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const = 0;
  // Calls `fn` with the key of every known object (what Replace needs to find deletions: a cache
  // that keeps objects compressed lists its keys without decompressing any). `fn` must not call
  // back into the KnownObjects.
  virtual void ForEachKey(absl::FunctionRef<void(absl::string_view key)> fn) const {
    ForEach([&](const ObjectPtr& object) { fn(object->key()); });
  }
  // The known object with `object`'s key if it has the same resourceVersion and uid, for a relist
  // to share instead of `object`; nullptr otherwise. A cache that keeps objects compressed
  // answers nullptr without decompressing (it keeps its copy when given the same version).
  virtual ObjectPtr GetUnchanged(const client::Object& object) const {
    ObjectPtr known = GetByKey(object.key());
    if (known != nullptr && known->resource_version() == object.resource_version() &&
        known->uid() == object.uid()) {
      return known;
    }
    return nullptr;
  }
};

// What Pop tells its process function besides the deltas.
struct PopContext {
  // The item belongs to the first Replace (client-go's isInInitialList).
  bool is_in_initial_list = false;
  // Non-empty when this Pop emptied the queue: the latest RV delivered to the FIFO.
  std::string drained_resource_version;
};

class DeltaFIFO {
 public:
  struct Options {
    // The cache the consumer maintains; nullptr when there is none (deletion detection then uses
    // only what is queued). Must outlive the FIFO.
    const KnownObjects* known_objects = nullptr;
    // Replace queues Replaced (true, as informers use it) or Sync (client-go's old behaviour).
    bool emit_delta_type_replaced = true;
    // See the header comment. Called on the thread of the Replace / UpdateResourceVersion /
    // Delete call, without the queue lock but while no item can be processed.
    std::function<void(const std::string& resource_version)> on_idle_resource_version;
    // Called when the queue goes from empty to holding an item, with the queue lock held (it
    // must not call back into the FIFO): the consumer schedules its TryPopBatch here.
    std::function<void()> on_ready;
  };

  using ProcessFunc = absl::FunctionRef<absl::Status(Deltas& deltas, const PopContext& context)>;

  static absl::StatusOr<std::unique_ptr<DeltaFIFO>> Create(Options options);
  ~DeltaFIFO();
  DeltaFIFO(const DeltaFIFO&) = delete;
  DeltaFIFO& operator=(const DeltaFIFO&) = delete;

  // ---- producer side (the reflector) ----

  // Queue Added / Updated for `object`. REQUIRES: object != nullptr.
  void Add(ObjectPtr object);
  void Update(ObjectPtr object);
  // Queues Deleted, unless the key is neither queued nor known.
  void Delete(ObjectPtr object);
  // See the header comment.
  void Replace(std::vector<ObjectPtr> list, std::string resource_version);
  // Queues Sync for every known object with nothing queued.
  void Resync();
  // Records a bookmark's RV.
  void UpdateResourceVersion(std::string resource_version);
  // Re-queues `deltas` (e.g. a failed item) unless its key already has something queued.
  // InvalidArgument when `deltas` is empty.
  absl::Status AddIfNotPresent(Deltas deltas);

  // ---- consumer side ----

  // Removes the oldest item and calls `process` with it (without the queue lock); returns what
  // `process` returns, or Unavailable at once when nothing is queued.
  absl::Status TryPop(ProcessFunc process) { return TryPopBatch(1, process); }
  // As TryPop, but takes up to `max` items at once (one queue lock) and processes them in order;
  // returns the first error of `process`, after processing them all.
  absl::Status TryPopBatch(size_t max, ProcessFunc process);

  // ---- inspection ----

  bool HasSynced() const;
  // Number of queued keys.
  size_t Len() const;
  // The queued keys, in FIFO order.
  std::vector<std::string> ListKeys() const;
  // The newest object of each queued key, in FIFO order.
  std::vector<ObjectPtr> List() const;
  // A copy of the deltas queued for `key`; empty when none.
  Deltas GetByKey(absl::string_view key) const;

 private:
  struct Item {
    ObjectPtr key_owner;  // holds the bytes the key views point into; never changes
    Deltas deltas;
  };

  explicit DeltaFIFO(Options options);

  // Appends a delta to `object`'s key (queueing the key if new), deduplicating deletions.
  void QueueActionLocked(DeltaType type, ObjectPtr object, bool final_state_unknown)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordResourceVersionLocked(absl::string_view rv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queue went from empty to one item: tell on_ready.
  void Readied() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasSyncedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return populated_ && initial_population_count_ == 0;
  }
  // Removes up to `max` of the oldest items and processes them; nullopt when nothing is queued.
  std::optional<absl::Status> PopFront(size_t max, ProcessFunc process)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // When nothing is queued or being processed, reports latest_rv_ (after releasing mu_).
  void ReportIdleResourceVersion() ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);

  const KnownObjects* const known_objects_;
  const bool emit_delta_type_replaced_;
  const std::function<void(const std::string&)> on_idle_resource_version_;
  const std::function<void()> on_ready_;

  // Held while an item is processed, and by the operations that read known_objects_ (which must
  // not see the cache between a Pop and the update it leads to). Taken before mu_.
  Mutex process_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  // Invariant: a key is in queue_ iff it is in items_; the views point into items' key_owner.
  absl::flat_hash_map<absl::string_view, Item, StringHash, StringEq> items_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::string_view> queue_ ABSL_GUARDED_BY(mu_);
  // Set by the first Replace, Add, Update or Delete.
  bool populated_ ABSL_GUARDED_BY(mu_) = false;
  // Items of the first Replace not yet popped and processed.
  size_t initial_population_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::string latest_rv_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_DELTA_FIFO_H_
