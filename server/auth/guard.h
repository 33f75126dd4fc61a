// Guard: who may call informerd, and what they may do — authentication and authorization
// delegated to the cluster, as kube-rbac-proxy and aggregated API servers do, with the decision
// caches and per-caller limits that keep it cheap and fair.
//
//   Guard guard(options, &review_client, &metrics);
//   grpc::ServerUnaryReactor* Service::Len(ctx, request, response) {
//     grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
//     guard.Check(ctx, CallKind::kUnary, QueueAccess("get", request->queue()), reactor,
//                 [=](Ticket ticket) { ...; reactor->Finish(grpc::Status::OK); });
//     return reactor;
//   }
//
// Authentication, in this order: a bearer token (gRPC metadata `authorization: Bearer ...`)
// checked with a TokenReview; a verified TLS client certificate (user = CN, groups = O); a
// unix-socket peer's uid (SO_PEERCRED, unix_peers.h) mapped by the configuration. Certificate
// and unix users also get the group system:authenticated, as kube-apiserver adds it. Calls over
// gRPC's in-process channel (the daemon's own probes) are the daemon itself and always allowed.
// No credentials, or a token the cluster rejects: UNAUTHENTICATED (reason NOT_AUTHENTICATED).
//
// Authorization: a SubjectAccessReview per attribute (verb, group, resource, namespace, name) for
// the caller's user, uid, groups and extra, asked of the cluster the attribute names (the one
// whose API server holds the data: RBAC on namespace "team-m" of one cluster says nothing of
// another's); informerd's own objects are reviewed by the default cluster. A Requirement is met when every attribute of one of
// its alternatives is allowed. Otherwise PERMISSION_DENIED (reason FORBIDDEN) naming the user
// and the first alternative's first refused attribute. A review that cannot be made (the API
// server down, an error response, a timeout): UNAVAILABLE (reason AUTHORIZATION_UNAVAILABLE) —
// the call is refused, never allowed, and nothing is cached.
//
// Caches: TokenReview results for token_ttl; SubjectAccessReview decisions for allow_ttl or
// deny_ttl. Refusals are kept apart from what was accepted (rejected tokens, denied decisions),
// so that a flood of bad tokens or of names nobody may use cannot push out the entries
// legitimate callers use. Each is bounded (cache_size entries; the refusals a quarter of it):
// when full, expired entries go first, then the least recently used eighth — never the whole
// cache. Identical reviews wanted at once are made once (the others wait for its answer). A call
// whose decisions are all cached is checked inline on gRPC's thread (a few hash lookups); any
// other waits for a review thread (review_threads, with at most max_pending calls waiting, and
// at most max_pending_per_peer from one client address: UNAVAILABLE beyond), so no gRPC thread
// ever waits on the API server and no one client takes every waiting place.
//
// Limits per caller (CallerLimits): calls in flight (a unary call counts from arrival until its
// Ticket is dropped: at once for calls answered inline, later for those that wait), open streams
// (until the stream's Ticket is dropped), and informers and queues created (AdmitInformer,
// AdmitQueue). Past a limit: RESOURCE_EXHAUSTED (reason CALLER_LIMIT, metadata `limit`).
//
// With insecure_allow_unauthenticated nothing is checked: every call is allowed as
// "system:anonymous" and no limit applies. The daemon logs this loudly and exports it.
//
// Thread safety: every method may be called from any thread. The destructor answers calls still
// waiting for a review UNAVAILABLE and joins the review threads.
#ifndef INFORMERD_SERVER_AUTH_GUARD_H_
#define INFORMERD_SERVER_AUTH_GUARD_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "client/client.h"
#include "server/auth/caller.h"
#include "server/auth/options.h"
#include "server/auth/reviews.h"
#include "server/auth/unix_peers.h"
#include "server/service/status.h"

namespace informerd::auth {

// informerd's own API group, for queues, informers and the daemon (RBAC grants these).
inline constexpr absl::string_view kApiGroup = "informerd.io";

enum class CallKind { kUnary, kStream };

// What a call needs: every attribute of at least one alternative allowed.
struct Requirement {
  std::vector<std::vector<Attributes>> any_of;

  static Requirement AllOf(std::vector<Attributes> attributes) {
    Requirement r;
    r.any_of.push_back(std::move(attributes));
    return r;
  }
  // Another alternative, tried after the ones already there.
  Requirement& Or(std::vector<Attributes> attributes) {
    any_of.push_back(std::move(attributes));
    return *this;
  }
};

// `verb` on queues.informerd.io named `queue` (cluster-scoped).
Attributes QueueAttributes(absl::string_view verb, absl::string_view queue);
// The Admin service: verb "admin" on daemon.informerd.io.
Requirement AdminRequirement();

// What a call requires, computed once its caller is authenticated (an error is answered as is).
using RequirementFn = absl::AnyInvocable<absl::StatusOr<Requirement>()>;

// A fixed requirement.
inline RequirementFn Need(Requirement r) {
  return [r = std::move(r)]() -> absl::StatusOr<Requirement> { return r; };
}

class Guard;

// An open stream the guard authorizes again while it lives (Ticket::OnRevoked).
struct StreamWatch {
  std::shared_ptr<Caller> caller;
  Requirement requirement;
  absl::AnyInvocable<void(const absl::Status&)> revoke;
  std::atomic<bool> open{true};
};

// A caller's admission to one call: holds its in-flight or stream slot until destroyed.
class Ticket {
 public:
  Ticket() = default;
  Ticket(std::shared_ptr<Caller> caller, std::atomic<int>* slot)
      : caller_(std::move(caller)), slot_(slot) {}
  Ticket(Ticket&& other) noexcept { *this = std::move(other); }
  Ticket& operator=(Ticket&& other) noexcept {
    Release();
    caller_ = std::move(other.caller_);
    slot_ = std::exchange(other.slot_, nullptr);
    guard_ = std::exchange(other.guard_, nullptr);
    requirement_ = std::move(other.requirement_);
    watch_ = std::move(other.watch_);
    return *this;
  }
  ~Ticket() { Release(); }

  // nullptr when nothing is checked (insecure, or a service without a guard).
  Caller* caller() const { return caller_.get(); }
  // Gives the slot back early (the call is answered; the ticket object lives on), and ends the
  // stream's re-authorization.
  void Release() {
    if (slot_ != nullptr) slot_->fetch_sub(1, std::memory_order_relaxed);
    slot_ = nullptr;
    if (watch_ != nullptr) watch_->open.store(false);
    watch_.reset();
  }

  // For a stream: while this ticket lives, the guard checks the stream's requirement again as
  // cached decisions expire, and calls `revoke` with the refusal once the caller is definitely
  // no longer allowed (PERMISSION_DENIED; a review that cannot be made ends nothing). `revoke`
  // runs on the guard's thread with none of its locks held, at most once, and possibly just
  // after the stream ended: it must find the stream safely (a weak_ptr, a registry) and not
  // block. A no-op without a guard.
  void OnRevoked(absl::AnyInvocable<void(const absl::Status&)> revoke);

 private:
  friend class Guard;
  std::shared_ptr<Caller> caller_;
  std::atomic<int>* slot_ = nullptr;
  // Set by the guard for admitted streams.
  Guard* guard_ = nullptr;
  std::shared_ptr<Requirement> requirement_;
  std::shared_ptr<StreamWatch> watch_;
};

class Guard {
 public:
  // `reviews`: the client of the cluster reviews go to (nullptr: reviews fail UNAVAILABLE).
  // `metrics` may be nullptr. Both must outlive the guard.
  // `reviews` answers TokenReviews and the SubjectAccessReviews of attributes without a cluster
  // (informerd's own objects); AddClusterReviewer names the client of each cluster whose data
  // informerd serves.
  Guard(GuardOptions options, client::Client* reviews, MetricsRegistry* metrics);
  // SubjectAccessReviews of attributes of `cluster` go to `client` (call before serving). An
  // attribute of a cluster with no reviewer is refused (AUTHORIZATION_UNAVAILABLE).
  void AddClusterReviewer(std::string cluster, client::Client* client);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  bool insecure() const { return options_.insecure_allow_unauthenticated; }
  UnixPeers& unix_peers() { return unix_peers_; }

  // Authenticates the call, then asks `need` what it requires (only an authenticated caller
  // learns, e.g., that an informer does not exist: `need`'s error is answered as it is) and
  // checks it. Then runs `allowed(Ticket)` — inline when every answer is cached, else on a
  // review thread — or `denied(status)`. Exactly one of them runs, once. An empty requirement
  // only authenticates.
  template <typename Allowed, typename Denied>
  void Check(grpc::CallbackServerContext* context, CallKind kind, RequirementFn need,
             Allowed&& allowed, Denied&& denied) {
    Ticket ticket;
    std::optional<Requirement> requirement;
    absl::Status s = CheckInline(context, kind, need, &requirement, &ticket);
    if (s.ok()) {
      std::forward<Allowed>(allowed)(std::move(ticket));
      return;
    }
    if (!IsMiss(s)) {
      std::forward<Denied>(denied)(s);
      return;
    }
    // A known caller's call waits for its review holding its slot (`ticket`, taken by
    // CheckInline): waiting calls count against callerLimits like answered ones.
    Enqueue(Job{.context = context,
                .kind = kind,
                .need = std::move(need),
                .requirement = std::move(requirement),
                .ticket = std::move(ticket),
                .allowed = std::forward<Allowed>(allowed),
                .deny = std::forward<Denied>(denied)});
  }

  // The same for a reactor that nothing else finishes before `allowed` runs: a refusal is
  // answered with reactor->Finish.
  template <typename Reactor, typename Allowed>
  void Check(grpc::CallbackServerContext* context, CallKind kind, RequirementFn need,
             Reactor* reactor, Allowed&& allowed) {
    Check(context, kind, std::move(need), std::forward<Allowed>(allowed),
          [reactor](const absl::Status& s) { reactor->Finish(service::ToGrpc(s)); });
  }

  // Whether `caller` meets `requirement`, waiting for reviews (for calls already off gRPC's
  // threads, e.g. on an API-call lane). nullptr caller: allowed (nothing is checked).
  absl::Status Authorize(const Caller* caller, const Requirement& requirement);

  // Before `caller` creates informer `id` (called only when it does not exist yet):
  // RESOURCE_EXHAUSTED past limits.informers, counting those `exists` still finds and those
  // being created. Admitted, `id` is counted at once (two creations at once cannot both take
  // the last place); the creator then says how it went: FinishInformer(created = false) gives
  // the place back. Counted per Principal (every token of one user).
  absl::Status AdmitInformer(Caller* caller, const std::string& id,
                             const std::function<bool(const std::string&)>& exists);
  void FinishInformer(Caller* caller, const std::string& id, bool created);
  absl::Status AdmitQueue(Caller* caller, const std::string& name,
                          const std::function<bool(const std::string&)>& exists);
  void FinishQueue(Caller* caller, const std::string& name, bool created);

  // Ends the re-authorization of open streams (the daemon calls it once no stream is left, before
  // the services whose streams it would revoke go). Also done by the destructor.
  void StopRechecks();

 private:
  enum class CreatedKind { kInformer, kQueue };
  // The one admission (and its end) of a created informer or queue.
  absl::Status AdmitCreation(Caller* caller, CreatedKind kind, const std::string& id,
                             const std::function<bool(const std::string&)>& exists);
  void FinishCreation(Caller* caller, CreatedKind kind, const std::string& id, bool created);
  struct Job {
    grpc::CallbackServerContext* context;
    std::string peer;  // the client's address without its port
    CallKind kind;
    RequirementFn need;
    std::optional<Requirement> requirement;  // once `need` ran
    // The slot a caller known before the review holds while it waits (empty for a caller whose
    // token is still to be reviewed: its slot is taken once it is known).
    Ticket ticket;
    absl::AnyInvocable<void(Ticket)> allowed;
    absl::AnyInvocable<void(const absl::Status&)> deny;
  };
  struct TokenEntry {
    std::shared_ptr<Caller> caller;  // nullptr: not authenticated
    std::string error;
    absl::Time expires;
    absl::Time last_used;
  };
  struct Decision {
    bool allowed;
    std::string reason;
    absl::Time expires;
    absl::Time last_used;
  };
  enum class Cached { kAllowed, kDenied, kUnknown };

  static bool IsMiss(const absl::Status& s);
  // OK with *ticket set; a miss (IsMiss); or the error to answer. On a miss of a known caller's
  // decision *ticket holds its slot already (a caller past its limits is refused at once).
  absl::Status CheckInline(grpc::CallbackServerContext* context, CallKind kind,
                           RequirementFn& need, std::optional<Requirement>* requirement,
                           Ticket* ticket);
  // The caller of `context` from what is known without a review. A token not in the cache:
  // *token set, *caller null, OK.
  absl::Status Identify(grpc::CallbackServerContext* context, std::shared_ptr<Caller>* caller,
                        std::string* token);
  // Takes a slot of `kind` for `caller` (a stream's ticket also keeps `requirement` for its
  // re-authorization) or RESOURCE_EXHAUSTED.
  absl::Status Admit(const std::shared_ptr<Caller>& caller, CallKind kind,
                     const Requirement& requirement, Ticket* ticket);
  // The cached review of `token`: OK with *caller set, UNAUTHENTICATED, or nullopt if none.
  std::optional<absl::Status> CachedToken(absl::string_view token,
                                          std::shared_ptr<Caller>* caller);
  Cached Lookup(const Caller& caller, const Attributes& a, std::string* reason);
  // Entries the refusal caches (rejected tokens, denied decisions) hold at most.
  size_t RefusalCapacity() const;
  client::Client* ReviewerFor(absl::string_view cluster) const;
  // Reviews what the cache does not know. OK, PERMISSION_DENIED or UNAVAILABLE.
  absl::Status Decide(const Caller& caller, const Requirement& requirement, bool may_review);
  absl::Status ReviewTokenNow(const std::string& token, std::shared_ptr<Caller>* caller);
  void Enqueue(Job job);
  void RunJob(Job& job);
  void Work();
  friend class Ticket;
  std::shared_ptr<StreamWatch> WatchStream(std::shared_ptr<Caller> caller,
                                           const Requirement& requirement,
                                           absl::AnyInvocable<void(const absl::Status&)> revoke);
  void Recheck();

  const GuardOptions options_;
  Clock* const clock_;
  client::Client* const reviews_;
  absl::flat_hash_map<std::string, client::Client*> cluster_reviewers_;  // set before serving
  Callers callers_;
  UnixPeers unix_peers_;
  std::shared_ptr<Caller> internal_;
  std::shared_ptr<Caller> anonymous_;
  std::vector<std::shared_ptr<Caller>> unix_callers_;  // by index of options_.unix_peers

  mutable Mutex cache_mu_;
  // Accepted tokens and allowed decisions; rejected tokens and denied decisions apart.
  absl::flat_hash_map<std::string, TokenEntry> tokens_ ABSL_GUARDED_BY(cache_mu_);
  absl::flat_hash_map<std::string, TokenEntry> rejected_tokens_ ABSL_GUARDED_BY(cache_mu_);
  absl::flat_hash_map<std::string, Decision> decisions_ ABSL_GUARDED_BY(cache_mu_);
  absl::flat_hash_map<std::string, Decision> denials_ ABSL_GUARDED_BY(cache_mu_);
  // Reviews under way, by cache key ("t" + token, "d" + decision key): a second call wanting
  // the same waits for the first's answer.
  absl::flat_hash_set<std::string> reviewing_ ABSL_GUARDED_BY(cache_mu_);

  Mutex jobs_mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(jobs_mu_);
  absl::flat_hash_map<std::string, size_t> pending_by_peer_ ABSL_GUARDED_BY(jobs_mu_);
  bool stopping_ ABSL_GUARDED_BY(jobs_mu_) = false;
  std::vector<std::thread> threads_;

  Mutex streams_mu_;
  std::vector<std::shared_ptr<StreamWatch>> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool rechecks_stopped_ ABSL_GUARDED_BY(streams_mu_) = false;
  std::thread rechecker_;
  Counter* revoked_ = nullptr;

  Counter* token_hits_ = nullptr;
  Counter* token_misses_ = nullptr;
  Counter* decision_hits_ = nullptr;
  Counter* decision_misses_ = nullptr;
  Counter* allowed_ = nullptr;
  Counter* denied_ = nullptr;
  Counter* unavailable_ = nullptr;
  Counter* unauthenticated_ = nullptr;
  Histogram* token_review_seconds_ = nullptr;
  Histogram* access_review_seconds_ = nullptr;
  MetricsRegistry* metrics_;
  std::unique_ptr<MetricsRegistry> own_metrics_;
};

// Guard::Check when `guard` is set; else (services built without one, in tests) `allowed` runs
// at once with an empty ticket.
template <typename Allowed, typename Denied>
void CheckCall(Guard* guard, grpc::CallbackServerContext* context, CallKind kind,
               RequirementFn need, Allowed&& allowed, Denied&& denied) {
  if (guard == nullptr) {
    std::forward<Allowed>(allowed)(Ticket());
    return;
  }
  guard->Check(context, kind, std::move(need), std::forward<Allowed>(allowed),
               std::forward<Denied>(denied));
}
template <typename Reactor, typename Allowed>
void CheckCall(Guard* guard, grpc::CallbackServerContext* context, CallKind kind,
               RequirementFn need, Reactor* reactor, Allowed&& allowed) {
  if (guard == nullptr) {
    std::forward<Allowed>(allowed)(Ticket());
    return;
  }
  guard->Check(context, kind, std::move(need), reactor, std::forward<Allowed>(allowed));
}

}  // namespace informerd::auth

#endif  // INFORMERD_SERVER_AUTH_GUARD_H_
