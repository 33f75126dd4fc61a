// The request of a raw gRPC method (one registered with WithRawCallbackMethod_*, whose request
// arrives as a grpc::ByteBuffer) parsed into its message. gRPC's own typed handlers answer a
// request that does not parse with a bare INTERNAL; this says INVALID_ARGUMENT and names the
// field that is malformed, so the caller knows what it sent wrong.
//
//   v1::WatchRequest request;
//   if (absl::Status s = ParseRawRequest(*raw, &request); !s.ok()) return Fail(ToGrpc(s));
//
// Thread safety: a function of its arguments.
#ifndef INFORMERD_SERVER_SERVICE_RAW_REQUEST_H_
#define INFORMERD_SERVER_SERVICE_RAW_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace informerd::service {

// Parses `raw` into `out`. On failure: InvalidField (status.h) naming the first top-level field
// of `out`'s type whose bytes do not parse — by its name, or "field N" when the type has no field
// N — and "request" when no single field is to blame (e.g. a truncated tag).
absl::Status ParseRawRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* out);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_RAW_REQUEST_H_
