#include "bench/metadata_floor.h"

#include <string>

#include "gtest/gtest.h"

namespace informerd::bench {
namespace {

TEST(MetadataFloorTest, ReadsTheIdentityAndCopiesTheObjectBytes) {
  const std::string object =
      R"({"kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u",)"
      R"("resourceVersion":"7","labels":{"x":"y"}},"data":{"k":"v"}})";
  simdjson::padded_string line("{\"type\":\"MODIFIED\",\"object\":" + object + "}");
  MetadataFloor floor;
  ASSERT_TRUE(floor.Decode(line.data(), line.size()));
  EXPECT_EQ(floor.type(), "MODIFIED");
  EXPECT_EQ(floor.name(), "a");
  EXPECT_EQ(floor.resource_version(), "7");
  EXPECT_EQ(floor.object_json(), object);
}

TEST(MetadataFloorTest, ObjectBeforeTypeAndClusterScoped) {
  const std::string object = R"({"metadata":{"uid":"u","name":"node-1","resourceVersion":"9"}})";
  simdjson::padded_string line("{\"object\": " + object + " , \"type\":\"ADDED\"}");
  MetadataFloor floor;
  ASSERT_TRUE(floor.Decode(line.data(), line.size()));
  EXPECT_EQ(floor.type(), "ADDED");
  EXPECT_EQ(floor.object_json(), object);
}

TEST(MetadataFloorTest, RefusesWhatIsNotAWatchEvent) {
  MetadataFloor floor;
  for (const std::string& bad : {std::string("[1,2]"), std::string(R"({"type":"ADDED"})"),
                                 std::string(R"({"type":"ADDED","object":{"metadata":{}}})"),
                                 std::string(R"({"type":"ADDED","object":"x"})")}) {
    simdjson::padded_string line(bad);
    EXPECT_FALSE(floor.Decode(line.data(), line.size())) << bad;
  }
}

}  // namespace
}  // namespace informerd::bench
