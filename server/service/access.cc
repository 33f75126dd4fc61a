#include "server/service/access.h"

#include <utility>

namespace informerd::service {
namespace {

std::vector<auth::Attributes> ListAndWatch(const InformerRegistry::Scope& scope,
                                           absl::string_view ns) {
  std::vector<auth::Attributes> both(2);
  both[0] = auth::Attributes{.verb = "list",
                             .group = scope.group,
                             .version = scope.version,
                             .resource = scope.resource,
                             .namespace_name = std::string(ns)};
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

auth::RequirementFn NeedQueue(const InformerRegistry* informers, std::string verb,
                              std::string queue, const v1::QueueSpec* spec) {
  std::vector<std::string> sources;
  if (spec != nullptr) {
    for (const v1::QueueSource& s : spec->sources()) {
      sources.push_back(s.informer_id());
      if (s.has_index()) sources.push_back(s.index().informer_id());
    }
  }
  return [informers, verb = std::move(verb), queue = std::move(queue),
          sources = std::move(sources)]() -> absl::StatusOr<auth::Requirement> {
    std::vector<auth::Attributes> all = {auth::QueueAttributes(verb, queue)};
    for (const std::string& id : sources) {
      absl::StatusOr<InformerRegistry::Scope> scope = informers->GetScope(id);
      if (!scope.ok()) continue;  // the call reports the unknown informer itself
      // A queue sees every object of its sources: the informer's whole scope.
      for (auth::Attributes& a : InformerRead(*scope, "").any_of[0]) all.push_back(std::move(a));
    }
    return auth::Requirement::AllOf(std::move(all));
  };
}

}  // namespace informerd::service
