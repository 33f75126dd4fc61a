// ApiServerFixture: what informer tests against testing/apiserver share — one fake API server per
// test binary (a real process on a real socket), a namespace per test, a client for the informer
// (whose User-Agent scopes the faults a test injects) and another to change and check the
// server's state, and a convergence check: the informer's cache holds exactly the server's
// objects (keys, uids and resourceVersions).
//
//   ApiServerFixture f("my-test");
//   ASSERT_TRUE(f.Seed(100).ok());
//   auto informer = f.NewInformer({});
//   informer->Start();
//   ASSERT_TRUE(f.Fault(R"("type":"gone","verb":"watch")").ok());
//   ASSERT_TRUE(f.WaitConverged(*informer).ok());
//
// Thread safety: a fixture is used by one test thread (clients and informers it creates are
// thread-safe as documented).
#ifndef INFORMERD_SERVER_INFORMER_APISERVER_FIXTURE_H_
#define INFORMERD_SERVER_INFORMER_APISERVER_FIXTURE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/fake_apiserver.h"
#include "server/informer/shared_informer.h"

namespace informerd::informer::testing {

struct ObjectState {
  std::string uid;
  std::string resource_version;
  bool operator==(const ObjectState&) const = default;
};
using State = std::map<std::string, ObjectState>;  // by key

class ApiServerFixture {
 public:
  // `name` must be a valid namespace name (lowercase, '-').
  explicit ApiServerFixture(std::string name);
  ~ApiServerFixture();

  // The process-wide server (bookmarks every 500 ms), started on first use.
  static client::testing::FakeApiServer* Server();

  const std::string& ns() const { return ns_; }
  client::Client& informer_client() { return *informer_client_; }
  client::Client& verify_client() { return *verify_client_; }
  const std::string& user_agent() const { return user_agent_; }

  // Creates the namespace with `count` ConfigMaps of about `bytes` bytes.
  absl::Status Seed(int count, int bytes = 0);
  // Arms a fault for the informer's requests: `fields` are JSON members, e.g.
  // R"("type":"gone","verb":"watch")".
  absl::Status Fault(absl::string_view fields);
  // Posts an immediate fault (compact, refuse, reset-connections, close-watches) as given.
  absl::Status Immediate(absl::string_view json);

  // A ConfigMap informer on the namespace with test-friendly settings (short backoff and stall
  // timeout, seed fixed); `options` may override them (lister_watcher and name are set here).
  std::unique_ptr<SharedInformer> NewInformer(SharedInformerOptions options);

  // Changes through the verify client.
  absl::Status Create(const std::string& name);
  absl::Status Update(const std::string& name);
  absl::Status Delete(const std::string& name);

  absl::StatusOr<State> ServerState();
  // Waits until the cache equals the server's state; on timeout, an error describing a difference.
  // Re-compares whenever the cache changes (through a listener of its own).
  absl::Status WaitConverged(SharedInformer& informer, absl::Duration timeout = absl::Seconds(90));

 private:
  std::string ns_;
  std::string user_agent_;
  std::unique_ptr<client::Client> informer_client_;
  std::unique_ptr<client::Client> verify_client_;
  std::atomic<int> changes_{0};
};

// A short description of how `a` and `b` differ ("" when equal).
std::string DescribeDifference(const State& want, const State& got);

// The objects of `resource` in `namespace_name` as the server has them now (a consistent read).
absl::StatusOr<State> ListState(client::Client& client, const client::GroupVersionResource& resource,
                                const std::string& namespace_name);
// What the informer's cache holds.
State CacheState(const SharedInformer& informer);
// Waits until the informer's cache equals `server_state()`, comparing again whenever the cache
// changes (through a listener of its own) — or every 100 ms while server_state() fails.
absl::Status WaitConverged(SharedInformer& informer,
                           const std::function<absl::StatusOr<State>()>& server_state,
                           absl::Duration timeout);

}  // namespace informerd::informer::testing

#endif  // INFORMERD_SERVER_INFORMER_APISERVER_FIXTURE_H_
