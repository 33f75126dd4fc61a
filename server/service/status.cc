// Status: see status.h.
#include "server/service/status.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/api_error.h"
#include "google/protobuf/any.pb.h"

namespace informerd::service {
namespace {

constexpr absl::string_view kTypeUrlPrefix = "type.googleapis.com/";

template <typename Message>
std::string TypeUrl() {
  return absl::StrCat(kTypeUrlPrefix, Message::descriptor()->full_name());
}

template <typename Message>
void SetDetail(absl::Status& status, const Message& detail) {
  status.SetPayload(TypeUrl<Message>(), absl::Cord(detail.SerializeAsString()));
}

template <typename Message>
std::optional<Message> GetDetail(const absl::Status& status) {
  auto payload = status.GetPayload(TypeUrl<Message>());
  if (!payload.has_value()) return std::nullopt;
  Message detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

google::rpc::ErrorInfo MakeErrorInfo(v1::ErrorReason reason, ErrorMetadata metadata) {
  google::rpc::ErrorInfo info;
  info.set_reason(v1::ErrorReason_Name(reason));
  info.set_domain(std::string(kErrorDomain));
  for (const auto& [key, value] : metadata) {
    (*info.mutable_metadata())[std::string(key)] = std::string(value);
  }
  return info;
}

// The ErrorInfo of an error that was given none.
google::rpc::ErrorInfo DerivedErrorInfo(const absl::Status& status) {
  if (std::optional<client::ApiError> api = client::GetApiError(status); api.has_value()) {
    const std::string code = absl::StrCat(api->code);
    return MakeErrorInfo(v1::API_SERVER_ERROR,
                         {{"http_code", code}, {"kubernetes_reason", api->reason}});
  }
  return MakeErrorInfo(ReasonForCode(status.code()), {});
}

}  // namespace

absl::Status Error(absl::StatusCode code, v1::ErrorReason reason, absl::string_view message,
                   ErrorMetadata metadata) {
  absl::Status status(code, message);
  SetDetail(status, MakeErrorInfo(reason, metadata));
  return status;
}

absl::Status InvalidField(absl::string_view field, absl::string_view why) {
  absl::Status status = Error(absl::StatusCode::kInvalidArgument, v1::INVALID_FIELD,
                              absl::StrCat(field, ": ", why), {{"field", field}});
  google::rpc::BadRequest bad_request;
  google::rpc::BadRequest::FieldViolation* violation = bad_request.add_field_violations();
  violation->set_field(std::string(field));
  violation->set_description(std::string(why));
  SetDetail(status, bad_request);
  return status;
}

absl::Status WithResource(absl::Status status, absl::string_view resource_type,
                          absl::string_view resource_name, absl::string_view description) {
  google::rpc::ResourceInfo info;
  info.set_resource_type(std::string(resource_type));
  info.set_resource_name(std::string(resource_name));
  info.set_description(std::string(description));
  SetDetail(status, info);
  return status;
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(prefix, status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

std::optional<google::rpc::ErrorInfo> GetErrorInfo(const absl::Status& status) {
  return GetDetail<google::rpc::ErrorInfo>(status);
}

std::optional<google::rpc::BadRequest> GetBadRequest(const absl::Status& status) {
  return GetDetail<google::rpc::BadRequest>(status);
}

std::optional<google::rpc::ResourceInfo> GetResourceInfo(const absl::Status& status) {
  return GetDetail<google::rpc::ResourceInfo>(status);
}

v1::ErrorReason ReasonForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return v1::ERROR_REASON_UNSPECIFIED;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return v1::INVALID_REQUEST;
    case absl::StatusCode::kNotFound:
      return v1::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return v1::CONFLICT;
    case absl::StatusCode::kFailedPrecondition:
      return v1::FAILED_PRECONDITION;
    case absl::StatusCode::kResourceExhausted:
      return v1::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kUnavailable:
      return v1::UNAVAILABLE;
    case absl::StatusCode::kCancelled:
      return v1::CANCELLED;
    case absl::StatusCode::kDeadlineExceeded:
      return v1::TIMEOUT;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return v1::PERMISSION_DENIED;
    default:
      return v1::INTERNAL;
  }
}

google::rpc::Status ToRpcStatus(const absl::Status& status) {
  google::rpc::Status rpc;
  rpc.set_code(static_cast<int>(status.code()));
  rpc.set_message(std::string(status.message()));
  if (status.ok()) return rpc;
  bool has_error_info = false;
  const std::string error_info_url = TypeUrl<google::rpc::ErrorInfo>();
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    if (!absl::StartsWith(url, kTypeUrlPrefix)) return;  // ours, not for the wire
    google::protobuf::Any* any = rpc.add_details();
    any->set_type_url(std::string(url));
    any->set_value(std::string(payload));
    has_error_info = has_error_info || url == error_info_url;
  });
  if (!has_error_info) rpc.add_details()->PackFrom(DerivedErrorInfo(status));
  // The API server's Retry-After, for clients that retry on RetryInfo.
  if (std::optional<client::ApiError> api = client::GetApiError(status);
      api.has_value() && api->retry_after_seconds > 0 &&
      !status.GetPayload(TypeUrl<google::rpc::RetryInfo>()).has_value()) {
    google::rpc::RetryInfo retry;
    retry.mutable_retry_delay()->set_seconds(api->retry_after_seconds);
    rpc.add_details()->PackFrom(retry);
  }
  return rpc;
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      ToRpcStatus(status).SerializeAsString());
}

absl::Status FromGrpc(const grpc::Status& status) {
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  google::rpc::Status rpc;
  if (out.ok() || !rpc.ParseFromString(status.error_details())) return out;
  for (const google::protobuf::Any& any : rpc.details()) {
    out.SetPayload(any.type_url(), absl::Cord(any.value()));
  }
  return out;
}

}  // namespace informerd::service
