// ElectionTimingsError: client-go's rules for leader election's three durations
// (leaderelection.NewLeaderElector): retry period positive, lease at least 1 s, lease longer than
// the renew deadline, renew deadline longer than 1.2 retry periods — and one of informerd's: the
// lease exceeds the renew deadline by at least kMinStepDownMargin. A deposed leader's term ends
// at its renew deadline (its watchdog, docs/high-availability.md); a follower takes the Lease no
// sooner than a lease duration after it saw the last renew; the difference is the margin that
// covers the watchdog's wake-up and the two replicas' clock rates. The config file and the
// elector both check with it.
//
//   if (auto e = ElectionTimingsError(lease, renew, retry)) return Bad(e->key, e->why);
//
// Thread safety: a pure function.
#ifndef INFORMERD_SERVER_HA_TIMINGS_H_
#define INFORMERD_SERVER_HA_TIMINGS_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace informerd::ha {

inline constexpr absl::Duration kMinStepDownMargin = absl::Milliseconds(500);

struct TimingsError {
  std::string key;  // the config key under leaderElection, e.g. "renewDeadline"
  std::string why;
};

inline std::optional<TimingsError> ElectionTimingsError(absl::Duration lease_duration,
                                                        absl::Duration renew_deadline,
                                                        absl::Duration retry_period) {
  if (retry_period <= absl::ZeroDuration()) return TimingsError{"retryPeriod", "must be positive"};
  if (lease_duration < absl::Seconds(1)) {
    return TimingsError{"leaseDuration", "must be at least 1s"};
  }
  if (lease_duration <= renew_deadline) {
    return TimingsError{"leaseDuration", "must be greater than renewDeadline"};
  }
  if (lease_duration - renew_deadline < kMinStepDownMargin) {
    return TimingsError{"leaseDuration",
                        "must exceed renewDeadline by at least 500ms (a deposed leader steps down "
                        "at its renew deadline; followers take over a lease duration after its "
                        "last renew)"};
  }
  if (renew_deadline <= retry_period * 1.2) {
    return TimingsError{"renewDeadline", "must be greater than retryPeriod * 1.2"};
  }
  return std::nullopt;
}

}  // namespace informerd::ha

#endif  // INFORMERD_SERVER_HA_TIMINGS_H_
