// Status: the services' one home for errors — absl::Status values that carry informerd's
// machine-readable details (gRPC's rich error model: google.rpc.ErrorInfo with an
// informerd.v1.ErrorReason, BadRequest, ResourceInfo), and their conversion to grpc::Status.
//
//   if (ns.size() > 63) return InvalidField("spec.namespace", "at most 63 characters");
//   return Error(absl::StatusCode::kNotFound, v1::INFORMER_NOT_FOUND,
//                absl::StrCat("informer \"", id, "\" does not exist"), {{"informer_id", id}});
//   reactor->Finish(ToGrpc(status));   // code, message, and the details in the trailer
//
// The details travel as payloads of the absl::Status, keyed by their type URL
// ("type.googleapis.com/google.rpc.ErrorInfo" -> the serialized message), so they survive code
// that only passes an absl::Status up. Use Prefixed to add context to a message: it keeps them
// (absl::Status(code, new_message) would drop them).
//
// ToGrpc sends a google.rpc.Status in grpc::Status's binary error details (the
// `grpc-status-details-bin` trailer) whose details are the status's "type.googleapis.com/*"
// payloads; other payloads (e.g. the client's Kubernetes error) are not sent. Every error gets
// an ErrorInfo: one without gets a reason derived from it (API_SERVER_ERROR when it carries a
// Kubernetes error, else the fallback reason of its code, ReasonForCode). A Kubernetes error
// with a Retry-After also gets a RetryInfo.
//
// Thread safety: pure functions of values.
#ifndef INFORMERD_SERVER_SERVICE_STATUS_H_
#define INFORMERD_SERVER_SERVICE_STATUS_H_

#include <optional>
#include <string>
#include <utility>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "informerd/v1/errors.pb.h"

namespace informerd::service {

// ErrorInfo.domain of every informerd error.
inline constexpr absl::string_view kErrorDomain = "informerd.io";

// ErrorInfo.metadata entries, e.g. {{"informer_id", id}, {"field", "spec.cluster"}}.
using ErrorMetadata = absl::Span<const std::pair<absl::string_view, absl::string_view>>;

// An error with an ErrorInfo: `reason` in kErrorDomain with `metadata`.
absl::Status Error(absl::StatusCode code, v1::ErrorReason reason, absl::string_view message,
                   ErrorMetadata metadata = {});

// INVALID_ARGUMENT "<field>: <why>", reason INVALID_FIELD with metadata `field`, and a
// BadRequest with one violation (field, why).
absl::Status InvalidField(absl::string_view field, absl::string_view why);

// `status` with a ResourceInfo (replacing any it had). OK stays OK.
absl::Status WithResource(absl::Status status, absl::string_view resource_type,
                          absl::string_view resource_name, absl::string_view description = "");

// `status` with "<prefix><message>" as message, every payload kept. OK stays OK.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& status);

// The ErrorInfo `status` carries, if any.
std::optional<google::rpc::ErrorInfo> GetErrorInfo(const absl::Status& status);
// The BadRequest `status` carries, if any.
std::optional<google::rpc::BadRequest> GetBadRequest(const absl::Status& status);
// The ResourceInfo `status` carries, if any.
std::optional<google::rpc::ResourceInfo> GetResourceInfo(const absl::Status& status);

// The fallback reason of an error with this code and no more precise one (see errors.proto);
// ERROR_REASON_UNSPECIFIED for OK.
v1::ErrorReason ReasonForCode(absl::StatusCode code);

// The google.rpc.Status ToGrpc sends for `status` (an ErrorInfo always among its details when
// `status` is not OK).
google::rpc::Status ToRpcStatus(const absl::Status& status);

// absl::Status to grpc::Status: the same code and message, and ToRpcStatus(status) serialized as
// the binary error details.
grpc::Status ToGrpc(const absl::Status& status);

// grpc::Status to absl::Status: code and message, and each detail of the google.rpc.Status in
// its binary error details as a payload keyed by the detail's type URL (so GetErrorInfo and
// friends read them). What a client, or a test, does with a status it received.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_STATUS_H_
