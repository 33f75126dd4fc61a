#include "server/workqueue/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::workqueue {

// ---- RetryCounts ----

int64_t RetryCounts::Increment(absl::string_view key) {
  MutexLock lock(&mu_);
  int64_t& count = counts_[key];
  int64_t before = count;
  if (count < std::numeric_limits<int64_t>::max()) ++count;
  PublishSizeLocked();
  return before;
}

void RetryCounts::Forget(absl::string_view key) {
  if (size_.load(std::memory_order_acquire) == 0) return;
  MutexLock lock(&mu_);
  counts_.erase(key);
  PublishSizeLocked();
}

int64_t RetryCounts::Get(absl::string_view key) {
  if (size_.load(std::memory_order_acquire) == 0) return 0;
  MutexLock lock(&mu_);
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

void RetryCounts::Set(absl::string_view key, int64_t count) {
  MutexLock lock(&mu_);
  if (count <= 0) {
    counts_.erase(key);
  } else {
    counts_[key] = count;
  }
  PublishSizeLocked();
}

void RetryCounts::ForEach(absl::FunctionRef<void(absl::string_view, int64_t)> f) {
  MutexLock lock(&mu_);
  for (const auto& [key, count] : counts_) f(key, count);
}

// ---- ItemExponentialFailureRateLimiter ----

absl::StatusOr<std::unique_ptr<ItemExponentialFailureRateLimiter>>
ItemExponentialFailureRateLimiter::Create(absl::Duration base, absl::Duration max) {
  if (base < absl::ZeroDuration()) return absl::InvalidArgumentError("base delay must be >= 0");
  if (max < base) return absl::InvalidArgumentError("max delay must be >= base delay");
  return std::unique_ptr<ItemExponentialFailureRateLimiter>(
      new ItemExponentialFailureRateLimiter(base, max));
}

absl::Duration ItemExponentialFailureRateLimiter::When(absl::string_view key) {
  int64_t exp = failures_.Increment(key);
  // In floating point, so 2^exp saturates to infinity instead of wrapping.
  double backoff_ns = absl::ToDoubleNanoseconds(base_) * std::pow(2.0, static_cast<double>(exp));
  constexpr double kInt64Limit = 9223372036854775808.0;  // 2^63: not representable as int64
  if (!(backoff_ns < absl::ToDoubleNanoseconds(max_)) || backoff_ns >= kInt64Limit) return max_;
  return absl::Nanoseconds(static_cast<int64_t>(backoff_ns));
}

void ItemExponentialFailureRateLimiter::Forget(absl::string_view key) { failures_.Forget(key); }

int64_t ItemExponentialFailureRateLimiter::NumRequeues(absl::string_view key) {
  return failures_.Get(key);
}

// ---- ItemFastSlowRateLimiter ----

absl::StatusOr<std::unique_ptr<ItemFastSlowRateLimiter>> ItemFastSlowRateLimiter::Create(
    absl::Duration fast, absl::Duration slow, int64_t max_fast_attempts) {
  if (fast < absl::ZeroDuration()) return absl::InvalidArgumentError("fast delay must be >= 0");
  if (slow < absl::ZeroDuration()) return absl::InvalidArgumentError("slow delay must be >= 0");
  if (max_fast_attempts < 0) return absl::InvalidArgumentError("max_fast_attempts must be >= 0");
  return std::unique_ptr<ItemFastSlowRateLimiter>(
      new ItemFastSlowRateLimiter(fast, slow, max_fast_attempts));
}

absl::Duration ItemFastSlowRateLimiter::When(absl::string_view key) {
  int64_t earlier_attempts = attempts_.Increment(key);
  return earlier_attempts < max_fast_attempts_ ? fast_ : slow_;
}

void ItemFastSlowRateLimiter::Forget(absl::string_view key) { attempts_.Forget(key); }

int64_t ItemFastSlowRateLimiter::NumRequeues(absl::string_view key) { return attempts_.Get(key); }

// ---- BucketRateLimiter ----

absl::StatusOr<std::unique_ptr<BucketRateLimiter>> BucketRateLimiter::Create(double qps,
                                                                               int64_t burst,
                                                                               Clock* clock) {
  if (!(qps > 0) || std::isinf(qps)) {
    return absl::InvalidArgumentError(absl::StrCat("qps must be a positive number, got ", qps));
  }
  if (burst < 1) return absl::InvalidArgumentError(absl::StrCat("burst must be >= 1, got ", burst));
  return std::unique_ptr<BucketRateLimiter>(
      new BucketRateLimiter(qps, burst, clock != nullptr ? clock : Clock::Real()));
}

BucketRateLimiter::BucketRateLimiter(double qps, int64_t burst, Clock* clock)
    : clock_(clock), bucket_(qps, static_cast<double>(burst), clock->Now()) {}

absl::Duration BucketRateLimiter::When(absl::string_view) {
  const absl::Time now = clock_->Now();
  MutexLock lock(&mu_);
  return bucket_.Reserve(now);
}

// ---- MaxOfRateLimiter ----

absl::StatusOr<std::unique_ptr<MaxOfRateLimiter>> MaxOfRateLimiter::Create(
    std::vector<std::unique_ptr<RateLimiter>> limiters) {
  if (limiters.empty()) return absl::InvalidArgumentError("MaxOf needs at least one limiter");
  for (const auto& limiter : limiters) {
    if (limiter == nullptr) return absl::InvalidArgumentError("MaxOf limiter must not be null");
  }
  return std::unique_ptr<MaxOfRateLimiter>(new MaxOfRateLimiter(std::move(limiters)));
}

absl::Duration MaxOfRateLimiter::When(absl::string_view key) {
  absl::Duration longest = absl::ZeroDuration();
  for (const auto& limiter : limiters_) longest = std::max(longest, limiter->When(key));
  return longest;
}

void MaxOfRateLimiter::Forget(absl::string_view key) {
  for (const auto& limiter : limiters_) limiter->Forget(key);
}

int64_t MaxOfRateLimiter::NumRequeues(absl::string_view key) {
  int64_t most = 0;
  for (const auto& limiter : limiters_) most = std::max(most, limiter->NumRequeues(key));
  return most;
}

void MaxOfRateLimiter::ForEachRequeues(absl::FunctionRef<void(absl::string_view, int64_t)> f) {
  // The count of a key is the largest any limiter holds (as NumRequeues answers).
  absl::flat_hash_map<std::string, int64_t> most;
  for (const auto& limiter : limiters_) {
    limiter->ForEachRequeues([&](absl::string_view key, int64_t n) {
      int64_t& m = most[key];
      m = std::max(m, n);
    });
  }
  for (const auto& [key, n] : most) f(key, n);
}

void MaxOfRateLimiter::SetRequeues(absl::string_view key, int64_t requeues) {
  for (const auto& limiter : limiters_) limiter->SetRequeues(key, requeues);
}

// ---- DefaultControllerRateLimiter ----

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock) {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(
      *ItemExponentialFailureRateLimiter::Create(absl::Milliseconds(5), absl::Seconds(1000)));
  limiters.push_back(*BucketRateLimiter::Create(10, 100, clock));
  return *MaxOfRateLimiter::Create(std::move(limiters));
}

}  // namespace informerd::workqueue
