// ClientListerWatcher: the ListerWatcher of one resource over client::Client — client-go's
// NewFilteredListWatchFromClient. The resource, namespace and selectors are fixed at creation;
// the reflector supplies resourceVersions, paging and watch options.
//
//   auto lw = ClientListerWatcher::Create({.client = client.get(),
//                                          .resource = {"", "v1", "pods"},
//                                          .namespace_name = "team-a",
//                                          .label_selector = "app=web"}).value();
//
// List is one blocking page request; Watch starts a stream on the client's transport thread and
// returns at once (events and the close arrive there). A watch handle owns its stream: destroying
// it stops the stream and no callback runs afterwards.
//
// Thread safety: List and Watch may be called from any thread but a watch callback (client::Client
// refuses blocking calls there).
#ifndef INFORMERD_SERVER_INFORMER_CLIENT_LISTER_WATCHER_H_
#define INFORMERD_SERVER_INFORMER_CLIENT_LISTER_WATCHER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/discovery.h"
#include "server/informer/lister_watcher.h"

namespace informerd::informer {

struct ClientListerWatcherOptions {
  // Must outlive the lister-watcher.
  client::Client* client = nullptr;
  client::GroupVersionResource resource;
  std::string namespace_name;  // "" for all namespaces (or a cluster-scoped resource)
  std::string label_selector;
  std::string field_selector;
  // Objects leave metadata.managedFields out, cut while they are decoded (one parse): the
  // informer's default transform done at the source, which it then skips (drops_managed_fields).
  bool drop_managed_fields = false;
};

class ClientListerWatcher : public ListerWatcher {
 public:
  // InvalidArgument without a client, version or resource.
  static absl::StatusOr<std::unique_ptr<ClientListerWatcher>> Create(
      ClientListerWatcherOptions options);

  // ListerWatcher:
  absl::StatusOr<ListPage> List(const ListRequest& request) override;
  absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(const WatchRequest& request,
                                                     WatchCallbacks callbacks) override;
  bool drops_managed_fields() const override { return options_.drop_managed_fields; }

 private:
  explicit ClientListerWatcher(ClientListerWatcherOptions options) : options_(std::move(options)) {}
  const ClientListerWatcherOptions options_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_CLIENT_LISTER_WATCHER_H_
