// Access: what each informerd call requires of its caller, as SubjectAccessReview attributes
// (auth/guard.h checks them). The rules, in one place:
//
//   informer reads (EnsureInformer, GetInformer, WaitForSync, Get, List, Watch):
//       list AND watch on the informer's resource, in its namespace, asked of the informer's
//       cluster. For a cluster-wide informer
//       of a namespaced resource: in all namespaces, or else in the one namespace the request
//       reads (Get's key, List's and Watch's `namespace`) — the caller then gets only that.
//   DeleteInformer: the read, and delete on informers.informerd.io.
//   queues (queues.informerd.io, cluster-scoped, name = the queue):
//       CreateQueue create, UpdateQueue update, DeleteQueue delete, GetQueue/Len/NumRequeues
//       get, Add/AddAfter/AddRateLimited/Forget/ShutDown update, Work streams work; a queue's
//       informer sources and a Work stream's object informer also need their informer's read.
//   Admin: admin on daemon.informerd.io.
//
// Thread safety: free functions over thread-safe registries.
#ifndef INFORMERD_SERVER_SERVICE_ACCESS_H_
#define INFORMERD_SERVER_SERVICE_ACCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "informerd/v1/queues.pb.h"
#include "server/auth/guard.h"
#include "server/service/informer_registry.h"

namespace informerd::service {

// The read rule for an informer of `scope`, by a request reading `request_namespace` ("": all
// the informer has).
auth::Requirement InformerRead(const InformerRegistry::Scope& scope,
                               absl::string_view request_namespace);

// The same for informer `id` (InformerNotFound when there is none).
absl::StatusOr<auth::Requirement> InformerRead(const InformerRegistry& informers,
                                               absl::string_view id,
                                               absl::string_view request_namespace);

// A deferred InformerRead for Guard::Check. `id` and `request_namespace` are not copied: they
// are the request's own fields (or views into them), which live until the call is answered.
auth::RequirementFn NeedInformerRead(const InformerRegistry* informers, const std::string& id,
                                     absl::string_view request_namespace);

// Appends to `*all` the read of informer `id`'s whole scope (what a queue source or a Work
// stream's object informer sees). Fails closed: an informer that does not exist is
// INFORMER_NOT_FOUND, its message prefixed with `field` — what is not there cannot be authorized,
// and is never left out of the check (it could be made, of any scope, before the call binds it).
absl::Status AppendWholeRead(const InformerRegistry& informers, absl::string_view id,
                             absl::string_view field, std::vector<auth::Attributes>* all);

// `verb` on `queue`, plus the read of every informer `spec` (if any) takes events or objects
// from. An unknown source informer fails the requirement (INFORMER_NOT_FOUND naming the field):
// what is not there cannot be authorized, and is not left out of the check.
auth::RequirementFn NeedQueue(const InformerRegistry* informers, std::string verb,
                              std::string queue, const v1::QueueSpec* spec = nullptr);

// The namespace of an object key ("ns/name" -> "ns"; "name" -> "").
absl::string_view KeyNamespace(absl::string_view key);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_ACCESS_H_
