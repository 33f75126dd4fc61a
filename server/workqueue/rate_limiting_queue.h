// RateLimitingQueue: a DelayingQueue that spaces out retries with a RateLimiter
// (client-go's rate_limiting_queue.go).
//
//   AddRateLimited(key) = AddAfter(key, limiter->When(key))
//   Forget(key)         clears the key's retry history; call it when the key succeeded.
//                       It does not replace Done: Done ends processing, Forget ends backoff.
//   NumRequeues(key)    the limiter's count of retries for the key
//
//   auto queue = RateLimitingQueue::Create({.name = "pods"}).value();  // default limiter
//   if (auto key = queue->Get()) {
//     if (Reconcile(*key).ok()) queue->Forget(*key); else queue->AddRateLimited(*key).IgnoreError();
//     queue->Done(*key).IgnoreError();
//   }
//
// Thread safety: every method may be called concurrently from any thread.
#ifndef INFORMERD_SERVER_WORKQUEUE_RATE_LIMITING_QUEUE_H_
#define INFORMERD_SERVER_WORKQUEUE_RATE_LIMITING_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/workqueue/delaying_queue.h"
#include "server/workqueue/rate_limiter.h"

namespace informerd::workqueue {

class RateLimitingQueue final : public DelayingQueue {
 public:
  // `limiter` nullptr: DefaultControllerRateLimiter on the queue's clock.
  static absl::StatusOr<std::unique_ptr<RateLimitingQueue>> Create(
      QueueOptions options, std::unique_ptr<RateLimiter> limiter = nullptr);

  absl::Status AddRateLimited(absl::string_view key);
  // At `priority`: the backoff is the key's, the priority is kept through the delay.
  absl::Status AddRateLimited(absl::string_view key, int32_t priority);
  void Forget(absl::string_view key);
  int64_t NumRequeues(absl::string_view key);
  // Replaces the limiter, carrying every key's retry count over to the new one (keys waiting for
  // a delay keep their deadline; later AddRateLimited calls use `limiter`). A retry recorded by
  // a concurrent AddRateLimited while the counts are copied may be lost.
  void SetRateLimiter(std::unique_ptr<RateLimiter> limiter);
  // The limiter now, for a batch of Forget/NumRequeues calls without reloading it for each (the
  // load is an atomic shared_ptr: a lock and a reference count).
  std::shared_ptr<RateLimiter> rate_limiter() const { return limiter(); }

 private:
  RateLimitingQueue(QueueOptions options, std::unique_ptr<RateLimiter> limiter);
  std::shared_ptr<RateLimiter> limiter() const { return limiter_.load(std::memory_order_acquire); }
  std::atomic<std::shared_ptr<RateLimiter>> limiter_;
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_RATE_LIMITING_QUEUE_H_
