#include "base/heap_trimmer.h"

#include <malloc.h>
#include <unistd.h>

#include <utility>

#include "base/process_stats.h"

namespace informerd {

HeapTrimmer::HeapTrimmer(HeapTrimmerOptions options)
    : period_(options.period > absl::ZeroDuration() ? options.period : absl::Seconds(5)),
      min_growth_bytes_(options.min_growth_bytes),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      resident_bytes_(options.resident_bytes ? std::move(options.resident_bytes)
                                             : std::function<size_t()>([] {
                                                 return ReadProcessMemory().resident_bytes;
                                               })),
      trim_(options.trim ? std::move(options.trim) : [] { malloc_trim(0); }) {
  {
    MutexLock lock(&mu_);
    baseline_ = resident_bytes_();
  }
  timer_ = clock_->CreateTimer([this] { OnTimer(); });
  timer_->ArmAt(clock_->Now() + period_);
}

HeapTrimmer::~HeapTrimmer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;  // a running check does not re-arm
  }
  timer_.reset();  // waits for a running check
}

void HeapTrimmer::OnTimer() {
  CheckNow();
  MutexLock lock(&mu_);
  if (!stopping_) timer_->ArmAt(clock_->Now() + period_);
}

bool HeapTrimmer::CheckNow() {
  MutexLock lock(&mu_);
  const size_t resident = resident_bytes_();
  if (resident < baseline_) {
    baseline_ = resident;  // freed to the system by malloc itself: count growth from here
    return false;
  }
  if (resident - baseline_ < min_growth_bytes_) return false;
  trim_();
  baseline_ = resident_bytes_();
  ++trims_;
  return true;
}

uint64_t HeapTrimmer::trims() const {
  MutexLock lock(&mu_);
  return trims_;
}

}  // namespace informerd
