#include "server/informer/field_path.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MakeObject;
using testing::TestObject;

std::vector<std::string> ValuesOf(absl::string_view path, const client::Object& object) {
  std::vector<std::string> out;
  FieldPath::Parse(path).value().Values(object, [&](absl::string_view v) { out.emplace_back(v); });
  return out;
}

TEST(FieldPathTest, MetadataFieldsComeFromTheParsedObject) {
  ObjectPtr o = MakeObject({.ns = "ns1", .name = "n", .rv = "42", .labels = {{"app", "web"}}});
  EXPECT_THAT(ValuesOf("metadata.name", *o), ElementsAre("n"));
  EXPECT_THAT(ValuesOf("metadata.namespace", *o), ElementsAre("ns1"));
  EXPECT_THAT(ValuesOf("metadata.resourceVersion", *o), ElementsAre("42"));
  EXPECT_THAT(ValuesOf("metadata.uid", *o), ElementsAre("uid-ns1-n"));
  EXPECT_THAT(ValuesOf("kind", *o), ElementsAre("ConfigMap"));
  EXPECT_THAT(ValuesOf("apiVersion", *o), ElementsAre("v1"));
  EXPECT_THAT(ValuesOf("metadata.labels.app", *o), ElementsAre("web"));
  EXPECT_THAT(ValuesOf("metadata.labels.missing", *o), IsEmpty());
}

TEST(FieldPathTest, NestedStringsNumbersAndBooleansAreRead) {
  ObjectPtr o = MakeObject(
      {.extra = R"("spec":{"nodeName":"node-1","replicas":3,"paused":true,"esc":"a\"b"})"});
  EXPECT_THAT(ValuesOf("spec.nodeName", *o), ElementsAre("node-1"));
  EXPECT_THAT(ValuesOf("spec.replicas", *o), ElementsAre("3"));
  EXPECT_THAT(ValuesOf("spec.paused", *o), ElementsAre("true"));
  EXPECT_THAT(ValuesOf("spec.esc", *o), ElementsAre("a\"b")) << "strings are unescaped";
}

TEST(FieldPathTest, ArraysYieldEachScalarElement) {
  ObjectPtr o = MakeObject({.extra = R"("spec":{"finalizers":["a","b",{"x":1},"c"]})"});
  EXPECT_THAT(ValuesOf("spec.finalizers", *o), ElementsAre("a", "b", "c"));
}

TEST(FieldPathTest, ArraysInTheMiddleOfThePathAreWalkedInto) {
  ObjectPtr o = MakeObject({.extra = R"("spec":{"template":{"spec":{"volumes":[)"
                                     R"({"name":"a","configMap":{"name":"settings"}},)"
                                     R"({"name":"b","secret":{"secretName":"token"}},)"
                                     R"({"name":"c","configMap":{"name":"shared"}},)"
                                     R"({"name":"d","projected":{"sources":[)"
                                     R"({"configMap":{"name":"p1"}},{"configMap":{"name":"p2"}}]}}]}}})"});
  EXPECT_THAT(ValuesOf("spec.template.spec.volumes.configMap.name", *o),
              ElementsAre("settings", "shared"));
  EXPECT_THAT(ValuesOf("spec.template.spec.volumes.secret.secretName", *o), ElementsAre("token"));
  EXPECT_THAT(ValuesOf("spec.template.spec.volumes.name", *o), ElementsAre("a", "b", "c", "d"));
  EXPECT_THAT(ValuesOf("spec.template.spec.volumes.projected.sources.configMap.name", *o),
              ElementsAre("p1", "p2"))
      << "arrays within arrays";
  EXPECT_THAT(ValuesOf("spec.template.spec.volumes.missing.name", *o), IsEmpty());
}

TEST(FieldPathTest, DeeplyNestedArraysAreWalkedOnlySoDeep) {
  // An object from the API server with arrays nested far deeper than any path needs: evaluating
  // a path into it neither overflows the stack nor yields what lies below the bound.
  auto nested = [](int levels) {
    return absl::StrCat(R"("spec":{"a":)", std::string(levels, '['), R"({"b":"deep"})",
                        std::string(levels, ']'), "}");
  };
  ObjectPtr shallow = MakeObject({.extra = nested(3)});
  EXPECT_THAT(ValuesOf("spec.a.b", *shallow), ElementsAre("deep"));
  ObjectPtr deep = MakeObject({.extra = nested(900)});
  EXPECT_THAT(ValuesOf("spec.a.b", *deep), IsEmpty());
}

TEST(FieldPathTest, MissingNullAndObjectValuesYieldNothing) {
  ObjectPtr o = MakeObject({.extra = R"("spec":{"a":null,"b":{"c":1}},"status":"x")"});
  EXPECT_THAT(ValuesOf("spec.a", *o), IsEmpty());
  EXPECT_THAT(ValuesOf("spec.b", *o), IsEmpty());
  EXPECT_THAT(ValuesOf("spec.zzz", *o), IsEmpty());
  EXPECT_THAT(ValuesOf("status.phase", *o), IsEmpty()) << "status is a string, not an object";
  EXPECT_EQ(FieldPath::Parse("spec.zzz").value().FirstValue(*o), "");
}

TEST(FieldPathTest, MetadataGenerationIsReadFromTheJson) {
  ObjectPtr o = MakeObject({.extra_metadata = R"("generation":5)"});
  EXPECT_THAT(ValuesOf("metadata.generation", *o), ElementsAre("5"));
  EXPECT_THAT(ValuesOf("metadata.generation", *MakeObject({})), IsEmpty());
}

TEST(FieldPathTest, BracketedSegmentsMayContainDots) {
  ObjectPtr o = MakeObject({.extra_metadata = R"("annotations":{"example.com/a.b":"x"})"});
  FieldPath path = FieldPath::Parse("metadata.annotations['example.com/a.b']").value();
  EXPECT_THAT(path.segments(), ElementsAre("metadata", "annotations", "example.com/a.b"));
  EXPECT_THAT(ValuesOf(R"(metadata.annotations["example.com/a.b"])", *o), ElementsAre("x"));
  EXPECT_THAT(FieldPath::Parse("['a.b'].c['d']").value().segments(), ElementsAre("a.b", "c", "d"));
  EXPECT_FALSE(FieldPath::Parse("a['b").ok());
  EXPECT_FALSE(FieldPath::Parse("a[b]").ok());
  EXPECT_FALSE(FieldPath::Parse("a['']").ok());
  EXPECT_FALSE(FieldPath::Parse("a['b']c").ok());
}

TEST(FieldPathTest, EmptyPathsAndSegmentsAreRejected) {
  EXPECT_EQ(FieldPath::Parse("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(FieldPath::Parse("spec..x").status().message(), HasSubstr("empty segment"));
  EXPECT_THAT(FieldPath::Parse(".spec").status().message(), HasSubstr("spec"));
  EXPECT_FALSE(FieldPath::Parse("spec.").ok());
}

}  // namespace
}  // namespace informerd::informer
