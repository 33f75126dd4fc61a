#include "server/informer/zstd_codec.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::informer {
namespace {

using ::testing::HasSubstr;

// ConfigMap-like objects that differ in name, uid and a counter, as a kind's objects do.
std::vector<std::string> Objects(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(absl::StrCat(
        R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"config-)", i,
        R"(","namespace":"team-)", i % 7, R"(","uid":"6f1c2a4e-0000-4000-8000-)", 100000 + i * 37,
        R"(","resourceVersion":")", 5000 + i,
        R"(","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app":"web","tier":"frontend"}},)",
        R"("data":{"settings.yaml":"replicas: )", i % 5,
        R"(\nimage: registry.example.com/web:1.2.3\nlogLevel: info\nfeatures: [a, b, c]\n"}})"));
  }
  return out;
}

std::vector<absl::string_view> Views(const std::vector<std::string>& s) {
  return std::vector<absl::string_view>(s.begin(), s.end());
}

TEST(ZstdCodecTest, RoundTripWithoutDictionary) {
  for (const std::string& json : Objects(3)) {
    const std::string frame = ZstdCompress(json, nullptr);
    ASSERT_FALSE(frame.empty());
    absl::StatusOr<std::string> back = ZstdDecompress(frame, nullptr);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, json);
  }
  absl::StatusOr<std::string> empty = ZstdDecompress(ZstdCompress("", nullptr), nullptr);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
}

TEST(ZstdCodecTest, TrainedDictionaryRoundTripsAndShrinksFrames) {
  const std::vector<std::string> objects = Objects(400);
  absl::StatusOr<std::shared_ptr<const ZstdDictionary>> dict =
      ZstdDictionary::Train(Views(objects));
  ASSERT_TRUE(dict.ok()) << dict.status();
  EXPECT_GT((*dict)->memory_bytes(), (*dict)->bytes().size());
  size_t plain = 0, without = 0, with = 0;
  // Objects it was not trained on, as the informer's later objects are.
  for (const std::string& json : Objects(450)) {
    const std::string frame = ZstdCompress(json, dict->get());
    absl::StatusOr<std::string> back = ZstdDecompress(frame, dict->get());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, json);
    plain += json.size();
    without += ZstdCompress(json, nullptr).size();
    with += frame.size();
  }
  EXPECT_LT(with * 2, without) << "plain " << plain << ", no dictionary " << without;
  EXPECT_LT(with * 5, plain);

  // The same dictionary from its bytes decompresses the same frames.
  absl::StatusOr<std::shared_ptr<const ZstdDictionary>> copy =
      ZstdDictionary::FromBytes((*dict)->bytes());
  ASSERT_TRUE(copy.ok()) << copy.status();
  const std::string frame = ZstdCompress(objects[7], dict->get());
  EXPECT_EQ(ZstdDecompress(frame, copy->get()).value(), objects[7]);
}

TEST(ZstdCodecTest, TrainingOnTooLittleFails) {
  const std::vector<std::string> objects = Objects(2);
  absl::StatusOr<std::shared_ptr<const ZstdDictionary>> dict =
      ZstdDictionary::Train(Views(objects));
  EXPECT_FALSE(dict.ok());
  EXPECT_EQ(dict.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ZstdCodecTest, CorruptedFramesAreErrors) {
  const std::vector<std::string> objects = Objects(400);
  std::shared_ptr<const ZstdDictionary> dict = ZstdDictionary::Train(Views(objects)).value();
  const std::string frame = ZstdCompress(objects[3], dict.get());

  EXPECT_THAT(ZstdDecompress("", dict.get()).status().message(), HasSubstr("not a zstd frame"));
  EXPECT_FALSE(ZstdDecompress("definitely not zstd", dict.get()).ok());
  // Truncated at every length.
  for (size_t n = 0; n < frame.size(); ++n) {
    EXPECT_FALSE(ZstdDecompress(frame.substr(0, n), dict.get()).ok()) << n;
  }
  // Every byte flipped in turn: an error or, where zstd cannot tell, other bytes; never a crash.
  for (size_t i = 0; i < frame.size(); ++i) {
    std::string bad = frame;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    absl::StatusOr<std::string> out = ZstdDecompress(bad, dict.get());
    if (out.ok()) {
      EXPECT_LE(out->size(), kMaxContentSize);
    }
  }
  // Without its dictionary, or with another one.
  EXPECT_FALSE(ZstdDecompress(frame, nullptr).ok());
  std::vector<std::string> others;
  for (int i = 0; i < 300; ++i) {
    others.push_back(absl::StrCat(R"({"kind":"Secret","metadata":{"name":"s)", i * 7919,
                                  R"("},"type":"Opaque","data":{"token":"dG9r)", i, R"("}})"));
  }
  absl::StatusOr<std::shared_ptr<const ZstdDictionary>> other =
      ZstdDictionary::Train(Views(others));
  if (other.ok()) {
    absl::StatusOr<std::string> out = ZstdDecompress(frame, other->get());
    EXPECT_TRUE(!out.ok() || *out != objects[3]);
  }
  // A frame header that declares more than kMaxContentSize is refused before allocating it:
  // zstd's header of a frame with content size 2^40 (single segment flag off, 8-byte size field).
  std::string header = ZstdCompress("x", nullptr).substr(0, 4);  // the magic number
  header += static_cast<char>(0xC0);  // frame header descriptor: 8-byte content size, window next
  header += static_cast<char>(0x00);  // window descriptor
  header += std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8);  // 2^40 little-endian
  EXPECT_THAT(ZstdDecompress(header, nullptr).status().message(), HasSubstr("implausible"));
}

}  // namespace
}  // namespace informerd::informer
