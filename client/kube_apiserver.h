// KubeApiServer: the real kube-apiserver of testing/kube (with embedded etcd, on loopback) for
// tests. Start() runs testing/kube/start, which builds the server when needed, starts it detached
// and waits until it is ready; the destructor stops it with SIGTERM and waits for its exit.
//
//   static KubeApiServer* server = KubeApiServer::Start().release();   // once per test suite
//   LoadKubeconfig({.paths = {server->kubeconfig()}});                 // admin credentials
//
// Thread safety: one thread at a time.
#ifndef INFORMERD_CLIENT_KUBE_APISERVER_H_
#define INFORMERD_CLIENT_KUBE_APISERVER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/client.h"

namespace informerd::client::testing {

class KubeApiServer {
 public:
  // nullptr when the server cannot be built or started (the script's output says why).
  static std::unique_ptr<KubeApiServer> Start();
  ~KubeApiServer();
  KubeApiServer(const KubeApiServer&) = delete;
  KubeApiServer& operator=(const KubeApiServer&) = delete;

  const std::string& kubeconfig() const { return kubeconfig_; }

 private:
  KubeApiServer() = default;
  std::string kubeconfig_;
  int pid_ = 0;
};

// Creates namespace `name` through `client` (tests give each case a namespace of its own).
absl::Status CreateNamespace(Client& client, const std::string& name);

}  // namespace informerd::client::testing

#endif  // INFORMERD_CLIENT_KUBE_APISERVER_H_
