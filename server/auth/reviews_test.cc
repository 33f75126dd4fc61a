#include "server/auth/reviews.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth/caller.h"

namespace informerd::auth {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ReviewsTest, TokenReviewBodyEscapesTheToken) {
  EXPECT_EQ(TokenReviewJson("a\"b\\c\n", {"informerd"}),
            R"({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"a\"b\\c\n","audiences":["informerd"]}})");
  EXPECT_EQ(TokenReviewJson("t", {}),
            R"({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"t"}})");
}

TEST(ReviewsTest, SubjectAccessReviewBodyCarriesTheWholeIdentity) {
  Identity id{.user = "system:serviceaccount:a:b",
              .uid = "u1",
              .groups = {"system:serviceaccounts", "g\x01"},
              .extra = {{"authentication.kubernetes.io/pod-name", {"p"}}}};
  Attributes a{.verb = "list", .group = "", .version = "v1", .resource = "configmaps",
               .namespace_name = "a"};
  EXPECT_EQ(
      SubjectAccessReviewJson(id, a),
      R"({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:serviceaccount:a:b","uid":"u1","groups":["system:serviceaccounts","g\u0001"],"extra":{"authentication.kubernetes.io/pod-name":["p"]},"resourceAttributes":{"verb":"list","group":"","version":"v1","resource":"configmaps","namespace":"a"}}})");
}

TEST(ReviewsTest, ParsesAnAuthenticatedTokenReview) {
  absl::StatusOr<TokenReviewResult> r = ParseTokenReview(R"({"kind":"TokenReview",
      "status":{"authenticated":true,"user":{"username":"alice","uid":"42",
      "groups":["dev","system:authenticated"],"extra":{"z":["1"],"a":["2","3"]}},
      "audiences":["informerd"]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->authenticated);
  EXPECT_EQ(r->identity.user, "alice");
  EXPECT_EQ(r->identity.uid, "42");
  EXPECT_THAT(r->identity.groups, ElementsAre("dev", "system:authenticated"));
  EXPECT_THAT(r->identity.extra,
              ElementsAre(Pair("a", ElementsAre("2", "3")), Pair("z", ElementsAre("1"))));
}

TEST(ReviewsTest, ARejectedTokenKeepsTheServersReason) {
  absl::StatusOr<TokenReviewResult> r = ParseTokenReview(
      R"({"status":{"authenticated":false,"error":"token has expired"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->authenticated);
  EXPECT_EQ(r->error, "token has expired");
  // No status at all (an old server, a proxy's page) is not a rejection: an error.
  EXPECT_EQ(ParseTokenReview(R"({"kind":"TokenReview"})").status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(ParseTokenReview("<html>").status().code(), absl::StatusCode::kInternal);
  // Authenticated without a user name is not an identity.
  EXPECT_THAT(ParseTokenReview(R"({"status":{"authenticated":true,"user":{}}})").status().message(),
              HasSubstr("status.user.username"));
}

TEST(ReviewsTest, ParsesAccessDecisions) {
  absl::StatusOr<AccessDecision> d = ParseSubjectAccessReview(
      R"({"status":{"allowed":true,"reason":"RBAC: allowed by RoleBinding \"r/a\""}})");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_THAT(d->reason, HasSubstr("RoleBinding"));
  d = ParseSubjectAccessReview(R"({"status":{"allowed":false,"evaluationError":"role not found"}})");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->reason, "role not found");
  EXPECT_FALSE(ParseSubjectAccessReview(R"({"spec":{}})").ok());
}

TEST(ReviewsTest, DescribesAttributesAsPeopleReadThem) {
  EXPECT_EQ((Attributes{.verb = "list", .resource = "configmaps", .namespace_name = "a"}).Describe(),
            "list configmaps in namespace \"a\"");
  EXPECT_EQ((Attributes{.verb = "work", .group = "informerd.io", .resource = "queues",
                        .name = "q1"})
                .Describe(),
            "work queues.informerd.io \"q1\"");
}

TEST(CallerTest, CertificateSubjectsMapToUserAndGroups) {
  // RFC 2253 order: the certificate's last RDN first.
  Identity id = IdentityFromSubject("CN=alice,O=system:masters,O=dev");
  EXPECT_EQ(id.user, "alice");
  EXPECT_THAT(id.groups, ElementsAre("dev", "system:masters"));
  EXPECT_EQ(id.method, "certificate");
  // Escapes (RFC 2253) and multi-valued RDNs.
  id = IdentityFromSubject("CN=bob\\, jr+O=a\\2Cb,OU=x,O=team");
  EXPECT_EQ(id.user, "bob, jr");
  EXPECT_THAT(id.groups, ElementsAre("team", "a,b"));
  EXPECT_EQ(IdentityFromSubject("O=only-a-group").user, "");
}

TEST(CallerTest, IdentitiesInternOnceAndKeysCannotCollide) {
  Callers callers;
  auto a = callers.Intern({.user = "a", .groups = {"b"}});
  auto same = callers.Intern({.user = "a", .groups = {"b"}});
  auto other = callers.Intern({.user = "a", .groups = {"b", ""}});
  EXPECT_EQ(a.get(), same.get());
  EXPECT_NE(a->id, other->id);
  // A user name containing a separator does not equal a user plus a group.
  EXPECT_NE((Identity{.user = "a;1:b"}).Key(), (Identity{.user = "a", .groups = {"b"}}).Key());
}

}  // namespace
}  // namespace informerd::auth
