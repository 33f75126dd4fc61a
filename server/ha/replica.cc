#include "base/log.h"
#include "client/api_error.h"
#include "server/ha/replica.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace informerd::ha {

Replica::Replica(client::Client* client, ReplicaOptions options, service::QueueRegistry* queues,
                 service::LeaderGate* gate, QueueStore* store)
    : options_(std::move(options)), queues_(queues), gate_(gate), store_(store) {
  ElectorOptions elector = options_.elector;
  if (store_ != nullptr && elector.epoch_floor == nullptr) {
    // The stored queues outlive the Lease: a new term starts above the epochs they name.
    elector.epoch_floor = [store = store_]() -> absl::StatusOr<uint64_t> {
      absl::StatusOr<uint64_t> highest = store->HighestEpoch();
      // No Queue CRD: nothing is stored, so nothing is recorded there (the restore says so).
      if (!highest.ok() && client::IsNotFound(highest.status())) return 0;
      return highest;
    };
  }
  elector_ = std::make_unique<LeaderElector>(
      client, std::move(elector),
      ElectorCallbacks{
          .started_leading = [this](const Term& term) { OnStarted(term); },
          .renewed =
              [this](SteadyTime deadline) {
                MutexLock l(&mu_);
                deadline_ = deadline;
                if (restoring_done_) gate_->Renewed(deadline);
              },
          .stopped_leading = [this] { OnStopped(); },
          .new_leader =
              [this](const std::string& identity, const std::string& address) {
                if (identity != options_.elector.identity) gate_->Follow(identity, address);
              },
      });
}

Replica::~Replica() { Stop(); }

void Replica::Start() {
  restorer_ = std::thread([this] { RunRestores(); });
  elector_->Start();
}

void Replica::Stop() {
  if (elector_ != nullptr) elector_->Stop();  // steps down and releases the Lease if leading
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  if (restorer_.joinable()) restorer_.join();
}

void Replica::OnStarted(const Term& term) {
  {
    MutexLock l(&mu_);
    ++seq_;
    restoring_done_ = false;
    not_ready_.clear();
    not_ready_until_ = absl::InfiniteFuture();
    deadline_ = term.deadline;
    // This replica leads from now on: until its queues are restored, NOT_LEADER names it (not
    // the previous leader, which may be gone). Under mu_ and before the restore is queued: the
    // restore thread's gate_->Lead must come after this, or this would undo it and the term
    // would serve nothing (seen: a leader answering FOLLOWER for a whole term).
    gate_->Restoring(options_.elector.identity, options_.elector.address);
    pending_.emplace_back(seq_, term);
  }
}

std::string Replica::NotReadyReason() const {
  MutexLock l(&mu_);
  return absl::Now() < not_ready_until_ ? not_ready_ : "";
}

void Replica::OnStopped() {
  {
    MutexLock l(&mu_);
    ++seq_;
    restoring_done_ = false;
    pending_.clear();
  }
  // The gate first: nothing is handed out from here on; then the queues and their streams.
  gate_->Follow(elector_->leader() == options_.elector.identity ? "" : elector_->leader(),
                elector_->leader() == options_.elector.identity ? "" : elector_->leader_address());
  queues_->EndTerm(service::NotLeaderError("", ""));
}

void Replica::RunRestores() {
  for (;;) {
    std::pair<uint64_t, Term> next;
    {
      MutexLock l(&mu_);
      mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      next = pending_.front();
      pending_.pop_front();
    }
    Restore(next.first, next.second);
  }
}

void Replica::Restore(uint64_t seq, const Term& term) {
  auto current = [this, seq] {
    MutexLock l(&mu_);
    return seq_ == seq && !stopping_;
  };
  {
    // Under mu_: a term that ended before its restore began must not reopen the registry.
    MutexLock l(&mu_);
    if (seq_ != seq || stopping_) return;
    queues_->BeginTerm(term.epoch);
    if (store_ != nullptr) store_->BeginTerm(term.epoch);
  }
  for (const v1::QueueSpec& spec : options_.config_queues) {
    absl::StatusOr<std::shared_ptr<service::NamedQueue>> q =
        queues_->Create(spec, service::Persist::kNo);
    if (q.ok()) {
      (*q)->Pin();
    } else {
      LogWithFields(spdlog::level::err,
                    {{"queue", spec.name()}, {"error", client::DescribeStatus(q.status())}},
                    "leader: the config's queue could not be created");
    }
  }
  if (store_ != nullptr) {
    const absl::Duration timeout = options_.restore_timeout > absl::ZeroDuration()
                                       ? options_.restore_timeout
                                       : options_.elector.lease_duration * 2;
    const absl::Time give_up = absl::Now() + timeout;
    for (int attempt = 0;; ++attempt) {
      if (!current()) return;
      absl::StatusOr<std::vector<StoredQueue>> stored = store_->List();
      // This term claims every stored queue before it serves: a deposed leader's late write to
      // one is refused from then on (QueueStore's terms).
      if (stored.ok()) {
        std::vector<StoredQueue> claimed;
        for (StoredQueue& s : *stored) {
          absl::StatusOr<StoredQueue> c = store_->Claim(std::move(s));
          if (c.ok()) {
            claimed.push_back(*std::move(c));
          } else if (!client::IsNotFound(c.status())) {  // removed meanwhile: nothing to restore
            stored = absl::Status(c.status().code(), absl::StrCat("claiming a stored queue: ",
                                                                  c.status().message()));
            break;
          }
        }
        if (stored.ok()) *stored = std::move(claimed);
      }
      if (!stored.ok()) {
        const std::string error = client::DescribeStatus(stored.status());
        spdlog::warn("leader: listing and claiming the stored queues failed (attempt {}); Queues and Work "
                     "wait until they are restored: {}",
                     attempt + 1, error);
        if (absl::Now() >= give_up) {
          {
            MutexLock l(&mu_);
            not_ready_ = absl::StrCat("leader: resigned after ", absl::FormatDuration(timeout),
                                      " without restoring its queues (the stored queues cannot "
                                      "be listed and claimed: ", error,
                                      "); another replica may take the Lease");
            not_ready_until_ = absl::Now() + timeout;  // while it leaves the Lease to others
          }
          LogWithFields(spdlog::level::err, {{"error", error}},
                        "leader: cannot restore the stored queues; resigning the Lease");
          elector_->Resign(timeout);
          return;
        }
        {
          MutexLock l(&mu_);
          if (seq_ == seq) {
            not_ready_ = absl::StrCat("leader: the stored queues cannot be listed and claimed "
                                      "(attempt ",
                                      attempt + 1, "): ", error);
          }
        }
        absl::SleepFor(absl::Seconds(1));
        continue;
      }
      for (StoredQueue& s : *stored) {
        if (!s.spec.ok()) {
          LogWithFields(spdlog::level::err,
                        {{"queue", s.name}, {"error", client::DescribeStatus(s.spec.status())}},
                        "leader: stored queue skipped");
          continue;
        }
        if (!s.informers.ok()) {
          LogWithFields(spdlog::level::err,
                        {{"queue", s.name}, {"error", client::DescribeStatus(s.informers.status())}},
                        "leader: stored queue's informers are not restored");
        } else if (options_.ensure_informer != nullptr) {
          for (const v1::InformerSpec& informer : *s.informers) {
            if (absl::Status e = options_.ensure_informer(informer); !e.ok()) {
              LogWithFields(spdlog::level::err,
                            {{"queue", s.name}, {"error", client::DescribeStatus(e)}},
                            "leader: ensuring a stored queue's informer failed");
            }
          }
        }
        absl::StatusOr<std::shared_ptr<service::NamedQueue>> q =
            queues_->Create(*s.spec, service::Persist::kNo);
        if (!q.ok()) {
          LogWithFields(spdlog::level::err,
                        {{"queue", s.name}, {"error", client::DescribeStatus(q.status())}},
                        "leader: stored queue could not be created");
        }
      }
      break;
    }
  }
  MutexLock l(&mu_);
  if (seq_ != seq || stopping_) return;
  restoring_done_ = true;
  not_ready_.clear();
  gate_->Lead(deadline_);
  spdlog::info("leader: term {} serves Queues and Work ({} queues)", term.transitions,
               queues_->List().size());
}

v1::ReplicaInfo Replica::Info() const {
  v1::ReplicaInfo info;
  const bool leading = gate_->MayDispatch();
  info.set_role(leading ? v1::LEADER : v1::FOLLOWER);
  info.set_identity(options_.elector.identity);
  info.set_address(options_.elector.address);
  info.set_leader(elector_->leader());
  info.set_leader_address(elector_->leader_address());
  info.set_lease(absl::StrCat(options_.elector.lease_namespace, "/", options_.elector.lease_name));
  info.set_cluster(options_.cluster);
  info.set_lease_transitions(elector_->observed_transitions());
  if (std::optional<Term> term = elector_->term(); term.has_value() && leading) {
    info.set_leading_since_unix_ms(absl::ToUnixMillis(term->since));
    info.set_token_epoch(term->epoch);
  }
  return info;
}

}  // namespace informerd::ha
