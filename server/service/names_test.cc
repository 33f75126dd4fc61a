// Tests of the name rules the services share.
#include "server/service/names.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;

TEST(NamesTest, LabelsAreLowercaseAlphanumericWithInnerDashes) {
  for (const char* ok : {"a", "web-1", "0", "a-b-c", "x9"}) {
    EXPECT_EQ(Dns1123LabelError(ok), "") << ok;
  }
  EXPECT_EQ(Dns1123LabelError(""), "required");
  EXPECT_THAT(Dns1123LabelError("Web"), HasSubstr("only lowercase letters, digits and '-'"));
  EXPECT_THAT(Dns1123LabelError("a.b"), HasSubstr("only lowercase"));
  EXPECT_THAT(Dns1123LabelError("-a"), HasSubstr("must start and end with a letter or digit"));
  EXPECT_THAT(Dns1123LabelError("a-"), HasSubstr("must start and end"));
  EXPECT_EQ(Dns1123LabelError(std::string(63, 'a')), "");
  EXPECT_THAT(Dns1123LabelError(std::string(64, 'a')), HasSubstr("at most 63 characters"));
  EXPECT_THAT(Dns1123LabelError("abcd", 3), HasSubstr("at most 3 characters"));
}

TEST(NamesTest, SubdomainsAreLabelsJoinedByDots) {
  for (const char* ok : {"apps", "example.com", "a-1.b-2.c", "x"}) {
    EXPECT_EQ(Dns1123SubdomainError(ok), "") << ok;
  }
  EXPECT_EQ(Dns1123SubdomainError(""), "required");
  EXPECT_THAT(Dns1123SubdomainError("a..b"), HasSubstr("each part between dots"));
  EXPECT_THAT(Dns1123SubdomainError("a.-b"), HasSubstr("must start and end"));
  EXPECT_THAT(Dns1123SubdomainError(".a"), HasSubstr("must start and end"));
  EXPECT_THAT(Dns1123SubdomainError("a_b"),
              HasSubstr("only lowercase letters, digits, '-' and '.'"));
  EXPECT_EQ(Dns1123SubdomainError(std::string(253, 'a')), "");
  EXPECT_THAT(Dns1123SubdomainError(std::string(254, 'a')), HasSubstr("at most 253"));
  EXPECT_THAT(Dns1123SubdomainError("a.bcd", 4), HasSubstr("at most 4"));
}

TEST(NamesTest, AnErrorShowsAtMostTheStartOfTheNameEscaped) {
  const std::string huge(1 << 20, 'A');
  const std::string error = Dns1123LabelError(huge);
  EXPECT_LT(error.size(), 200u);
  EXPECT_THAT(error, HasSubstr("(1048576 characters)"));
  EXPECT_THAT(Dns1123SubdomainError("a\nb"), HasSubstr("\"a\\nb\""));
}

}  // namespace
}  // namespace informerd::service
