// Caller: who made a gRPC call, as the cluster knows them — the user, uid, groups and extra of
// a TokenReview, a client certificate (CN and O) or a configured unix-socket peer — and what
// that identity holds open in the daemon (for the per-caller limits).
//
//   std::shared_ptr<Caller> alice = callers.Intern({.user = "alice", .groups = {"dev"}});
//   alice->Describe();   // user "alice" (groups: dev)
//
// Callers are interned (Callers::Intern): one object per distinct identity, so that its `id`
// keys the decision cache (authorization may depend on every field, extra included). Ids are
// never reused within a process. What the per-caller limits count belongs to the identity's
// Principal — its user, uid and groups, not extra: a bound service-account token carries its
// own credential id in extra, so each rotated token is a new Caller of the same Principal, with
// the same limits. A Principal lives while anything of it does (a Caller, an open stream or call,
// an informer or queue it created), so forgetting idle Callers resets no limit.
//
// Thread safety: a Caller's identity fields are immutable after Intern; its counters are atomic
// and its created-objects sets are guarded by its mutex. Callers is thread-safe.
#ifndef INFORMERD_SERVER_AUTH_CALLER_H_
#define INFORMERD_SERVER_AUTH_CALLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "base/mutex.h"

namespace informerd::auth {

// The identity a call was authenticated as (what a SubjectAccessReview's spec carries).
struct Identity {
  std::string user;
  std::string uid;
  std::vector<std::string> groups;
  // Sorted by key (TokenReview's user.extra).
  std::vector<std::pair<std::string, std::vector<std::string>>> extra;
  // How it was established: "token", "certificate", "unix", "internal", "insecure".
  std::string method;

  // A canonical text of user, uid, groups and extra (not method): equal identities, equal keys.
  std::string Key() const;
  // The same of user, uid and groups only: the principal the limits count.
  std::string PrincipalKey() const;
};

// What one user (user, uid, groups) holds in the daemon: what the per-caller limits count.
struct Principal {
  // Calls in flight (unary calls answered later than they arrived) and open streams.
  std::atomic<int> in_flight{0};
  std::atomic<int> streams{0};

  Mutex mu;
  // Informer ids and queue names it created that may still exist: true once the creation
  // finished (an entry still being created is never taken for one that is gone).
  absl::flat_hash_map<std::string, bool> informers ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, bool> queues ABSL_GUARDED_BY(mu);

  // Holds nothing: no call, stream, informer or queue.
  bool Idle();
};

struct Caller {
  Caller(uint64_t id, Identity identity, std::shared_ptr<Principal> principal)
      : id(id), identity(std::move(identity)), principal(std::move(principal)) {}

  // `user "alice" (groups: dev, system:authenticated)`.
  std::string Describe() const;

  const uint64_t id;
  const Identity identity;
  const std::shared_ptr<Principal> principal;
};

class Callers {
 public:
  // The one Caller for `identity` (made on first use), of the one Principal of its user, uid and
  // groups.
  std::shared_ptr<Caller> Intern(Identity identity);
  // Principals known (for tests).
  size_t principals() const;

 private:
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, std::shared_ptr<Caller>> by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Principal>> principals_ ABSL_GUARDED_BY(mu_);
};

// The user and groups of a client certificate from gRPC's "x509_subject" auth property (RFC 2253,
// last RDN first, e.g. "CN=alice,O=ops,O=dev" for O=dev, O=ops, CN=alice): user = CN, groups =
// every O in the certificate's order, as kube-apiserver maps them.
// Escaped characters ("\,", "\+", hex "\2C") are unescaped. An empty user when there is no CN.
Identity IdentityFromSubject(const std::string& subject);

}  // namespace informerd::auth

#endif  // INFORMERD_SERVER_AUTH_CALLER_H_
