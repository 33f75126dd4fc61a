// HeapTrimmer: gives the memory malloc keeps unused back to the system after a burst.
//
// glibc's malloc returns freed memory to the system only from the top of a heap; what is freed
// in the middle of its arenas stays in the process's RSS until malloc_trim. A daemon that streams
// a large informer to many Watch subscribers allocates and frees gigabytes (with a compressed
// cache, every object read is a decompressed copy), and was left holding 870 MiB of which 68 MiB
// was in use (50k Pods, 30 subscribers); malloc_trim(0) brought it to 105 MiB.
//
//   HeapTrimmer trimmer({.clock = clock});   // checks every `period` on the clock's timer
//
// Policy: every `period`, if the RSS has grown by `min_growth` or more since the last trim (or
// since the lowest RSS seen after it), trim. Reading the RSS is cheap (/proc/self/statm); the
// trim walks every arena under its lock, so it runs only after such growth, not on a schedule.
// Memory that is in use is not returned, so a trim that finds none moves the baseline up and
// the next waits for more growth.
//
// The check runs on the clock's timer thread, which the queues' delay timers share: a trim after a
// burst of gigabytes holds it for tens of milliseconds, once.
//
// Thread safety: CheckNow may be called from any thread; the destructor waits for a running
// check.
#ifndef INFORMERD_BASE_HEAP_TRIMMER_H_
#define INFORMERD_BASE_HEAP_TRIMMER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"

namespace informerd {

struct HeapTrimmerOptions {
  // How often the RSS is read; > 0.
  absl::Duration period = absl::Seconds(5);
  // Growth of the RSS since the last trim that makes the next check trim.
  size_t min_growth_bytes = size_t{64} << 20;
  // nullptr: Clock::Real(). Must outlive the trimmer.
  Clock* clock = nullptr;
  // The process's resident bytes, and the trim. Empty: ReadProcessMemory()'s (base/process_stats.h)
  // and malloc_trim(0).
  std::function<size_t()> resident_bytes;
  std::function<void()> trim;
};

class HeapTrimmer {
 public:
  explicit HeapTrimmer(HeapTrimmerOptions options);
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // One check, as the timer makes it; returns whether it trimmed.
  bool CheckNow();
  // Trims so far.
  uint64_t trims() const;

 private:
  void OnTimer();

  const absl::Duration period_;
  const size_t min_growth_bytes_;
  Clock* const clock_;
  const std::function<size_t()> resident_bytes_;
  const std::function<void()> trim_;
  mutable Mutex mu_;
  // The RSS after the last trim, or lower since; growth is counted from here.
  size_t baseline_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Timer> timer_;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_HEAP_TRIMMER_H_
