#include "server/workqueue/slot_index.h"

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace informerd::workqueue {
namespace {

// A model of what the workqueue keeps: per slot id, its key's hash, a distinguishing key, and
// the position the index gave it (updated through on_move).
struct Model {
  SlotIndex index;
  std::map<uint32_t, std::pair<uint64_t, uint32_t>> live;  // id -> (key, position)
  std::vector<uint32_t> hash_of_key;

  uint32_t Hash(uint64_t key) const { return hash_of_key[key]; }
  void Insert(uint32_t id, uint64_t key) {
    const uint32_t pos = index.Insert(Hash(key), id, [&](uint32_t moved, uint32_t p) {
      ASSERT_TRUE(live.contains(moved));
      live[moved].second = p;
    });
    live[id] = {key, pos};
  }
  SlotIndex::Found Find(uint64_t key) const {
    return index.Find(Hash(key), [&](uint32_t id) {
      auto it = live.find(id);
      return it != live.end() && it->second.first == key;
    });
  }
  void Erase(uint32_t id) {
    index.Erase(live.at(id).second);
    live.erase(id);
  }
};

TEST(SlotIndexTest, FindsWhatWasInsertedAndNothingAfterErase) {
  Model m;
  m.hash_of_key = {7, 7, 9};  // keys 0 and 1 share a hash
  m.Insert(10, 0);
  m.Insert(11, 1);
  m.Insert(12, 2);
  EXPECT_EQ(m.Find(0).id, 10u);
  EXPECT_EQ(m.Find(1).id, 11u);
  EXPECT_EQ(m.Find(2).id, 12u);
  EXPECT_EQ(m.Find(1).pos, m.live[11].second);
  m.Erase(10);
  EXPECT_EQ(m.Find(0).id, SlotIndex::kNone);
  EXPECT_EQ(m.Find(1).id, 11u) << "the colliding key behind an erased one is still found";
  EXPECT_EQ(m.index.size(), 2u);
}

TEST(SlotIndexTest, RandomOperationsAgreeWithAMapThroughRehashes) {
  std::mt19937_64 rng(42);
  Model m;
  const uint64_t kKeys = 5000;
  // Few distinct hashes: long collision runs and many equal hashes.
  for (uint64_t k = 0; k < kKeys; ++k) m.hash_of_key.push_back(static_cast<uint32_t>(rng() % 700));
  std::map<uint64_t, uint32_t> by_key;  // key -> id
  uint32_t next_id = 0;
  for (int step = 0; step < 200000; ++step) {
    const uint64_t key = rng() % kKeys;
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      if (rng() % 3 != 0) {
        m.Insert(next_id, key);
        by_key[key] = next_id++;
      }
    } else if (rng() % 2 == 0) {
      m.Erase(it->second);
      by_key.erase(it);
    }
    if (step % 997 == 0) {
      ASSERT_EQ(m.index.size(), by_key.size());
      for (uint64_t k = 0; k < kKeys; ++k) {
        auto want = by_key.find(k);
        const SlotIndex::Found f = m.Find(k);
        if (want == by_key.end()) {
          ASSERT_EQ(f.id, SlotIndex::kNone) << "key " << k << " step " << step;
        } else {
          ASSERT_EQ(f.id, want->second) << "key " << k << " step " << step;
          ASSERT_EQ(f.pos, m.live[f.id].second) << "the slot's remembered position is current";
        }
      }
    }
  }
  // The table stays bounded by what is live, not by everything ever inserted.
  EXPECT_LE(m.index.capacity(), 4 * std::max<size_t>(by_key.size(), 16) * 2);
}

TEST(SlotIndexTest, DrainingEverythingLeavesAnEmptyIndexThatStillWorks) {
  Model m;
  for (uint32_t k = 0; k < 1000; ++k) m.hash_of_key.push_back(k * 2654435761u);
  for (uint32_t k = 0; k < 1000; ++k) m.Insert(k, k);
  for (uint32_t k = 0; k < 1000; ++k) m.Erase(k);
  EXPECT_EQ(m.index.size(), 0u);
  for (uint32_t k = 0; k < 1000; ++k) EXPECT_EQ(m.Find(k).id, SlotIndex::kNone);
  m.Insert(5, 3);
  EXPECT_EQ(m.Find(3).id, 5u);
}

}  // namespace
}  // namespace informerd::workqueue
