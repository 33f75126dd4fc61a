// Happens-before annotations for ThreadSanitizer, for hand-overs it cannot see.
//
// Debian's gRPC, protobuf and Abseil are not instrumented: when gRPC runs a reactor's
// OnWriteDone on one of its threads after the write that a StartWrite on another thread began,
// the ordering lives in gRPC's own atomics and futexes, invisible to TSan. It then takes every
// 8-byte word of a message buffer that both threads touch (a reused response, an event carried
// to the next message) for a race. Those reports are suppressed, but each costs TSan a stack
// restore and a suppression match, about a millisecond: a reactor moving a 1 MiB object spent
// minutes in them. Annotating the hand-over states what gRPC guarantees and removes the reports.
//
//   TsanRelease(this);  // everything before this point ...
//   StartWrite(&response_);
//   ...
//   void OnWriteDone(bool ok) override {
//     TsanAcquire(this);  // ... happens before everything after this one
//
// Without ThreadSanitizer both are no-ops.
//
// Thread safety: callable from any thread.
#ifndef INFORMERD_BASE_TSAN_H_
#define INFORMERD_BASE_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace informerd {

// Publishes this thread's writes so far to a later TsanAcquire of the same address.
inline void TsanRelease(const void* addr) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

// Orders what follows after every earlier TsanRelease of the same address.
inline void TsanAcquire(const void* addr) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

}  // namespace informerd

#endif  // INFORMERD_BASE_TSAN_H_
