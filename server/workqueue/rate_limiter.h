// Rate limiters: how long a key waits before its next retry (client-go's default_rate_limiters.go).
//
//   When(key)        the delay for this retry of `key`, and records the retry
//   Forget(key)      clears the key's history (call it once the key succeeds)
//   NumRequeues(key) how many retries the key has had since it was last forgotten
//
// ItemExponentialFailureRateLimiter  base * 2^failures, capped at max (no overflow, ever)
// ItemFastSlowRateLimiter            `fast` for the first max_fast_attempts retries, then `slow`
// BucketRateLimiter                  a token bucket shared by all keys (qps, burst); keeps no
//                                    per-key history, so NumRequeues is always 0
// MaxOfRateLimiter                   the longest delay of several limiters
// DefaultControllerRateLimiter       MaxOf(exponential 5 ms .. 1000 s, bucket 10 qps / burst 100)
//
//   auto limiter = ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(5),
//                                                            absl::Seconds(1000)).value();
//   absl::Duration first = limiter->When("ns/a");   // 5 ms
//   absl::Duration second = limiter->When("ns/a");  // 10 ms
//
// Thread safety: every limiter may be used from any thread at once.
#ifndef INFORMERD_SERVER_WORKQUEUE_RATE_LIMITER_H_
#define INFORMERD_SERVER_WORKQUEUE_RATE_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "base/token_bucket.h"

namespace informerd::workqueue {

// Per-key retry counts, shared by the per-item limiters. Saturates instead of overflowing.
// Forget and Get of a key with no count — every success of a queue without failures — cost one
// atomic load, not the lock and a hash lookup: with no counts at all they return at once (a
// concurrent Increment of the same key is then simply ordered after them).
class RetryCounts {
 public:
  // Records one more retry of `key`; returns the count before it.
  int64_t Increment(absl::string_view key);
  void Forget(absl::string_view key);
  int64_t Get(absl::string_view key);
  // Sets the count of `key` (0 forgets it).
  void Set(absl::string_view key, int64_t count);
  // Calls `f` with every key that has a count, and its count (under the lock: `f` must not call
  // back into this object).
  void ForEach(absl::FunctionRef<void(absl::string_view, int64_t)> f);

 private:
  void PublishSizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_.store(counts_.size(), std::memory_order_release);
  }

  Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> size_{0};  // counts_.size(), written under mu_
};

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  virtual absl::Duration When(absl::string_view key) = 0;
  virtual void Forget(absl::string_view key) = 0;
  virtual int64_t NumRequeues(absl::string_view key) = 0;
  // Retry history, so that a queue can replace its limiter without forgetting failures
  // (RateLimitingQueue::SetRateLimiter): every key with a count, and setting a key's count.
  // Limiters without per-key history (the bucket) have none.
  virtual void ForEachRequeues(absl::FunctionRef<void(absl::string_view, int64_t)> f) {}
  virtual void SetRequeues(absl::string_view key, int64_t requeues) {}
};

class ItemExponentialFailureRateLimiter final : public RateLimiter {
 public:
  // REQUIRES (else InvalidArgument): 0 <= base <= max.
  static absl::StatusOr<std::unique_ptr<ItemExponentialFailureRateLimiter>> Create(
      absl::Duration base, absl::Duration max);

  // RateLimiter:
  absl::Duration When(absl::string_view key) override;
  void Forget(absl::string_view key) override;
  int64_t NumRequeues(absl::string_view key) override;
  void ForEachRequeues(absl::FunctionRef<void(absl::string_view, int64_t)> f) override {
    failures_.ForEach(f);
  }
  void SetRequeues(absl::string_view key, int64_t requeues) override { failures_.Set(key, requeues); }

 private:
  ItemExponentialFailureRateLimiter(absl::Duration base, absl::Duration max)
      : base_(base), max_(max) {}
  const absl::Duration base_;
  const absl::Duration max_;
  RetryCounts failures_;
};

class ItemFastSlowRateLimiter final : public RateLimiter {
 public:
  // REQUIRES (else InvalidArgument): fast >= 0, slow >= 0, max_fast_attempts >= 0.
  static absl::StatusOr<std::unique_ptr<ItemFastSlowRateLimiter>> Create(
      absl::Duration fast, absl::Duration slow, int64_t max_fast_attempts);

  // RateLimiter:
  absl::Duration When(absl::string_view key) override;
  void Forget(absl::string_view key) override;
  int64_t NumRequeues(absl::string_view key) override;
  void ForEachRequeues(absl::FunctionRef<void(absl::string_view, int64_t)> f) override {
    attempts_.ForEach(f);
  }
  void SetRequeues(absl::string_view key, int64_t requeues) override { attempts_.Set(key, requeues); }

 private:
  ItemFastSlowRateLimiter(absl::Duration fast, absl::Duration slow, int64_t max_fast_attempts)
      : fast_(fast), slow_(slow), max_fast_attempts_(max_fast_attempts) {}
  const absl::Duration fast_;
  const absl::Duration slow_;
  const int64_t max_fast_attempts_;
  RetryCounts attempts_;
};

// A token bucket with golang.org/x/time/rate's Reserve semantics: tokens refill at `qps` up to
// `burst`; each When takes one token, and when none is left it returns how long until the
// reservation is covered (the bucket goes into debt, so concurrent callers are spaced out).
class BucketRateLimiter final : public RateLimiter {
 public:
  // REQUIRES (else InvalidArgument): qps > 0, burst >= 1. `clock` nullptr: Clock::Real().
  static absl::StatusOr<std::unique_ptr<BucketRateLimiter>> Create(double qps, int64_t burst,
                                                                   Clock* clock = nullptr);

  // RateLimiter:
  absl::Duration When(absl::string_view key) override;
  void Forget(absl::string_view key) override {}
  int64_t NumRequeues(absl::string_view key) override { return 0; }

 private:
  BucketRateLimiter(double qps, int64_t burst, Clock* clock);
  Clock* const clock_;
  Mutex mu_;
  TokenBucket bucket_ ABSL_GUARDED_BY(mu_);
};

class MaxOfRateLimiter final : public RateLimiter {
 public:
  // REQUIRES (else InvalidArgument): at least one limiter, none null.
  static absl::StatusOr<std::unique_ptr<MaxOfRateLimiter>> Create(
      std::vector<std::unique_ptr<RateLimiter>> limiters);

  // RateLimiter:
  absl::Duration When(absl::string_view key) override;
  void Forget(absl::string_view key) override;
  int64_t NumRequeues(absl::string_view key) override;
  void ForEachRequeues(absl::FunctionRef<void(absl::string_view, int64_t)> f) override;
  void SetRequeues(absl::string_view key, int64_t requeues) override;

 private:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
      : limiters_(std::move(limiters)) {}
  const std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// MaxOf(ItemExponentialFailure(5 ms, 1000 s), Bucket(10 qps, burst 100)), as client-go's
// DefaultControllerRateLimiter. `clock` nullptr: Clock::Real().
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock = nullptr);

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_RATE_LIMITER_H_
