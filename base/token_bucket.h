// TokenBucket: golang.org/x/time/rate's Reserve semantics, the one bucket behind client-go's
// client-side throttle (client/transport) and the workqueue's BucketRateLimiter.
//
// Tokens refill at `qps` per second up to `burst`. Reserve takes one token and says how long the
// caller must wait before acting: zero while tokens are left; otherwise the bucket goes into
// debt, so that concurrent callers are spaced 1/qps apart instead of all waking at once.
//
//   TokenBucket bucket(/*qps=*/5, /*burst=*/10, clock->Now());
//   absl::Duration wait = bucket.Reserve(clock->Now());  // zero for the first 10
//
// Time that goes backwards (a fake clock set back) refills nothing.
//
// Thread safety: a value type; callers serialize access (both users hold their own lock).
#ifndef INFORMERD_BASE_TOKEN_BUCKET_H_
#define INFORMERD_BASE_TOKEN_BUCKET_H_

#include <algorithm>

#include "absl/time/time.h"

namespace informerd {

class TokenBucket {
 public:
  // REQUIRES: qps > 0 and finite, burst >= 1 (callers validate their own configuration).
  TokenBucket(double qps, double burst, absl::Time now)
      : qps_(qps), burst_(burst), tokens_(burst), last_(now) {}

  // Takes one token at `now`; returns how long until the reservation is covered.
  absl::Duration Reserve(absl::Time now) {
    Refill(now);
    tokens_ -= 1;
    if (tokens_ >= 0) return absl::ZeroDuration();
    return absl::Seconds(-tokens_ / qps_);
  }

  // Takes one token at `now` if one is there (never goes into debt); returns whether it did.
  bool TryTake(absl::Time now) {
    Refill(now);
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

  double qps() const { return qps_; }
  double burst() const { return burst_; }

 private:
  void Refill(absl::Time now) {
    if (now > last_) {
      tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
      last_ = now;
    }
  }

  double qps_;
  double burst_;
  double tokens_;  // negative: reserved ahead
  absl::Time last_;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_TOKEN_BUCKET_H_
