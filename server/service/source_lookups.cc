#include "server/service/source_lookups.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace informerd::service {

SourceLookups InformerSourceLookups(InformerRegistry* informers, Clusters* clusters) {
  SourceLookups lookups;
  lookups.informer = [informers, clusters](absl::string_view id) -> std::optional<SourceInformer> {
    absl::StatusOr<InformerRegistry::Entry> e = informers->Get(id);
    if (!e.ok()) return std::nullopt;
    // Keys of the default cluster carry no cluster prefix.
    const std::string& cluster = e->spec.cluster();
    return SourceInformer{.informer = e->informer,
                          .cluster = cluster == clusters->default_name() ? "" : cluster};
  };
  lookups.kind_namespaced = [clusters](absl::string_view cluster_name,
                                       const std::optional<std::string>& group,
                                       absl::string_view kind) -> absl::StatusOr<bool> {
    absl::StatusOr<Clusters::Cluster*> cluster = clusters->Find(cluster_name);
    if (!cluster.ok()) return cluster.status();
    auto found = (*cluster)->client->discovery().ResourcesForGroupKind(group, kind);
    if (!found.ok()) return found.status();
    const bool namespaced = found->front().namespaced;
    for (const client::ResourceInfo& r : *found) {
      if (r.namespaced != namespaced) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kind \"", kind, "\" is namespaced in one group and cluster-scoped in another: "
            "set owner.group"));
      }
    }
    return namespaced;
  };
  return lookups;
}

}  // namespace informerd::service
