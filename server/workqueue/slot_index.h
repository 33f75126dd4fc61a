// SlotIndex: the workqueue's map from a key to the slot that holds it — an open-addressing table
// of (32-bit key hash, slot id) entries with linear probing, where every slot remembers the
// position of its entry. Finding a key probes as any hash table does; erasing a slot's entry is
// a single store at the position the slot remembers, with no probe and no read of the table.
// That is what the workqueue needs when a worker's batch of outcomes ends: a Done of a key that
// leaves the queue no longer waits for a cache miss into a table of a million entries.
//
//   SlotIndex index;
//   uint32_t pos = index.Insert(hash32, id, on_move);   // the slot stores pos
//   SlotIndex::Found f = index.Find(hash32, [&](uint32_t id) { return slots[id].key == key; });
//   index.Erase(slots[id].index_pos);
//
// Insert may rehash; it then reports the new position of every entry through `on_move(id, pos)`
// (the owner updates its slots), before it returns the inserted entry's own position.
//
// Thread safety: none; the workqueue's lock guards it. The callbacks run inside the calls, under
// the caller's lock: they say so with their own annotations, which the analysis cannot match
// through these templates (hence ABSL_NO_THREAD_SAFETY_ANALYSIS on them).
#ifndef INFORMERD_SERVER_WORKQUEUE_SLOT_INDEX_H_
#define INFORMERD_SERVER_WORKQUEUE_SLOT_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace informerd::workqueue {

class SlotIndex {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Found {
    uint32_t id = kNone;   // the slot, or kNone
    uint32_t pos = kNone;  // its entry's position
  };

  size_t size() const { return size_; }
  size_t capacity() const { return table_.size(); }

  // The entry whose hash is `hash32` and for whose slot id `equal(id)` holds.
  template <typename Equal>
  Found Find(uint32_t hash32, Equal&& equal) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (table_.empty()) return {};
    for (size_t pos = Home(hash32);; pos = (pos + 1) & mask_) {
      const uint64_t e = table_[pos];
      if (e == kEmpty) return {};
      if (e != kTombstone && static_cast<uint32_t>(e >> 32) == hash32 && equal(IdOf(e))) {
        return {IdOf(e), static_cast<uint32_t>(pos)};
      }
    }
  }

  // Adds the entry of slot `id` (REQUIRES: not present, id < kNone - 2) and returns its
  // position. `on_move(id, pos)` is called for every other entry a rehash moves.
  template <typename OnMove>
  uint32_t Insert(uint32_t hash32, uint32_t id, OnMove&& on_move) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // At most half the table in use, counting tombstones (they lengthen probes like entries):
    // linear probing stays near one cache line per lookup. A table mostly tombstones is rebuilt
    // at its size; one mostly live doubles.
    if ((size_ + tombstones_ + 1) * 2 > table_.size()) {
      Rehash((size_ + 1) * 4 > table_.size() ? table_.size() * 2 : table_.size(), on_move);
    }
    size_t pos = Home(hash32);
    while (table_[pos] != kEmpty && table_[pos] != kTombstone) pos = (pos + 1) & mask_;
    if (table_[pos] == kTombstone) --tombstones_;
    table_[pos] = Pack(hash32, id);
    ++size_;
    return static_cast<uint32_t>(pos);
  }

  // Removes the entry at `pos` (a position Insert or Find returned, still current).
  void Erase(uint32_t pos) {
    --size_;
    if (table_[(pos + 1) & mask_] != kEmpty) {
      table_[pos] = kTombstone;
      ++tombstones_;
      return;
    }
    // The next position is empty, so no probe passes through this one: it can be empty too, and
    // so can the tombstones just before it, for the same reason.
    table_[pos] = kEmpty;
    for (size_t p = (pos - 1) & mask_; table_[p] == kTombstone; p = (p - 1) & mask_) {
      table_[p] = kEmpty;
      --tombstones_;
    }
  }

  // Starts fetching the memory Erase(pos) writes.
  void PrefetchForErase(uint32_t pos) const {
    __builtin_prefetch(&table_[pos], 1);
    __builtin_prefetch(&table_[(pos + 1) & mask_]);
  }

 private:
  // An entry: the key's hash in the high half, slot id + 2 in the low half (0 and 1 are free).
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = 1;
  static uint64_t Pack(uint32_t hash32, uint32_t id) {
    return static_cast<uint64_t>(hash32) << 32 | (id + 2);
  }
  static uint32_t IdOf(uint64_t e) { return static_cast<uint32_t>(e) - 2; }
  size_t Home(uint32_t hash32) const {
    // Fibonacci hashing spreads hashes that differ only in high bits over the low ones.
    return static_cast<size_t>((static_cast<uint64_t>(hash32) * 0x9e3779b97f4a7c15ull) >> 20) &
           mask_;
  }

  template <typename OnMove>
  void Rehash(size_t capacity, OnMove&& on_move) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (capacity < 16) capacity = 16;
    std::vector<uint64_t> old(capacity, kEmpty);
    old.swap(table_);
    mask_ = capacity - 1;
    tombstones_ = 0;
    for (uint64_t e : old) {
      if (e == kEmpty || e == kTombstone) continue;
      size_t pos = Home(static_cast<uint32_t>(e >> 32));
      while (table_[pos] != kEmpty) pos = (pos + 1) & mask_;
      table_[pos] = e;
      on_move(IdOf(e), static_cast<uint32_t>(pos));
    }
  }

  std::vector<uint64_t> table_;  // a power of two long, or empty
  size_t mask_ = 0;
  size_t size_ = 0;
  size_t tombstones_ = 0;
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_SLOT_INDEX_H_
