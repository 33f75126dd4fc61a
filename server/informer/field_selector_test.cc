#include "server/informer/field_selector.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::HasSubstr;
using testing::MakeObject;

bool Match(absl::string_view selector, const client::Object& object) {
  absl::StatusOr<FieldSelector> s = FieldSelector::Parse(selector);
  EXPECT_TRUE(s.ok()) << selector << ": " << s.status();
  return s.ok() && s->Matches(object);
}

TEST(FieldSelectorTest, MatchesNameAndNamespace) {
  ObjectPtr o = MakeObject({.ns = "team-a", .name = "web"});
  EXPECT_TRUE(Match("metadata.name=web", *o));
  EXPECT_TRUE(Match("metadata.name==web", *o));
  EXPECT_TRUE(Match("metadata.namespace=team-a,metadata.name!=db", *o));
  EXPECT_FALSE(Match("metadata.namespace!=team-a", *o));
  EXPECT_FALSE(Match("metadata.name=db", *o));
  EXPECT_TRUE(Match("", *o));
}

TEST(FieldSelectorTest, OtherFieldsAreReadFromTheJsonAndMissingOnesAreEmpty) {
  ObjectPtr scheduled = MakeObject({.kind = "Pod", .extra = R"("spec":{"nodeName":"n1"})"});
  ObjectPtr pending = MakeObject({.kind = "Pod", .extra = R"("spec":{})"});
  EXPECT_TRUE(Match("spec.nodeName=n1", *scheduled));
  EXPECT_FALSE(Match("spec.nodeName=n1", *pending));
  EXPECT_TRUE(Match("spec.nodeName=", *pending)) << "unscheduled pods, as on the API server";
  EXPECT_TRUE(Match("spec.nodeName!=", *scheduled));
}

TEST(FieldSelectorTest, EscapedCommasAndEqualsBelongToTheValue) {
  ObjectPtr o = MakeObject({.extra = R"("data":{"k":"a,b=c\\d"})"});
  FieldSelector s = FieldSelector::Parse(R"(data.k=a\,b\=c\\d)").value();
  ASSERT_EQ(s.terms().size(), 1u);
  EXPECT_EQ(s.terms()[0].value, R"(a,b=c\d)");
  EXPECT_TRUE(s.Matches(*o));
  EXPECT_EQ(s.ToString(), R"(data.k=a\,b\=c\\d)");
}

TEST(FieldSelectorTest, ParseErrorsNameTheTerm) {
  EXPECT_THAT(FieldSelector::Parse("metadata.name=a,spec").status().message(),
              HasSubstr("term \"spec\": expected '=', '==' or '!='"));
  EXPECT_THAT(FieldSelector::Parse("=a").status().message(), HasSubstr("field name is empty"));
  EXPECT_THAT(FieldSelector::Parse(R"(a=\x)").status().message(),
              HasSubstr("invalid escape sequence"));
  EXPECT_THAT(FieldSelector::Parse("a..b=c").status().message(), HasSubstr("empty segment"));
  EXPECT_EQ(FieldSelector::Parse("x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FieldSelectorTest, HugeSelectorsAreRefusedWithAShortError) {
  std::string many;
  for (int i = 0; i < 1001; ++i) absl::StrAppend(&many, i == 0 ? "" : ",", "metadata.name=n", i);
  absl::Status s = FieldSelector::Parse(many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("at most 1000 terms"));
  EXPECT_LT(s.message().size(), 300u);
  s = FieldSelector::Parse(absl::StrCat("metadata.name=", std::string(70000, 'a'))).status();
  EXPECT_THAT(s.message(), HasSubstr("at most 65536 bytes"));
  EXPECT_LT(s.message().size(), 200u);
}

TEST(FieldSelectorTest, RequiredNamespaceIsFoundOnlyForEquality) {
  EXPECT_EQ(*FieldSelector::Parse("metadata.namespace=a").value().RequiredNamespace(), "a");
  EXPECT_EQ(FieldSelector::Parse("metadata.namespace!=a").value().RequiredNamespace(), nullptr);
}

}  // namespace
}  // namespace informerd::informer
