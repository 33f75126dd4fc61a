#include "server/ha/leader_elector.h"

#include <unistd.h>

#include <limits>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_writer.h"
#include "client/api_error.h"
#include "server/ha/timings.h"
#include "server/service/names.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace informerd::ha {
namespace {

SteadyTime SteadyNow() { return std::chrono::steady_clock::now(); }

std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

// metav1.MicroTime's wire form: RFC 3339 with microseconds, UTC.
std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::Status BadLease(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Lease ", field, ": ", why));
}

std::string OptionalString(simdjson::dom::object obj, const char* key) {
  std::string_view v;
  if (obj[key].get_string().get(v) != simdjson::SUCCESS) return "";
  return std::string(v);
}

}  // namespace

absl::Status ValidateElectorOptions(const ElectorOptions& o) {
  auto bad = [](absl::string_view key, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("leaderElection.", key, ": ", why));
  };
  if (std::string why = service::Dns1123SubdomainError(o.lease_name); !why.empty()) {
    return bad("lease.name", why);
  }
  if (std::string why = service::Dns1123LabelError(o.lease_namespace); !why.empty()) {
    return bad("lease.namespace", why);
  }
  if (o.identity.empty()) return bad("identity", "must not be empty");
  if (o.identity.size() > 253) return bad("identity", "at most 253 characters");
  if (auto e = ElectionTimingsError(o.lease_duration, o.renew_deadline, o.retry_period)) {
    return bad(e->key, e->why);
  }
  return absl::OkStatus();
}

std::string DefaultIdentity() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == 0) {
    absl::SNPrintF(host, sizeof(host), "informerd");
  }
  std::random_device rd;
  return absl::StrFormat("%s_%08x", host, static_cast<uint32_t>(rd()));
}

std::string LeaseJson(absl::string_view lease_namespace, absl::string_view name,
                      const LeaseRecord& r) {
  std::string out = R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":)";
  AppendJsonString(&out, name);
  out.append(R"(,"namespace":)");
  AppendJsonString(&out, lease_namespace);
  if (!r.resource_version.empty()) {
    out.append(R"(,"resourceVersion":)");
    AppendJsonString(&out, r.resource_version);
  }
  out.append(R"(,"annotations":{)");
  AppendJsonString(&out, kLeaderAddressAnnotation);
  out.push_back(':');
  AppendJsonString(&out, r.holder_address);
  if (r.epoch != 0) {
    out.push_back(',');
    AppendJsonString(&out, kLeaseEpochAnnotation);
    out.push_back(':');
    AppendJsonString(&out, absl::StrCat(r.epoch));
  }
  out.append(R"(}},"spec":{"holderIdentity":)");
  AppendJsonString(&out, r.holder);
  absl::StrAppend(&out, R"(,"leaseDurationSeconds":)", r.lease_duration_seconds);
  if (!r.acquire_time.empty()) {
    out.append(R"(,"acquireTime":)");
    AppendJsonString(&out, r.acquire_time);
  }
  if (!r.renew_time.empty()) {
    out.append(R"(,"renewTime":)");
    AppendJsonString(&out, r.renew_time);
  }
  absl::StrAppend(&out, R"(,"leaseTransitions":)", r.transitions, "}}");
  return out;
}

absl::StatusOr<LeaseRecord> ParseLease(absl::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) {
    return BadLease("", "the API server's answer is not JSON");
  }
  simdjson::dom::object metadata;
  if (doc["metadata"].get_object().get(metadata) != simdjson::SUCCESS) {
    return BadLease("metadata", "missing");
  }
  LeaseRecord r;
  r.resource_version = OptionalString(metadata, "resourceVersion");
  if (r.resource_version.empty()) return BadLease("metadata.resourceVersion", "missing");
  simdjson::dom::object annotations;
  if (metadata["annotations"].get_object().get(annotations) == simdjson::SUCCESS) {
    r.holder_address = OptionalString(annotations, std::string(kLeaderAddressAnnotation).c_str());
    const std::string epoch =
        OptionalString(annotations, std::string(kLeaseEpochAnnotation).c_str());
    if (!epoch.empty() && !absl::SimpleAtoi(epoch, &r.epoch)) {
      return BadLease(absl::StrCat("metadata.annotations[", kLeaseEpochAnnotation, "]"),
                      "not an unsigned decimal integer");
    }
  }
  simdjson::dom::object spec;
  if (doc["spec"].get_object().get(spec) != simdjson::SUCCESS) {
    return r;  // an empty Lease: no holder
  }
  r.holder = OptionalString(spec, "holderIdentity");
  r.acquire_time = OptionalString(spec, "acquireTime");
  r.renew_time = OptionalString(spec, "renewTime");
  simdjson::dom::element e;
  if (spec["leaseDurationSeconds"].get(e) == simdjson::SUCCESS) {
    int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS || v < 0 ||
        v > std::numeric_limits<int32_t>::max()) {
      return BadLease("spec.leaseDurationSeconds", "not an integer in [0, 2^31)");
    }
    r.lease_duration_seconds = v;
  }
  if (spec["leaseTransitions"].get(e) == simdjson::SUCCESS) {
    int64_t v = 0;
    if (e.get_int64().get(v) != simdjson::SUCCESS || v < 0 ||
        v > std::numeric_limits<int32_t>::max()) {
      return BadLease("spec.leaseTransitions", "not an integer in [0, 2^31)");
    }
    r.transitions = v;
  }
  return r;
}

LeaderElector::LeaderElector(client::Client* client, ElectorOptions options,
                             ElectorCallbacks callbacks)
    : client_(client),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      request_timeout_(std::min(options_.renew_deadline / 2, options_.retry_period + absl::Seconds(1))),
      path_(absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", options_.lease_namespace,
                         "/leases/", options_.lease_name)) {
  if (options_.metrics != nullptr) {
    const std::string lease = absl::StrCat(options_.lease_namespace, "/", options_.lease_name);
    leader_gauge_ = options_.metrics->GetGauge(
        "informerd_leader", "1 while this replica holds the Lease (leads its replica set)",
        {{"lease", lease}});
    transitions_counter_ = options_.metrics->GetCounter(
        "informerd_leader_transitions_total", "Terms this replica began or ended (leader election)",
        {{"lease", lease}});
    renew_failures_ = options_.metrics->GetCounter(
        "informerd_leader_renew_failures_total",
        "Lease reads or writes of leader election that failed", {{"lease", lease}});
  }
}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  watchdog_ = std::thread([this] { Watch(); });
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    MutexLock l(&mu_);
    if (stopping_ && !thread_.joinable() && !watchdog_.joinable()) return;
    stopping_ = true;
  }
  {
    // Step down now, not when the elector's thread is done with a request in flight.
    MutexLock c(&callbacks_mu_);
    LoseLocked();
  }
  if (thread_.joinable()) thread_.join();  // releases the Lease on its way out
  if (watchdog_.joinable()) watchdog_.join();
}

void LeaderElector::Resign(absl::Duration pause) {
  {
    MutexLock l(&mu_);
    resigned_until_ = SteadyNow() + ToChrono(pause);
  }
  {
    MutexLock c(&callbacks_mu_);
    LoseLocked();
  }
  Release();
}

void LeaderElector::Watch() {
  for (;;) {
    {
      MutexLock l(&mu_);
      for (;;) {
        if (stopping_) return;
        if (leading_ && SteadyNow() >= term_->deadline) break;
        const uint64_t seen = term_changes_;
        const absl::Duration left =
            leading_ ? absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           term_->deadline - SteadyNow()))
                     : absl::InfiniteDuration();
        // Woken by a change of the term (or Stop); else at the deadline, on the steady clock (a
        // wall-clock step cannot delay a step-down).
        mu_.AwaitWithTimeout(
            [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || term_changes_ != seen; },
            left);
      }
    }
    MutexLock c(&callbacks_mu_);
    bool expired;
    {
      MutexLock l(&mu_);
      expired = leading_ && SteadyNow() >= term_->deadline;  // not renewed meanwhile
    }
    if (expired) {
      spdlog::warn("leader election: {} was not renewed by its deadline", options_.identity);
      LoseLocked();
    }
  }
}

bool LeaderElector::leading() const {
  MutexLock l(&mu_);
  return leading_;
}

std::string LeaderElector::leader() const {
  MutexLock l(&mu_);
  return observed_.has_value() ? observed_->holder : "";
}

std::string LeaderElector::leader_address() const {
  MutexLock l(&mu_);
  return observed_.has_value() && !observed_->holder.empty() ? observed_->holder_address : "";
}

int64_t LeaderElector::observed_transitions() const {
  MutexLock l(&mu_);
  return observed_.has_value() ? observed_->transitions : 0;
}

std::optional<Term> LeaderElector::term() const {
  MutexLock l(&mu_);
  return term_;
}

bool LeaderElector::Sleep(absl::Duration d) {
  MutexLock l(&mu_);
  mu_.AwaitWithDeadline([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; },
                        absl::Now() + d);
  return !stopping_;
}

void LeaderElector::Run() {
  std::mt19937_64 rng(std::random_device{}());
  for (;;) {
    std::optional<SteadyTime> resigned;
    {
      MutexLock l(&mu_);
      if (SteadyNow() < resigned_until_) resigned = resigned_until_;
    }
    if (resigned.has_value()) {
      // Resigned: leave the Lease to the others for a while.
      if (!Sleep(std::min(options_.retry_period,
                          absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              *resigned - SteadyNow()))))) {
        break;
      }
      continue;
    }
    SteadyTime sent;
    const bool holds = TryAcquireOrRenew(&sent);
    const SteadyTime deadline = sent + ToChrono(options_.renew_deadline);
    {
      // The decision and its callback together, so that the watchdog's step-down cannot fall
      // between them.
      MutexLock c(&callbacks_mu_);
      enum { kNothing, kStart, kRenewed, kLose } action = kNothing;
      Term term;
      {
        MutexLock l(&mu_);
        if (holds && leading_) {
          if (SteadyNow() < term_->deadline) {
            term_->deadline = std::max(term_->deadline, deadline);
            ++term_changes_;
            action = kRenewed;
          } else {
            action = kLose;  // its deadline passed while the renew was under way
          }
        } else if (holds && !stopping_ && SteadyNow() < deadline &&
                   SteadyNow() >= resigned_until_ && observed_->epoch > last_term_epoch_) {
          leading_ = true;
          term.transitions = observed_->transitions;
          term.epoch = observed_->epoch;
          term.since = absl::Now();
          term.deadline = deadline;
          term_ = term;
          last_term_transitions_ = term.transitions;
          last_term_epoch_ = term.epoch;
          ++term_changes_;
          action = kStart;
        } else if (!holds && leading_ &&
                   (SteadyNow() >= term_->deadline ||
                    (observed_.has_value() && observed_->holder != options_.identity))) {
          // A failed renew: leadership lasts until the deadline of the last one that succeeded.
          action = kLose;
        }
        // (Holding a Lease whose term this replica lost, a late renew of it: not a term. The
        // next try reads the Lease and takes it again as a new term.)
      }
      switch (action) {
        case kStart:
          spdlog::info("leader election: {} leads {}/{} (term {})", options_.identity,
                       options_.lease_namespace, options_.lease_name, term.transitions);
          if (leader_gauge_ != nullptr) leader_gauge_->Set(1);
          if (transitions_counter_ != nullptr) transitions_counter_->Inc();
          if (callbacks_.started_leading) callbacks_.started_leading(term);
          break;
        case kRenewed:
          if (callbacks_.renewed) callbacks_.renewed(deadline);
          break;
        case kLose:
          LoseLocked();
          break;
        case kNothing:
          break;
      }
    }
    // client-go: wait.JitterUntil with factor 1.2 while acquiring; renewals every retry period.
    absl::Duration wait = options_.retry_period;
    if (!holds && !leading()) {
      wait += options_.retry_period * (0.2 * std::uniform_real_distribution<double>(0, 1)(rng));
      // Another holder's lease runs out before the next try: try right after it does (plus a
      // little jitter, so that followers do not all write at once). Safety is unchanged — the
      // lease is measured from this replica's own observation — but failover no longer waits up
      // to a retry period more.
      if (others_expire_.has_value()) {
        const auto left = *others_expire_ - SteadyNow() + std::chrono::milliseconds(std::uniform_int_distribution<int>(1, 50)(rng));
        wait = std::min(wait, absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(left)));
        wait = std::max(wait, absl::Milliseconds(1));
      }
    }
    others_expire_.reset();
    if (std::optional<Term> term = this->term(); term.has_value()) {
      // Never sleep past the deadline: the next renew is tried before it (the watchdog ends the
      // term at it if none succeeds).
      auto left = term->deadline - SteadyNow();
      wait = std::max(absl::ZeroDuration(),
                      std::min(wait, absl::FromChrono(std::chrono::duration_cast<
                                                      std::chrono::nanoseconds>(left))));
    }
    if (!Sleep(wait)) break;
  }
  {
    MutexLock c(&callbacks_mu_);
    LoseLocked();
  }
  Release();
}

void LeaderElector::LoseLocked() {
  {
    MutexLock l(&mu_);
    if (!leading_) return;
    leading_ = false;
    term_.reset();
    ++term_changes_;
  }
  spdlog::warn("leader election: {} stopped leading {}/{}", options_.identity,
               options_.lease_namespace, options_.lease_name);
  if (leader_gauge_ != nullptr) leader_gauge_->Set(0);
  if (transitions_counter_ != nullptr) transitions_counter_->Inc();
  if (callbacks_.stopped_leading) callbacks_.stopped_leading();
}

void LeaderElector::Observe(const LeaseRecord& record, SteadyTime now) {
  std::string holder, address;
  {
    MutexLock l(&mu_);
    if (!observed_.has_value() || observed_->resource_version != record.resource_version) {
      observed_ = record;
      observed_time_ = now;
    }
    holder = observed_->holder;
    address = observed_->holder_address;
  }
  if (holder != reported_leader_) {
    reported_leader_ = holder;
    if (holder != options_.identity) {
      spdlog::info("leader election: the leader of {}/{} is {}", options_.lease_namespace,
                   options_.lease_name, holder.empty() ? "nobody" : holder);
    }
    if (callbacks_.new_leader) callbacks_.new_leader(holder, holder.empty() ? "" : address);
  }
}

bool LeaderElector::TryAcquireOrRenew(SteadyTime* sent) {
  const bool leading = this->leading();
  const absl::Time now = absl::Now();
  LeaseRecord desired;
  desired.holder = options_.identity;
  desired.holder_address = options_.address;
  desired.lease_duration_seconds = absl::ToInt64Seconds(absl::Ceil(options_.lease_duration, absl::Seconds(1)));
  desired.renew_time = MicroTime(now);
  desired.acquire_time = desired.renew_time;

  auto fail = [this](absl::string_view what, const absl::Status& s) {
    if (renew_failures_ != nullptr) renew_failures_->Inc();
    spdlog::warn("leader election: {} the Lease {}/{} failed: {}", std::string(what), options_.lease_namespace,
                 options_.lease_name, client::DescribeStatus(s));
    return false;
  };

  // Fast path (client-go): the leader updates its cached record without reading first.
  if (leading) {
    LeaseRecord cached;
    {
      MutexLock l(&mu_);
      cached = *observed_;
    }
    if (cached.holder == options_.identity) {
      desired.acquire_time = cached.acquire_time;
      desired.transitions = cached.transitions;
      desired.epoch = cached.epoch;
      desired.resource_version = cached.resource_version;
      *sent = SteadyNow();
      absl::StatusOr<LeaseRecord> written = Write(desired, /*create=*/false);
      if (written.ok()) {
        Observe(*written, SteadyNow());
        return true;
      }
      if (!client::IsConflict(written.status())) return fail("renewing", written.status());
      // Someone else wrote it: read it and decide below.
    }
  }

  *sent = SteadyNow();
  absl::StatusOr<LeaseRecord> current = Read();
  if (!current.ok()) {
    if (!client::IsNotFound(current.status())) return fail("reading", current.status());
    // A Lease deleted while another replica held it: that replica may lead until the lease it
    // was last seen renewing runs out (it cannot tell a deleted Lease from a slow API server), so
    // wait that out as for a Lease that is there. Creating it at once made two leaders.
    {
      MutexLock l(&mu_);
      if (observed_.has_value() && !observed_->holder.empty() &&
          observed_->holder != options_.identity) {
        const SteadyTime expires =
            observed_time_ + std::chrono::seconds(observed_->lease_duration_seconds);
        if (SteadyNow() < expires) {
          others_expire_ = expires;
          return false;
        }
      }
    }
    desired.transitions = NextTransitions(-1);
    absl::StatusOr<uint64_t> epoch = NextEpoch(nullptr);
    if (!epoch.ok()) return fail("creating", epoch.status());
    desired.epoch = *epoch;
    *sent = SteadyNow();
    absl::StatusOr<LeaseRecord> created = Write(desired, /*create=*/true);
    if (!created.ok()) return fail("creating", created.status());
    Observe(*created, SteadyNow());
    return true;
  }
  Observe(*current, SteadyNow());
  SteadyTime observed_time;
  {
    MutexLock l(&mu_);
    observed_time = observed_time_;
  }
  const bool held_by_other = !current->holder.empty() && current->holder != options_.identity;
  const SteadyTime expires = observed_time + std::chrono::seconds(current->lease_duration_seconds);
  if (held_by_other && SteadyNow() < expires) {
    others_expire_ = expires;  // the next try is then, not a whole retry period later
    return false;              // another replica's lease has not run out
  }
  desired.resource_version = current->resource_version;
  if (leading && current->holder == options_.identity) {
    desired.acquire_time = current->acquire_time;
    desired.transitions = current->transitions;
    desired.epoch = current->epoch;
  } else {
    // A new term: another holder's (or nobody's) Lease, or ours from a term we lost.
    desired.transitions = NextTransitions(current->transitions);
    absl::StatusOr<uint64_t> epoch = NextEpoch(&*current);
    if (!epoch.ok()) return fail("acquiring", epoch.status());
    desired.epoch = *epoch;
  }
  *sent = SteadyNow();
  absl::StatusOr<LeaseRecord> written = Write(desired, /*create=*/false);
  if (!written.ok()) {
    if (client::IsConflict(written.status())) return false;  // another replica was faster
    return fail(leading ? "renewing" : "acquiring", written.status());
  }
  Observe(*written, SteadyNow());
  return true;
}

int64_t LeaderElector::NextTransitions(int64_t current) const {
  MutexLock l(&mu_);
  // The API's int32 stops counting at its end; epochs do not depend on it.
  return std::min<int64_t>(std::max(current, last_term_transitions_) + 1,
                           std::numeric_limits<int32_t>::max());
}

absl::StatusOr<uint64_t> LeaderElector::NextEpoch(const LeaseRecord* current) const {
  uint64_t floor = 0;
  {
    MutexLock l(&mu_);
    floor = last_term_epoch_;
  }
  if (current != nullptr) {
    floor = std::max(floor, current->epoch);
    if (current->transitions < (int64_t{1} << 23)) {  // an older informerd's epoch
      floor = std::max(floor, static_cast<uint64_t>(current->transitions + 1) << 40);
    }
  }
  if (options_.epoch_floor != nullptr) {
    absl::StatusOr<uint64_t> recorded = options_.epoch_floor();
    if (!recorded.ok()) {
      return absl::Status(recorded.status().code(),
                          absl::StrCat("reading the highest epoch recorded outside the Lease "
                                       "(no term is taken without it): ",
                                       recorded.status().message()));
    }
    floor = std::max(floor, *recorded);
  }
  if (floor > std::numeric_limits<uint64_t>::max() - 2 * kEpochSpacing) {
    return BadLease(absl::StrCat("metadata.annotations[", kLeaseEpochAnnotation, "]"),
                    absl::StrCat(floor, ": no epoch is left above it for fencing tokens"));
  }
  const uint64_t now = static_cast<uint64_t>(std::max<int64_t>(absl::GetCurrentTimeNanos(), 0));
  return std::max(floor + kEpochSpacing, now);
}

void LeaderElector::Release() {
  LeaseRecord record;
  {
    MutexLock l(&mu_);
    if (!observed_.has_value() || observed_->holder != options_.identity) return;
    record = *observed_;
  }
  const std::string now = MicroTime(absl::Now());
  record.holder.clear();
  record.holder_address.clear();
  record.lease_duration_seconds = 1;
  record.renew_time = now;
  record.acquire_time = now;
  absl::StatusOr<LeaseRecord> written = Write(record, /*create=*/false);
  if (!written.ok()) {
    spdlog::warn("leader election: releasing the Lease {}/{} failed (followers take it when it "
                 "runs out): {}",
                 options_.lease_namespace, options_.lease_name,
                 client::DescribeStatus(written.status()));
    return;
  }
  spdlog::info("leader election: {} released {}/{}", options_.identity, options_.lease_namespace,
               options_.lease_name);
}

absl::StatusOr<LeaseRecord> LeaderElector::Read() {
  client::HttpRequest request;
  request.method = "GET";
  request.path = path_;
  request.headers = {{"Accept", "application/json"}};
  request.timeout = request_timeout_;
  absl::StatusOr<client::Client::RawResponse> response = client_->Send(std::move(request));
  if (!response.ok()) return response.status();
  return ParseLease(response->body);
}

absl::StatusOr<LeaseRecord> LeaderElector::Write(const LeaseRecord& record, bool create) {
  client::HttpRequest request;
  request.method = create ? "POST" : "PUT";
  request.path = create ? absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                                       options_.lease_namespace, "/leases")
                        : path_;
  request.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  request.body = LeaseJson(options_.lease_namespace, options_.lease_name, record);
  request.timeout = request_timeout_;
  absl::StatusOr<client::Client::RawResponse> response = client_->Send(std::move(request));
  if (!response.ok()) return response.status();
  return ParseLease(response->body);
}

}  // namespace informerd::ha
