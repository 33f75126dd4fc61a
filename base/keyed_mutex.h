// KeyedMutex: one exclusive lock per string key, for work that must not interleave per key but
// may run in parallel across keys (a queue's spec change and its write to the cluster).
//
//   KeyedMutex locks;
//   {
//     KeyedMutex::Lock lock(&locks, "pods");   // waits while another holds "pods"
//     ...
//   }
//
// A key has an entry only while someone holds or waits for it, so memory is bounded by the
// callers at once, not by the keys ever seen. Locks of different keys taken by one thread must
// be taken in one order (as for any two mutexes).
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_BASE_KEYED_MUTEX_H_
#define INFORMERD_BASE_KEYED_MUTEX_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"

namespace informerd {

class KeyedMutex {
 public:
  KeyedMutex() = default;
  KeyedMutex(const KeyedMutex&) = delete;
  KeyedMutex& operator=(const KeyedMutex&) = delete;

  // Holds `key`'s lock from construction to destruction.
  class Lock {
   public:
    Lock(KeyedMutex* locks, absl::string_view key);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    KeyedMutex* const locks_;
    const std::string key_;
  };

  // Keys held or waited for now.
  size_t size() const;

 private:
  struct Entry {
    bool held = false;
    size_t waiting = 0;
  };
  mutable Mutex mu_;
  // unique_ptr: an entry's address outlives the map's rehashes while a waiter reads it.
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd

#endif  // INFORMERD_BASE_KEYED_MUTEX_H_
