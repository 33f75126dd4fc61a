#include "absl/synchronization/mutex.h"

namespace informerd {
namespace {

// Debian builds Abseil without NDEBUG, which turns on absl::Mutex's deadlock detection: a
// global lock-order graph updated on every Lock. informerd's own locks are std::mutex (see
// mutex.h), but gRPC and Abseil itself lock absl::Mutex on hot paths, so every program that
// links this library switches the detector off. Lock order is checked by ThreadSanitizer.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace
}  // namespace informerd
