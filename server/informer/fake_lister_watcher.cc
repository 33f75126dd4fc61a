#include "server/informer/fake_lister_watcher.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace informerd::informer::testing {

// One watch. `delivery_mu` is held while a callback runs, so that destroying the handle (which
// takes it) waits for a running callback and stops later ones.
struct FakeListerWatcher::WatchState {
  Mutex delivery_mu;
  WatchCallbacks callbacks ABSL_GUARDED_BY(delivery_mu);
  bool done ABSL_GUARDED_BY(delivery_mu) = false;  // closed or stopped
};

class FakeListerWatcher::Handle : public WatchHandle {
 public:
  Handle(FakeListerWatcher* owner, std::shared_ptr<WatchState> state)
      : owner_(owner), state_(std::move(state)) {}
  ~Handle() override {
    {
      MutexLock lock(&state_->delivery_mu);
      state_->done = true;
      state_->callbacks = WatchCallbacks();
    }
    owner_->MarkDone(state_.get());
  }

 private:
  FakeListerWatcher* const owner_;
  std::shared_ptr<WatchState> state_;
};

void FakeListerWatcher::MarkDone(const WatchState* state) {
  MutexLock lock(&mu_);
  if (current_.get() == state) current_open_ = false;
}

FakeListerWatcher::FakeListerWatcher() = default;
FakeListerWatcher::~FakeListerWatcher() { Close(); }

template <typename Pred>
bool FakeListerWatcher::WaitFor(Pred pred) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(pred, absl::Now() + absl::Seconds(60));
}

void FakeListerWatcher::PushList(absl::StatusOr<ListPage> response) {
  MutexLock lock(&mu_);
  lists_.push_back(std::move(response));
}

void FakeListerWatcher::FailNextWatch(absl::Status status) {
  MutexLock lock(&mu_);
  watch_failures_.push_back(std::move(status));
}

bool FakeListerWatcher::SendEvents(std::vector<client::WatchEvent> events) {
  std::shared_ptr<WatchState> state;
  {
    MutexLock lock(&mu_);
    state = current_;
  }
  if (state == nullptr) return false;
  MutexLock lock(&state->delivery_mu);
  if (state->done) return false;
  state->callbacks.on_events(events);
  return true;
}

bool FakeListerWatcher::CloseWatch(absl::Status status) {
  std::shared_ptr<WatchState> state;
  {
    MutexLock lock(&mu_);
    state = current_;
  }
  if (state == nullptr) return false;
  MutexLock lock(&state->delivery_mu);
  if (state->done) return false;
  state->done = true;
  state->callbacks.on_close(std::move(status));
  MarkDone(state.get());
  return true;
}

void FakeListerWatcher::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
}

std::vector<ListRequest> FakeListerWatcher::list_requests() const {
  MutexLock lock(&mu_);
  return list_requests_;
}

std::vector<WatchRequest> FakeListerWatcher::watch_requests() const {
  MutexLock lock(&mu_);
  return watch_requests_;
}

bool FakeListerWatcher::watch_open() const {
  MutexLock lock(&mu_);
  return current_open_;
}

bool FakeListerWatcher::WaitForLists(size_t n) const {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return list_requests_.size() >= n; });
}

bool FakeListerWatcher::WaitForWatches(size_t n) const {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return watch_requests_.size() >= n; });
}

bool FakeListerWatcher::WaitForOpenWatch(size_t n) const {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return watch_requests_.size() >= n && current_open_;
  });
}

bool FakeListerWatcher::WaitForListWaiting() const {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return lists_waiting_ > 0; });
}

absl::StatusOr<ListPage> FakeListerWatcher::List(const ListRequest& request) {
  MutexLock lock(&mu_);
  list_requests_.push_back(request);
  ++lists_waiting_;
  mu_.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return closed_ || !lists_.empty(); });
  --lists_waiting_;
  if (lists_.empty()) return absl::CancelledError("fake lister-watcher closed");
  absl::StatusOr<ListPage> response = std::move(lists_.front());
  lists_.pop_front();
  return response;
}

absl::StatusOr<std::unique_ptr<WatchHandle>> FakeListerWatcher::Watch(const WatchRequest& request,
                                                                      WatchCallbacks callbacks) {
  auto state = std::make_shared<WatchState>();
  WatchCallbacks copy = callbacks;
  {
    MutexLock delivery(&state->delivery_mu);
    state->callbacks = std::move(callbacks);
  }
  absl::Status failure;
  {
    MutexLock lock(&mu_);
    watch_requests_.push_back(request);
    if (!watch_failures_.empty()) {
      failure = std::move(watch_failures_.front());
      watch_failures_.pop_front();
    }
    current_ = state;
    current_open_ = failure.ok();
  }
  if (!failure.ok()) {
    // As a refused request: the stream ends at once, before any event.
    {
      MutexLock delivery(&state->delivery_mu);
      state->done = true;
    }
    copy.on_close(failure);
  }
  return std::unique_ptr<WatchHandle>(new Handle(this, std::move(state)));
}

ListPage Page(std::vector<ObjectPtr> items, std::string resource_version,
              std::string continue_token) {
  ListPage page;
  page.items = std::move(items);
  page.resource_version = std::move(resource_version);
  page.continue_token = std::move(continue_token);
  return page;
}

client::WatchEvent Added(ObjectPtr object) {
  return client::WatchEvent{client::WatchEventType::kAdded, std::move(object), false};
}
client::WatchEvent Modified(ObjectPtr object) {
  return client::WatchEvent{client::WatchEventType::kModified, std::move(object), false};
}
client::WatchEvent Deleted(ObjectPtr object) {
  return client::WatchEvent{client::WatchEventType::kDeleted, std::move(object), false};
}

client::WatchEvent Bookmark(std::string resource_version, bool initial_events_end,
                            std::string kind) {
  auto object = client::Object::Parse(absl::StrCat(R"({"kind":")", kind,
                                                   R"(","apiVersion":"v1","metadata":{"resourceVersion":")",
                                                   resource_version, R"("}})"));
  if (!object.ok()) std::abort();
  return client::WatchEvent{client::WatchEventType::kBookmark, *std::move(object),
                            initial_events_end};
}

}  // namespace informerd::informer::testing
