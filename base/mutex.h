// Mutex: absl::Mutex with lock contracts, made visible to ThreadSanitizer.
//
// informerd links Debian's prebuilt Abseil, which is not compiled with -fsanitize=thread, so
// TSan cannot see absl::Mutex's happens-before edges and reports every guarded access as a race.
// This thin wrapper adds the TSan mutex annotations around each lock operation when the build
// defines INFORMERD_TSAN (`--config=tsan`); in every other build it compiles down to absl::Mutex.
//
// Waiting uses predicates (any const-callable returning bool), evaluated with the mutex held;
// they must only read state guarded by this mutex and must not block.
//
//   informerd::Mutex mu;
//   int n ABSL_GUARDED_BY(mu) = 0;
//   {
//     informerd::MutexLock lock(&mu);
//     mu.Await([&]() { return n > 0; });
//   }
//
// Thread safety: all methods may be called from any thread.
#ifndef INFORMERD_BASE_MUTEX_H_
#define INFORMERD_BASE_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(INFORMERD_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace informerd {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() {
#if defined(INFORMERD_TSAN)
    __tsan_mutex_create(this, __tsan_mutex_not_static);
#endif
  }
  ~Mutex() {
#if defined(INFORMERD_TSAN)
    __tsan_mutex_destroy(this, __tsan_mutex_not_static);
#endif
  }
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    BeforeLock(0);
    mu_.Lock();
    AfterLock(0);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    BeforeUnlock(0);
    mu_.Unlock();
    AfterUnlock(0);
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() {
    BeforeLock(kRead);
    mu_.ReaderLock();
    AfterLock(kRead);
  }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() {
    BeforeUnlock(kRead);
    mu_.ReaderUnlock();
    AfterUnlock(kRead);
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() { mu_.AssertHeld(); }

  // Releases the mutex until `pred()` is true, then returns with it held again.
  // REQUIRES: the mutex is held exclusively.
  template <typename Pred>
  void Await(const Pred& pred) {
    BeginWait();
    mu_.Await(absl::Condition(&pred));
    EndWait();
  }

  // As Await, but gives up at `deadline`; returns whether `pred()` held.
  // REQUIRES: the mutex is held exclusively.
  template <typename Pred>
  bool AwaitWithDeadline(const Pred& pred, absl::Time deadline) {
    BeginWait();
    bool ok = mu_.AwaitWithDeadline(absl::Condition(&pred), deadline);
    EndWait();
    return ok;
  }

 private:
#if defined(INFORMERD_TSAN)
  static constexpr unsigned kRead = __tsan_mutex_read_lock;
  void BeforeLock(unsigned flags) { __tsan_mutex_pre_lock(this, flags); }
  void AfterLock(unsigned flags) { __tsan_mutex_post_lock(this, flags, 0); }
  void BeforeUnlock(unsigned flags) { __tsan_mutex_pre_unlock(this, flags); }
  void AfterUnlock(unsigned flags) { __tsan_mutex_post_unlock(this, flags); }
  // TSan ignores memory accesses between a pre_ and a post_ annotation. absl evaluates the
  // predicates of waiters inside its lock and unlock paths, on whichever thread is there, reading
  // state (and the Condition objects) that absl's own uninstrumented lock orders; those reads
  // must fall in such a window. A wait is therefore one long unlock window (the release happens
  // at its start) followed by an empty lock window (the acquire).
  void BeginWait() { BeforeUnlock(0); }
  void EndWait() {
    AfterUnlock(0);
    BeforeLock(0);
    AfterLock(0);
  }
#else
  static constexpr unsigned kRead = 0;
  void BeforeLock(unsigned) {}
  void AfterLock(unsigned) {}
  void BeforeUnlock(unsigned) {}
  void AfterUnlock(unsigned) {}
  void BeginWait() {}
  void EndWait() {}
#endif

  absl::Mutex mu_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` shared for its scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace informerd

#endif  // INFORMERD_BASE_MUTEX_H_
