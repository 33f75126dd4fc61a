// Tests of the services' error helpers: the details an error carries, and what of them reaches
// a client through grpc::Status (decoded back with FromGrpc, as a client library would).
#include "server/service/status.h"

#include "absl/strings/cord.h"
#include "client/api_error.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"

namespace informerd::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusTest, InvalidFieldNamesTheFieldInTheMessageTheErrorInfoAndABadRequest) {
  const absl::Status s = InvalidField("spec.namespace", "at most 63 characters");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.namespace: at most 63 characters");
  std::optional<google::rpc::ErrorInfo> info = GetErrorInfo(s);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->reason(), "INVALID_FIELD");
  EXPECT_EQ(info->domain(), "informerd.io");
  EXPECT_EQ(info->metadata().at("field"), "spec.namespace");
  std::optional<google::rpc::BadRequest> bad = GetBadRequest(s);
  ASSERT_TRUE(bad.has_value());
  ASSERT_EQ(bad->field_violations_size(), 1);
  EXPECT_EQ(bad->field_violations(0).field(), "spec.namespace");
  EXPECT_EQ(bad->field_violations(0).description(), "at most 63 characters");
}

TEST(StatusTest, DetailsSurviveTheTripThroughGrpcStatus) {
  const absl::Status s = WithResource(
      Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND, "informer \"x\" does not exist",
            {{"informer_id", "x"}}),
      "informer", "x", "not found");
  const grpc::Status g = ToGrpc(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "informer \"x\" does not exist");
  google::rpc::Status rpc;
  ASSERT_TRUE(rpc.ParseFromString(g.error_details()));
  EXPECT_EQ(rpc.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(rpc.details_size(), 2);

  const absl::Status back = FromGrpc(g);
  EXPECT_EQ(back.code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(GetErrorInfo(back).has_value());
  EXPECT_EQ(GetErrorInfo(back)->reason(), "INFORMER_NOT_FOUND");
  EXPECT_EQ(GetErrorInfo(back)->metadata().at("informer_id"), "x");
  ASSERT_TRUE(GetResourceInfo(back).has_value());
  EXPECT_EQ(GetResourceInfo(back)->resource_type(), "informer");
  EXPECT_EQ(GetResourceInfo(back)->resource_name(), "x");
}

TEST(StatusTest, AnErrorWithoutErrorInfoGetsTheReasonOfItsCode) {
  const absl::Status back = FromGrpc(ToGrpc(absl::UnavailableError("try later")));
  ASSERT_TRUE(GetErrorInfo(back).has_value());
  EXPECT_EQ(GetErrorInfo(back)->reason(), "UNAVAILABLE");
  EXPECT_EQ(GetErrorInfo(back)->domain(), "informerd.io");
  EXPECT_EQ(ReasonForCode(absl::StatusCode::kInvalidArgument), v1::INVALID_REQUEST);
  EXPECT_EQ(ReasonForCode(absl::StatusCode::kDeadlineExceeded), v1::TIMEOUT);
  EXPECT_EQ(ReasonForCode(absl::StatusCode::kDataLoss), v1::INTERNAL);
  EXPECT_EQ(ReasonForCode(absl::StatusCode::kOk), v1::ERROR_REASON_UNSPECIFIED);
}

TEST(StatusTest, AKubernetesErrorIsAnApiServerErrorWithItsReasonAndNoInternalPayload) {
  const absl::Status forbidden = client::ToStatus(
      {.code = 403, .reason = "Forbidden", .message = "secrets is forbidden: User \"x\" cannot list"});
  const grpc::Status g = ToGrpc(forbidden);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  google::rpc::Status rpc;
  ASSERT_TRUE(rpc.ParseFromString(g.error_details()));
  ASSERT_EQ(rpc.details_size(), 1);  // the client's own payload is not sent
  const absl::Status back = FromGrpc(g);
  ASSERT_TRUE(GetErrorInfo(back).has_value());
  EXPECT_EQ(GetErrorInfo(back)->reason(), "API_SERVER_ERROR");
  EXPECT_EQ(GetErrorInfo(back)->metadata().at("kubernetes_reason"), "Forbidden");
  EXPECT_EQ(GetErrorInfo(back)->metadata().at("http_code"), "403");
}

TEST(StatusTest, PrefixedKeepsTheDetails) {
  const absl::Status s = Prefixed("informers[2]: ", InvalidField("spec.kind", "required"));
  EXPECT_EQ(s.message(), "informers[2]: spec.kind: required");
  ASSERT_TRUE(GetErrorInfo(s).has_value());
  EXPECT_EQ(GetErrorInfo(s)->metadata().at("field"), "spec.kind");
  EXPECT_TRUE(Prefixed("x", absl::OkStatus()).ok());
}

TEST(StatusTest, TheApiServersRetryAfterBecomesARetryInfo) {
  const absl::Status throttled = client::ToStatus(
      {.code = 429, .reason = "TooManyRequests", .message = "slow down", .retry_after_seconds = 3});
  google::rpc::Status rpc = ToRpcStatus(throttled);
  google::rpc::RetryInfo retry;
  bool found = false;
  for (const google::protobuf::Any& any : rpc.details()) found = found || any.UnpackTo(&retry);
  ASSERT_TRUE(found);
  EXPECT_EQ(retry.retry_delay().seconds(), 3);
  // Without a Retry-After, no RetryInfo.
  rpc = ToRpcStatus(client::ToStatus({.code = 500, .reason = "InternalError", .message = "x"}));
  for (const google::protobuf::Any& any : rpc.details()) EXPECT_FALSE(any.UnpackTo(&retry));
}

TEST(StatusTest, OkIsOkWithoutDetails) {
  const grpc::Status g = ToGrpc(absl::OkStatus());
  EXPECT_TRUE(g.ok());
  EXPECT_TRUE(g.error_details().empty());
  EXPECT_TRUE(FromGrpc(g).ok());
}

TEST(StatusTest, AClientWithoutDetailsStillGetsCodeAndMessage) {
  const absl::Status back = FromGrpc(grpc::Status(grpc::StatusCode::INTERNAL, "boom", "\xff\xff"));
  EXPECT_EQ(back.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(back.message(), "boom");
  EXPECT_FALSE(GetErrorInfo(back).has_value());
  EXPECT_THAT(std::string(back.message()), Not(HasSubstr("\xff")));
}

}  // namespace
}  // namespace informerd::service
