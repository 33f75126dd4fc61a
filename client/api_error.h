// ApiError: a Kubernetes API error (a metav1.Status with status "Failure") carried inside an
// absl::Status, so that callers get the Kubernetes reason and HTTP code back from any error this
// client returns.
//
// Every error the API server sends (an HTTP response with a Status body, or an ERROR event in a
// watch) becomes an absl::Status whose message is the server's message and whose payload holds
// the Status fields. The predicates below are what a reflector acts on, named after client-go's
// k8s.io/apimachinery/pkg/api/errors:
//
//   absl::Status s = client->List(...).status();
//   if (IsExpired(s)) { /* relist from scratch */ }
//   else if (auto delay = RetryAfter(s)) { /* back off for *delay */ }
//
// Call the predicates qualified (client::IsNotFound(s)): Abseil declares absl::IsNotFound and
// absl::IsAlreadyExists for absl codes, and argument-dependent lookup makes an unqualified call
// ambiguous (a compile error, never a silent mix-up).
//
// Errors that never reached the server (connection refused, TLS failure, timeout) carry no
// payload: GetApiError returns nullopt and every predicate is false for them.
//
// Thread safety: everything here is a value type or a pure function.
#ifndef INFORMERD_CLIENT_API_ERROR_H_
#define INFORMERD_CLIENT_API_ERROR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace informerd::client {

// One entry of metav1.StatusDetails.causes.
struct StatusCause {
  std::string type;  // "reason" in JSON, e.g. "FieldValueInvalid", "ResourceVersionTooLarge"
  std::string message;
  std::string field;
  bool operator==(const StatusCause&) const = default;
};

// The fields of a failed metav1.Status that matter to a client.
struct ApiError {
  int code = 0;        // HTTP status code, e.g. 410
  std::string reason;  // metav1.StatusReason, e.g. "Expired"; never empty after parsing
  std::string message;
  // metav1.StatusDetails.
  std::string name;
  std::string group;
  std::string kind;
  std::string uid;
  std::vector<StatusCause> causes;
  // details.retryAfterSeconds, or the Retry-After header; 0 when absent.
  int retry_after_seconds = 0;
  // metadata.continue: with an expired continue token the server may offer a fresh one.
  std::string continue_token;
  bool operator==(const ApiError&) const = default;
};

// The reason client-go infers for a status code when the body is not a Status
// (k8s.io/apimachinery/pkg/api/errors.NewGenericServerResponse), e.g. 410 -> "Gone".
std::string ReasonForCode(int code);

// Parses a metav1.Status JSON body. `http_code` (0 when unknown, as in watch ERROR events) fills
// in a missing code. An absent reason is inferred from the code. Fails when `json` is not a JSON
// object with kind "Status" (or with no kind but a status field).
absl::StatusOr<ApiError> ParseApiError(absl::string_view json, int http_code);

// The error for an HTTP response with status `http_code` >= 300: the Status in `body` if it is
// one, else a generic error for the code with a prefix of the body as message (as client-go does).
// `retry_after_header` is the Retry-After header value ("" when absent).
absl::Status ApiErrorFromResponse(int http_code, absl::string_view body,
                                  absl::string_view retry_after_header);

// Wraps `error` in an absl::Status: the code maps to the nearest absl code (404 NotFound,
// 409 AlreadyExists/Aborted, 410 OutOfRange, 429 ResourceExhausted, 401 Unauthenticated,
// 403 PermissionDenied, 5xx Internal/Unavailable/DeadlineExceeded, 4xx InvalidArgument ...),
// the message is error.message, and the payload keeps every field.
absl::Status ToStatus(const ApiError& error);

// The Kubernetes error inside `status`, or nullopt when it carries none.
std::optional<ApiError> GetApiError(const absl::Status& status);

// The HTTP code of the Kubernetes error in `status`, or 0.
int ApiErrorCode(const absl::Status& status);
// The Kubernetes reason in `status`, or "".
std::string ApiErrorReason(const absl::Status& status);

// `status` for people, without payload bytes (absl's ToString prints payloads): "<CODE>:
// <message>", plus " (<Kubernetes reason>)" when it carries a Kubernetes error, e.g.
// "PERMISSION_DENIED: secrets is forbidden: User \"x\" cannot list ... (Forbidden)". "" for OK.
std::string DescribeStatus(const absl::Status& status);

// The resourceVersion or continue token is too old (reason Expired or Gone, or HTTP 410): relist.
bool IsExpired(const absl::Status& status);
// Reason TooManyRequests or HTTP 429.
bool IsTooManyRequests(const absl::Status& status);
// Reason Conflict (HTTP 409 from an update with a stale resourceVersion).
bool IsConflict(const absl::Status& status);
// Reason AlreadyExists.
bool IsAlreadyExists(const absl::Status& status);
// Reason NotFound or HTTP 404.
bool IsNotFound(const absl::Status& status);
// Reason Forbidden or HTTP 403.
bool IsForbidden(const absl::Status& status);
// Reason Unauthorized or HTTP 401.
bool IsUnauthorized(const absl::Status& status);
// Reason InternalError or HTTP 500.
bool IsInternalError(const absl::Status& status);
// Reason Timeout (HTTP 504) or ServerTimeout.
bool IsTimeout(const absl::Status& status);
// Reason Invalid (HTTP 422).
bool IsInvalid(const absl::Status& status);
// Reason BadRequest (HTTP 400).
bool IsBadRequest(const absl::Status& status);
// A request for a resourceVersion newer than the server has seen: a Timeout carrying the
// ResourceVersionTooLarge cause (client-go's IsTooLargeResourceVersion). Relist with RV="".
bool IsTooLargeResourceVersion(const absl::Status& status);
// The delay the server asked for (Retry-After / details.retryAfterSeconds), if any
// (client-go's SuggestsClientDelay).
std::optional<absl::Duration> RetryAfter(const absl::Status& status);

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_API_ERROR_H_
