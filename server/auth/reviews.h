// Reviews: informerd asking its cluster who a caller is (TokenReview, authentication.k8s.io/v1)
// and whether they may do something (SubjectAccessReview, authorization.k8s.io/v1) — the two
// calls kube-rbac-proxy and aggregated API servers delegate to kube-apiserver.
//
//   absl::StatusOr<TokenReviewResult> who = ReviewToken(client, token, {"informerd"}, 5s);
//   absl::StatusOr<AccessDecision> may = ReviewAccess(client, identity, attributes, 5s);
//
// Both block for at most `timeout`. An error status means the review itself failed (the API
// server unreachable or refusing informerd) — never a decision; callers must not treat it as one.
//
// Thread safety: free functions; `client` is thread-safe.
#ifndef INFORMERD_SERVER_AUTH_REVIEWS_H_
#define INFORMERD_SERVER_AUTH_REVIEWS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "server/auth/caller.h"

namespace informerd::auth {

// What a SubjectAccessReview asks: a verb on a resource (kube's ResourceAttributes).
struct Attributes {
  std::string verb;
  std::string group;
  std::string version;
  std::string resource;
  // "" for all namespaces (or a cluster-scoped resource).
  std::string namespace_name;
  // "" for any name.
  std::string name;
  // The cluster whose API server decides (the one holding the data): its configured name; ""
  // for the default cluster (informerd's own objects: queues, informers, the daemon).
  std::string cluster;

  // `list configmaps in namespace "a"`, `work queues.informerd.io "q1"`, `list pods in cluster
  // "prod"`.
  std::string Describe() const;
  bool operator==(const Attributes&) const = default;
};

struct TokenReviewResult {
  bool authenticated = false;
  Identity identity;  // method "token"
  // The API server's reason when not authenticated.
  std::string error;
};

struct AccessDecision {
  bool allowed = false;
  // The authorizer's reason (RBAC: which binding allowed it; or why not).
  std::string reason;
};

absl::StatusOr<TokenReviewResult> ReviewToken(client::Client& client, absl::string_view token,
                                              const std::vector<std::string>& audiences,
                                              absl::Duration timeout);

absl::StatusOr<AccessDecision> ReviewAccess(client::Client& client, const Identity& identity,
                                            const Attributes& attributes, absl::Duration timeout);

// The JSON bodies (for tests).
std::string TokenReviewJson(absl::string_view token, const std::vector<std::string>& audiences);
std::string SubjectAccessReviewJson(const Identity& identity, const Attributes& attributes);
// Parse a review's response body; INTERNAL naming the field when it is not a review.
absl::StatusOr<TokenReviewResult> ParseTokenReview(absl::string_view json);
absl::StatusOr<AccessDecision> ParseSubjectAccessReview(absl::string_view json);

}  // namespace informerd::auth

#endif  // INFORMERD_SERVER_AUTH_REVIEWS_H_
