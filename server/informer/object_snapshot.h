// ObjectSnapshot: the objects of a cache at one instant, handed out one at a time — what a
// listener added to a running informer starts with (processor_listener.h).
//
//   std::unique_ptr<ObjectSnapshot> s = store.Snapshot();   // under the informer's lock: cheap
//   for (size_t i = 0; i < s->size(); ++i) Send(s->Take(i));  // later, at the consumer's pace
//
// A plain cache's snapshot shares its objects. A compressed cache's (thread_safe_store.h) keeps
// each object's frame and unpacks it only when taken, so a snapshot costs no copy of the cache
// and a subscriber holds decompressed only what it is sending: 100 subscribers joining a
// compressed informer of 150k Pods would otherwise each hold the whole cache decompressed.
//
// Thread safety: none; the owner (a listener, under its lock) serializes calls.
#ifndef INFORMERD_SERVER_INFORMER_OBJECT_SNAPSHOT_H_
#define INFORMERD_SERVER_INFORMER_OBJECT_SNAPSHOT_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "server/informer/index.h"

namespace informerd::informer {

class ObjectSnapshot {
 public:
  virtual ~ObjectSnapshot() = default;
  virtual size_t size() const = 0;
  // Object i, each at most once, releasing the snapshot's hold on it; null when it cannot be
  // produced (a frame that does not decompress, logged by the store): the caller skips it.
  virtual ObjectPtr Take(size_t i) = 0;
};

// A snapshot of objects already in hand.
class VectorSnapshot : public ObjectSnapshot {
 public:
  explicit VectorSnapshot(std::vector<ObjectPtr> objects) : objects_(std::move(objects)) {}
  size_t size() const override { return objects_.size(); }
  ObjectPtr Take(size_t i) override { return std::move(objects_[i]); }

 private:
  std::vector<ObjectPtr> objects_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_OBJECT_SNAPSHOT_H_
