#include "server/informer/client_lister_watcher.h"

#include <utility>

namespace informerd::informer {
namespace {

class StreamHandle : public WatchHandle {
 public:
  explicit StreamHandle(std::unique_ptr<client::WatchStream> stream) : stream_(std::move(stream)) {}

 private:
  std::unique_ptr<client::WatchStream> stream_;  // its destructor stops the stream
};

}  // namespace

absl::StatusOr<std::unique_ptr<ClientListerWatcher>> ClientListerWatcher::Create(
    ClientListerWatcherOptions options) {
  if (options.client == nullptr) return absl::InvalidArgumentError("lister-watcher: no client");
  if (options.resource.version.empty() || options.resource.resource.empty()) {
    return absl::InvalidArgumentError("lister-watcher: resource needs a version and a name");
  }
  return std::unique_ptr<ClientListerWatcher>(new ClientListerWatcher(std::move(options)));
}

absl::StatusOr<ListPage> ClientListerWatcher::List(const ListRequest& request) {
  client::ListOptions options;
  options.namespace_name = options_.namespace_name;
  options.label_selector = options_.label_selector;
  options.field_selector = options_.field_selector;
  options.resource_version = request.resource_version;
  options.resource_version_match = request.resource_version_match;
  options.limit = request.limit;
  options.continue_token = request.continue_token;
  options.drop_managed_fields = options_.drop_managed_fields;
  absl::StatusOr<client::ListResult> result = options_.client->List(options_.resource, options);
  if (!result.ok()) return result.status();
  ListPage page;
  page.items = std::move(result->items);
  page.resource_version = std::move(result->resource_version);
  page.continue_token = std::move(result->continue_token);
  return page;
}

absl::StatusOr<std::unique_ptr<WatchHandle>> ClientListerWatcher::Watch(const WatchRequest& request,
                                                                      WatchCallbacks callbacks) {
  client::WatchOptions options;
  options.namespace_name = options_.namespace_name;
  options.label_selector = options_.label_selector;
  options.field_selector = options_.field_selector;
  options.resource_version = request.resource_version;
  options.allow_bookmarks = request.allow_bookmarks;
  options.timeout_seconds = request.timeout_seconds;
  if (request.send_initial_events) options.send_initial_events = true;
  options.idle_timeout = request.idle_timeout;
  options.drop_managed_fields = options_.drop_managed_fields;
  absl::StatusOr<std::unique_ptr<client::WatchStream>> stream = options_.client->Watch(
      options_.resource, options,
      client::WatchHandler{.on_events = std::move(callbacks.on_events),
                           .on_close = std::move(callbacks.on_close)});
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<WatchHandle>(new StreamHandle(*std::move(stream)));
}

}  // namespace informerd::informer
