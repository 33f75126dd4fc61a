#include "base/log.h"
#include "server/informer/reflector.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/api_error.h"
#include "server/informer/informer_threads.h"
#include "spdlog/spdlog.h"

namespace informerd::informer {
namespace {

// What to do after a watch ended with `status` (not a stall, not a stop).
enum class AfterWatch {
  kRewatch,         // at once
  kBackoffRewatch,  // after a backoff, without relisting
  kRelist,          // after a backoff (ListAndWatch returns)
};

AfterWatch Classify(const absl::Status& status) {
  if (client::IsExpired(status)) return AfterWatch::kRelist;
  if (client::IsTooManyRequests(status)) return AfterWatch::kBackoffRewatch;
  const int code = client::ApiErrorCode(status);
  if (code >= 500) return AfterWatch::kBackoffRewatch;
  if (code == 0) {
    // Not from the server: refused or dropped connections, broken streams, timeouts.
    switch (status.code()) {
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kDataLoss:
      case absl::StatusCode::kDeadlineExceeded:
      case absl::StatusCode::kResourceExhausted:
      case absl::StatusCode::kAborted:
        return AfterWatch::kBackoffRewatch;
      default:
        break;
    }
  }
  return AfterWatch::kRelist;
}

// The server does not know sendInitialEvents (an old server or the WatchList gate off).
bool StreamingListUnsupported(const absl::Status& status) {
  return client::IsInvalid(status) || client::IsBadRequest(status);
}

}  // namespace

absl::string_view ReflectorStateName(ReflectorState state) {
  switch (state) {
    case ReflectorState::kIdle:
      return "Idle";
    case ReflectorState::kListing:
      return "Listing";
    case ReflectorState::kWatching:
      return "Watching";
    case ReflectorState::kBackingOff:
      return "BackingOff";
    case ReflectorState::kStopped:
      return "Stopped";
  }
  return "Unknown";
}

absl::StatusOr<std::unique_ptr<Reflector>> Reflector::Create(ReflectorOptions options) {
  if (options.lister_watcher == nullptr) {
    return absl::InvalidArgumentError("reflector: lister_watcher is required");
  }
  if (options.store == nullptr) return absl::InvalidArgumentError("reflector: store is required");
  if (options.page_size < 0) return absl::InvalidArgumentError("reflector: page_size < 0");
  if (options.min_watch_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError("reflector: min_watch_timeout must be at least 1s");
  }
  return std::unique_ptr<Reflector>(new Reflector(std::move(options)));
}

Reflector::Reflector(ReflectorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      backoff_(options_.backoff, clock_, options_.seed),
      rng_(options_.seed != 0 ? options_.seed + 1 : std::random_device()()) {
  // spdlog's registry is a lazily built singleton inside a library ThreadSanitizer cannot see
  // into: build it here, before any of this reflector's threads can log.
  (void)spdlog::default_logger_raw();
  task_ = std::make_unique<SerialTask>(
      options_.executor != nullptr ? options_.executor : ReflectorExecutor(), [this] { Step(); });
  backoff_timer_ = clock_->CreateTimer([this] {
    MutexLock lock(&mu_);
    backoff_fired_ = true;
    task_->Schedule();
  });
  stall_timer_ = clock_->CreateTimer([this] { OnStallTimer(); });
}

Reflector::~Reflector() {
  Stop();
  // Timers may run their callbacks (which lock mu_) until destroyed: destroy them unlocked.
  backoff_timer_.reset();
  stall_timer_.reset();
}

void Reflector::Start() {
  MutexLock lock(&mu_);
  if (started_ || stop_) return;
  started_ = true;
  task_->Schedule();
}

void Reflector::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  task_->Stop();  // a step in progress (a list) ends; none follows
  watch_.reset();  // no watch callback runs once this returns
  backoff_timer_->Disarm();
  MutexLock lock(&mu_);
  ++session_;  // whatever a stream still delivers is ignored
  stall_timer_->Disarm();
  status_.state = ReflectorState::kStopped;
}

ReflectorStatus Reflector::status() const {
  MutexLock lock(&mu_);
  return status_;
}

std::string Reflector::LastSyncResourceVersion() const {
  MutexLock lock(&mu_);
  return status_.last_sync_resource_version;
}

bool Reflector::Stopping() const {
  MutexLock lock(&mu_);
  return stop_;
}

void Reflector::SetState(ReflectorState state) {
  MutexLock lock(&mu_);
  if (!stop_) status_.state = state;
}

void Reflector::RecordError(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    status_.last_error = status;
    status_.last_error_time = clock_->Now();
    ++status_.errors;
  }
  // Not ToString(), which prints the payload's bytes.
  const std::string text = client::DescribeStatus(status);
  LogWithFields(client::IsExpired(status) ? spdlog::level::info : spdlog::level::warn,
                {{"informer", options_.name}}, "reflector: {}", text);
}

// ---- the cycle ----

void Reflector::Step() {
  if (Stopping()) return;
  switch (phase_) {
    case Phase::kStart:
      BeginRound();
      return;
    case Phase::kInitialEvents:
      CheckInitialEvents();
      return;
    case Phase::kWatching:
      CheckWatch();
      return;
    case Phase::kBackoffRound:
    case Phase::kBackoffRewatch: {
      {
        MutexLock lock(&mu_);
        if (!backoff_fired_) return;
      }
      if (phase_ == Phase::kBackoffRound) {
        BeginRound();
      } else {
        OpenPlainWatch();
      }
      return;
    }
  }
}

void Reflector::BeginRound() {
  bool try_streaming = false;
  {
    MutexLock lock(&mu_);
    try_streaming = options_.use_streaming_list && !status_.streaming_list_unsupported;
  }
  if (!try_streaming) {
    ListThenWatch();
    return;
  }
  SetState(ReflectorState::kListing);
  WatchRequest request;
  {
    MutexLock lock(&mu_);
    request.resource_version =
        last_sync_rv_unavailable_ ? "" : status_.last_sync_resource_version;
  }
  request.allow_bookmarks = true;
  request.send_initial_events = true;
  request.timeout_seconds = WatchTimeoutSeconds();
  request.idle_timeout = options_.stall_timeout;
  phase_ = Phase::kInitialEvents;
  OpenWatch(request, /*initial_phase=*/true);
}

void Reflector::CheckInitialEvents() {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (initial_events_ == InitialEvents::kArriving && session_stream_ == SessionStream::kOpen) {
      return;  // still arriving
    }
    if (initial_events_ == InitialEvents::kDone) {
      // The same stream goes on as the watch.
      phase_ = Phase::kWatching;
    } else {
      if (session_stream_ == SessionStream::kStalled) {
        ++status_.stalls;
        status = absl::DeadlineExceededError(
            "streaming list stalled before its initial events ended");
      } else {
        status = session_end_status_.ok()
                     ? absl::UnavailableError("streaming list ended before its initial events did")
                     : session_end_status_;
      }
      ++session_;  // ignore whatever the stream still delivers
      initial_events_ = InitialEvents::kNone;
      initial_.clear();
      stall_timer_->Disarm();
    }
  }
  if (phase_ == Phase::kWatching) {
    SetState(ReflectorState::kWatching);
    CheckWatch();  // in case the stream ended already
    return;
  }
  watch_.reset();
  // client-go: "making progress is better than deadlocking" — fall back to a list.
  absl::Status fallback(status.code(), absl::StrCat("streaming list failed, falling back to list: ",
                                                    status.message()));
  // Keeps the Kubernetes error (its reason) for whoever reports last_error.
  status.ForEachPayload([&fallback](absl::string_view url, const absl::Cord& payload) {
    fallback.SetPayload(url, payload);
  });
  RecordError(fallback);
  {
    MutexLock lock(&mu_);
    ++status_.streaming_list_fallbacks;
    if (StreamingListUnsupported(status)) status_.streaming_list_unsupported = true;
  }
  ListThenWatch();
}

void Reflector::ListThenWatch() {
  absl::Status status = ListAndReplace();  // blocks this executor thread until it is done
  if (Stopping()) return;
  if (!status.ok()) {
    EndRound(status);
    return;
  }
  OpenPlainWatch();
}

void Reflector::OpenPlainWatch() {
  WatchRequest request;
  {
    MutexLock lock(&mu_);
    request.resource_version = status_.last_sync_resource_version;
  }
  request.allow_bookmarks = true;
  request.timeout_seconds = WatchTimeoutSeconds();
  request.idle_timeout = options_.stall_timeout;
  SetState(ReflectorState::kWatching);
  phase_ = Phase::kWatching;
  OpenWatch(request, /*initial_phase=*/false);
}

void Reflector::CheckWatch() {
  bool stalled = false;
  absl::Status end;
  absl::Duration lasted;
  uint64_t events = 0;
  {
    MutexLock lock(&mu_);
    if (session_stream_ == SessionStream::kOpen) return;  // still watching
    end = session_end_status_;
    // The ListerWatcher's byte-level idle timeout (DeadlineExceeded, not from the server) is
    // the same stall, seen first.
    stalled = session_stream_ == SessionStream::kStalled ||
              (session_stream_ == SessionStream::kEnded &&
               end.code() == absl::StatusCode::kDeadlineExceeded &&
               client::ApiErrorCode(end) == 0);
    lasted = clock_->Now() - session_started_;
    events = session_events_;
    ++session_;  // whatever the stream still delivers is ignored
    stall_timer_->Disarm();
    if (stalled) ++status_.stalls;
  }
  watch_.reset();  // no callback runs once this returns
  if (Stopping()) return;
  if (stalled) {
    // informerd extension: nothing arrived for stall_timeout, not even a bookmark.
    RecordError(absl::DeadlineExceededError(absl::StrCat(
        "watch stalled: nothing received for ", absl::FormatDuration(options_.stall_timeout),
        "; resuming from resourceVersion ", LastSyncResourceVersion())));
    OpenPlainWatch();
    return;
  }
  if (end.ok()) {
    if (lasted < options_.very_short_watch && events == 0) {
      EndRound(absl::UnavailableError(
          absl::StrCat("very short watch: the watch lasted ", absl::FormatDuration(lasted),
                       " and delivered nothing")));
      return;
    }
    OpenPlainWatch();  // closed by the server (timeoutSeconds): watch again at once
    return;
  }
  switch (Classify(end)) {
    case AfterWatch::kRewatch:
      OpenPlainWatch();
      return;
    case AfterWatch::kBackoffRewatch:
      RecordError(end);
      StartBackoff(Phase::kBackoffRewatch);
      return;
    case AfterWatch::kRelist:
      EndRound(end);
      return;
  }
}

void Reflector::EndRound(const absl::Status& status) {
  if (!status.ok()) RecordError(status);
  StartBackoff(Phase::kBackoffRound);
}

void Reflector::StartBackoff(Phase then) {
  const absl::Duration wait = backoff_.Next();
  phase_ = then;
  MutexLock lock(&mu_);
  if (stop_) return;
  status_.state = ReflectorState::kBackingOff;
  status_.backoff_until = clock_->Now() + wait;
  ++status_.backoffs;
  backoff_fired_ = false;
  backoff_timer_->ArmAt(status_.backoff_until);
}

std::string Reflector::RelistResourceVersionLocked() const {
  if (last_sync_rv_unavailable_) return "";
  if (status_.last_sync_resource_version.empty()) return "0";
  return status_.last_sync_resource_version;
}

absl::Status Reflector::ListAndReplace() {
  SetState(ReflectorState::kListing);
  std::string rv;
  {
    MutexLock lock(&mu_);
    rv = RelistResourceVersionLocked();
  }
  absl::StatusOr<Listed> listed = ListAll(rv);
  if (!listed.ok() && (client::IsExpired(listed.status()) ||
                       client::IsTooLargeResourceVersion(listed.status()))) {
    // The RV is gone (or the server has not reached it): list the current state, at once.
    RecordError(listed.status());
    {
      MutexLock lock(&mu_);
      last_sync_rv_unavailable_ = true;
      rv = RelistResourceVersionLocked();
    }
    listed = ListAll(rv);
  }
  if (!listed.ok()) return listed.status();
  {
    // Counted before the store has it: once the Replace is in, the informer may report synced at
    // any moment, and a reader of the status then must already see this sync.
    MutexLock lock(&mu_);
    // A paged answer to RV "0" means no watch cache: keep paging later lists too.
    if (rv == "0" && listed->paginated) paginated_result_ = true;
    last_sync_rv_unavailable_ = false;
    status_.last_sync_resource_version = listed->resource_version;
    ++status_.syncs;
  }
  options_.store->Replace(std::move(listed->items), listed->resource_version);
  return absl::OkStatus();
}

absl::StatusOr<Reflector::Listed> Reflector::ListAll(const std::string& rv) {
  ListRequest request;
  request.resource_version = rv;
  request.limit = options_.page_size;
  {
    MutexLock lock(&mu_);
    // Lists at an RV other than "0" go unpaged unless the server paged the first list, so that
    // they are served from the watch cache rather than from etcd (client-go's reasoning).
    if (!paginated_result_ && !rv.empty() && rv != "0") request.limit = 0;
  }
  Listed listed;
  bool first_page = true;
  for (;;) {
    if (Stopping()) return absl::CancelledError("reflector stopped");
    {
      MutexLock lock(&mu_);
      ++status_.list_requests;
    }
    absl::StatusOr<ListPage> page = options_.lister_watcher->List(request);
    if (!page.ok()) {
      if (client::IsExpired(page.status()) && !request.continue_token.empty()) {
        // The continue token expired mid-way: everything again, in one unpaged request at the
        // original RV (client-go's pager with FullListIfExpired).
        RecordError(page.status());
        listed.items.clear();
        request.continue_token.clear();
        request.resource_version = rv;
        request.limit = 0;
        first_page = true;
        continue;
      }
      return page.status();
    }
    if (first_page) listed.resource_version = page->resource_version;
    first_page = false;
    listed.items.reserve(listed.items.size() + page->items.size());
    for (ObjectPtr& item : page->items) listed.items.push_back(Prepare(std::move(item)));
    page->items.clear();
    if (page->continue_token.empty()) break;
    listed.paginated = true;
    request.continue_token = std::move(page->continue_token);
    request.resource_version.clear();  // a continue token carries its own RV
  }
  return listed;
}

void Reflector::OpenWatch(const WatchRequest& request, bool initial_phase) {
  uint64_t session;
  {
    MutexLock lock(&mu_);
    session = ++session_;
    session_stream_ = SessionStream::kOpen;
    session_end_status_ = absl::OkStatus();
    session_events_ = 0;
    session_started_ = clock_->Now();
    initial_events_ = initial_phase ? InitialEvents::kArriving : InitialEvents::kNone;
    initial_.clear();
    ++status_.watches_started;
    if (options_.stall_timeout > absl::ZeroDuration()) {
      stall_timer_->ArmAt(session_started_ + options_.stall_timeout);
    }
  }
  WatchCallbacks callbacks;
  callbacks.on_events = [this, session](std::vector<client::WatchEvent>& events) {
    OnEvents(session, events);
  };
  callbacks.on_close = [this, session](absl::Status status) { OnClose(session, std::move(status)); };
  absl::StatusOr<std::unique_ptr<WatchHandle>> opened =
      options_.lister_watcher->Watch(request, std::move(callbacks));
  if (!opened.ok()) {
    OnClose(session, opened.status());
    return;
  }
  watch_ = *std::move(opened);
}

int64_t Reflector::WatchTimeoutSeconds() {
  const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return static_cast<int64_t>(absl::ToDoubleSeconds(options_.min_watch_timeout) * (1.0 + r));
}

// ---- watch callbacks (the ListerWatcher's thread) ----

ObjectPtr Reflector::TransformOnly(ObjectPtr object) const {
  if (options_.transform == nullptr) return object;
  absl::StatusOr<ObjectPtr> transformed = options_.transform->Apply(object);
  if (!transformed.ok()) {
    LogWithFields(spdlog::level::warn,
                  {{"informer", options_.name},
                   {"key", object->key()},
                   {"error", client::DescribeStatus(transformed.status())}},
                  "transform failed, storing the object as received");
    return object;
  }
  return *std::move(transformed);
}

ObjectPtr Reflector::Prepare(ObjectPtr object) const {
  if (options_.known_objects != nullptr) {
    // Unchanged: share the cached object instead of keeping a second copy.
    if (ObjectPtr known = options_.known_objects->GetUnchanged(*object)) return known;
  }
  return TransformOnly(std::move(object));
}

void Reflector::OnEvents(uint64_t session, std::vector<client::WatchEvent>& events) {
  bool initial = false;
  {
    MutexLock lock(&mu_);
    if (session != session_ || session_stream_ == SessionStream::kEnded) return;
    initial = initial_events_ == InitialEvents::kArriving;
    if (options_.stall_timeout > absl::ZeroDuration()) {
      stall_timer_->ArmAt(clock_->Now() + options_.stall_timeout);
    }
  }
  // The initial events of a streaming list are transformed here, without the lock, as they are
  // held until the list is complete (and unchanged ones are swapped for the cached objects). Live
  // events are queued as received: the consumer transforms them (off this, the transport's,
  // thread).
  if (initial) {
    for (client::WatchEvent& event : events) {
      if (event.type == client::WatchEventType::kBookmark || event.object == nullptr) continue;
      event.object = Prepare(std::move(event.object));
    }
  }
  MutexLock lock(&mu_);
  if (session != session_ || session_stream_ == SessionStream::kEnded) return;
  for (client::WatchEvent& event : events) {
    if (event.object == nullptr) continue;
    ApplyEventLocked(event);
  }
}

void Reflector::ApplyEventLocked(client::WatchEvent& event) {
  ++session_events_;
  const absl::string_view rv = event.object->resource_version();
  if (event.type == client::WatchEventType::kBookmark) {
    ++status_.bookmarks;
    if (initial_events_ == InitialEvents::kArriving) {
      if (!event.initial_events_end) return;
      std::vector<ObjectPtr> items;
      items.reserve(initial_.size());
      for (auto& [key, object] : initial_) items.push_back(std::move(object));
      initial_.clear();
      options_.store->Replace(std::move(items), std::string(rv));
      initial_events_ = InitialEvents::kDone;
      last_sync_rv_unavailable_ = false;
      ++status_.syncs;
      ++status_.streaming_syncs;
      task_->Schedule();
    } else if (!rv.empty()) {
      options_.store->UpdateResourceVersion(std::string(rv));
    }
    if (!rv.empty()) status_.last_sync_resource_version.assign(rv.data(), rv.size());
    return;
  }
  if (!options_.expected_kind.empty() && event.object->kind() != options_.expected_kind) {
    ++status_.wrong_kind_dropped;
    LogWithFields(spdlog::level::warn, {{"informer", options_.name}, {"key", event.object->key()}},
                  "reflector: dropped a {} event of kind {} (expected {})",
                  std::string(client::WatchEventTypeName(event.type)),
                  std::string(event.object->kind()), options_.expected_kind);
    return;
  }
  if (initial_events_ == InitialEvents::kArriving) {
    // The temporary set of a streaming list: the last state of each key, until the bookmark.
    if (event.type == client::WatchEventType::kDeleted) {
      initial_.erase(event.object->key());
    } else {
      const absl::string_view key = event.object->key();
      initial_.erase(key);  // the map's key views the stored object: replace both together
      ObjectPtr& slot = initial_[event.object->key()];
      slot = std::move(event.object);
    }
    return;
  }
  ++status_.events;
  std::string rv_copy(rv);
  switch (event.type) {
    case client::WatchEventType::kAdded:
      options_.store->Add(std::move(event.object));
      break;
    case client::WatchEventType::kModified:
      options_.store->Update(std::move(event.object));
      break;
    case client::WatchEventType::kDeleted:
      options_.store->Delete(std::move(event.object));
      break;
    case client::WatchEventType::kBookmark:
      break;
  }
  if (!rv_copy.empty()) status_.last_sync_resource_version = std::move(rv_copy);
}

void Reflector::OnClose(uint64_t session, absl::Status status) {
  MutexLock lock(&mu_);
  if (session != session_ || session_stream_ == SessionStream::kEnded) return;
  session_stream_ = SessionStream::kEnded;
  session_end_status_ = std::move(status);
  task_->Schedule();
}

void Reflector::OnStallTimer() {
  MutexLock lock(&mu_);
  if (session_stream_ != SessionStream::kOpen) return;
  // The deadline is re-armed on every batch; firing means nothing arrived since.
  session_stream_ = SessionStream::kStalled;
  task_->Schedule();
}

}  // namespace informerd::informer
