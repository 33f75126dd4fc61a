#include "base/log.h"
#include "server/service/idle_reaper.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "spdlog/spdlog.h"

namespace informerd::service {

IdleReaper::IdleReaper(InformerRegistry* informers, QueueRegistry* queues,
                       IdleReaperOptions options)
    : informers_(informers),
      queues_(queues),
      idle_timeout_(options.idle_timeout),
      period_(std::min(options.idle_timeout / 4, absl::Minutes(1))),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()) {
  // The callback re-arms through a plain pointer: the unique_ptr is cleared before ~Timer waits
  // for a running callback.
  timer_ = clock_->CreateTimer([this] {
    if (stopping_.load()) return;
    Sweep();
    timer_raw_->ArmAt(clock_->Now() + period_);
  });
  timer_raw_ = timer_.get();
  timer_->ArmAt(clock_->Now() + period_);
}

IdleReaper::~IdleReaper() {
  stopping_.store(true);
  timer_.reset();
}

IdleReaper::Freed IdleReaper::Sweep() {
  Freed freed;
  const absl::Time now = clock_->Now();
  const absl::Time cutoff = now - idle_timeout_;
  std::vector<std::string> idle;
  for (const std::shared_ptr<NamedQueue>& q : queues_->List()) {
    if (q->pinned()) continue;
    if (q->worker_count() > 0) {
      q->Touch(now);
    } else if (q->last_used() <= cutoff) {
      idle.push_back(q->name());
    }
  }
  for (const std::string& name : idle) {
    if (queues_->FreeIfUnused(name, cutoff)) {
      ++freed.queues;
      LogWithFields(spdlog::level::info, {{"queue", name}}, "queue freed: unused for {}",
                    absl::FormatDuration(idle_timeout_));
    }
  }
  // The informers the remaining queues' sources name (an index source holds its informer weakly,
  // so the spec is asked, not only the reference count).
  absl::flat_hash_set<std::string> named;
  for (const std::shared_ptr<NamedQueue>& q : queues_->List()) {
    const v1::QueueSpec spec = q->spec();  // a copy: iterate the copy, not a temporary
    for (const v1::QueueSource& source : spec.sources()) {
      named.insert(source.informer_id());
      if (source.has_index()) named.insert(source.index().informer_id());
    }
  }
  idle.clear();
  for (const InformerRegistry::Entry& e : informers_->List()) {
    if (e.pinned()) continue;
    // Held by this copy and the registry's entry: anything more is a user.
    if (named.contains(e.id) || e.informer.use_count() > 2) {
      informers_->Touch(e.id);
    } else if (e.last_used() <= cutoff) {
      idle.push_back(e.id);
    }
  }
  for (const std::string& id : idle) {
    if (named.contains(id)) continue;
    if (informers_->FreeIfUnused(id, cutoff)) {
      ++freed.informers;
      LogWithFields(spdlog::level::info, {{"informer", id}}, "informer freed: unused for {}",
                    absl::FormatDuration(idle_timeout_));
    }
  }
  return freed;
}

}  // namespace informerd::service
