// Transform: what an informer does to each object before storing it (client-go's
// SetTransform), declared rather than coded so that informers with equal transforms can share.
//
//   auto t = Transform::Create({.drop_paths = {"status.conditions"}}).value();
//   absl::StatusOr<ObjectPtr> stored = t->Apply(std::move(received));
//
// Operations, applied to the object's JSON in one pass:
//   * strip_managed_fields (on by default): drop metadata.managedFields, 20–40% of a typical
//     object and never needed by controllers.
//   * drop_paths: drop the fields at these paths (field_path.h syntax, e.g.
//     `metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']`).
//   * keep_paths (a keep-only projection): keep only these paths, plus apiVersion, kind and
//     metadata (which the cache needs for keys, selectors and indexes).
//   * metadata_only: keep only apiVersion, kind and metadata (client-go's metadata informers).
// Drops apply inside kept subtrees too. A path through a value that is not an object leaves that
// value alone.
//
// The daemon's informers do the managedFields strip while decoding instead (one parse of each
// object: ClientListerWatcherOptions.drop_managed_fields), and apply the rest here.
//
// The result is a new immutable Object (compact JSON plus parsed metadata). When the transform
// changes nothing — no dropped field is present — Apply returns the very object it was given
// without parsing it, so the default costs one scan of the bytes for objects that have no
// managedFields. Transforms are idempotent: applying one to its own output changes nothing.
//
// Thread safety: a Transform is immutable; Apply may be called from any number of threads.
#ifndef INFORMERD_SERVER_INFORMER_TRANSFORM_H_
#define INFORMERD_SERVER_INFORMER_TRANSFORM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/object.h"
#include "server/informer/index.h"

namespace informerd::informer {

struct TransformOptions {
  bool strip_managed_fields = true;
  std::vector<std::string> drop_paths;
  std::vector<std::string> keep_paths;
  bool metadata_only = false;
};

class Transform {
 public:
  // InvalidArgument naming the path for an invalid path, or for keep_paths with metadata_only.
  static absl::StatusOr<std::unique_ptr<Transform>> Create(TransformOptions options);
  ~Transform();

  // The transformed object (the input itself when nothing changes). Fails with InvalidArgument
  // only when the object's JSON cannot be read, which an Object's JSON always can.
  // REQUIRES: object != nullptr.
  absl::StatusOr<ObjectPtr> Apply(ObjectPtr object) const;

  // Whether Apply always returns its input.
  bool identity() const;
  // A canonical description: equal for transforms that do the same.
  const std::string& fingerprint() const { return fingerprint_; }

  struct Node;  // internal

 private:
  Transform(std::unique_ptr<Node> root, std::vector<std::string> needles, std::string fingerprint);

  const std::unique_ptr<Node> root_;
  // For a drop-only transform: `"key":` of every dropped leaf. If none occurs in an object's
  // bytes, the transform cannot change it. Empty for projections (which always parse).
  const std::vector<std::string> needles_;
  const std::string fingerprint_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_TRANSFORM_H_
