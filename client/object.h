// Object: one Kubernetes object as informerd keeps it — its compact JSON bytes plus the metadata
// parsed once (namespace, name, uid, resourceVersion, generation, labels, annotations,
// finalizers, ownerReferences, creationTimestamp, deletionTimestamp, kind, apiVersion) and its
// cache key. Immutable; shared as
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
// Thread safety: immutable after construction (but for the once-set cache of derived()); any
// number of threads may read one Object.
#ifndef INFORMERD_CLIENT_OBJECT_H_
#define INFORMERD_CLIENT_OBJECT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
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
  // type (e.g. "metadata.labels.app: not a string"), and when the object is out of the bounds
  // the compact form assumes (JSON of 4 GiB or more; a metadata string or the key longer than
  // 65535 bytes; more than 65535 labels, annotations, finalizers or owner references: far beyond
  // Kubernetes' limits).
  static absl::StatusOr<std::shared_ptr<const Object>> Parse(absl::string_view json);

  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  ~Object();

  // The compact JSON of the whole object.
  absl::string_view json() const { return absl::string_view(data(), json_size_); }

  absl::string_view api_version() const { return View(kApiVersion); }
  absl::string_view kind() const { return View(kKind); }
  // metadata.namespace: "" for cluster-scoped objects.
  absl::string_view namespace_name() const { return key().substr(0, namespace_size_); }
  absl::string_view name() const {
    return namespace_size_ == 0 ? key() : key().substr(namespace_size_ + 1);
  }
  absl::string_view uid() const { return View(kUid); }
  // Opaque: compare for equality only.
  absl::string_view resource_version() const { return View(kResourceVersion); }
  // metadata.generation, 0 when absent.
  int64_t generation() const { return generation_; }
  // metadata.deletionTimestamp (RFC 3339), "" when the object is not being deleted.
  absl::string_view deletion_timestamp() const { return View(kDeletionTimestamp); }
  // metadata.creationTimestamp (RFC 3339), "" when absent.
  absl::string_view creation_timestamp() const { return View(kCreationTimestamp); }
  // "namespace/name", or "name" for cluster-scoped objects (client-go's MetaNamespaceKeyFunc).
  absl::string_view key() const { return absl::string_view(data() + KeyOffset(), key_size_); }

  // metadata.labels, sorted by key.
  absl::Span<const Label> labels() const {
    return absl::Span<const Label>(reinterpret_cast<const Label*>(data() + LabelsOffset()),
                                   label_count_);
  }
  // The value of label `key`, if set.
  std::optional<absl::string_view> label(absl::string_view key) const;

  // metadata.annotations, sorted by key.
  absl::Span<const Label> annotations() const {
    return absl::Span<const Label>(reinterpret_cast<const Label*>(data() + AnnotationsOffset()),
                                   annotation_count_);
  }
  // The value of annotation `key`, if set.
  std::optional<absl::string_view> annotation(absl::string_view key) const;

  // metadata.finalizers, in the object's order.
  absl::Span<const absl::string_view> finalizers() const {
    return absl::Span<const absl::string_view>(
        reinterpret_cast<const absl::string_view*>(data() + FinalizersOffset()),
        finalizer_count_);
  }

  absl::Span<const OwnerReference> owner_references() const {
    return absl::Span<const OwnerReference>(
        reinterpret_cast<const OwnerReference*>(data() + OwnersOffset()), owner_count_);
  }
  // The owner reference with controller=true, or nullptr.
  const OwnerReference* controller_ref() const;

  // A form of this object that a higher layer derives once and shares among all its readers —
  // the gRPC service's wire encoding (server/service/object_proto.h), which would otherwise be
  // rebuilt for every Watch stream that sends the object. The object owns it and frees it with
  // itself; it is not counted in allocated_bytes(). One slot, one user: only that encoding sets it.
  class Derived {
   public:
    virtual ~Derived() = default;
  };
  // The derived form: made by `make` on the first call, the same one for every later call.
  // `make` runs once: concurrent first calls wait for it rather than make a second form.
  const Derived& derived(absl::FunctionRef<std::unique_ptr<Derived>()> make) const;

  // Heap bytes of the one allocation that holds this Object, its shared_ptr control block and
  // every byte its views point into, as malloc accounts them (chunk size, header included).
  size_t allocated_bytes() const { return allocated_bytes_; }

 private:
  friend class ObjectParser;
  // Only ObjectParser can name the key, so only it can construct (with std::make_shared).
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  explicit Object(ConstructionKey) {}

 private:
  // Metadata strings held as (offset, size) into data().
  enum Field {
    kApiVersion,
    kKind,
    kUid,
    kResourceVersion,
    kDeletionTimestamp,
    kCreationTimestamp,
    kFieldCount
  };

  // Every byte the accessors point into lives right after this Object, in the allocation that
  // holds it and its shared_ptr control block (ObjectParser allocates them together):
  //   [json][0-7 zero bytes][Label x label_count_][Label x annotation_count_]
  //   [OwnerReference x owner_count_][string_view x finalizer_count_][key]
  //   [decoded copies of escaped strings][zero bytes up to kPadding after the json]
  // Metadata strings without escape sequences (the usual case) point into the json bytes; so
  // the metadata, key and arrays after the json usually serve as its padding too.
  // Never modified after construction.
  const char* data() const { return reinterpret_cast<const char*>(this + 1); }
  size_t LabelsOffset() const { return (size_t{json_size_} + 7) & ~size_t{7}; }
  size_t AnnotationsOffset() const { return LabelsOffset() + label_count_ * sizeof(Label); }
  size_t OwnersOffset() const { return AnnotationsOffset() + annotation_count_ * sizeof(Label); }
  size_t FinalizersOffset() const {
    return OwnersOffset() + owner_count_ * sizeof(OwnerReference);
  }
  size_t KeyOffset() const {
    return FinalizersOffset() + finalizer_count_ * sizeof(absl::string_view);
  }
  absl::string_view View(Field f) const {
    return absl::string_view(data() + offsets_[f], sizes_[f]);
  }

  int64_t generation_ = 0;
  uint32_t json_size_ = 0;
  uint32_t allocated_bytes_ = 0;
  uint32_t offsets_[kFieldCount] = {};
  uint16_t sizes_[kFieldCount] = {};
  uint16_t key_size_ = 0;
  uint16_t namespace_size_ = 0;  // the key's "namespace" part; 0 when cluster-scoped
  uint16_t label_count_ = 0;
  uint16_t annotation_count_ = 0;
  uint16_t owner_count_ = 0;
  uint16_t finalizer_count_ = 0;
  // Set once by derived(); immutable afterwards like the rest of the object.
  mutable std::atomic<const Derived*> derived_{nullptr};
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_OBJECT_H_
