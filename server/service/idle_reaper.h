// IdleReaper: frees the informers and queues created over the API that nobody has used for the
// daemon's idle timeout (DaemonConfig::idle_timeout), so that what clients create and forget does
// not stay forever. Those of the config file are pinned and never freed.
//
//   IdleReaper reaper(&informers, &queues, {.idle_timeout = absl::Minutes(10), .clock = clock});
//
// One timer on the injected clock (no thread, nothing per object) sweeps every
// min(idle_timeout / 4, 1 minute):
//   * a queue with a Work stream attached is in use: its last use becomes now; one unused since
//     now - idle_timeout is closed as DeleteQueue would (QueueRegistry::FreeIfUnused);
//   * then an informer named by a source of a remaining queue, or held by anything outside the
//     registry (a Watch stream, a queue source, a Work stream's object informer), is in use;
//     one unused since now - idle_timeout is stopped and its memory released
//     (InformerRegistry::FreeIfUnused).
// So an object is freed between idle_timeout and idle_timeout + one sweep period after its last
// use; an informer whose only user was a queue goes one idle timeout after the queue.
//
// The sweep runs on the clock's timer thread (stopping an informer joins its threads: a few ms).
//
// Thread safety: Sweep may be called from any thread; the destructor waits for a running sweep.
#ifndef INFORMERD_SERVER_SERVICE_IDLE_REAPER_H_
#define INFORMERD_SERVER_SERVICE_IDLE_REAPER_H_

#include <atomic>
#include <memory>

#include "absl/time/time.h"
#include "base/clock.h"
#include "server/service/informer_registry.h"
#include "server/service/queue_registry.h"

namespace informerd::service {

struct IdleReaperOptions {
  // > 0 (a daemon with idle timeout 0 has no reaper).
  absl::Duration idle_timeout = absl::Minutes(10);
  // nullptr: Clock::Real(). Must outlive the reaper.
  Clock* clock = nullptr;
};

class IdleReaper {
 public:
  // REQUIRES: both registries outlive the reaper.
  IdleReaper(InformerRegistry* informers, QueueRegistry* queues, IdleReaperOptions options);
  ~IdleReaper();
  IdleReaper(const IdleReaper&) = delete;
  IdleReaper& operator=(const IdleReaper&) = delete;

  struct Freed {
    int queues = 0;
    int informers = 0;
  };
  // One sweep now (the timer calls it; tests may too).
  Freed Sweep();

  absl::Duration period() const { return period_; }

 private:
  InformerRegistry* const informers_;
  QueueRegistry* const queues_;
  const absl::Duration idle_timeout_;
  const absl::Duration period_;
  Clock* const clock_;
  std::atomic<bool> stopping_{false};
  Timer* timer_raw_ = nullptr;
  // Last: destroyed first, waiting for a running sweep.
  std::unique_ptr<Timer> timer_;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_IDLE_REAPER_H_
