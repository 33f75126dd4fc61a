#include "server/informer/transform.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::HasSubstr;
using testing::MakeObject;

constexpr char kManaged[] =
    R"("managedFields":[{"manager":"kubectl","operation":"Update","fieldsV1":{"f:data":{}}}])";

ObjectPtr Pod() {
  return MakeObject(
      {.ns = "ns",
       .name = "p",
       .rv = "9",
       .labels = {{"app", "web"}},
       .kind = "Pod",
       .extra_metadata = std::string(kManaged) +
                         R"(,"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","keep":"me"})",
       .extra = R"("spec":{"nodeName":"n1","containers":[{"name":"c","image":"i"}]},)"
                R"("status":{"phase":"Running","conditions":[{"type":"Ready"}],"podIP":"10.0.0.1"})"});
}

std::string Apply(TransformOptions options, ObjectPtr in) {
  auto t = Transform::Create(std::move(options)).value();
  absl::StatusOr<ObjectPtr> out = t->Apply(std::move(in));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::string((*out)->json()) : "";
}

TEST(TransformTest, ManagedFieldsAreStrippedByDefault) {
  ObjectPtr pod = Pod();
  auto t = Transform::Create({}).value();
  ObjectPtr out = t->Apply(pod).value();
  EXPECT_THAT(pod->json(), HasSubstr("managedFields"));
  EXPECT_THAT(out->json(), ::testing::Not(HasSubstr("managedFields")));
  EXPECT_THAT(out->json(), HasSubstr(R"("labels":{"app":"web"})"));
  EXPECT_THAT(out->json(), HasSubstr(R"("status":{"phase":"Running")"));
  EXPECT_EQ(out->key(), "ns/p");
  EXPECT_EQ(out->resource_version(), "9");
  EXPECT_EQ(out->label("app"), "web");
  EXPECT_LT(out->json().size(), pod->json().size());
}

TEST(TransformTest, AnObjectWithNothingToDropIsReturnedAsIs) {
  ObjectPtr plain = MakeObject({.name = "x"});
  auto t = Transform::Create({}).value();
  EXPECT_EQ(t->Apply(plain).value(), plain) << "no parse, no copy";
  // A managedFields key elsewhere (not in metadata) is not dropped, and nothing changes.
  ObjectPtr elsewhere = MakeObject({.extra = R"("spec":{"managedFields":1})"});
  EXPECT_EQ(t->Apply(elsewhere).value(), elsewhere);
}

TEST(TransformTest, DropPathsRemoveFieldsIncludingKeysWithDots) {
  const std::string out = Apply(
      {.drop_paths = {"status.conditions",
                      "metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"}},
      Pod());
  EXPECT_THAT(out, ::testing::Not(HasSubstr("conditions")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("last-applied")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("managedFields")));
  EXPECT_THAT(out, HasSubstr(R"("annotations":{"keep":"me"})"));
  EXPECT_THAT(out, HasSubstr(R"("status":{"phase":"Running","podIP":"10.0.0.1"})"));
}

TEST(TransformTest, KeepPathsProjectOntoThemPlusIdentity) {
  const std::string out = Apply({.keep_paths = {"spec.nodeName", "status.phase"}}, Pod());
  EXPECT_THAT(out, HasSubstr(R"("spec":{"nodeName":"n1"})"));
  EXPECT_THAT(out, HasSubstr(R"("status":{"phase":"Running"})"));
  EXPECT_THAT(out, HasSubstr(R"("kind":"Pod","apiVersion":"v1","metadata":{)"));
  EXPECT_THAT(out, HasSubstr(R"("annotations":)")) << "metadata is kept whole";
  EXPECT_THAT(out, ::testing::Not(HasSubstr("managedFields"))) << "drops apply inside kept parts";
  EXPECT_THAT(out, ::testing::Not(HasSubstr("containers")));
}

TEST(TransformTest, AShorterKeepPathKeepsTheWholeSubtree) {
  const std::string a = Apply({.keep_paths = {"status.phase", "status"}}, Pod());
  const std::string b = Apply({.keep_paths = {"status", "status.phase"}}, Pod());
  EXPECT_EQ(a, b);
  EXPECT_THAT(a, HasSubstr(R"("podIP":"10.0.0.1")"));
}

TEST(TransformTest, MetadataOnlyKeepsKindApiVersionAndMetadata) {
  const std::string out = Apply({.metadata_only = true}, Pod());
  EXPECT_THAT(out, ::testing::StartsWith(R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"p")"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("spec")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("status")));
  EXPECT_THAT(out, ::testing::EndsWith("}}"));
}

TEST(TransformTest, TransformsAreIdempotent) {
  for (TransformOptions options :
       {TransformOptions{}, TransformOptions{.keep_paths = {"spec"}},
        TransformOptions{.metadata_only = true},
        TransformOptions{.drop_paths = {"status"}}}) {
    auto t = Transform::Create(options).value();
    ObjectPtr once = t->Apply(Pod()).value();
    ObjectPtr twice = t->Apply(once).value();
    EXPECT_EQ(once->json(), twice->json());
  }
}

TEST(TransformTest, DroppingNeighboursFirstAndLastFieldsKeepsValidJson) {
  ObjectPtr o = MakeObject({.extra = R"("spec":{"a":1,"b":[2],"c":{"x":3},"d":"4"})"});
  struct Case {
    std::vector<std::string> drop;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{"spec.a"}, R"("spec":{"b":[2],"c":{"x":3},"d":"4"})"},
      {{"spec.d"}, R"("spec":{"a":1,"b":[2],"c":{"x":3}})"},
      {{"spec.b", "spec.c"}, R"("spec":{"a":1,"d":"4"})"},
      {{"spec.c", "spec.d"}, R"("spec":{"a":1,"b":[2]})"},
      {{"spec.b", "spec.c", "spec.d"}, R"("spec":{"a":1})"},
      {{"spec.a", "spec.b", "spec.c", "spec.d"}, R"("spec":{})"},
      {{"spec.a", "spec.d"}, R"("spec":{"b":[2],"c":{"x":3}})"},
      {{"spec.c.x", "spec.d"}, R"("spec":{"a":1,"b":[2],"c":{}})"},
  };
  for (const Case& c : cases) {
    const std::string out = Apply({.drop_paths = c.drop}, o);
    EXPECT_THAT(out, HasSubstr(c.want)) << ::testing::PrintToString(c.drop);
    EXPECT_TRUE(client::Object::Parse(out).ok()) << out;
  }
}

TEST(TransformTest, NonObjectValuesOnAPathAreLeftAlone) {
  ObjectPtr o = MakeObject({.extra = R"("spec":"opaque","data":[1,2])"});
  EXPECT_THAT(Apply({.drop_paths = {"spec.x", "data.y"}}, o), HasSubstr(R"("spec":"opaque","data":[1,2])"));
}

TEST(TransformTest, DisabledTransformIsTheIdentity) {
  auto t = Transform::Create({.strip_managed_fields = false}).value();
  EXPECT_TRUE(t->identity());
  ObjectPtr pod = Pod();
  EXPECT_EQ(t->Apply(pod).value(), pod);
  EXPECT_EQ(t->fingerprint(), "");
}

TEST(TransformTest, FingerprintsAreCanonical) {
  auto a = Transform::Create({.drop_paths = {"b", "a", "metadata['x.y']"}}).value();
  auto b = Transform::Create({.drop_paths = {"a", "metadata.managedFields", "b", "metadata['x.y']", "a"}}).value();
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(a->fingerprint(), "drop(a,b,metadata.managedFields,metadata['x.y'])");
  EXPECT_NE(Transform::Create({.metadata_only = true}).value()->fingerprint(),
            Transform::Create({}).value()->fingerprint());
}

TEST(TransformTest, InvalidOptionsAreRejected) {
  EXPECT_THAT(Transform::Create({.drop_paths = {"a..b"}}).status().message(), HasSubstr("drop path"));
  EXPECT_THAT(Transform::Create({.keep_paths = {""}}).status().message(), HasSubstr("keep path"));
  EXPECT_FALSE(Transform::Create({.keep_paths = {"spec"}, .metadata_only = true}).ok());
}

}  // namespace
}  // namespace informerd::informer
