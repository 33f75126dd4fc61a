#include "server/service/access.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

std::vector<auth::Attributes> ListAndWatch(const InformerRegistry::Scope& scope,
                                           absl::string_view ns) {
  std::vector<auth::Attributes> both(2);
  both[0] = auth::Attributes{.verb = "list",
                             .group = scope.group,
                             .version = scope.version,
                             .resource = scope.resource,
                             .namespace_name = std::string(ns),
                             .cluster = scope.cluster};
  both[1] = both[0];
  both[1].verb = "watch";
  return both;
}

}  // namespace

absl::string_view KeyNamespace(absl::string_view key) {
  const size_t slash = key.find('/');
  return slash == absl::string_view::npos ? absl::string_view() : key.substr(0, slash);
}

auth::Requirement InformerRead(const InformerRegistry::Scope& scope,
                               absl::string_view request_namespace) {
  if (!scope.namespaced || !scope.namespace_name.empty()) {
    // Cluster-scoped resource, or an informer of one namespace: exactly that scope.
    return auth::Requirement::AllOf(ListAndWatch(scope, scope.namespace_name));
  }
  auth::Requirement r = auth::Requirement::AllOf(ListAndWatch(scope, ""));
  if (!request_namespace.empty()) r.Or(ListAndWatch(scope, request_namespace));
  return r;
}

absl::StatusOr<auth::Requirement> InformerRead(const InformerRegistry& informers,
                                               absl::string_view id,
                                               absl::string_view request_namespace) {
  absl::StatusOr<InformerRegistry::Scope> scope = informers.GetScope(id);
  if (!scope.ok()) return scope.status();
  return InformerRead(*scope, request_namespace);
}

auth::RequirementFn NeedInformerRead(const InformerRegistry* informers, const std::string& id,
                                     absl::string_view request_namespace) {
  // Two pointers and a view: small enough for AnyInvocable's inline storage on most calls.
  return [informers, id = &id, ns = request_namespace]() -> absl::StatusOr<auth::Requirement> {
    return InformerRead(*informers, *id, ns);
  };
}

absl::Status AppendWholeRead(const InformerRegistry& informers, absl::string_view id,
                             absl::string_view field, std::vector<auth::Attributes>* all) {
  absl::StatusOr<InformerRegistry::Scope> scope = informers.GetScope(id);
  if (!scope.ok()) return Prefixed(absl::StrCat(field, ": "), scope.status());
  // A local: the attributes are moved out of it (a range over a temporary's member would not
  // keep the temporary alive).
  auth::Requirement read = InformerRead(*scope, "");
  for (auth::Attributes& a : read.any_of[0]) all->push_back(std::move(a));
  return absl::OkStatus();
}

auth::RequirementFn NeedQueue(const InformerRegistry* informers, std::string verb,
                              std::string queue, const v1::QueueSpec* spec) {
  // (field, informer id) of every informer the spec reads.
  std::vector<std::pair<std::string, std::string>> sources;
  if (spec != nullptr) {
    for (int i = 0; i < spec->sources_size(); ++i) {
      const v1::QueueSource& s = spec->sources(i);
      const std::string field = absl::StrCat("spec.sources[", i, "]");
      sources.emplace_back(field + ".informer_id", s.informer_id());
      if (s.has_index()) sources.emplace_back(field + ".index.informer_id", s.index().informer_id());
    }
  }
  return [informers, verb = std::move(verb), queue = std::move(queue),
          sources = std::move(sources)]() -> absl::StatusOr<auth::Requirement> {
    std::vector<auth::Attributes> all = {auth::QueueAttributes(verb, queue)};
    for (const auto& [field, id] : sources) {
      // A queue sees every object of its sources: the informer's whole scope.
      if (absl::Status s = AppendWholeRead(*informers, id, field, &all); !s.ok()) return s;
    }
    return auth::Requirement::AllOf(std::move(all));
  };
}

}  // namespace informerd::service
