#include "server/informer/informer_key.h"

#include "absl/strings/str_cat.h"

namespace informerd::informer {

std::string InformerKey::ToString() const {
  return absl::StrCat(cluster, "|", resource.group.empty() ? "" : resource.group + "/",
                      resource.version, "/", resource.resource, "|", namespace_name, "|",
                      label_selector, "|", field_selector, "|", transform,
                      compressed ? "|zstd" : "");
}

}  // namespace informerd::informer
