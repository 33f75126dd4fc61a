#include "server/workqueue/rate_limiting_queue.h"

#include <utility>

namespace informerd::workqueue {

absl::StatusOr<std::unique_ptr<RateLimitingQueue>> RateLimitingQueue::Create(
    QueueOptions options, std::unique_ptr<RateLimiter> limiter) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  if (limiter == nullptr) {
    limiter = DefaultControllerRateLimiter(options.clock != nullptr ? options.clock
                                                                    : Clock::Real());
  }
  return std::unique_ptr<RateLimitingQueue>(
      new RateLimitingQueue(std::move(options), std::move(limiter)));
}

RateLimitingQueue::RateLimitingQueue(QueueOptions options, std::unique_ptr<RateLimiter> limiter)
    : DelayingQueue(std::move(options)), limiter_(std::shared_ptr<RateLimiter>(std::move(limiter))) {}

absl::Status RateLimitingQueue::AddRateLimited(absl::string_view key) {
  return AddRateLimited(key, kDefaultPriority);
}

absl::Status RateLimitingQueue::AddRateLimited(absl::string_view key, int32_t priority) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  // Outside the queue lock: the limiter has its own.
  absl::Duration delay = limiter()->When(key);
  return AddAfter(key, delay, priority);
}

void RateLimitingQueue::Forget(absl::string_view key) { limiter()->Forget(key); }

int64_t RateLimitingQueue::NumRequeues(absl::string_view key) {
  return limiter()->NumRequeues(key);
}

void RateLimitingQueue::SetRateLimiter(std::unique_ptr<RateLimiter> limiter) {
  std::shared_ptr<RateLimiter> next(std::move(limiter));
  this->limiter()->ForEachRequeues(
      [&](absl::string_view key, int64_t n) { next->SetRequeues(key, n); });
  limiter_.store(std::move(next), std::memory_order_release);
}

}  // namespace informerd::workqueue
