// Client: Kubernetes API requests on one cluster — GET, LIST (one page), WATCH (streaming,
// callback-based), CREATE, UPDATE, PATCH and DELETE — over one Transport (one thread, HTTP/2),
// with the cluster's Credentials and Discovery.
//
//   auto client = Client::Create({.config = LoadKubeconfig({}).value()}).value();
//   GroupVersionResource cms{"", "v1", "configmaps"};
//   absl::StatusOr<ListResult> page = client->List(cms, {.namespace_name = "default",
//                                                        .limit = 500});
//   auto watch = client->Watch(cms, {.resource_version = page->resource_version},
//                              {.on_events = ..., .on_close = ...});
//
// Unary calls block the calling thread until the response; called from a watch callback (the
// transport thread, which would wait for itself) they fail with FailedPrecondition. A 401 makes the call fetch credentials again
// (re-reading a token file, re-running an exec plugin) and retry once. Errors from the server
// are ApiErrors (api_error.h): client::IsExpired(status) and friends.
//
// Watch never blocks a thread: events arrive on the transport thread, decoded, in batches (one
// per chunk of the response); on_close is called once when the stream ends — OK when the server
// closed it (e.g. timeoutSeconds), else why (an ERROR event's ApiError such as 410 Expired,
// DeadlineExceeded for a stall, DataLoss for garbage or truncation, Unavailable for a dropped
// connection). Destroying the WatchStream stops it; no callback runs after its destructor.
//
// Thread safety: all methods may be called from any thread.
// REQUIRES: every WatchStream is destroyed before the Client that made it.
#ifndef INFORMERD_CLIENT_CLIENT_H_
#define INFORMERD_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "client/credentials.h"
#include "client/discovery.h"
#include "client/object.h"
#include "client/rest_config.h"
#include "client/transport.h"
#include "client/watch_decoder.h"

namespace informerd::client {

struct ListOptions {
  std::string namespace_name;  // "" for all namespaces (or a cluster-scoped resource)
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;        // "" consistent read, "0" any, or a version
  std::string resource_version_match;  // "", "NotOlderThan" or "Exact"
  int64_t limit = 0;                   // page size; 0: no paging
  std::string continue_token;
  // The items leave metadata.managedFields out, cut while they are decoded (ObjectParseOptions).
  bool drop_managed_fields = false;
};

struct ListResult {
  std::vector<std::shared_ptr<const Object>> items;
  std::string resource_version;  // the list's resourceVersion (metadata.resourceVersion)
  std::string continue_token;    // "" on the last page
  std::optional<int64_t> remaining_item_count;
};

struct WatchOptions {
  std::string namespace_name;
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  // Asks the server to end the watch after this long (it adds jitter itself); 0: its default.
  int64_t timeout_seconds = 0;
  // Streaming list (KEP-3157): initial state as ADDED events, then a bookmark with
  // k8s.io/initial-events-end. Sets resourceVersionMatch=NotOlderThan.
  std::optional<bool> send_initial_events;
  // No byte for this long (not even a bookmark): the stream ends with DeadlineExceeded.
  absl::Duration idle_timeout = absl::Minutes(5);
  // The events' objects leave metadata.managedFields out, cut while they are decoded.
  bool drop_managed_fields = false;
};

struct WatchHandler {
  // Decoded events, in order. Runs on the transport thread: must not block.
  std::function<void(std::vector<WatchEvent>& events)> on_events;
  // Once, last.
  std::function<void(absl::Status status)> on_close;
};

class WatchStream {
 public:
  ~WatchStream();  // Stops the stream; no callback runs once this returns.
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

 private:
  friend class Client;
  WatchStream(Transport* transport, uint64_t id) : transport_(transport), id_(id) {}
  Transport* const transport_;
  const uint64_t id_;
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

struct DeleteOptions {
  std::string propagation_policy;  // "", "Orphan", "Background", "Foreground"
  std::optional<int64_t> grace_period_seconds;
  std::string precondition_uid;
  std::string precondition_resource_version;
};

class Client {
 public:
  struct Options {
    RestConfig config;
    std::string user_agent = "informerd/0.1";
    double qps = 50;
    int burst = 100;
    // Unary requests fail after this long.
    absl::Duration request_timeout = absl::Minutes(1);
    // Clock of the transport's limiter and timeouts and of exec credential expiry.
    Clock* clock = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<Client>> Create(Options options);
  ~Client();

  const RestConfig& config() const { return options_.config; }
  Discovery& discovery() { return *discovery_; }
  Transport& transport() { return *transport_; }

  absl::StatusOr<std::shared_ptr<const Object>> Get(const GroupVersionResource& gvr,
                                                    const std::string& namespace_name,
                                                    const std::string& name);
  absl::StatusOr<ListResult> List(const GroupVersionResource& gvr, const ListOptions& options);
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const GroupVersionResource& gvr,
                                                     const WatchOptions& options,
                                                     WatchHandler handler);
  absl::StatusOr<std::shared_ptr<const Object>> Create(const GroupVersionResource& gvr,
                                                       const std::string& namespace_name,
                                                       const std::string& json);
  // `json` must carry metadata.name (and metadata.resourceVersion for optimistic concurrency).
  absl::StatusOr<std::shared_ptr<const Object>> Update(const GroupVersionResource& gvr,
                                                       const std::string& namespace_name,
                                                       const std::string& name,
                                                       const std::string& json);
  absl::StatusOr<std::shared_ptr<const Object>> Patch(const GroupVersionResource& gvr,
                                                      const std::string& namespace_name,
                                                      const std::string& name, PatchType type,
                                                      const std::string& patch);
  absl::Status Delete(const GroupVersionResource& gvr, const std::string& namespace_name,
                      const std::string& name, const DeleteOptions& options = {});

  struct RawResponse {
    int status = 0;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
    std::string body;  // decompressed
  };
  // A unary request with credentials (and one retry after a 401). Non-2xx is an ApiError.
  absl::StatusOr<RawResponse> Send(HttpRequest request);

 private:
  explicit Client(Options options) : options_(std::move(options)) {}
  // The path of a resource (collection when name is empty) in `namespace_name`.
  absl::StatusOr<std::string> ResourcePath(const GroupVersionResource& gvr,
                                           const std::string& namespace_name,
                                           const std::string& name, ResourceInfo* info = nullptr);
  absl::StatusOr<std::shared_ptr<const Object>> SendForObject(HttpRequest request);

  const Options options_;
  std::unique_ptr<Credentials> credentials_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Discovery> discovery_;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_CLIENT_H_
