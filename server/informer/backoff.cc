#include "server/informer/backoff.h"

#include <algorithm>

namespace informerd::informer {

Backoff::Backoff(BackoffOptions options, Clock* clock, uint64_t seed)
    : options_(options),
      clock_(clock),
      duration_(options.initial),
      rng_(seed != 0 ? seed : std::random_device()()) {}

absl::Duration Backoff::Next() {
  const absl::Time now = clock_->Now();
  if (now - last_start_ > options_.reset_after) duration_ = options_.initial;
  last_start_ = now;
  absl::Duration wait = duration_;
  if (options_.factor > 0) {
    duration_ = std::min(duration_ * options_.factor, options_.max);
  }
  if (options_.jitter > 0) {
    const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    wait += wait * (r * options_.jitter);
  }
  // Whole nanoseconds: clocks count in nanoseconds, and a deadline a fraction of one later than
  // "now" would never be reached by a fake clock set to it.
  return absl::Trunc(wait, absl::Nanoseconds(1));
}

}  // namespace informerd::informer
