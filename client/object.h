// Object: one Kubernetes object as informerd keeps it — its compact JSON bytes plus the metadata
// parsed once (namespace, name, uid, resourceVersion, generation, labels, ownerReferences,
// deletionTimestamp, kind, apiVersion) and its cache key. Immutable; shared as
// `std::shared_ptr<const Object>` by the cache, the informers and every reader.
//
//   absl::StatusOr<std::shared_ptr<const Object>> pod = Object::Parse(json);
//   if (pod.ok() && (*pod)->label("app") == "web") Enqueue((*pod)->key());
//
// The accessors return views into the object itself: valid as long as the Object lives. The
// JSON bytes are followed by at least kPadding readable bytes, so a simdjson parser can read
// them in place (simdjson::padded_string_view(json.data(), json.size(), json.size() + kPadding)).
//
// Objects are built by Object::Parse, the watch decoder and the list decoder (object_parser.h).
//
// Thread safety: immutable after construction; any number of threads may read one Object.
#ifndef INFORMERD_CLIENT_OBJECT_H_
#define INFORMERD_CLIENT_OBJECT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace informerd::client {

// metadata.ownerReferences[i].
struct OwnerReference {
  absl::string_view api_version;
  absl::string_view kind;
  absl::string_view name;
  absl::string_view uid;
  bool controller = false;
  bool block_owner_deletion = false;
};

class Object {
 public:
  // Readable bytes after json().end(): simdjson's SIMDJSON_PADDING.
  static constexpr size_t kPadding = 64;

  struct Label {
    absl::string_view key;
    absl::string_view value;
  };

  // Parses a JSON object (any formatting); the stored bytes are compacted. Fails with
  // InvalidArgument when `json` is not one valid JSON object or a metadata field has the wrong
  // type (e.g. "metadata.labels.app: not a string").
  static absl::StatusOr<std::shared_ptr<const Object>> Parse(absl::string_view json);

  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  // The compact JSON of the whole object.
  absl::string_view json() const { return json_; }

  absl::string_view api_version() const { return api_version_; }
  absl::string_view kind() const { return kind_; }
  // metadata.namespace: "" for cluster-scoped objects.
  absl::string_view namespace_name() const { return namespace_; }
  absl::string_view name() const { return name_; }
  absl::string_view uid() const { return uid_; }
  // Opaque: compare for equality only.
  absl::string_view resource_version() const { return resource_version_; }
  // metadata.generation, 0 when absent.
  int64_t generation() const { return generation_; }
  // metadata.deletionTimestamp (RFC 3339), "" when the object is not being deleted.
  absl::string_view deletion_timestamp() const { return deletion_timestamp_; }
  // "namespace/name", or "name" for cluster-scoped objects (client-go's MetaNamespaceKeyFunc).
  absl::string_view key() const { return key_; }

  // metadata.labels, sorted by key.
  absl::Span<const Label> labels() const { return labels_; }
  // The value of label `key`, if set.
  std::optional<absl::string_view> label(absl::string_view key) const;

  absl::Span<const OwnerReference> owner_references() const { return owner_references_; }
  // The owner reference with controller=true, or nullptr.
  const OwnerReference* controller_ref() const;

 private:
  friend class ObjectParser;
  // Only ObjectParser can name the key, so only it can construct (with std::make_shared).
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  explicit Object(ConstructionKey) {}

 private:
  // Every byte the views below point into lives right after this Object, in the allocation
  // that holds it and its shared_ptr control block (ObjectParser allocates them together):
  //   [Label x labels][OwnerReference x owners][json][kPadding bytes][metadata strings and key]
  // Never modified after construction.

  absl::string_view json_;
  absl::string_view api_version_;
  absl::string_view kind_;
  absl::string_view namespace_;
  absl::string_view name_;
  absl::string_view uid_;
  absl::string_view resource_version_;
  absl::string_view deletion_timestamp_;
  absl::string_view key_;
  int64_t generation_ = 0;
  absl::Span<const Label> labels_;
  absl::Span<const OwnerReference> owner_references_;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_OBJECT_H_
