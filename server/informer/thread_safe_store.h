// ThreadSafeStore: client-go's ThreadSafeStore/Indexer — the informer's cache. A map from key
// ("namespace/name", or "name" for cluster-scoped objects) to the immutable object, plus indexes
// that map index values to keys. The namespace index (kNamespaceIndex) is always present; more are
// declared at creation (StoreOptions::indexers) or added later (AddIndexers).
//
//   auto store = ThreadSafeStore::Create({.indexers = {IndexSpec::Field("by-node",
//                                                                        "spec.nodeName")}}).value();
//   store->Update(pod);
//   ListResult on_node = store->ByIndex("by-node", "node-1").value();
//   // on_node.objects, and on_node.resource_version: the cache state it reflects
//
// Every read reports the resourceVersion the cache had reached when the read was served (the
// informer sets it as it applies events; see SetResourceVersion). Reads are of a possibly stale
// cache, never a strong read from the API server.
//
// Objects are shared, never copied: a read returns the same shared_ptrs the store holds. Storing
// the very object that is already stored (as an informer does when a relist finds an object
// unchanged) costs one lookup and touches no index. Replace updates in place and removes what is
// missing, so it never holds two copies of the contents.
//
// Memory accounting: memory() reports the number of objects and an estimate of the bytes they and
// the store's own structures hold (ApproximateObjectBytes per object plus per-entry overhead).
//
// Compression (StoreOptions::compression = kZstd): the store keeps each object as a zstd frame of
// its JSON (zstd_codec.h) beside a metadata shell — the object with only apiVersion, kind and
// metadata without annotations (a Transform with metadata_only) — so that keys, resourceVersion and
// uid checks, the namespace, label and owner indexes and label selectors never decompress.
// Reads (Get, List, ByIndex, ForEach, ...) return ordinary Objects: each is decompressed and
// parsed outside the lock, per read (nothing is cached, the point being not to hold the JSON).
//   * The dictionary is trained once, on the writing thread, from the objects stored so far:
//     when their JSON reaches kTrainBytes, or when the informer drains its queue
//     (SetResourceVersion: e.g. the first list is in) with at least kMinTrainBytes of JSON. Until
//     then objects are kept plain (an informer smaller than that stays plain: the dictionary
//     would cost more than it saves); then those are compressed too, in batches (readers wait
//     for one batch at most). If training fails the store compresses without a dictionary. The
//     dictionary is never retrained: a kind's field names and common values do not drift much.
//   * An object whose frame would not save kMinSaving bytes is kept plain (small objects).
//   * Storing an object whose resourceVersion and uid equal the stored one's (a relist or resync)
//     keeps the stored frame and returns the given object as the previous one.
//   * Field and custom indexes need the contents: updating or deleting an object decompresses the
//     previous version when the store has one. The returned previous object of Update and Delete
//     is decompressed outside the lock.
//   * memory() counts the frames, shells and the dictionary: the true footprint.
//
// Thread safety: every method may be called from any thread. Writes and reads are serialised by
// one lock; reads copy shared_ptrs out under it and never block on a writer for longer than one
// write.
#ifndef INFORMERD_SERVER_INFORMER_THREAD_SAFE_STORE_H_
#define INFORMERD_SERVER_INFORMER_THREAD_SAFE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/hash.h"
#include "base/mutex.h"
#include "client/object.h"
#include "server/informer/index.h"
#include "server/informer/object_snapshot.h"
#include "server/informer/transform.h"
#include "server/informer/zstd_codec.h"

namespace informerd::informer {

enum class StoreCompression {
  kNone,
  kZstd,  // zstd with a dictionary trained on the store's own objects
};

struct StoreOptions {
  // Indexes besides the built-in namespace index. Names must be unique and not "namespace".
  std::vector<IndexSpec> indexers;
  StoreCompression compression = StoreCompression::kNone;
};

// The result of a Get: `object` is null when the key is absent.
struct GetResult {
  ObjectPtr object;
  std::string resource_version;
};

struct ListResult {
  std::vector<ObjectPtr> objects;
  std::string resource_version;
};

struct KeysResult {
  std::vector<std::string> keys;
  std::string resource_version;
};

struct ValuesResult {
  std::vector<std::string> values;
  std::string resource_version;
};

struct MemoryUsage {
  size_t objects = 0;
  // Object bytes (see ApproximateObjectBytes) plus the store's per-entry bookkeeping.
  size_t bytes = 0;
};

// Heap bytes held by one Object: its single allocation, which holds the object itself, the
// shared_ptr control block and every byte the object's views point into.
size_t ApproximateObjectBytes(const client::Object& object);

class ThreadSafeStore {
 public:
  static absl::StatusOr<std::unique_ptr<ThreadSafeStore>> Create(StoreOptions options);
  ~ThreadSafeStore();
  ThreadSafeStore(const ThreadSafeStore&) = delete;
  ThreadSafeStore& operator=(const ThreadSafeStore&) = delete;

  // ---- writes ----

  // Inserts `object` under object->key() or replaces what is there (client-go's Add and Update).
  // Returns the previous object, or null. REQUIRES: object != nullptr.
  ObjectPtr Update(ObjectPtr object);
  // Removes `key`; returns the removed object, or null when absent.
  ObjectPtr Delete(absl::string_view key);
  // Makes the contents exactly `objects` (later duplicates of a key win) and sets the
  // resourceVersion. In place: unchanged objects are kept, missing keys removed.
  void Replace(std::vector<ObjectPtr> objects, std::string resource_version);
  // Records the resourceVersion the cache reflects; reported by every later read.
  void SetResourceVersion(std::string resource_version);

  // ---- reads ----

  GetResult Get(absl::string_view key) const;
  ListResult List() const;
  KeysResult ListKeys() const;
  // Objects in `namespace_name` (through the namespace index).
  ListResult ListNamespace(absl::string_view namespace_name) const;
  // Objects that share at least one value of index `index_name` with `object` (client-go Index).
  absl::StatusOr<ListResult> Index(absl::string_view index_name,
                                   const client::Object& object) const;
  // Objects whose index `index_name` has `value`. NotFound for an unknown index.
  absl::StatusOr<ListResult> ByIndex(absl::string_view index_name, absl::string_view value) const;
  // Keys of those objects.
  absl::StatusOr<KeysResult> IndexKeys(absl::string_view index_name,
                                       absl::string_view value) const;
  // Every value index `index_name` currently holds.
  absl::StatusOr<ValuesResult> ListIndexFuncValues(absl::string_view index_name) const;
  // Names of every index, the namespace index first.
  std::vector<std::string> IndexNames() const;

  // Adds indexes and indexes the current contents under them. AlreadyExists when a name is
  // taken (nothing is added then); InvalidArgument for an invalid spec.
  absl::Status AddIndexers(std::vector<IndexSpec> indexers);

  size_t Size() const;
  std::string ResourceVersion() const;
  MemoryUsage memory() const;

  // Calls `fn` for every object with the store's lock held: `fn` must not call into this store.
  // With compression the objects are decompressed after the lock is released, and `fn` runs
  // then (all at once: a new listener's snapshot uses Snapshot instead).
  void ForEach(absl::FunctionRef<void(const ObjectPtr&)> fn) const;

  // Every object at this instant, taken one at a time (object_snapshot.h): the lock is held only
  // to copy references; a compressed object is unpacked when taken.
  std::unique_ptr<ObjectSnapshot> Snapshot() const;

  // Calls `fn` with every key, the lock held (`fn` must not call into this store). Decompresses
  // nothing.
  void ForEachKey(absl::FunctionRef<void(absl::string_view key)> fn) const;

  // The stored object with `object`'s key when it has the same resourceVersion and uid (a relist
  // can share it instead of keeping a second copy); nullptr otherwise, and when that object is
  // kept compressed (storing `object` then keeps the stored frame, see Update).
  ObjectPtr GetUnchanged(const client::Object& object) const;

  // Compression: train the dictionary when the JSON of the plain objects reaches this many bytes
  // (zstd wants about 100 times the dictionary's size) ...
  static constexpr size_t kTrainBytes = 100 * ZstdDictionary::kDefaultCapacity;
  // ... or at a drain, once it is at least this much. Below it the store stays plain: the
  // digested dictionary (about half a MiB of zstd tables) would cost more than it saves.
  static constexpr size_t kMinTrainBytes = 1 << 20;
  // Objects whose frame would not be this much smaller are kept plain.
  static constexpr size_t kMinSaving = 64;

 private:
  using SlotId = uint32_t;
  // A compressed object: its JSON as one zstd frame, and the dictionary it was made with.
  struct Packed {
    std::string frame;
    std::shared_ptr<const ZstdDictionary> dictionary;  // null: none
  };
  using PackedPtr = std::shared_ptr<const Packed>;
  // An object as the store holds it: plain (packed null), or a metadata shell and its frame.
  struct Stored {
    ObjectPtr object;
    PackedPtr packed;
  };

  struct Slot {
    ObjectPtr object;     // null: free. The metadata shell when packed is set.
    PackedPtr packed;     // compression: the whole object, when it is kept compressed
    uint32_t hash32 = 0;  // Hash32(key)
    union {
      uint32_t epoch = 0;  // live: Replace's mark
      SlotId next_free;    // free: the next free slot
    };
  };

  // The key index holds the ids of the live slots; it hashes them by the slot's hash32, so that
  // it rehashes and erases without reading keys (as in server/workqueue/queue.h).
  struct HashedKey {
    absl::string_view key;
    uint32_t hash32;
  };
  static uint32_t Hash32(absl::string_view key) {
    return static_cast<uint32_t>(HashBytes(key) >> 32);
  }
  struct KeyHash {
    using is_transparent = void;
    const std::vector<Slot>* slots;
    static size_t Spread(uint32_t h) {
      return (static_cast<uint64_t>(h) * 0x9e3779b97f4a7c15ull) ^ h;
    }
    size_t operator()(SlotId id) const { return Spread((*slots)[id].hash32); }
    size_t operator()(const HashedKey& k) const { return Spread(k.hash32); }
  };
  struct KeyEq {
    using is_transparent = void;
    const std::vector<Slot>* slots;
    bool operator()(SlotId a, SlotId b) const { return a == b; }
    bool operator()(SlotId a, const HashedKey& b) const {
      const Slot& slot = (*slots)[a];
      return slot.hash32 == b.hash32 && slot.object->key() == b.key;
    }
    bool operator()(const HashedKey& a, SlotId b) const { return (*this)(b, a); }
  };

  // One index: value -> slots holding an object with that value.
  struct IndexData {
    std::unique_ptr<IndexFunction> function;
    absl::flat_hash_map<std::string, absl::flat_hash_set<SlotId>, StringHash, StringEq> values;
  };

  // Reusable, de-duplicated list of index values (a write's scratch space).
  class ValueList {
   public:
    void Clear() { size_ = 0; }
    void Add(absl::string_view v);
    size_t size() const { return size_; }
    const std::string& operator[](size_t i) const { return values_[i]; }
    bool Contains(absl::string_view v) const;

   private:
    std::vector<std::string> values_;  // [0, size_) in use; the rest keep their buffers
    size_t size_ = 0;
  };

  ThreadSafeStore() = default;

  // Compression: the object to store for `object` (its shell and frame, or itself).
  Stored Pack(ObjectPtr object, const std::shared_ptr<const ZstdDictionary>& dictionary) const;
  // The whole object of `stored` (decompressed and parsed when packed); null on a decoding
  // failure, which is logged (it would be a bug: the store made the frame).
  static ObjectPtr Unpack(const Stored& stored);
  // Unpacks every packed object that a read collected outside the lock, in place; drops the
  // objects that fail.
  static void UnpackAll(std::vector<ObjectPtr>& objects, std::vector<std::pair<size_t, PackedPtr>>& packed);
  // Trains the dictionary and compresses the plain objects (see the header comment). Takes the
  // lock in batches. A no-op unless training is due.
  void MaybeTrain(bool drained) ABSL_LOCKS_EXCLUDED(mu_);
  static size_t PackedBytes(const Packed& packed);
  size_t SlotBytesLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends slot `id`'s object to `objects`, noting it in `packed` when it needs unpacking.
  void CollectLocked(SlotId id, std::vector<ObjectPtr>& objects,
                     std::vector<std::pair<size_t, PackedPtr>>& packed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SlotId FindLocked(absl::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free slot: a reused one, or a new one at the end.
  SlotId NewSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `object` (keyed by its key); returns the previous object. Sets the slot's epoch.
  // `stored` is the object to keep for `object` (its Pack, or null to store `object` plain);
  // the previous one comes back as stored.
  Stored UpdateLocked(ObjectPtr object, Stored stored, uint32_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Stored RemoveSlotLocked(SlotId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the indexes read of a stored object: the shell, unless an index needs the contents.
  ObjectPtr IndexedLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves slot `id` from the values of `old_object` to those of `new_object` in every index
  // (either may be null).
  void ReindexLocked(SlotId id, const client::Object* old_object,
                     const client::Object* new_object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReindexOneLocked(IndexData& index, SlotId id, const client::Object* old_object,
                        const client::Object* new_object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const IndexData* FindIndexLocked(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddIndexersLocked(std::vector<IndexSpec> indexers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots of `index` with `value`, or nullptr.
  static const absl::flat_hash_set<SlotId>* SlotsWithValue(const IndexData& index,
                                                           absl::string_view value);

  mutable Mutex mu_;
  // Slot storage; a slot is live iff its object is set, and then the key index holds it. Grows
  // by an eighth (NewSlotLocked), not by doubling: a slot is a quarter of a small object's
  // overhead.
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  SlotId free_head_ ABSL_GUARDED_BY(mu_) = 0;  // valid when free_count_ > 0
  size_t free_count_ ABSL_GUARDED_BY(mu_) = 0;
  // REQUIRES for every id in keys_: slots_[id] is live (the hash functors read it).
  absl::flat_hash_set<SlotId, KeyHash, KeyEq> keys_ ABSL_GUARDED_BY(mu_){
      0, KeyHash{&slots_}, KeyEq{&slots_}};
  // indexes_[0] is the namespace index.
  std::vector<IndexData> indexes_ ABSL_GUARDED_BY(mu_);
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
  uint32_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  size_t object_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  ValueList old_values_ ABSL_GUARDED_BY(mu_);
  // Compression. shell_ is null when it is off.
  std::unique_ptr<Transform> shell_;
  bool content_indexes_ ABSL_GUARDED_BY(mu_) = false;  // a field or custom index exists
  bool trained_ ABSL_GUARDED_BY(mu_) = false;
  bool training_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const ZstdDictionary> dictionary_ ABSL_GUARDED_BY(mu_);
  size_t plain_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // JSON of the plain objects before training
  ValueList new_values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_THREAD_SAFE_STORE_H_
