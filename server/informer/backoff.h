// Backoff: client-go's exponential backoff manager (wait.NewExponentialBackoffManager) as the
// reflector uses it: 800 ms doubling to 30 s, each wait jittered up to twice as long, and back to
// 800 ms once no backoff was asked for 2 minutes (the connection was healthy that long).
//
//   Backoff backoff({}, clock);
//   absl::Duration wait = backoff.Next();  // 0.8–1.6 s, then 1.6–3.2 s, ...
//
// Thread safety: not synchronised; one user (the reflector's steps, which run one at a time).
#ifndef INFORMERD_SERVER_INFORMER_BACKOFF_H_
#define INFORMERD_SERVER_INFORMER_BACKOFF_H_

#include <cstdint>
#include <random>

#include "absl/time/time.h"
#include "base/clock.h"

namespace informerd::informer {

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(800);
  absl::Duration max = absl::Seconds(30);
  double factor = 2.0;
  // Each wait is d + rand[0,1) * jitter * d.
  double jitter = 1.0;
  // Start over at `initial` when Next was last called longer ago than this.
  absl::Duration reset_after = absl::Minutes(2);
};

class Backoff {
 public:
  // `seed` 0 picks a random seed.
  Backoff(BackoffOptions options, Clock* clock, uint64_t seed = 0);

  // The next wait (client-go's getNextBackoff).
  absl::Duration Next();
  // The un-jittered base of the next wait.
  absl::Duration base() const { return duration_; }

 private:
  const BackoffOptions options_;
  Clock* const clock_;
  absl::Duration duration_;
  absl::Time last_start_ = absl::InfinitePast();
  std::mt19937_64 rng_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_BACKOFF_H_
