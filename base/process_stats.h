// What the process uses, read from the kernel and from malloc, and ProcessMetrics, which exports
// it under the names every Prometheus client library gives it (process_resident_memory_bytes,
// process_cpu_seconds_total, ...) plus malloc's own view of the heap:
//
//   informerd_heap_in_use_bytes  bytes handed out by malloc and not yet freed
//   informerd_heap_free_bytes    freed bytes malloc keeps in its arenas for reuse
//
// The RSS alone cannot tell a leak from fragmentation: glibc returns freed memory to the system
// only from the top of a heap (base/heap_trimmer.h), so the RSS can step up by a megabyte when
// a burst lands in a new arena and stay there with nothing leaked. In use is what a leak grows.
// Under ASan and TSan, whose allocators replace malloc, both come from the sanitizer's allocator.
//
//   ProcessMetrics process(&registry);   // declares the series
//   process.Update();                    // before each render of /metrics
//
// Thread safety: the functions and ProcessMetrics's methods may be called from any thread.
#ifndef INFORMERD_BASE_PROCESS_STATS_H_
#define INFORMERD_BASE_PROCESS_STATS_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "base/metrics.h"
#include "base/mutex.h"

namespace informerd {

struct ProcessMemory {
  size_t virtual_bytes = 0;
  size_t resident_bytes = 0;
};
// /proc/self/statm; zeros when it cannot be read.
ProcessMemory ReadProcessMemory();

struct HeapStats {
  size_t in_use_bytes = 0;
  size_t free_bytes = 0;
};
// glibc's mallinfo2 over every arena (in use counts mmapped chunks too), or the sanitizer's
// allocator. Walks malloc's free lists under each arena's lock: for a scrape, not a hot path.
HeapStats ReadHeapStats();

// User plus system CPU time of the whole process so far.
double ProcessCpuSeconds();

// Open file descriptors (entries of /proc/self/fd), and the soft limit on them (RLIMIT_NOFILE;
// unlimited: INT64_MAX); -1 when unknown.
int64_t OpenFds();
int64_t MaxFds();

class ProcessMetrics {
 public:
  // Declares the series in `registry` (which must outlive this); the start time is now.
  explicit ProcessMetrics(MetricsRegistry* registry);
  ProcessMetrics(const ProcessMetrics&) = delete;
  ProcessMetrics& operator=(const ProcessMetrics&) = delete;

  // Reads everything above into the series.
  void Update();

 private:
  Gauge* const resident_;
  Gauge* const virtual_;
  Gauge* const open_fds_;
  Gauge* const max_fds_;
  Gauge* const heap_in_use_;
  Gauge* const heap_free_;
  Counter* const cpu_;
  Mutex mu_;
  double cpu_counted_ ABSL_GUARDED_BY(mu_) = 0;  // what cpu_ has been given so far
};

}  // namespace informerd

#endif  // INFORMERD_BASE_PROCESS_STATS_H_
