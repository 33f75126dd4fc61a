// ElectionTimingsError: client-go's rules for leader election's three durations
// (leaderelection.NewLeaderElector): retry period positive, lease at least 1 s, lease longer than
// the renew deadline, renew deadline longer than 1.2 retry periods. The config file and the
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
  if (renew_deadline <= retry_period * 1.2) {
    return TimingsError{"renewDeadline", "must be greater than retryPeriod * 1.2"};
  }
  return std::nullopt;
}

}  // namespace informerd::ha

#endif  // INFORMERD_SERVER_HA_TIMINGS_H_
