#include "server/informer/index.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MakeObject;

std::vector<std::string> ValuesOf(IndexSpec spec, const client::Object& object) {
  auto function = IndexFunction::Create(std::move(spec)).value();
  std::vector<std::string> out;
  function->Values(object, [&](absl::string_view v) { out.emplace_back(v); });
  return out;
}

constexpr char kOwners[] =
    R"([{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"rs-uid","controller":true},)"
    R"({"apiVersion":"v1","kind":"ConfigMap","name":"cfg","uid":"cm-uid"}])";

TEST(IndexTest, NamespaceIndexUsesTheNamespaceAndEmptyForClusterScoped) {
  EXPECT_THAT(ValuesOf(IndexSpec::Namespace(), *MakeObject({.ns = "a"})), ElementsAre("a"));
  EXPECT_THAT(ValuesOf(IndexSpec::Namespace(), *MakeObject({.ns = ""})), ElementsAre(""));
}

TEST(IndexTest, LabelIndexUsesTheLabelValueWhenSet) {
  ObjectPtr o = MakeObject({.labels = {{"app", "web"}, {"tier", "front"}}});
  EXPECT_THAT(ValuesOf(IndexSpec::Label("by-app", "app"), *o), ElementsAre("web"));
  EXPECT_THAT(ValuesOf(IndexSpec::Label("by-x", "x"), *o), IsEmpty());
}

TEST(IndexTest, FieldIndexUsesTheValuesAtThePath) {
  ObjectPtr o = MakeObject({.kind = "Pod", .extra = R"("spec":{"nodeName":"node-1"})"});
  EXPECT_THAT(ValuesOf(IndexSpec::Field("by-node", "spec.nodeName"), *o), ElementsAre("node-1"));
}

TEST(IndexTest, OwnerIndexUsesTheControllerByKindAndNameByDefault) {
  ObjectPtr o = MakeObject({.owner_references = kOwners});
  EXPECT_THAT(ValuesOf(IndexSpec::Owner("o"), *o), ElementsAre("ReplicaSet/web-1"));
  EXPECT_THAT(ValuesOf(IndexSpec::Owner("o", {.by = OwnerIndex::By::kUid}), *o),
              ElementsAre("rs-uid"));
  EXPECT_THAT(ValuesOf(IndexSpec::Owner("o", {.controller_only = false}), *o),
              ElementsAre("ReplicaSet/web-1", "ConfigMap/cfg"));
  EXPECT_THAT(ValuesOf(IndexSpec::Owner("o", {.kind = "Deployment"}), *o), IsEmpty());
  EXPECT_THAT(ValuesOf(IndexSpec::Owner("o", {}), *MakeObject({})), IsEmpty());
}

TEST(IndexTest, CustomIndexCallsTheFunction) {
  auto spec = IndexSpec::Custom("by-name-length", [](const client::Object& o, auto emit) {
    emit(std::to_string(o.name().size()));
  });
  EXPECT_THAT(ValuesOf(spec, *MakeObject({.name = "abcd"})), ElementsAre("4"));
}

TEST(IndexTest, InvalidSpecsAreRejectedWithTheIndexName) {
  EXPECT_THAT(IndexFunction::Create(IndexSpec::Label("l", "")).status().message(),
              HasSubstr("\"l\""));
  EXPECT_THAT(IndexFunction::Create(IndexSpec::Field("f", "a..b")).status().message(),
              HasSubstr("\"f\""));
  EXPECT_FALSE(IndexFunction::Create(IndexSpec::Label("", "x")).ok());
  EXPECT_FALSE(IndexFunction::Create(IndexSpec::Custom("c", nullptr)).ok());
}

TEST(IndexTest, DebugStringNamesTheKind) {
  EXPECT_EQ(IndexSpec::Field("by-node", "spec.nodeName").DebugString(),
            "by-node=field(spec.nodeName)");
  EXPECT_EQ(IndexSpec::Owner("o").DebugString(), "o=owner(*,kind/name,controller)");
}

}  // namespace
}  // namespace informerd::informer
