#include "base/process_stats.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizers' allocator statistics (compiler-rt's sanitizer/allocator_interface.h, which
// GCC does not install; its runtimes export them all the same).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
extern "C" size_t __sanitizer_get_free_bytes();
#define INFORMERD_SANITIZER_ALLOCATOR 1
#endif

namespace informerd {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return m;
  unsigned long size = 0, resident = 0;  // NOLINT(runtime/int): statm's fields
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return m;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  m.virtual_bytes = static_cast<size_t>(size) * page;
  m.resident_bytes = static_cast<size_t>(resident) * page;
  return m;
}

HeapStats ReadHeapStats() {
  HeapStats h;
#ifdef INFORMERD_SANITIZER_ALLOCATOR
  h.in_use_bytes = __sanitizer_get_current_allocated_bytes();
  h.free_bytes = __sanitizer_get_free_bytes();
#else
  const struct mallinfo2 info = mallinfo2();
  h.in_use_bytes = info.uordblks + info.hblkhd;  // chunks in arenas, and mmapped ones
  h.free_bytes = info.fordblks;
#endif
  return h;
}

double ProcessCpuSeconds() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const struct timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int64_t OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t n = 0;
  while (const struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

int64_t MaxFds() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  constexpr rlim_t kMax = static_cast<rlim_t>(INT64_MAX);
  return static_cast<int64_t>(limit.rlim_cur > kMax ? kMax : limit.rlim_cur);
}

ProcessMetrics::ProcessMetrics(MetricsRegistry* registry)
    : resident_(registry->GetGauge("process_resident_memory_bytes",
                                   "Bytes of the process's memory resident in RAM.", {})),
      virtual_(registry->GetGauge("process_virtual_memory_bytes",
                                  "Bytes of the process's virtual address space.", {})),
      open_fds_(registry->GetGauge("process_open_fds", "File descriptors the process has open.", {})),
      max_fds_(registry->GetGauge("process_max_fds",
                                  "The soft limit on open file descriptors (RLIMIT_NOFILE).", {})),
      heap_in_use_(registry->GetGauge(
          "informerd_heap_in_use_bytes",
          "Bytes allocated by malloc and not freed: what a leak grows, unlike the RSS.", {})),
      heap_free_(registry->GetGauge(
          "informerd_heap_free_bytes",
          "Freed bytes malloc keeps in its arenas for reuse (a trim may have returned part of "
          "them to the system).",
          {})),
      cpu_(registry->GetCounter("process_cpu_seconds_total",
                                "CPU seconds, user and system, the process has used.", {})) {
  registry
      ->GetGauge("process_start_time_seconds",
                 "When the daemon started, in seconds since the Unix epoch.", {})
      ->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

void ProcessMetrics::Update() {
  const ProcessMemory memory = ReadProcessMemory();
  resident_->Set(static_cast<double>(memory.resident_bytes));
  virtual_->Set(static_cast<double>(memory.virtual_bytes));
  open_fds_->Set(static_cast<double>(OpenFds()));
  max_fds_->Set(static_cast<double>(MaxFds()));
  const HeapStats heap = ReadHeapStats();
  heap_in_use_->Set(static_cast<double>(heap.in_use_bytes));
  heap_free_->Set(static_cast<double>(heap.free_bytes));
  // A counter only goes up: it is given what the CPU time grew by since the last update.
  MutexLock lock(&mu_);
  const double cpu = ProcessCpuSeconds();
  if (cpu > cpu_counted_) {
    cpu_->Inc(cpu - cpu_counted_);
    cpu_counted_ = cpu;
  }
}

}  // namespace informerd
