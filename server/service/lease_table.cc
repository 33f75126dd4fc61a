#include "base/log.h"
#include "server/service/lease_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "server/service/queue_spec.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

using workqueue::Lease;

void Refuse(std::vector<v1::Refusal>* refusals, absl::string_view key, uint64_t token,
            v1::ErrorReason reason, std::string message) {
  v1::Refusal& r = refusals->emplace_back();
  r.set_key(std::string(key));
  r.set_token(token);
  r.set_code(static_cast<int32_t>(reason == v1::INVALID_FIELD
                                      ? absl::StatusCode::kInvalidArgument
                                      : absl::StatusCode::kFailedPrecondition));
  r.set_reason(reason);
  r.set_message(std::move(message));
}

std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CEscape(key.substr(0, 128)), "\"");
}

}  // namespace

// ---- Worker ----

Worker::Worker(LeaseTable* table, std::string stream_id, WorkerOptions options,
               std::shared_ptr<LeaseSink> sink)
    : table_(table),
      stream_id_(std::move(stream_id)),
      options_(std::move(options)),
      sink_(std::move(sink)) {}

Worker::~Worker() { Detach(); }

void Worker::Detach() {
  std::shared_ptr<LeaseSink> sink;
  {
    MutexLock lock(&table_->mu_);
    table_->DetachLocked(this);
    sink = std::move(sink_);
  }
  // `sink` may be the last reference to the stream that is detaching us: released here, outside
  // the lock.
}

std::shared_ptr<LeaseSink> Worker::TakeSinkToCloseLocked() {
  table_->mu_.AssertHeld();
  if ((table_->stopping_ || draining_) && attached_ && InFlightLocked() == 0 && !close_sent_) {
    close_sent_ = true;
    return sink_;
  }
  return nullptr;
}

std::vector<v1::Refusal> Worker::Apply(const v1::Outcomes& outcomes) {
  std::vector<v1::Refusal> refusals;
  std::shared_ptr<LeaseSink> close_sink;
  std::vector<const v1::Outcome*> failures;  // logged outside the lock
  {
    MutexLock lock(&table_->mu_);
    workqueue::RateLimitingQueue& q = *table_->queue_;
    // One load of the limiter for the batch (it is swapped only when the spec changes).
    const std::shared_ptr<workqueue::RateLimiter> limiter = q.rate_limiter();
    std::vector<workqueue::HandOut>& ending = table_->ending_;
    ending.clear();
    for (int i = 0; i < outcomes.outcomes_size(); ++i) {
      const v1::Outcome& o = outcomes.outcomes(i);
      if (!attached_) {
        Refuse(&refusals, o.key(), o.token(), v1::KEY_NOT_HELD,
               "this stream no longer holds any key");
        continue;
      }
      auto it = held_.find(o.key());
      if ((it == held_.end() || it->second.token != o.token()) &&
          TakeExpiredLocked(o.key(), o.token())) {
        // The key went back to the queue when the lease expired; this outcome is too late. The
        // worker's reconcile is over, so its credit comes back.
        Refuse(&refusals, o.key(), o.token(), v1::LEASE_EXPIRED,
               absl::StrCat("lease of key ", Quoted(o.key()), " (token ", o.token(),
                            ") expired after ", absl::FormatDuration(table_->lease_timeout_),
                            " without an outcome or heartbeat; the key was handed out again"));
        continue;
      }
      if (it == held_.end()) {
        Refuse(&refusals, o.key(), o.token(), v1::KEY_NOT_HELD,
               absl::StrCat("key ", Quoted(o.key()), " is not held by this stream"));
        continue;
      }
      Held& held = it->second;
      if (held.token != o.token()) {
        Refuse(&refusals, o.key(), o.token(), v1::STALE_TOKEN,
               absl::StrCat("stale token ", o.token(), " for key ", Quoted(o.key()),
                            ": this stream holds it with token ", held.token));
        continue;
      }
      const bool delayed = o.result() == v1::Outcome::REQUEUE_AFTER ||
                           o.result() == v1::Outcome::FORGET_AND_REQUEUE_AFTER;
      if (delayed && (o.requeue_after_ms() < 0 || o.requeue_after_ms() > kMaxDelayMs)) {
        Refuse(&refusals, o.key(), o.token(), v1::INVALID_FIELD,
               absl::StrCat("outcomes[", i, "].requeue_after_ms: must be in 0..", kMaxDelayMs));
        continue;  // still held: the worker may send a valid outcome
      }
      // A requeue waits at the priority the outcome names, else at the one it was handed out at.
      const int32_t priority = o.has_priority() ? o.priority() : held.priority;
      if (o.has_priority()) {
        if (absl::Status s = ValidatePriority(o.priority(), absl::StrCat("outcomes[", i,
                                                                         "].priority"));
            !s.ok()) {
          Refuse(&refusals, o.key(), o.token(), v1::INVALID_FIELD, std::string(s.message()));
          continue;  // still held, as above
        }
      }
      switch (o.result()) {
        case v1::Outcome::SUCCESS:
          limiter->Forget(o.key());
          break;
        case v1::Outcome::RETRY:
          // Refused only after shutdown, when the key is dropped like any other.
          if (q.AddRateLimited(o.key(), priority).ok()) table_->retries_.fetch_add(1);
          break;
        case v1::Outcome::REQUEUE_AFTER:
          if (q.AddAfter(o.key(), absl::Milliseconds(o.requeue_after_ms()), priority).ok()) {
            table_->retries_.fetch_add(1);
          }
          break;
        case v1::Outcome::FORGET_AND_REQUEUE_AFTER:
          limiter->Forget(o.key());
          q.AddAfter(o.key(), absl::Milliseconds(o.requeue_after_ms()), priority).IgnoreError();
          break;
        case v1::Outcome::DONE:
          break;
        default:
          Refuse(&refusals, o.key(), o.token(), v1::INVALID_FIELD,
                 absl::StrCat("outcomes[", i,
                              "].result: must be SUCCESS, RETRY, REQUEUE_AFTER, DONE or "
                              "FORGET_AND_REQUEUE_AFTER"));
          continue;
      }
      if (!o.error().empty()) failures.push_back(&o);
      table_->EndLeaseLocked(o.key(), held, /*requeue=*/false, &ending);
      held_.erase(it);
    }
    q.DoneAll(ending);
    close_sink = TakeSinkToCloseLocked();
  }
  if (close_sink != nullptr) close_sink->Close(absl::OkStatus());
  // The worker's reason for a failed reconcile, as controller-runtime logs "Reconciler error".
  for (const v1::Outcome* o : failures) {
    LogWithFields(spdlog::level::warn,
                  {{"queue", table_->queue_name_},
                   {"worker", stream_id_},
                   {"key", o->key()},
                   {"token", o->token()},
                   {"error", absl::string_view(o->error()).substr(0, 1024)}},
                  "reconcile failed");
  }
  return refusals;
}

std::vector<v1::Refusal> Worker::Heartbeat(const v1::Heartbeat& heartbeat) {
  std::vector<v1::Refusal> refusals;
  MutexLock lock(&table_->mu_);
  for (int i = 0; i < heartbeat.leases_size(); ++i) {
    const v1::LeaseRef& ref = heartbeat.leases(i);
    auto it = attached_ ? held_.find(ref.key()) : held_.end();
    if (attached_ && (it == held_.end() || it->second.token != ref.token())) {
      if (auto e = expired_.find(ref.token()); e != expired_.end() && e->second == ref.key()) {
        Refuse(&refusals, ref.key(), ref.token(), v1::LEASE_EXPIRED,
               absl::StrCat("heartbeat.leases[", i, "]: the lease of key ", Quoted(ref.key()),
                            " already expired; the key was handed out again"));
        continue;
      }
    }
    if (it == held_.end()) {
      Refuse(&refusals, ref.key(), ref.token(), v1::KEY_NOT_HELD,
             absl::StrCat("heartbeat.leases[", i, "]: key ", Quoted(ref.key()),
                          " is not held by this stream"));
      continue;
    }
    Held& held = it->second;
    if (held.token != ref.token()) {
      Refuse(&refusals, ref.key(), ref.token(), v1::STALE_TOKEN,
             absl::StrCat("heartbeat.leases[", i, "]: stale token ", ref.token(), " for key ",
                          Quoted(ref.key()), ": this stream holds it with token ",
                          held.token));
      continue;
    }
    table_->DisarmExpiryLocked(held);
    table_->ArmExpiryLocked(this, it->first, held);
  }
  return refusals;
}

void Worker::Drain(const std::vector<Lease>& unsent) {
  std::shared_ptr<LeaseSink> close_sink;
  {
    MutexLock lock(&table_->mu_);
    draining_ = true;
    close_sink = GiveBackLocked(unsent);
  }
  if (close_sink != nullptr) close_sink->Close(absl::OkStatus());
}

void Worker::GiveBack(const std::vector<Lease>& leases) {
  std::shared_ptr<LeaseSink> close_sink;
  {
    MutexLock lock(&table_->mu_);
    close_sink = GiveBackLocked(leases);
  }
  if (close_sink != nullptr) close_sink->Close(absl::OkStatus());
}

std::shared_ptr<LeaseSink> Worker::GiveBackLocked(const std::vector<Lease>& leases) {
  table_->mu_.AssertHeld();
  for (const Lease& l : leases) {
    // Expired before it was sent: its key went back already; nobody will answer it.
    if (TakeExpiredLocked(l.key, l.token)) continue;
    auto it = held_.find(l.key);
    if (it == held_.end() || it->second.token != l.token) continue;
    table_->EndLeaseLocked(it->first, it->second, /*requeue=*/true);
    held_.erase(it);
  }
  return TakeSinkToCloseLocked();
}

size_t Worker::InFlightLocked() const {
  table_->mu_.AssertHeld();
  return held_.size() + expired_.size();
}

size_t Worker::in_flight() const {
  MutexLock lock(&table_->mu_);
  return InFlightLocked();
}

bool Worker::TakeExpiredLocked(absl::string_view key, uint64_t token) {
  table_->mu_.AssertHeld();
  auto it = expired_.find(token);
  if (it == expired_.end() || it->second != key) return false;
  expired_.erase(it);
  return true;
}

// ---- LeaseTable ----

LeaseTable::LeaseTable(std::shared_ptr<workqueue::RateLimitingQueue> queue, Options options)
    : queue_name_(std::move(options.queue_name)),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      expirations_(options.expirations),
      workers_gauge_(options.workers),
      queue_(std::move(queue)),
      lease_timeout_(options.lease_timeout) {
  // spdlog's registry is a lazily built singleton inside a library ThreadSanitizer cannot see
  // into: build it here, before any stream of this queue can log a failure.
  (void)spdlog::default_logger_raw();
  expiry_timer_ = clock_->CreateTimer([this] { OnExpiryTimer(); });
}

LeaseTable::~LeaseTable() {
  expiry_timer_.reset();  // waits for a running expiry pass; none starts after
}

absl::StatusOr<std::unique_ptr<Worker>> LeaseTable::Attach(WorkerOptions options,
                                                           std::shared_ptr<LeaseSink> sink) {
  if (options.max_batch == 0 || options.max_batch > options.max_in_flight) {
    options.max_batch = options.max_in_flight;
  }
  std::string id = absl::StrCat(queue_name_, "/", next_stream_.fetch_add(1));
  MutexLock lock(&mu_);
  if (stopping_) {
    return Error(absl::StatusCode::kFailedPrecondition, v1::QUEUE_SHUT_DOWN,
                 absl::StrCat("queue ", queue_name_, " is shut down"), {{"queue", queue_name_}});
  }
  std::unique_ptr<Worker> worker(
      new Worker(this, std::move(id), std::move(options), std::move(sink)));
  workers_.push_back(worker.get());
  if (workers_gauge_ != nullptr) workers_gauge_->Set(static_cast<double>(workers_.size()));
  return worker;
}

void LeaseTable::SetLeaseTimeout(absl::Duration timeout) {
  MutexLock lock(&mu_);
  lease_timeout_ = timeout;
  if (timeout == absl::ZeroDuration()) {
    for (auto& [when, ref] : expiries_) ref.worker->held_.find(ref.key)->second.expiry = expiries_.end();
    expiries_.clear();
    expiry_timer_->Disarm();
  }
}

absl::Duration LeaseTable::lease_timeout() const {
  MutexLock lock(&mu_);
  return lease_timeout_;
}

void LeaseTable::ArmExpiryLocked(Worker* worker, absl::string_view key, Worker::Held& held) {
  if (lease_timeout_ == absl::ZeroDuration()) {
    held.expiry = expiries_.end();
    return;
  }
  const absl::Time when = clock_->Now() + lease_timeout_;
  held.expiry = expiries_.emplace(when, ExpiryRef{worker, std::string(key), held.token});
  if (held.expiry == expiries_.begin()) expiry_timer_->ArmAt(when);
}

void LeaseTable::DisarmExpiryLocked(Worker::Held& held) {
  if (held.expiry == expiries_.end()) return;
  expiries_.erase(held.expiry);  // the timer may fire early; it re-arms for the new first
  held.expiry = expiries_.end();
}

void LeaseTable::EndLeaseLocked(absl::string_view key, Worker::Held& held, bool requeue,
                                std::vector<workqueue::HandOut>* batch) {
  DisarmExpiryLocked(held);
  const workqueue::HandOut end{.slot = held.slot, .token = held.token};
  if (requeue) {
    ReturnLocked(key, end, held.priority, held.initial_list);
  } else if (batch != nullptr) {
    batch->push_back(end);
  } else {
    queue_->DoneAll({&end, 1});
  }
}

void LeaseTable::ReturnLocked(absl::string_view key, const workqueue::HandOut& end,
                              int32_t priority, bool initial_list) {
  // Add while still processing marks the key dirty; Done then puts it back in the FIFO, at the
  // priority it had. After shutdown the Add is refused and the key dropped, as client-go drops it.
  queue_->Add(key, priority, initial_list).IgnoreError();
  queue_->DoneAll({&end, 1});
}

void LeaseTable::Return(const std::vector<Lease>& leases) {
  MutexLock lock(&mu_);
  for (const Lease& l : leases) {
    ReturnLocked(l.key, {.slot = l.slot, .token = l.token}, l.priority, l.initial_list);
  }
}

void LeaseTable::OnExpiryTimer() {
  MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  while (!expiries_.empty() && expiries_.begin()->first <= now) {
    auto first = expiries_.begin();
    Worker* worker = first->second.worker;
    auto it = worker->held_.find(first->second.key);
    expiries_.erase(first);
    if (it == worker->held_.end()) continue;  // cannot happen: entries leave with their lease
    Worker::Held& held = it->second;
    held.expiry = expiries_.end();
    EndLeaseLocked(it->first, held, /*requeue=*/true);
    // Kept (against the worker's credit) until the worker answers it.
    worker->expired_.emplace(held.token, it->first);
    worker->held_.erase(it);
    expired_.fetch_add(1, std::memory_order_relaxed);
    if (expirations_ != nullptr) expirations_->Inc();
  }
  if (!expiries_.empty()) expiry_timer_->ArmAt(expiries_.begin()->first);
}

void LeaseTable::DetachLocked(Worker* worker) {
  if (!worker->attached_) return;
  worker->attached_ = false;
  for (auto& [key, held] : worker->held_) EndLeaseLocked(key, held, /*requeue=*/true);
  worker->held_.clear();
  worker->expired_.clear();  // their keys went back when they expired
  workers_.erase(std::find(workers_.begin(), workers_.end(), worker));
  if (workers_gauge_ != nullptr) workers_gauge_->Set(static_cast<double>(workers_.size()));
}

size_t LeaseTable::AwaitCredit() {
  MutexLock lock(&mu_);
  auto credit = [](const Worker* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !w->draining_ && w->InFlightLocked() < w->options_.max_in_flight;
  };
  mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || std::any_of(workers_.begin(), workers_.end(), credit);
  });
  if (stopping_) return 0;
  // The most any one worker can take; the batch goes to whichever can take it when it arrives
  // (GetBatch may wait long, and workers come and go meanwhile).
  size_t want = 0;
  for (const Worker* w : workers_) {
    if (!credit(w)) continue;
    want = std::max<size_t>(want, std::min<size_t>(w->options_.max_in_flight - w->InFlightLocked(),
                                                   w->options_.max_batch));
  }
  return want;
}

std::vector<LeaseTable::Delivery> LeaseTable::Assign(std::vector<Lease>* leases) {
  std::vector<Delivery> deliveries;
  MutexLock lock(&mu_);
  size_t next = 0;
  if (!stopping_) {
    // Round robin from next_worker_: each worker with credit takes what it can.
    const size_t n = workers_.size();
    const size_t start = n == 0 ? 0 : next_worker_ % n;
    for (size_t i = 0; i < n && next < leases->size(); ++i) {
      Worker* w = workers_[(start + i) % n];
      if (w->draining_) continue;
      const size_t take = std::min<size_t>(
          {w->options_.max_in_flight -
               std::min<size_t>(w->InFlightLocked(), w->options_.max_in_flight),
           w->options_.max_batch, leases->size() - next});
      if (take == 0) continue;
      Delivery& d = deliveries.emplace_back();
      d.sink = w->sink_;
      d.leases.reserve(take);
      for (size_t k = next; k < next + take; ++k) {
        Lease& l = (*leases)[k];
        // The queue hands a key to one processor at a time: no live lease of it is held here
        // (an expired one may be, in expired_, and stays).
        auto [it, inserted] = w->held_.try_emplace(l.key);
        Worker::Held& held = it->second;
        held.token = l.token;
        held.slot = l.slot;
        held.priority = l.priority;
        held.initial_list = l.initial_list;
        ArmExpiryLocked(w, it->first, held);
        d.leases.push_back(std::move(l));  // the caller refills the vector
      }
      next += take;
      next_worker_ = (start + i + 1) % n;
    }
  }
  // Nobody could take the rest (workers left meanwhile, or stopping): back into the queue (and
  // dropped by it after shutdown).
  for (; next < leases->size(); ++next) {
    const Lease& l = (*leases)[next];
    ReturnLocked(l.key, {.slot = l.slot, .token = l.token}, l.priority, l.initial_list);
  }
  return deliveries;
}

void LeaseTable::Stop() {
  MutexLock lock(&mu_);
  stopping_ = true;
}

bool LeaseTable::stopping() const {
  MutexLock lock(&mu_);
  return stopping_;
}

void LeaseTable::CloseWorkers(const absl::Status& status, bool idle_only) {
  std::vector<std::shared_ptr<LeaseSink>> to_close;
  {
    MutexLock lock(&mu_);
    for (Worker* w : workers_) {
      if (w->close_sent_ || (idle_only && w->InFlightLocked() != 0)) continue;
      w->close_sent_ = true;
      to_close.push_back(w->sink_);
    }
  }
  for (auto& sink : to_close) sink->Close(status);
}

bool LeaseTable::AwaitNoneInFlight(absl::Time deadline) {
  MutexLock lock(&mu_);
  // Every Done happens under mu_ (outcomes, expiries, detaches, give-backs), so the predicate is
  // re-checked whenever the count can have dropped.
  return mu_.AwaitWithDeadline(
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return queue_->Processing() == 0; }, deadline);
}

std::vector<WorkerInfo> LeaseTable::Workers() const {
  MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const Worker* w : workers_) {
    out.push_back({.stream_id = w->stream_id_,
                   .peer = w->options_.peer,
                   .name = w->options_.name,
                   .max_in_flight = w->options_.max_in_flight,
                   .in_flight = w->InFlightLocked(),
                   .draining = w->draining_});
  }
  return out;
}

size_t LeaseTable::worker_count() const {
  MutexLock lock(&mu_);
  return workers_.size();
}

size_t LeaseTable::Held() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const Worker* w : workers_) n += w->InFlightLocked();
  return n;
}

}  // namespace informerd::service
