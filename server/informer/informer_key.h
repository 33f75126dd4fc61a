// InformerKey: an informer's identity — cluster, group/version/resource, namespace, label
// selector, field selector, transform and storage (compressed or not). Two requests with equal keys share one running informer
// (the service's InformerRegistry keeps them), and the informer id of the API is derived from
// ToString().
//
//   InformerKey key{.cluster = "prod", .resource = {"", "v1", "pods"}, .namespace_name = "a"};
//   key.ToString();  // "prod|v1/pods|a|||"
//
// Thread safety: a value type.
#ifndef INFORMERD_SERVER_INFORMER_INFORMER_KEY_H_
#define INFORMERD_SERVER_INFORMER_INFORMER_KEY_H_

#include <string>

#include "client/discovery.h"

namespace informerd::informer {

struct InformerKey {
  std::string cluster;
  client::GroupVersionResource resource;
  std::string namespace_name;
  std::string label_selector;
  std::string field_selector;
  // Transform::fingerprint() of the informer's transform.
  std::string transform;
  // The cache keeps objects compressed (StoreCompression::kZstd): another cache, another informer.
  bool compressed = false;

  // A canonical, readable identity, e.g. "prod|apps/v1/deployments|team-a|app=web||drop(...)",
  // with "|zstd" at the end for a compressed cache (so that uncompressed informers keep the ids
  // they had before compression existed).
  std::string ToString() const;
  bool operator==(const InformerKey&) const = default;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_INFORMER_KEY_H_
