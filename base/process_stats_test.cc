#include "base/process_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/metrics.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(ProcessStatsTest, ReadsThisProcesssMemory) {
  const ProcessMemory before = ReadProcessMemory();
  ASSERT_GT(before.resident_bytes, 0u);
  ASSERT_GE(before.virtual_bytes, before.resident_bytes);
  // 64 MiB touched: the RSS grows by about that much.
  std::vector<char> block(64 * kMiB, 1);
  const ProcessMemory after = ReadProcessMemory();
  EXPECT_GE(after.resident_bytes, before.resident_bytes + 60 * kMiB) << int{block[0]};
}

TEST(ProcessStatsTest, HeapInUseFollowsWhatIsAllocatedAndFreed) {
  const size_t before = ReadHeapStats().in_use_bytes;
  ASSERT_GT(before, 0u);
  // Small blocks land in malloc's arenas, a large one in a mapping of its own: both count.
  std::vector<std::unique_ptr<char[]>> small;
  for (int i = 0; i < 4096; ++i) small.push_back(std::make_unique<char[]>(1024));
  auto large = std::make_unique<char[]>(32 * kMiB);
  const size_t held = ReadHeapStats().in_use_bytes;
  EXPECT_GE(held, before + 36 * kMiB);
  EXPECT_LE(held, before + 40 * kMiB);
  large.reset();
  small.clear();
  const HeapStats after = ReadHeapStats();
  EXPECT_LE(after.in_use_bytes, before + 1 * kMiB);
  // The small blocks' memory stays with malloc, free for reuse.
  EXPECT_GT(after.free_bytes, 0u);
}

TEST(ProcessStatsTest, CountsOpenFileDescriptorsAndTheirLimit) {
  const int64_t before = OpenFds();
  ASSERT_GE(before, 3);  // stdin, stdout, stderr at least
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(OpenFds(), before + 5);
  for (int fd : fds) close(fd);
  EXPECT_EQ(OpenFds(), before);
  EXPECT_GE(MaxFds(), before + 5);
}

TEST(ProcessMetricsTest, ExportsEachReadingAndCpuTimeOnlyGoesUp) {
  MetricsRegistry registry;
  ProcessMetrics process(&registry);
  auto gauge = [&](const char* name) { return registry.GetGauge(name, "", {})->Value(); };
  Counter* cpu = registry.GetCounter("process_cpu_seconds_total", "", {});
  EXPECT_GT(gauge("process_start_time_seconds"), 1.7e9);  // after 2023
  process.Update();
  EXPECT_GT(gauge("process_resident_memory_bytes"), 0);
  EXPECT_GE(gauge("process_virtual_memory_bytes"), gauge("process_resident_memory_bytes"));
  EXPECT_GE(gauge("process_open_fds"), 3);
  EXPECT_GE(gauge("process_max_fds"), gauge("process_open_fds"));
  const double in_use = gauge("informerd_heap_in_use_bytes");
  EXPECT_GT(in_use, 0);

  // 50 ms of CPU: the counter grows by at least that much.
  const double cpu_before = cpu->Value();
  const double until = ProcessCpuSeconds() + 0.05;
  while (ProcessCpuSeconds() < until) {
    // getrusage itself is the work: a system call each time round, which nothing optimizes away.
  }
  auto block = std::make_unique<char[]>(16 * kMiB);
  process.Update();
  EXPECT_GE(cpu->Value(), cpu_before + 0.05);
  EXPECT_GE(gauge("informerd_heap_in_use_bytes"), in_use + 16 * kMiB);
  const double cpu_now = cpu->Value();
  process.Update();
  EXPECT_GE(cpu->Value(), cpu_now);

  const std::string text = registry.Render();
  for (const char* family :
       {"process_resident_memory_bytes gauge", "process_cpu_seconds_total counter",
        "informerd_heap_in_use_bytes gauge", "informerd_heap_free_bytes gauge"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family), std::string::npos) << family;
  }
}

}  // namespace
}  // namespace informerd
