// Index: how a store indexes its objects — client-go's IndexFunc and Indexers, as declarations.
//
// An index maps each object to zero or more values; the store keeps, per index, value -> keys.
// Indexes are declared per informer by kind, so that they can be named in configuration and
// compared (two informers with the same declarations can share):
//
//   IndexSpec::Namespace()                        "namespace": metadata.namespace (built in)
//   IndexSpec::Label("by-app", "app")             the value of label `app`, when set
//   IndexSpec::Field("by-node", "spec.nodeName")  the values at a field path (field_path.h)
//   IndexSpec::Owner("by-owner")                  the controller owner as "Kind/name"
//   IndexSpec::Owner("by-rs", {.kind = "ReplicaSet", .by = OwnerIndex::By::kUid})
//   IndexSpec::Custom("x", fn)                    any function (in-process users only)
//
// A compiled index (IndexFunction) emits its values as views that are valid only during the
// call; callers copy what they keep.
//
// Thread safety: IndexSpec is a value; an IndexFunction is immutable and may be evaluated from any
// number of threads (custom functions must be thread-safe themselves).
#ifndef INFORMERD_SERVER_INFORMER_INDEX_H_
#define INFORMERD_SERVER_INFORMER_INDEX_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"
#include "server/informer/field_path.h"

namespace informerd::informer {

using ObjectPtr = std::shared_ptr<const client::Object>;

// The name of the built-in namespace index (client-go's cache.NamespaceIndex).
inline constexpr absl::string_view kNamespaceIndex = "namespace";

// Emits the values of one object. `emit` may be called any number of times.
using IndexFunc =
    std::function<void(const client::Object&, absl::FunctionRef<void(absl::string_view)> emit)>;

struct OwnerIndex {
  enum class By {
    kKindName,  // "ReplicaSet/web-7d9f8" (owners live in the object's namespace)
    kUid,       // the owner's uid
  };
  // Only owner references of this kind; "" for any kind.
  std::string kind;
  By by = By::kKindName;
  // Only the reference with controller=true (the usual case); false indexes every owner.
  bool controller_only = true;
};

struct IndexSpec {
  enum class Kind { kNamespace, kLabel, kField, kOwner, kCustom };

  static IndexSpec Namespace();
  static IndexSpec Label(std::string name, std::string label_key);
  static IndexSpec Field(std::string name, std::string field_path);
  static IndexSpec Owner(std::string name, OwnerIndex owner = {});
  static IndexSpec Custom(std::string name, IndexFunc func);

  // A readable form, e.g. "by-node=field(spec.nodeName)".
  std::string DebugString() const;

  std::string name;
  Kind kind = Kind::kNamespace;
  // kLabel: the label key; kField: the field path.
  std::string argument;
  OwnerIndex owner;   // kOwner
  IndexFunc custom;   // kCustom
};

// A compiled IndexSpec.
class IndexFunction {
 public:
  // Fails with InvalidArgument for an empty name, an invalid field path, an empty label key or a
  // custom index without a function.
  static absl::StatusOr<std::unique_ptr<IndexFunction>> Create(IndexSpec spec);

  const std::string& name() const { return spec_.name; }
  const IndexSpec& spec() const { return spec_; }

  // Calls `emit` for every value of `object` in this index (possibly with duplicates).
  void Values(const client::Object& object,
              absl::FunctionRef<void(absl::string_view)> emit) const;

 private:
  IndexFunction(IndexSpec spec, std::unique_ptr<FieldPath> path)
      : spec_(std::move(spec)), path_(std::move(path)) {}

  const IndexSpec spec_;
  const std::unique_ptr<FieldPath> path_;  // kField only
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_INDEX_H_
