// DelayingQueue: a Queue whose keys can be added after a delay (client-go's delaying_queue.go).
//
// AddAfter(key, d) adds `key` once `d` has passed on the queue's clock; d <= 0 is a plain Add.
// A key already waiting for its deadline keeps the earlier of its two deadlines and the higher of
// its two priorities, so a burst of AddAfter calls for one key produces one Add, at that priority. Waiting keys live in a heap ordered by deadline
// (FIFO among equal deadlines); one clock timer, armed for the earliest deadline, moves due keys
// into the queue. There is no thread per key or per queue.
//
//   auto queue = DelayingQueue::Create({.name = "pods"}).value();
//   queue->AddAfter("default/web-0", absl::Seconds(5)).IgnoreError();
//
// After shutdown AddAfter is refused like Add (FailedPrecondition) and keys still waiting for
// their deadline are dropped; keys already due stay in the queue for Get, as in client-go.
// Waiting keys share the queue's key slots, so a retry costs no allocation in steady state.
//
// Thread safety: every method may be called concurrently from any thread.
#ifndef INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_
#define INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // At `priority` (Queue::Add's rules once the delay has passed).
  absl::Status AddAfter(absl::string_view key, absl::Duration delay, int32_t priority);

  // Number of keys waiting for their deadline (not yet in the queue).
  size_t Waiting() const;

 protected:
  explicit DelayingQueue(QueueOptions options);
  absl::Status AddAfterLocked(absl::string_view key, absl::Duration delay, int32_t priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  struct HeapItem {
    int64_t ready_ns;  // unix ns
    uint64_t seq;      // FIFO among equal deadlines; identifies the live item of a slot
    SlotId slot;
  };
  struct Later {
    bool operator()(const HeapItem& a, const HeapItem& b) const {
      return a.ready_ns != b.ready_ns ? a.ready_ns > b.ready_ns : a.seq > b.seq;
    }
  };

  // Moves every due key into the queue and re-arms the timer for the next deadline.
  void OnTimer();
  // Pops stale items, then arms (or disarms) the timer for the earliest live deadline.
  void ArmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LiveLocked(const HeapItem& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return SlotAt(item.slot).waiting_seq == item.seq;
  }

  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Min-heap by (ready_ns, seq). An item is live iff its slot's waiting_seq equals its seq; a
  // key moved to an earlier deadline leaves a stale item behind, skipped when it surfaces.
  std::vector<HeapItem> heap_ ABSL_GUARDED_BY(mu_);
  size_t waiting_count_ ABSL_GUARDED_BY(mu_) = 0;
  // The deadline the timer is armed for (unix ns); INT64_MAX when disarmed.
  int64_t armed_for_ns_ ABSL_GUARDED_BY(mu_) = INT64_MAX;
  std::unique_ptr<Timer> timer_;
};

}  // namespace informerd::workqueue

#endif  // INFORMERD_SERVER_WORKQUEUE_DELAYING_QUEUE_H_
