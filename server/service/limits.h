// Limits: the size bounds of the services' messages, in one place for every service that
// batches (List, Watch, and Work's lease batches).
//
//   const size_t cap = request.max_batch_bytes() == 0 ? kDefaultMaxBatchBytes
//                                                     : request.max_batch_bytes();
//
// A batch holds items until adding the next would pass its byte cap; an item larger than the
// cap goes alone in a message of its own. The default stays well below gRPC's default receive
// limit (4 MiB), so a client with default channel settings reads every message; a client that
// raised its limit may ask for up to kMaxMaxBatchBytes.
//
// Thread safety: constants only.
#ifndef INFORMERD_SERVER_SERVICE_LIMITS_H_
#define INFORMERD_SERVER_SERVICE_LIMITS_H_

#include <cstddef>

namespace informerd::service {

// gRPC's default maximum size of a received message (GRPC_DEFAULT_MAX_RECV_MESSAGE_LENGTH).
inline constexpr size_t kGrpcDefaultMaxReceiveBytes = 4 << 20;

// Bytes of items per streamed message when the request says 0.
inline constexpr size_t kDefaultMaxBatchBytes = 2 << 20;

// The largest byte cap a request may ask for (INVALID_FIELD beyond).
inline constexpr size_t kMaxMaxBatchBytes = 64 << 20;

static_assert(kDefaultMaxBatchBytes < kGrpcDefaultMaxReceiveBytes);

// A Work stream's answers waiting to be written (Started, refusals) at most, in bytes: past it
// the stream reads no more of the worker's messages until they drain to half, so a worker that
// sends and never reads is held back by gRPC's flow control instead of growing the daemon.
inline constexpr size_t kMaxBufferedControlBytes = 1 << 20;

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_LIMITS_H_
