// FieldPath: a dotted path into an object's JSON (`spec.nodeName`, `metadata.name`,
// `status.podIP`), evaluated to the scalar values found there. Used by field indexes, field
// selectors and transforms.
//
//   FieldPath path = FieldPath::Parse("spec.nodeName").value();
//   path.Values(*pod, [&](absl::string_view node) { ... });
//
// What a path yields: a string gives its unescaped text, a number or boolean its JSON text; an
// array at the end gives each scalar element (so `spec.finalizers` yields every finalizer), and
// an array in the middle is walked into, each element continuing the path (so
// `spec.template.spec.volumes.configMap.name` yields the name of every ConfigMap volume); null,
// an object or a missing field yield nothing. Paths into metadata that the Object already
// parsed (metadata.name, metadata.namespace, metadata.uid, metadata.resourceVersion,
// metadata.generation, metadata.deletionTimestamp, kind, apiVersion) and `metadata.labels.KEY`
// are answered without reading the JSON.
//
// Segments are separated by dots and may not be empty. A key containing dots is written in
// brackets and quotes: `metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']`.
//
// Thread safety: a FieldPath is immutable; Values may be called from any number of threads. Each
// thread parses with its own simdjson parser; the views passed to `emit` are valid only during
// the call, and `emit` must not evaluate another FieldPath on the same thread.
#ifndef INFORMERD_SERVER_INFORMER_FIELD_PATH_H_
#define INFORMERD_SERVER_INFORMER_FIELD_PATH_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"

namespace informerd::informer {

class FieldPath {
 public:
  // Fails with InvalidArgument naming the problem (empty path, empty segment).
  static absl::StatusOr<FieldPath> Parse(absl::string_view path);

  // Calls `emit` once per value found at this path in `object` (see the header comment).
  void Values(const client::Object& object,
              absl::FunctionRef<void(absl::string_view)> emit) const;

  // The first value, or "" when there is none (a field selector's view of a missing field).
  std::string FirstValue(const client::Object& object) const;

  // The path as written.
  const std::string& text() const { return text_; }
  const std::vector<std::string>& segments() const { return segments_; }

 private:
  // Paths answered from the parsed metadata.
  enum class Known {
    kNone,
    kName,
    kNamespace,
    kUid,
    kResourceVersion,
    kGeneration,
    kDeletionTimestamp,
    kKind,
    kApiVersion,
    kLabel,
  };
  FieldPath() = default;

  std::string text_;
  std::vector<std::string> segments_;
  Known known_ = Known::kNone;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_FIELD_PATH_H_
