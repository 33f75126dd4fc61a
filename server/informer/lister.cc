#include "server/informer/lister.h"

#include <utility>

namespace informerd::informer {

void Lister::Filter(ListResult* result, const LabelSelector& labels, const FieldSelector& fields) {
  if (labels.Empty() && fields.Empty()) return;
  size_t kept = 0;
  for (ObjectPtr& object : result->objects) {
    if (labels.Matches(*object) && fields.Matches(*object)) {
      if (&result->objects[kept] != &object) result->objects[kept] = std::move(object);
      ++kept;
    }
  }
  result->objects.resize(kept);
}

ListResult Lister::List(const LabelSelector& labels, const FieldSelector& fields) const {
  if (const std::string* ns = fields.RequiredNamespace()) {
    return ListNamespace(*ns, labels, fields);
  }
  ListResult result = store_->List();
  Filter(&result, labels, fields);
  return result;
}

ListResult Lister::ListNamespace(absl::string_view namespace_name, const LabelSelector& labels,
                                 const FieldSelector& fields) const {
  ListResult result = store_->ListNamespace(namespace_name);
  Filter(&result, labels, fields);
  return result;
}

}  // namespace informerd::informer
