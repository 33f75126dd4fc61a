#include "base/hash.h"

#include <bitset>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

TEST(StringHashTest, EqualStringsHashEqualAcrossTypes) {
  std::string owned = "default/web-0";
  EXPECT_EQ(StringHash()(owned), StringHash()(absl::string_view("default/web-0")));
}

TEST(StringHashTest, NoCollisionsAmongAMillionTypicalKeys) {
  absl::flat_hash_set<uint64_t> seen;
  for (int i = 0; i < 1000000; ++i) {
    ASSERT_TRUE(seen.insert(HashBytes(absl::StrCat("namespace-", i % 50, "/object-", i))).second)
        << i;
  }
}

TEST(StringHashTest, EveryLengthAndEveryByteMatters) {
  absl::flat_hash_set<uint64_t> seen;
  std::string base(64, 'a');
  for (size_t len = 0; len <= base.size(); ++len) {
    ASSERT_TRUE(seen.insert(HashBytes(absl::string_view(base.data(), len))).second) << len;
  }
  for (size_t pos = 0; pos < base.size(); ++pos) {
    std::string s = base;
    s[pos] = 'b';
    ASSERT_TRUE(seen.insert(HashBytes(s)).second) << pos;
  }
}

TEST(StringHashTest, FlippingOneInputBitFlipsAboutHalfTheOutputBits) {
  // Avalanche: the Swiss table uses both the low and the top bits.
  double total = 0;
  int trials = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s = absl::StrCat("ns-", i, "/pod-", i * 7919);
    uint64_t h = HashBytes(s);
    for (size_t byte = 0; byte < s.size(); ++byte) {
      std::string t = s;
      t[byte] ^= 1;
      total += std::bitset<64>(h ^ HashBytes(t)).count();
      ++trials;
    }
  }
  double mean = total / trials;
  EXPECT_GT(mean, 28);
  EXPECT_LT(mean, 36);
}

TEST(StringHashTest, WorksAsATransparentHasher) {
  absl::flat_hash_map<std::string, int, StringHash, StringEq> m;
  m["a/b"] = 1;
  EXPECT_EQ(m.find(absl::string_view("a/b"))->second, 1);
}

}  // namespace
}  // namespace informerd
