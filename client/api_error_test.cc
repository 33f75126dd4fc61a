#include "client/api_error.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

// Bodies as the kube-apiserver writes them.
constexpr char kExpired[] =
    R"j({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
    R"j("message":"too old resource version: 5 (10)","reason":"Expired","code":410})j";
constexpr char kExpiredContinue[] =
    R"j({"kind":"Status","apiVersion":"v1","metadata":{"continue":"eyJ2IjoxfQ"},)j"
    R"j("status":"Failure","message":"The provided continue parameter is too old",)j"
    R"j("reason":"Expired","code":410})j";
constexpr char kTooMany[] =
    R"j({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
    R"j("message":"Too many requests, please try again later.","reason":"TooManyRequests",)j"
    R"j("details":{"retryAfterSeconds":3},"code":429})j";
constexpr char kNotFound[] =
    R"j({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
    R"j("message":"configmaps \"cm-1\" not found","reason":"NotFound",)j"
    R"j("details":{"name":"cm-1","kind":"configmaps"},"code":404})j";
constexpr char kTooLarge[] =
    R"j({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
    R"j("message":"Too large resource version: 99, current: 10","reason":"Timeout",)j"
    R"j("details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],)j"
    R"j("retryAfterSeconds":1},"code":504})j";

TEST(ApiErrorTest, ParsesEveryFieldOfAStatus) {
  absl::StatusOr<ApiError> e = ParseApiError(kTooLarge, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->code, 504);
  EXPECT_EQ(e->reason, "Timeout");
  EXPECT_EQ(e->message, "Too large resource version: 99, current: 10");
  EXPECT_EQ(e->retry_after_seconds, 1);
  EXPECT_THAT(e->causes, ElementsAre(StatusCause{"ResourceVersionTooLarge",
                                                 "Too large resource version", ""}));
}

TEST(ApiErrorTest, StatusRoundTripsEveryField) {
  ApiError e{.code = 409, .reason = "Conflict", .message = "m", .name = "n", .group = "apps",
             .kind = "deployments", .uid = "u", .causes = {{"t", "m", "f"}, {"t2", "", ""}},
             .retry_after_seconds = 7, .continue_token = "c:1"};
  absl::Status s = ToStatus(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "m");
  EXPECT_THAT(GetApiError(s), Optional(e));
}

TEST(ApiErrorTest, ExpiredIsRecognisedFromReasonAndFromBare410) {
  absl::Status s = ApiErrorFromResponse(410, kExpired, "");
  EXPECT_TRUE(IsExpired(s));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "too old resource version: 5 (10)");
  // A proxy's 410 without a Status body is "Gone", which the reflector treats alike.
  absl::Status bare = ApiErrorFromResponse(410, "<html>gone</html>", "");
  EXPECT_TRUE(IsExpired(bare));
  EXPECT_EQ(ApiErrorReason(bare), "Gone");
  EXPECT_THAT(std::string(bare.message()), HasSubstr("<html>gone</html>"));
  EXPECT_FALSE(client::IsNotFound(s));
}

TEST(ApiErrorTest, ExpiredContinueKeepsTheFreshToken) {
  std::optional<ApiError> e = GetApiError(ApiErrorFromResponse(410, kExpiredContinue, ""));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->continue_token, "eyJ2IjoxfQ");
}

TEST(ApiErrorTest, TooManyRequestsCarriesRetryAfterFromDetailsOrHeader) {
  absl::Status s = ApiErrorFromResponse(429, kTooMany, "");
  EXPECT_TRUE(IsTooManyRequests(s));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(RetryAfter(s), Optional(absl::Seconds(3)));
  absl::Status header_only = ApiErrorFromResponse(429, "", " 12 ");
  EXPECT_TRUE(IsTooManyRequests(header_only));
  EXPECT_THAT(RetryAfter(header_only), Optional(absl::Seconds(12)));
  EXPECT_EQ(RetryAfter(ApiErrorFromResponse(404, kNotFound, "")), std::nullopt);
}

TEST(ApiErrorTest, EachReasonHasItsPredicateAndAbslCode) {
  struct Case {
    int code;
    const char* reason;
    bool (*predicate)(const absl::Status&);
    absl::StatusCode absl_code;
  };
  const Case cases[] = {
      {404, "NotFound", client::IsNotFound, absl::StatusCode::kNotFound},
      {403, "Forbidden", IsForbidden, absl::StatusCode::kPermissionDenied},
      {401, "Unauthorized", IsUnauthorized, absl::StatusCode::kUnauthenticated},
      {409, "Conflict", IsConflict, absl::StatusCode::kAborted},
      {409, "AlreadyExists", client::IsAlreadyExists, absl::StatusCode::kAlreadyExists},
      {500, "InternalError", IsInternalError, absl::StatusCode::kInternal},
      {504, "Timeout", IsTimeout, absl::StatusCode::kDeadlineExceeded},
      {422, "Invalid", IsInvalid, absl::StatusCode::kInvalidArgument},
      {400, "BadRequest", IsBadRequest, absl::StatusCode::kInvalidArgument},
      {429, "TooManyRequests", IsTooManyRequests, absl::StatusCode::kResourceExhausted},
  };
  for (const Case& c : cases) {
    absl::Status s = ToStatus(ApiError{.code = c.code, .reason = c.reason, .message = "x"});
    EXPECT_TRUE(c.predicate(s)) << c.reason;
    EXPECT_EQ(s.code(), c.absl_code) << c.reason;
    EXPECT_EQ(ApiErrorCode(s), c.code);
  }
  EXPECT_FALSE(IsConflict(ToStatus(ApiError{.code = 409, .reason = "AlreadyExists"})));
}

TEST(ApiErrorTest, TooLargeResourceVersionNeedsItsCause) {
  EXPECT_TRUE(IsTooLargeResourceVersion(ApiErrorFromResponse(504, kTooLarge, "")));
  EXPECT_FALSE(IsTooLargeResourceVersion(
      ToStatus(ApiError{.code = 504, .reason = "Timeout", .message = "slow"})));
}

TEST(ApiErrorTest, ErrorsWithoutPayloadMatchNoPredicate) {
  absl::Status s = absl::UnavailableError("connection refused");
  EXPECT_EQ(GetApiError(s), std::nullopt);
  EXPECT_FALSE(IsExpired(s));
  EXPECT_FALSE(client::IsNotFound(s));
  EXPECT_EQ(ApiErrorCode(s), 0);
  EXPECT_EQ(RetryAfter(s), std::nullopt);
  EXPECT_FALSE(client::IsNotFound(absl::OkStatus()));
}

TEST(ApiErrorTest, ParseRejectsWhatIsNotAStatus) {
  EXPECT_FALSE(ParseApiError(R"j({"kind":"ConfigMap"})j", 200).ok());
  EXPECT_FALSE(ParseApiError("[1,2]", 200).ok());
  EXPECT_FALSE(ParseApiError("{\"kind\":", 200).ok());
  EXPECT_FALSE(ParseApiError("", 200).ok());
  // A Status without a reason gets one from the code.
  absl::StatusOr<ApiError> e = ParseApiError(R"j({"kind":"Status","code":503})j", 0);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->reason, "ServiceUnavailable");
}

TEST(ApiErrorTest, DescribeStatusSaysCodeMessageAndReasonWithoutPayloadBytes) {
  const absl::Status forbidden =
      ToStatus({.code = 403, .reason = "Forbidden", .message = "secrets is forbidden"});
  EXPECT_EQ(DescribeStatus(forbidden), "PERMISSION_DENIED: secrets is forbidden (Forbidden)");
  EXPECT_THAT(forbidden.ToString(), HasSubstr("informerd.io"));  // the payload DescribeStatus omits
  EXPECT_EQ(DescribeStatus(absl::UnavailableError("connection refused")),
            "UNAVAILABLE: connection refused");
  EXPECT_EQ(DescribeStatus(absl::OkStatus()), "");
}

TEST(ApiErrorTest, ResponseWithEmptyBodyStillNamesTheCode) {
  absl::Status s = ApiErrorFromResponse(502, "", "");
  EXPECT_THAT(std::string(s.message()), HasSubstr("HTTP 502"));
  EXPECT_EQ(ApiErrorReason(s), "InternalError");
}

}  // namespace
}  // namespace informerd::client
