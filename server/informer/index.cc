#include "server/informer/index.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace informerd::informer {

IndexSpec IndexSpec::Namespace() {
  IndexSpec spec;
  spec.name = std::string(kNamespaceIndex);
  spec.kind = Kind::kNamespace;
  return spec;
}

IndexSpec IndexSpec::Label(std::string name, std::string label_key) {
  IndexSpec spec;
  spec.name = std::move(name);
  spec.kind = Kind::kLabel;
  spec.argument = std::move(label_key);
  return spec;
}

IndexSpec IndexSpec::Field(std::string name, std::string field_path) {
  IndexSpec spec;
  spec.name = std::move(name);
  spec.kind = Kind::kField;
  spec.argument = std::move(field_path);
  return spec;
}

IndexSpec IndexSpec::Owner(std::string name, OwnerIndex owner) {
  IndexSpec spec;
  spec.name = std::move(name);
  spec.kind = Kind::kOwner;
  spec.owner = std::move(owner);
  return spec;
}

IndexSpec IndexSpec::Custom(std::string name, IndexFunc func) {
  IndexSpec spec;
  spec.name = std::move(name);
  spec.kind = Kind::kCustom;
  spec.custom = std::move(func);
  return spec;
}

std::string IndexSpec::DebugString() const {
  switch (kind) {
    case Kind::kNamespace:
      return absl::StrCat(name, "=namespace");
    case Kind::kLabel:
      return absl::StrCat(name, "=label(", argument, ")");
    case Kind::kField:
      return absl::StrCat(name, "=field(", argument, ")");
    case Kind::kOwner:
      return absl::StrCat(name, "=owner(", owner.kind.empty() ? "*" : owner.kind, ",",
                          owner.by == OwnerIndex::By::kUid ? "uid" : "kind/name",
                          owner.controller_only ? ",controller" : ",any", ")");
    case Kind::kCustom:
      return absl::StrCat(name, "=custom");
  }
  return name;
}

absl::StatusOr<std::unique_ptr<IndexFunction>> IndexFunction::Create(IndexSpec spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("index name is empty");
  std::unique_ptr<FieldPath> path;
  switch (spec.kind) {
    case IndexSpec::Kind::kNamespace:
    case IndexSpec::Kind::kOwner:
      break;
    case IndexSpec::Kind::kLabel:
      if (spec.argument.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("index \"", spec.name, "\": label key is empty"));
      }
      break;
    case IndexSpec::Kind::kField: {
      absl::StatusOr<FieldPath> parsed = FieldPath::Parse(spec.argument);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("index \"", spec.name, "\": ", parsed.status().message()));
      }
      path = std::make_unique<FieldPath>(*std::move(parsed));
      break;
    }
    case IndexSpec::Kind::kCustom:
      if (!spec.custom) {
        return absl::InvalidArgumentError(
            absl::StrCat("index \"", spec.name, "\": custom index without a function"));
      }
      break;
  }
  return std::unique_ptr<IndexFunction>(new IndexFunction(std::move(spec), std::move(path)));
}

void IndexFunction::Values(const client::Object& object,
                           absl::FunctionRef<void(absl::string_view)> emit) const {
  switch (spec_.kind) {
    case IndexSpec::Kind::kNamespace:
      // client-go's MetaNamespaceIndexFunc: cluster-scoped objects are indexed under "".
      emit(object.namespace_name());
      return;
    case IndexSpec::Kind::kLabel:
      if (auto value = object.label(spec_.argument)) emit(*value);
      return;
    case IndexSpec::Kind::kField:
      path_->Values(object, emit);
      return;
    case IndexSpec::Kind::kOwner: {
      std::string buffer;
      for (const client::OwnerReference& ref : object.owner_references()) {
        if (spec_.owner.controller_only && !ref.controller) continue;
        if (!spec_.owner.kind.empty() && ref.kind != spec_.owner.kind) continue;
        if (spec_.owner.by == OwnerIndex::By::kUid) {
          if (!ref.uid.empty()) emit(ref.uid);
        } else {
          buffer.clear();
          absl::StrAppend(&buffer, ref.kind, "/", ref.name);
          emit(buffer);
        }
      }
      return;
    }
    case IndexSpec::Kind::kCustom:
      spec_.custom(object, emit);
      return;
  }
}

}  // namespace informerd::informer
