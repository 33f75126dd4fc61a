// FakeListerWatcher: an in-memory ListerWatcher that a test scripts step by step — what each list
// returns, which events each watch delivers and how it ends — and that records every request.
//
//   FakeListerWatcher lw;
//   lw.PushList(Page({obj}, "10"));                 // the next List returns this
//   ASSERT_TRUE(lw.WaitForWatches(1));
//   EXPECT_EQ(lw.watch_requests()[0].resource_version, "10");
//   lw.SendEvents({Added(obj2)});                   // delivered to the open watch
//   lw.CloseWatch(absl::OkStatus());                // the server closed it
//
// List blocks until a response is pushed (or Close). Events and closes are delivered on the
// calling (test) thread, as the transport thread would; a watch whose handle was destroyed gets
// nothing more. Waits give up after 60 s of real time so a broken test fails instead of hanging.
//
// Thread safety: every method may be called from any thread.
#ifndef INFORMERD_SERVER_INFORMER_FAKE_LISTER_WATCHER_H_
#define INFORMERD_SERVER_INFORMER_FAKE_LISTER_WATCHER_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "server/informer/lister_watcher.h"

namespace informerd::informer::testing {

class FakeListerWatcher : public ListerWatcher {
 public:
  FakeListerWatcher();
  ~FakeListerWatcher() override;

  // ---- scripting ----

  // Queues the answer of a later List.
  void PushList(absl::StatusOr<ListPage> response);
  // The next Watch call fails at once (on_close with `status`, as a refused request would).
  void FailNextWatch(absl::Status status);
  // Delivers events to the open watch; false when none is open.
  bool SendEvents(std::vector<client::WatchEvent> events);
  // Ends the open watch with `status`; false when none is open.
  bool CloseWatch(absl::Status status);
  // Unblocks Lists waiting for a response (they return Cancelled) and fails later ones.
  void Close();

  // ---- observation ----

  std::vector<ListRequest> list_requests() const;
  std::vector<WatchRequest> watch_requests() const;
  // Whether a watch is open (requested and neither closed nor stopped).
  bool watch_open() const;
  // Wait until at least `n` Lists / Watches were requested; false after 60 s.
  bool WaitForLists(size_t n) const;
  bool WaitForWatches(size_t n) const;
  // Waits until `n` watches were requested and the last one is open.
  bool WaitForOpenWatch(size_t n) const;
  // Waits until a List is blocked waiting for a response.
  bool WaitForListWaiting() const;

  // ---- ListerWatcher ----
  absl::StatusOr<ListPage> List(const ListRequest& request) override;
  absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(const WatchRequest& request,
                                                     WatchCallbacks callbacks) override;

 private:
  struct WatchState;
  class Handle;
  template <typename Pred>
  bool WaitFor(Pred pred) const;
  // The watch of `state` is closed or stopped.
  void MarkDone(const WatchState* state);

  mutable Mutex mu_;
  std::deque<absl::StatusOr<ListPage>> lists_ ABSL_GUARDED_BY(mu_);
  std::vector<ListRequest> list_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<WatchRequest> watch_requests_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::Status> watch_failures_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<WatchState> current_ ABSL_GUARDED_BY(mu_);  // the latest watch
  bool current_open_ ABSL_GUARDED_BY(mu_) = false;
  int lists_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Builders.
ListPage Page(std::vector<ObjectPtr> items, std::string resource_version,
              std::string continue_token = "");
client::WatchEvent Added(ObjectPtr object);
client::WatchEvent Modified(ObjectPtr object);
client::WatchEvent Deleted(ObjectPtr object);
// A BOOKMARK at `resource_version` (kind ConfigMap unless given).
client::WatchEvent Bookmark(std::string resource_version, bool initial_events_end = false,
                            std::string kind = "ConfigMap");

}  // namespace informerd::informer::testing

#endif  // INFORMERD_SERVER_INFORMER_FAKE_LISTER_WATCHER_H_
