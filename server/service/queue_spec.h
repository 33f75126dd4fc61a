// Queue specs and keys: the rules a QueueSpec must follow, the defaults it gets, the rate limiter
// it describes, and how a queue key names the cluster it belongs to.
//
//   absl::StatusOr<v1::QueueSpec> spec = NormalizeQueueSpec(request.spec());  // "spec.x: why"
//   auto limiter = BuildRateLimiter(spec->rate_limiter(), "spec.rate_limiter", clock);
//   QueueKey("east", "default/web")     == "east//default/web"
//   SplitQueueKey("east//default/web")  == {.cluster = "east", .object_key = "default/web"}
//
// Keys of the daemon's default cluster are plain object keys ("namespace/name" or "name"); keys
// of any other cluster are "<cluster>//<object key>". Kubernetes names never contain "/" twice in
// a row (names may not be empty or contain "/"), so the two forms cannot collide.
//
// Thread safety: functions only; safe from any thread.
#ifndef INFORMERD_SERVER_SERVICE_QUEUE_SPEC_H_
#define INFORMERD_SERVER_SERVICE_QUEUE_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "informerd/v1/queues.pb.h"
#include "server/workqueue/rate_limiter.h"

namespace informerd::service {

// Longest delay a request may ask for (a year): larger values would only overflow absl::Duration
// math in the limiters and mean "never" anyway.
inline constexpr int64_t kMaxDelayMs = int64_t{365} * 24 * 3600 * 1000;
// Keys longer than this are refused (INVALID_ARGUMENT).
inline constexpr size_t kMaxKeyBytes = 1024;
// Sources of one queue at most (INVALID_ARGUMENT naming spec.sources beyond): each is a binding
// the registry's pump feeds on every event of its informer.
inline constexpr int kMaxQueueSources = 64;
// Keys one queue holds waiting or delayed at most before client adds (Add, AddAfter,
// AddRateLimited) are refused with RESOURCE_EXHAUSTED. Sources are not refused: their keys are
// bounded by their informers' objects, and dropping one would lose an event.
inline constexpr size_t kMaxQueueKeys = 1000000;
// QueueSpec.lease_timeout_ms bounds (when not 0).
inline constexpr int64_t kMinLeaseTimeoutMs = 1000;
inline constexpr int64_t kMaxLeaseTimeoutMs = int64_t{24} * 3600 * 1000;
// Priorities a request or a source may name (queues.proto's AddRequest.priority).
inline constexpr int32_t kMinPriority = -1000000;
inline constexpr int32_t kMaxPriority = 1000000;
// QueueSpec.priority_aging_ms: 0 means this; other values are bounded like lease timeouts.
inline constexpr int64_t kDefaultPriorityAgingMs = 60 * 1000;
// QueueState.depth_by_priority entries at most.
inline constexpr size_t kMaxDepthByPriority = 64;

// "": valid; else why `key` is not a valid queue key.
std::string InvalidKeyReason(absl::string_view key);
// OK, or INVALID_ARGUMENT naming `field` when `priority` is outside kMinPriority..kMaxPriority.
absl::Status ValidatePriority(int32_t priority, absl::string_view field);
// The aging of `spec`'s priorities (priority_aging_ms, 0 for the default).
absl::Duration PriorityAging(const v1::QueueSpec& spec);

// The queue key of `object_key` from `cluster` ("" for the default cluster).
std::string QueueKey(absl::string_view cluster, absl::string_view object_key);
struct QueueKeyParts {
  absl::string_view cluster;     // "" for the default cluster
  absl::string_view object_key;
};
// Views into `key`.
QueueKeyParts SplitQueueKey(absl::string_view key);

// Validates every field that needs no lookup (name, limiter, resync period, lease timeout, the
// shape of each source and its predicates) and fills defaults (the default controller limiter).
// INVALID_ARGUMENT naming the field: "spec.sources[1].predicates[0].fields_changed...: why".
absl::StatusOr<v1::QueueSpec> NormalizeQueueSpec(const v1::QueueSpec& spec);

// The limiter `spec` describes (client-go's limiters); `field` prefixes error fields.
absl::StatusOr<std::unique_ptr<workqueue::RateLimiter>> BuildRateLimiter(
    const v1::RateLimiterSpec& spec, absl::string_view field, Clock* clock);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_QUEUE_SPEC_H_
