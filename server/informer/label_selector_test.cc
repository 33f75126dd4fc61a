#include "server/informer/label_selector.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/informer/test_objects.h"

namespace informerd::informer {
namespace {

using ::testing::HasSubstr;
using testing::MakeObject;

ObjectPtr WithLabels(std::vector<std::pair<std::string, std::string>> labels) {
  return MakeObject({.labels = std::move(labels)});
}

bool Match(absl::string_view selector, std::vector<std::pair<std::string, std::string>> labels) {
  absl::StatusOr<LabelSelector> s = LabelSelector::Parse(selector);
  EXPECT_TRUE(s.ok()) << selector << ": " << s.status();
  return s.ok() && s->Matches(*WithLabels(std::move(labels)));
}

// apimachinery's labels TestSelectorParse good and bad strings.
TEST(LabelSelectorTest, ParsesEveryFormOfTheSyntax) {
  for (const char* good : {"", "x=a,y=b,z=c", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ",
                           "!x", "x>1", "x>1,z<5", "x in (a)", "x in (a,b)", "x notin (a)",
                           "x in (,a)", "x in (a,)", "x == a", "  x  ", "x,y", "notin=in",
                           "in in (a)", "example.com/app=web", "x in (a) ,y", "a.b-c_d=e.f-g_h"}) {
    EXPECT_TRUE(LabelSelector::Parse(good).ok()) << good << ": " << LabelSelector::Parse(good).status();
  }
  for (const char* bad : {"x=a||y=b", "x==a==b", "!x=a", "x<a", "x>1.5", "x in (a", "x in a",
                          "x in ()", "x notin ()", "x=a b", "=a", "x,", ",x", "x y", "x in (a b)",
                          "-x=a", "x=-a", "Bad.Prefix/x=a", "/x=a", "x/=a", "a/b/c=d",
                          "x=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}) {
    absl::StatusOr<LabelSelector> s = LabelSelector::Parse(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(LabelSelectorTest, ParseErrorsNameTheOffendingPart) {
  EXPECT_THAT(LabelSelector::Parse("app in (web").status().message(),
              HasSubstr("missing ')' after the values of \"app\""));
  EXPECT_THAT(LabelSelector::Parse("app=web,-x=1").status().message(),
              HasSubstr("invalid label key \"-x\""));
  EXPECT_THAT(LabelSelector::Parse("app=we b").status().message(), HasSubstr("'b'"));
  EXPECT_THAT(LabelSelector::Parse("tier=f@o").status().message(),
              HasSubstr("invalid value \"f@o\" for label \"tier\""));
  EXPECT_THAT(LabelSelector::Parse("n>x").status().message(), HasSubstr("must be an integer"));
  EXPECT_THAT(LabelSelector::Parse("x in ()").status().message(), HasSubstr("must not be empty"));
  EXPECT_THAT(LabelSelector::Parse("app in (web").status().message(),
              HasSubstr("label selector \"app in (web\""));
}

// apimachinery's TestSelectorMatches / TestSetMatches.
TEST(LabelSelectorTest, MatchesAsTheApiServerDoes) {
  EXPECT_TRUE(Match("", {{"x", "y"}}));
  EXPECT_TRUE(Match("x=y", {{"x", "y"}}));
  EXPECT_TRUE(Match("x=y,z=w", {{"x", "y"}, {"z", "w"}}));
  EXPECT_TRUE(Match("x!=y,z!=w", {{"x", "z"}, {"z", "a"}}));
  EXPECT_TRUE(Match("notin=in", {{"notin", "in"}}));
  EXPECT_TRUE(Match("x", {{"x", "z"}}));
  EXPECT_TRUE(Match("!x", {{"y", "z"}}));
  EXPECT_TRUE(Match("x>1", {{"x", "2"}}));
  EXPECT_TRUE(Match("x<1", {{"x", "0"}}));
  EXPECT_TRUE(Match("x in (a,b)", {{"x", "b"}}));
  EXPECT_TRUE(Match("x notin (a,b)", {{"x", "c"}}));
  EXPECT_TRUE(Match("x notin (a,b)", {}));
  EXPECT_TRUE(Match("x!=a", {})) << "!= matches when the label is absent";
  EXPECT_TRUE(Match("x=", {{"x", ""}}));
  EXPECT_TRUE(Match("x in (,a)", {{"x", ""}}));

  EXPECT_FALSE(Match("x=z", {}));
  EXPECT_FALSE(Match("x=y", {{"x", "z"}}));
  EXPECT_FALSE(Match("x=y,z=w", {{"x", "w"}, {"z", "w"}}));
  EXPECT_FALSE(Match("x!=y,z!=w", {{"x", "z"}, {"z", "w"}}));
  EXPECT_FALSE(Match("x", {{"y", "z"}}));
  EXPECT_FALSE(Match("!x", {{"x", "z"}}));
  EXPECT_FALSE(Match("x>1", {{"x", "0"}}));
  EXPECT_FALSE(Match("x<1", {{"x", "2"}}));
  EXPECT_FALSE(Match("x>1", {{"x", "abc"}}));
  EXPECT_FALSE(Match("x>1", {}));
  EXPECT_FALSE(Match("x in (a,b)", {{"x", "c"}}));
  EXPECT_FALSE(Match("x in (a,b)", {}));
  EXPECT_FALSE(Match("x notin (a,b)", {{"x", "a"}}));
  EXPECT_FALSE(Match("x=", {}));
}

TEST(LabelSelectorTest, ToStringIsCanonical) {
  EXPECT_EQ(LabelSelector::Parse("z=1, a in (c,b,b), !m,k").value().ToString(),
            "a in (b,c),k,!m,z=1");
  EXPECT_EQ(LabelSelector::Parse("x==y").value().ToString(), "x=y");
  EXPECT_TRUE(LabelSelector::Parse("").value().Empty());
  EXPECT_TRUE(LabelSelector().Matches(*WithLabels({})));
}

// A client's selector bounds what parsing it costs: its bytes and its requirements, and the
// error quotes only its start.
TEST(LabelSelectorTest, HugeSelectorsAreRefusedWithAShortError) {
  std::string many;
  for (int i = 0; i < 1001; ++i) absl::StrAppend(&many, i == 0 ? "" : ",", "k", i, "=v");
  absl::Status s = LabelSelector::Parse(many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("at most 1000 requirements"));
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_TRUE(LabelSelector::Parse(many.substr(0, many.rfind(','))).ok());  // 1000 are fine
  const std::string long_set = absl::StrCat("k in (", std::string(70000, 'a'), ")");
  s = LabelSelector::Parse(long_set).status();
  EXPECT_THAT(s.message(), HasSubstr("at most 65536 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("(70007 bytes)"));
  EXPECT_LT(s.message().size(), 200u);
}

}  // namespace
}  // namespace informerd::informer
