#include "server/auth/guard.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "informerd/v1/errors.pb.h"

namespace informerd::auth {
namespace {

using service::Error;

constexpr absl::string_view kAuthenticatedGroup = "system:authenticated";

// A status that only says "ask a review thread" (never answered to a caller).
absl::Status MissStatus() { return absl::Status(absl::StatusCode::kUnknown, "\x01miss"); }

void AppendKeyField(std::string* key, absl::string_view s) {
  absl::StrAppend(key, s.size(), ":", s);
}

// The decision cache's key of `a` for `caller`, in a buffer of the calling thread's (valid until
// its next call on this thread): the hot path allocates nothing once the buffer has grown.
const std::string& DecisionKey(const Caller& caller, const Attributes& a) {
  thread_local std::string key;
  key.clear();
  absl::StrAppend(&key, caller.id, "|");
  AppendKeyField(&key, a.verb);
  AppendKeyField(&key, a.group);
  AppendKeyField(&key, a.resource);
  AppendKeyField(&key, a.namespace_name);
  AppendKeyField(&key, a.name);
  AppendKeyField(&key, a.cluster);
  return key;
}

// Makes room for one more entry in `cache`, which holds at most `capacity`: expired entries go
// first; if none has, the least recently used eighth — never the whole cache, so a flood of new
// entries pushes out only entries nobody uses.
template <typename Map>
void MakeRoom(Map& cache, size_t capacity, absl::Time now) {
  if (cache.size() < capacity) return;
  absl::erase_if(cache, [now](const auto& kv) { return kv.second.expires <= now; });
  if (cache.size() < capacity) return;
  std::vector<absl::Time> used;
  used.reserve(cache.size());
  for (const auto& kv : cache) used.push_back(kv.second.last_used);
  const size_t evict = std::max<size_t>(1, cache.size() / 8);
  std::nth_element(used.begin(), used.begin() + static_cast<ptrdiff_t>(evict - 1), used.end());
  const absl::Time cutoff = used[evict - 1];
  size_t evicted = 0;
  absl::erase_if(cache, [&](const auto& kv) {
    if (evicted >= evict || kv.second.last_used > cutoff) return false;
    ++evicted;
    return true;
  });
}

// "ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1", "ipv6:[::1]:5000" -> "ipv6:[::1]"; a unix peer as is.
std::string PeerHost(absl::string_view peer) {
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    const size_t colon = peer.rfind(':');
    if (colon > 5) return std::string(peer.substr(0, colon));
  }
  return std::string(peer);
}

absl::Status Unauthenticated(absl::string_view why) {
  return Error(absl::StatusCode::kUnauthenticated, v1::NOT_AUTHENTICATED, why);
}

absl::Status TokenRejected(absl::string_view error) {
  return Unauthenticated(absl::StrCat("the bearer token was rejected by the cluster: ", error));
}

absl::Status Forbidden(const Caller& caller, const Attributes& a, absl::string_view reason) {
  std::string message =
      absl::StrCat(caller.Describe(), " may not ", a.Describe(), " (informerd asked the cluster",
                   reason.empty() ? "" : absl::StrCat(": ", reason), ")");
  return Error(absl::StatusCode::kPermissionDenied, v1::FORBIDDEN, message,
               {{"user", caller.identity.user},
                {"verb", a.verb},
                {"group", a.group},
                {"resource", a.resource},
                {"namespace", a.namespace_name},
                {"name", a.name}});
}

absl::Status ReviewUnavailable(absl::string_view what, const absl::Status& cause) {
  return Error(absl::StatusCode::kUnavailable, v1::AUTHORIZATION_UNAVAILABLE,
               absl::StrCat(what, " could not be made, so the call is refused: ", cause.message()));
}

std::vector<std::string> WithAuthenticatedGroup(std::vector<std::string> groups) {
  if (std::find(groups.begin(), groups.end(), kAuthenticatedGroup) == groups.end()) {
    groups.emplace_back(kAuthenticatedGroup);
  }
  return groups;
}

const std::vector<double>& ReviewBuckets() {
  static const auto* b = new std::vector<double>{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,   0.25,   0.5,   1,    2.5, 5};
  return *b;
}

}  // namespace

Attributes QueueAttributes(absl::string_view verb, absl::string_view queue) {
  return Attributes{.verb = std::string(verb),
                    .group = std::string(kApiGroup),
                    .version = "v1",
                    .resource = "queues",
                    .name = std::string(queue)};
}

Requirement AdminRequirement() {
  return Requirement::AllOf({Attributes{
      .verb = "admin", .group = std::string(kApiGroup), .version = "v1", .resource = "daemon"}});
}

Guard::Guard(GuardOptions options, client::Client* reviews, MetricsRegistry* metrics)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      reviews_(reviews),
      metrics_(metrics) {
  internal_ = callers_.Intern({.user = "system:informerd", .method = "internal"});
  anonymous_ = callers_.Intern({.user = "system:anonymous",
                                .groups = {"system:unauthenticated"},
                                .method = "insecure"});
  for (const UnixPeerMapping& m : options_.unix_peers) {
    unix_callers_.push_back(callers_.Intern(
        {.user = m.user, .groups = WithAuthenticatedGroup(m.groups), .method = "unix"}));
  }
  if (metrics_ == nullptr) {
    own_metrics_ = std::make_unique<MetricsRegistry>();
    metrics_ = own_metrics_.get();
  }
  metrics_->GetGauge("informerd_insecure_allow_unauthenticated",
                     "1 when the daemon serves every call without authentication or "
                     "authorization (--insecure-allow-unauthenticated)",
                     {})
      ->Set(options_.insecure_allow_unauthenticated ? 1 : 0);
  token_hits_ = metrics_->GetCounter("informerd_authentication_cache_hits_total",
                                     "Calls whose bearer token's review was cached", {});
  token_misses_ = metrics_->GetCounter("informerd_authentication_cache_misses_total",
                                       "Calls whose bearer token needed a TokenReview", {});
  decision_hits_ = metrics_->GetCounter("informerd_authorization_cache_hits_total",
                                        "Authorization decisions answered from the cache", {});
  decision_misses_ = metrics_->GetCounter("informerd_authorization_cache_misses_total",
                                          "Authorization decisions that needed a review", {});
  const char* decisions_help = "Calls by authorization outcome";
  allowed_ = metrics_->GetCounter("informerd_authorization_decisions_total", decisions_help,
                                  {{"decision", "allowed"}});
  denied_ = metrics_->GetCounter("informerd_authorization_decisions_total", decisions_help,
                                 {{"decision", "denied"}});
  unavailable_ = metrics_->GetCounter("informerd_authorization_decisions_total", decisions_help,
                                      {{"decision", "unavailable"}});
  unauthenticated_ = metrics_->GetCounter("informerd_authorization_decisions_total",
                                          decisions_help, {{"decision", "unauthenticated"}});
  token_review_seconds_ =
      metrics_->GetHistogram("informerd_token_review_duration_seconds",
                             "TokenReview round trips to the API server", {}, ReviewBuckets());
  access_review_seconds_ = metrics_->GetHistogram(
      "informerd_subject_access_review_duration_seconds",
      "SubjectAccessReview round trips to the API server", {}, ReviewBuckets());
  revoked_ = metrics_->GetCounter("informerd_authorization_streams_revoked_total",
                                  "Open streams ended because their caller lost access", {});
  if (!options_.insecure_allow_unauthenticated) {
    for (int i = 0; i < std::max(1, options_.review_threads); ++i) {
      threads_.emplace_back([this] { Work(); });
    }
    rechecker_ = std::thread([this] { Recheck(); });
  }
}

void Ticket::OnRevoked(absl::AnyInvocable<void(const absl::Status&)> revoke) {
  if (guard_ == nullptr || caller_ == nullptr || requirement_ == nullptr) return;
  watch_ = guard_->WatchStream(caller_, *requirement_, std::move(revoke));
}

std::shared_ptr<StreamWatch> Guard::WatchStream(
    std::shared_ptr<Caller> caller, const Requirement& requirement,
    absl::AnyInvocable<void(const absl::Status&)> revoke) {
  auto w = std::make_shared<StreamWatch>();
  w->caller = std::move(caller);
  w->requirement = requirement;
  w->revoke = std::move(revoke);
  MutexLock lock(&streams_mu_);
  if (!rechecks_stopped_) streams_.push_back(w);
  return w;
}

void Guard::Recheck() {
  // Half the shorter TTL: a decision that changes is seen within 1.5 TTLs of the change.
  const absl::Duration period =
      std::max(absl::Milliseconds(100), std::min(options_.allow_ttl, options_.deny_ttl) / 2);
  for (;;) {
    std::vector<std::shared_ptr<StreamWatch>> open;
    {
      MutexLock lock(&streams_mu_);
      streams_mu_.AwaitWithDeadline(
          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(streams_mu_) { return rechecks_stopped_; },
          absl::Now() + period);
      if (rechecks_stopped_) return;
      std::erase_if(streams_, [](const auto& w) { return !w->open.load(); });
      open = streams_;
    }
    for (const std::shared_ptr<StreamWatch>& w : open) {
      if (!w->open.load()) continue;
      absl::Status s = Decide(*w->caller, w->requirement, /*may_review=*/true);
      if (s.code() != absl::StatusCode::kPermissionDenied || !w->open.exchange(false)) continue;
      revoked_->Inc();
      w->revoke(s);
    }
  }
}

void Guard::StopRechecks() {
  {
    MutexLock lock(&streams_mu_);
    if (rechecks_stopped_) return;
    rechecks_stopped_ = true;
    streams_.clear();
  }
  if (rechecker_.joinable()) rechecker_.join();
}

Guard::~Guard() {
  StopRechecks();
  std::deque<Job> left;
  {
    MutexLock lock(&jobs_mu_);
    stopping_ = true;
    left.swap(jobs_);
  }
  for (Job& job : left) {
    job.deny(Error(absl::StatusCode::kUnavailable, v1::DAEMON_SHUTTING_DOWN,
                   "informerd is shutting down"));
  }
  for (std::thread& t : threads_) t.join();
}

bool Guard::IsMiss(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnknown && s.message() == "\x01miss";
}

absl::Status Guard::Identify(grpc::CallbackServerContext* context,
                             std::shared_ptr<Caller>* caller, std::string* token) {
  const std::multimap<grpc::string_ref, grpc::string_ref>& md = context->client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ") && !absl::ConsumePrefix(&value, "bearer ")) {
      return Unauthenticated(
          "the authorization metadata is not \"Bearer <token>\" (informerd accepts bearer "
          "tokens, client certificates and configured unix-socket peers)");
    }
    value = absl::StripAsciiWhitespace(value);
    if (value.empty()) return Unauthenticated("the bearer token is empty");
    if (std::optional<absl::Status> cached = CachedToken(value, caller); cached.has_value()) {
      token_hits_->Inc();
      return *cached;
    }
    token_misses_->Inc();
    *token = std::string(value);
    return absl::OkStatus();
  }
  const std::string peer = context->peer();
  if (absl::StartsWith(peer, "inproc")) {
    *caller = internal_;
    return absl::OkStatus();
  }
  if (std::optional<ucred> cred = unix_peers_.Find(peer); cred.has_value()) {
    for (size_t i = 0; i < options_.unix_peers.size(); ++i) {
      if (options_.unix_peers[i].uid == cred->uid) {
        *caller = unix_callers_[i];
        return absl::OkStatus();
      }
    }
    return Unauthenticated(absl::StrCat("unix-socket peer uid ", cred->uid,
                                        " (pid ", cred->pid,
                                        ") is not in authentication.unixPeers and sent no token"));
  }
  std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<grpc::string_ref> subject = auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
    if (!subject.empty()) {
      Identity id = IdentityFromSubject(std::string(subject[0].data(), subject[0].size()));
      if (id.user.empty()) {
        return Unauthenticated("the client certificate's subject has no common name (CN)");
      }
      id.groups = WithAuthenticatedGroup(std::move(id.groups));
      *caller = callers_.Intern(std::move(id));
      return absl::OkStatus();
    }
  }
  return Unauthenticated(
      "no credentials: send a bearer token (authorization: Bearer <token>), a client "
      "certificate, or call over a unix socket as a configured peer");
}

absl::Status Guard::Admit(const std::shared_ptr<Caller>& caller, CallKind kind,
                          const Requirement& requirement, Ticket* ticket) {
  if (caller == internal_) {
    *ticket = Ticket(caller, nullptr);
    return absl::OkStatus();
  }
  const bool stream = kind == CallKind::kStream;
  Principal& principal = *caller->principal;
  std::atomic<int>* slot = stream ? &principal.streams : &principal.in_flight;
  const int limit = stream ? options_.limits.streams : options_.limits.in_flight;
  if (slot->fetch_add(1, std::memory_order_relaxed) >= limit) {
    slot->fetch_sub(1, std::memory_order_relaxed);
    const char* name = stream ? "streams" : "inFlight";
    return Error(absl::StatusCode::kResourceExhausted, v1::CALLER_LIMIT,
                 absl::StrCat(caller->Describe(), " has ", limit, " ",
                              stream ? "open streams" : "calls in flight",
                              ", its limit (callerLimits.", name, ")"),
                 {{"limit", name}, {"user", caller->identity.user}});
  }
  *ticket = Ticket(caller, slot);
  if (stream) {
    // For OnRevoked: the stream's requirement is checked again while it is open.
    ticket->guard_ = this;
    ticket->requirement_ = std::make_shared<Requirement>(requirement);
  }
  return absl::OkStatus();
}

Guard::Cached Guard::Lookup(const Caller& caller, const Attributes& a, std::string* reason) {
  const std::string& key = DecisionKey(caller, a);
  MutexLock lock(&cache_mu_);
  const absl::Time now = clock_->Now();
  for (auto* cache : {&decisions_, &denials_}) {
    auto it = cache->find(key);
    if (it == cache->end() || it->second.expires <= now) continue;
    it->second.last_used = now;
    if (reason != nullptr) *reason = it->second.reason;
    return it->second.allowed ? Cached::kAllowed : Cached::kDenied;
  }
  return Cached::kUnknown;
}

absl::Status Guard::Decide(const Caller& caller, const Requirement& requirement,
                           bool may_review) {
  if (&caller == internal_.get()) return absl::OkStatus();
  absl::Status first_denial;
  absl::Status unavailable;
  for (const std::vector<Attributes>& alternative : requirement.any_of) {
    bool all = true;
    for (const Attributes& a : alternative) {
      std::string reason;
      Cached c = Lookup(caller, a, &reason);
      if (c == Cached::kUnknown) {
        if (!may_review) return MissStatus();
        decision_misses_->Inc();
        // The cluster that holds the data decides; one the guard has no reviewer for is refused
        // (never reviewed elsewhere).
        client::Client* reviewer = ReviewerFor(a.cluster);
        if (reviewer == nullptr) {
          unavailable = ReviewUnavailable(
              "SubjectAccessReview",
              absl::FailedPreconditionError(
                  a.cluster.empty() ? std::string("no cluster is configured")
                                    : absl::StrCat("no reviewer for cluster \"", a.cluster,
                                                   "\"")));
          all = false;
          break;
        }
        // One review per decision at a time: a call wanting one already under way waits for it.
        const std::string flight = absl::StrCat("d", DecisionKey(caller, a));
        {
          MutexLock lock(&cache_mu_);
          cache_mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !reviewing_.contains(flight);
          });
          reviewing_.insert(flight);
        }
        c = Lookup(caller, a, &reason);  // answered meanwhile?
        if (c != Cached::kUnknown) {
          MutexLock lock(&cache_mu_);
          reviewing_.erase(flight);
        } else {
          const absl::Time start = clock_->Now();
          absl::StatusOr<AccessDecision> d =
              ReviewAccess(*reviewer, caller.identity, a, options_.review_timeout);
          access_review_seconds_->Observe(absl::ToDoubleSeconds(clock_->Now() - start));
          MutexLock lock(&cache_mu_);
          reviewing_.erase(flight);
          if (!d.ok()) {
            unavailable = ReviewUnavailable("SubjectAccessReview", d.status());
            all = false;
            break;
          }
          reason = d->reason;
          const absl::Time now = clock_->Now();
          auto& cache = d->allowed ? decisions_ : denials_;
          MakeRoom(cache, d->allowed ? options_.cache_size : RefusalCapacity(), now);
          cache[flight.substr(1)] = Decision{
              d->allowed, d->reason, now + (d->allowed ? options_.allow_ttl : options_.deny_ttl),
              now};
          c = d->allowed ? Cached::kAllowed : Cached::kDenied;
        }
      } else {
        decision_hits_->Inc();
      }
      if (c == Cached::kDenied) {
        if (first_denial.ok()) first_denial = Forbidden(caller, a, reason);
        all = false;
        break;
      }
    }
    if (all) return absl::OkStatus();
  }
  // Refused. When a review could not be made the refusal may be wrong: say so.
  if (!unavailable.ok()) return unavailable;
  return first_denial;
}

absl::Status Guard::CheckInline(grpc::CallbackServerContext* context, CallKind kind,
                                RequirementFn& need, std::optional<Requirement>* requirement,
                                Ticket* ticket) {
  if (options_.insecure_allow_unauthenticated) {
    *ticket = Ticket(anonymous_, nullptr);
    return absl::OkStatus();
  }
  std::shared_ptr<Caller> caller;
  std::string token;
  if (absl::Status s = Identify(context, &caller, &token); !s.ok()) {
    unauthenticated_->Inc();
    return s;
  }
  if (caller == nullptr) return MissStatus();  // a token to review
  absl::StatusOr<Requirement> r = need();
  if (!r.ok()) return r.status();
  *requirement = *std::move(r);
  absl::Status s = Decide(*caller, **requirement, /*may_review=*/false);
  if (!s.ok() && !IsMiss(s)) {
    denied_->Inc();
    return s;
  }
  if (absl::Status a = Admit(caller, kind, **requirement, ticket); !a.ok()) return a;
  if (s.ok() && caller != internal_) allowed_->Inc();
  return s;
}

std::optional<absl::Status> Guard::CachedToken(absl::string_view token,
                                               std::shared_ptr<Caller>* caller) {
  MutexLock lock(&cache_mu_);
  const absl::Time now = clock_->Now();
  for (auto* cache : {&tokens_, &rejected_tokens_}) {
    auto t = cache->find(token);
    if (t == cache->end() || t->second.expires <= now) continue;
    t->second.last_used = now;
    if (t->second.caller == nullptr) return TokenRejected(t->second.error);
    *caller = t->second.caller;
    return absl::OkStatus();
  }
  return std::nullopt;
}

void Guard::AddClusterReviewer(std::string cluster, client::Client* client) {
  cluster_reviewers_[std::move(cluster)] = client;
}

client::Client* Guard::ReviewerFor(absl::string_view cluster) const {
  if (cluster.empty()) return reviews_;
  auto it = cluster_reviewers_.find(cluster);
  return it == cluster_reviewers_.end() ? nullptr : it->second;
}

size_t Guard::RefusalCapacity() const { return std::max<size_t>(1, options_.cache_size / 4); }

absl::Status Guard::ReviewTokenNow(const std::string& token, std::shared_ptr<Caller>* caller) {
  if (reviews_ == nullptr) {
    return ReviewUnavailable("TokenReview",
                             absl::FailedPreconditionError("no cluster is configured"));
  }
  // One review per token at a time: a call with a token already under review waits for it.
  const std::string flight = absl::StrCat("t", token);
  {
    MutexLock lock(&cache_mu_);
    cache_mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !reviewing_.contains(flight); });
    reviewing_.insert(flight);
  }
  // Another call may have reviewed it meanwhile.
  if (std::optional<absl::Status> cached = CachedToken(token, caller); cached.has_value()) {
    MutexLock lock(&cache_mu_);
    reviewing_.erase(flight);
    return *cached;
  }
  const absl::Time start = clock_->Now();
  absl::StatusOr<TokenReviewResult> r =
      ReviewToken(*reviews_, token, options_.audiences, options_.review_timeout);
  token_review_seconds_->Observe(absl::ToDoubleSeconds(clock_->Now() - start));
  if (!r.ok()) {
    MutexLock lock(&cache_mu_);
    reviewing_.erase(flight);
    return ReviewUnavailable("TokenReview", r.status());
  }
  const absl::Time now = clock_->Now();
  TokenEntry entry{.expires = now + options_.token_ttl, .last_used = now};
  if (r->authenticated) {
    entry.caller = callers_.Intern(std::move(r->identity));
  } else {
    entry.error = r->error.empty() ? "not authenticated" : r->error;
  }
  {
    MutexLock lock(&cache_mu_);
    reviewing_.erase(flight);
    auto& cache = entry.caller != nullptr ? tokens_ : rejected_tokens_;
    MakeRoom(cache, entry.caller != nullptr ? options_.cache_size : RefusalCapacity(), now);
    cache[token] = entry;
  }
  if (entry.caller == nullptr) return TokenRejected(entry.error);
  *caller = std::move(entry.caller);
  return absl::OkStatus();
}

absl::Status Guard::Authorize(const Caller* caller, const Requirement& requirement) {
  if (caller == nullptr || options_.insecure_allow_unauthenticated) return absl::OkStatus();
  absl::Status s = Decide(*caller, requirement, /*may_review=*/true);
  if (s.ok()) {
    allowed_->Inc();
  } else if (s.code() == absl::StatusCode::kUnavailable) {
    unavailable_->Inc();
  } else {
    denied_->Inc();
  }
  return s;
}

void Guard::Enqueue(Job job) {
  job.peer = PeerHost(job.context->peer());
  bool peer_full = false;
  {
    MutexLock lock(&jobs_mu_);
    size_t& from_peer = pending_by_peer_[job.peer];
    peer_full = from_peer >= options_.max_pending_per_peer;
    if (!stopping_ && !peer_full && jobs_.size() < options_.max_pending) {
      ++from_peer;
      jobs_.push_back(std::move(job));
      return;
    }
    if (from_peer == 0) pending_by_peer_.erase(job.peer);
  }
  unavailable_->Inc();
  job.deny(Error(absl::StatusCode::kUnavailable, v1::AUTHORIZATION_UNAVAILABLE,
                 peer_full ? absl::StrCat("more than ", options_.max_pending_per_peer,
                                          " calls from ", job.peer,
                                          " are waiting for authentication or authorization "
                                          "reviews; retry later")
                           : absl::StrCat("more than ", options_.max_pending,
                                          " calls are waiting for authentication or "
                                          "authorization reviews; retry later")));
}

void Guard::RunJob(Job& job) {
  if (job.context->IsCancelled()) {
    job.deny(absl::CancelledError("the call was cancelled while informerd reviewed it"));
    return;
  }
  std::shared_ptr<Caller> caller = job.ticket.caller_;
  if (caller == nullptr) {
    std::string token;
    absl::Status s = Identify(job.context, &caller, &token);
    if (s.ok() && caller == nullptr) s = ReviewTokenNow(token, &caller);
    if (!s.ok()) {
      (s.code() == absl::StatusCode::kUnavailable ? unavailable_ : unauthenticated_)->Inc();
      job.deny(s);
      return;
    }
  }
  if (!job.requirement.has_value()) {
    absl::StatusOr<Requirement> r = job.need();
    if (!r.ok()) {
      job.deny(r.status());
      return;
    }
    job.requirement = *std::move(r);
  }
  absl::Status s = Decide(*caller, *job.requirement, /*may_review=*/true);
  if (!s.ok()) {
    (s.code() == absl::StatusCode::kUnavailable ? unavailable_ : denied_)->Inc();
    job.ticket.Release();  // before the answer: a caller retrying at once finds its slot free
    job.deny(s);
    return;
  }
  if (job.ticket.caller_ == nullptr) {
    if (absl::Status a = Admit(caller, job.kind, *job.requirement, &job.ticket); !a.ok()) {
      job.deny(a);
      return;
    }
  }
  allowed_->Inc();
  job.allowed(std::move(job.ticket));
}

void Guard::Work() {
  for (;;) {
    Job job;
    {
      MutexLock lock(&jobs_mu_);
      jobs_mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu_) {
        return stopping_ || !jobs_.empty();
      });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (auto it = pending_by_peer_.find(job.peer); it != pending_by_peer_.end() &&
                                                     --it->second == 0) {
        pending_by_peer_.erase(it);
      }
    }
    RunJob(job);
  }
}

namespace {

// One admission of a created object, under the principal's lock: prune only finished creations
// that no longer exist, count the rest (finished or under way), take a place.
absl::Status AdmitCreated(const Caller& caller, const std::string& id,
                          absl::flat_hash_map<std::string, bool>* created, int limit,
                          const char* what,
                          const std::function<bool(const std::string&)>& exists) {
  absl::erase_if(*created, [&](const auto& kv) { return kv.second && !exists(kv.first); });
  if (created->contains(id)) return absl::OkStatus();  // the same one, created again meanwhile
  if (static_cast<int>(created->size()) >= limit) {
    return Error(absl::StatusCode::kResourceExhausted, v1::CALLER_LIMIT,
                 absl::StrCat(caller.Describe(), " has created ", created->size(), " ", what,
                              " that still exist, its limit (callerLimits.", what, ")"),
                 {{"limit", what}, {"user", caller.identity.user}});
  }
  created->emplace(id, false);
  return absl::OkStatus();
}

void FinishCreated(absl::flat_hash_map<std::string, bool>* created, const std::string& id,
                   bool ok) {
  auto it = created->find(id);
  if (it == created->end()) return;
  if (ok) {
    it->second = true;
  } else {
    created->erase(it);
  }
}

}  // namespace

absl::Status Guard::AdmitCreation(Caller* caller, CreatedKind kind, const std::string& id,
                                  const std::function<bool(const std::string&)>& exists) {
  if (caller == nullptr || caller == internal_.get() || insecure()) return absl::OkStatus();
  Principal& p = *caller->principal;
  MutexLock lock(&p.mu);
  return kind == CreatedKind::kInformer
             ? AdmitCreated(*caller, id, &p.informers, options_.limits.informers, "informers",
                            exists)
             : AdmitCreated(*caller, id, &p.queues, options_.limits.queues, "queues", exists);
}

void Guard::FinishCreation(Caller* caller, CreatedKind kind, const std::string& id,
                           bool created) {
  if (caller == nullptr || caller == internal_.get() || insecure()) return;
  Principal& p = *caller->principal;
  MutexLock lock(&p.mu);
  FinishCreated(kind == CreatedKind::kInformer ? &p.informers : &p.queues, id, created);
}

absl::Status Guard::AdmitInformer(Caller* caller, const std::string& id,
                                  const std::function<bool(const std::string&)>& exists) {
  return AdmitCreation(caller, CreatedKind::kInformer, id, exists);
}

void Guard::FinishInformer(Caller* caller, const std::string& id, bool created) {
  FinishCreation(caller, CreatedKind::kInformer, id, created);
}

absl::Status Guard::AdmitQueue(Caller* caller, const std::string& name,
                               const std::function<bool(const std::string&)>& exists) {
  return AdmitCreation(caller, CreatedKind::kQueue, name, exists);
}

void Guard::FinishQueue(Caller* caller, const std::string& name, bool created) {
  FinishCreation(caller, CreatedKind::kQueue, name, created);
}


}  // namespace informerd::auth
