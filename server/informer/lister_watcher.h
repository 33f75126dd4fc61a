// ListerWatcher: what a reflector needs from the API server for one resource (client-go's
// cache.ListerWatcher) — list one page, and open a watch. The resource, namespace and selectors
// are bound into the implementation (client_lister_watcher.h over client::Client; tests use an
// in-memory fake).
//
//   absl::StatusOr<ListPage> page = lw->List({.resource_version = "0", .limit = 500});
//   auto watch = lw->Watch({.resource_version = page->resource_version},
//                          {.on_events = ..., .on_close = ...});
//   watch->reset();  // stops it: no callback runs once the handle is destroyed
//
// List blocks the calling thread. Watch does not: events arrive in order, in batches, on a
// thread of the implementation, then on_close once (OK when the server ended the stream, else
// why: an ApiError such as 410 Expired or 429, Unavailable for a refused or dropped connection,
// DataLoss for a broken stream, DeadlineExceeded when no byte arrived within idle_timeout). A
// watch that cannot even be requested may also fail in Watch itself. An empty batch means bytes
// arrived that completed no event yet (progress, for stall detection).
//
// Thread safety: implementations allow List and Watch from any thread; callbacks must not
// destroy their own handle.
#ifndef INFORMERD_SERVER_INFORMER_LISTER_WATCHER_H_
#define INFORMERD_SERVER_INFORMER_LISTER_WATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/watch_decoder.h"
#include "server/informer/index.h"

namespace informerd::informer {

struct ListRequest {
  std::string resource_version;        // "" consistent read, "0" any, or a version
  std::string resource_version_match;  // "", "NotOlderThan" or "Exact"
  int64_t limit = 0;                   // 0: no paging
  std::string continue_token;
};

struct ListPage {
  std::vector<ObjectPtr> items;
  std::string resource_version;
  std::string continue_token;  // "" on the last page
};

struct WatchRequest {
  std::string resource_version;
  bool allow_bookmarks = true;
  int64_t timeout_seconds = 0;  // 0: the server's default
  // Streaming list: the current state first, then a bookmark annotated initial-events-end.
  bool send_initial_events = false;
  // The implementation ends the stream with DeadlineExceeded after this long without a byte
  // (zero: never).
  absl::Duration idle_timeout = absl::ZeroDuration();
};

struct WatchCallbacks {
  std::function<void(std::vector<client::WatchEvent>& events)> on_events;
  std::function<void(absl::Status status)> on_close;
};

// Destroying it stops the watch; once the destructor returns no callback is running or will run.
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
};

class ListerWatcher {
 public:
  virtual ~ListerWatcher() = default;
  virtual absl::StatusOr<ListPage> List(const ListRequest& request) = 0;
  virtual absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(const WatchRequest& request,
                                                             WatchCallbacks callbacks) = 0;
  // Whether the objects it returns never hold metadata.managedFields because it cuts them while
  // decoding: an informer whose transform strips them then leaves that step out (the objects
  // are parsed once, not again by the transform).
  virtual bool drops_managed_fields() const { return false; }
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_LISTER_WATCHER_H_
