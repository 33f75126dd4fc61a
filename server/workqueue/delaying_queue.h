// DelayingQueue: a Queue whose keys can be added after a delay (client-go's delaying_queue.go).
//
// AddAfter(key, d) adds `key` once `d` has passed on the queue's clock; d <= 0 is a plain Add.
// A key already waiting for its deadline keeps the earlier of its two deadlines, so a burst of
// AddAfter calls for one key produces one Add. Waiting keys live in a heap ordered by deadline
// (FIFO among equal deadlines); one clock timer, armed for the earliest deadline, moves due keys
// into the queue. There is no thread per key or per queue.
//
//   auto queue = DelayingQueue::Create({.name = "pods"}).value();
//   queue->AddAfter("default/web-0", absl::Seconds(5)).IgnoreError();
//
// After shutdown AddAfter is refused like Add (FailedPrecondition) and keys still waiting for
// their deadline are dropped; keys already due stay in the queue for Get, as in client-go.
//
// Thread safety: every method may be called concurrently from any thread.
#ifndef INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_
#define INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/workqueue/queue.h"

namespace informerd::workqueue {

class DelayingQueue : public Queue {
 public:
  static absl::StatusOr<std::unique_ptr<DelayingQueue>> Create(QueueOptions options);
  ~DelayingQueue() override;

  // Adds `key` after `delay`; see the header comment. Counts a retry in the metrics.
  absl::Status AddAfter(absl::string_view key, absl::Duration delay);

  // Number of keys waiting for their deadline (not yet in the queue).
  size_t Waiting() const;

 protected:
  explicit DelayingQueue(QueueOptions options);
  absl::Status AddAfterLocked(absl::string_view key, absl::Duration delay)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  struct HeapItem {
    absl::Time ready_at;
    uint64_t seq;
    std::string key;
  };
  struct Later {
    bool operator()(const HeapItem& a, const HeapItem& b) const {
      return a.ready_at != b.ready_at ? a.ready_at > b.ready_at : a.seq > b.seq;
    }
  };
  struct Deadline {
    absl::Time ready_at;
    uint64_t seq;  // the live heap item for this key
  };

  // Moves every due key into the queue and re-arms the timer for the next deadline.
  void OnTimer();
  void ArmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Min-heap by (ready_at, seq). A heap item is live iff waiting_[key].seq == item.seq; a key
  // moved to an earlier deadline leaves a stale item behind, skipped when it surfaces.
  std::vector<HeapItem> heap_ ABSL_GUARDED_BY(mu_);
  // Each key waiting for its deadline, once.
  absl::flat_hash_map<std::string, Deadline> waiting_ ABSL_GUARDED_BY(mu_);
  // The deadline the timer is armed for; InfiniteFuture when disarmed.
  absl::Time armed_for_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::unique_ptr<Timer> timer_;
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_
