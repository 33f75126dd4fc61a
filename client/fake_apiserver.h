// FakeApiServer: the fake Kubernetes API server of testing/apiserver as a real child process,
// for tests of the client against real sockets.
//
// Start() runs out/fake-apiserver (building it with Go first when it is missing or older than
// its sources) on 127.0.0.1 port 0 with TLS, waits until it prints its address, and loads the
// kubeconfig it wrote. The destructor stops it (SIGTERM, then waits).
//
//   auto server = FakeApiServer::Start({}).value();
//   RestConfig config = server->config();
//   server->Control("POST", "/_fake/faults", R"({"type":"gone","verb":"watch"})").value();
//
// Thread safety: Control may be called from any thread; the rest from the owning thread.
#ifndef INFORMERD_CLIENT_FAKE_APISERVER_H_
#define INFORMERD_CLIENT_FAKE_APISERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/rest_config.h"

namespace informerd::client::testing {

// The root of the source tree (found through this file's runfile), or "" if unknown.
std::string WorkspaceRoot();

class FakeApiServer {
 public:
  struct Options {
    std::vector<std::string> extra_flags;  // e.g. "--bookmark-interval=1s"
    // HTTPS with a token (the default); false: plain HTTP without authentication, as tools that
    // drive a test server over http:// (bench/load's --apiserver) need.
    bool tls = true;
  };
  static absl::StatusOr<std::unique_ptr<FakeApiServer>> Start(Options options);
  ~FakeApiServer();

  // The kubeconfig's config: host, CA, token.
  const RestConfig& config() const { return config_; }
  const std::string& url() const { return config_.host; }
  const std::string& kubeconfig_path() const { return kubeconfig_; }

  // A control-endpoint call (/_fake/...); returns the response body, or an error for non-2xx.
  // Connection failures (a reset or refuse-connections fault in progress) are retried for ~1 s.
  absl::StatusOr<std::string> Control(absl::string_view method, absl::string_view path,
                                      absl::string_view body = "") const;

 private:
  absl::StatusOr<std::string> ControlOnce(absl::string_view method, absl::string_view path,
                                          absl::string_view body) const;
  FakeApiServer() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string kubeconfig_;
  RestConfig config_;
};

}  // namespace informerd::client::testing

#endif  // INFORMERD_CLIENT_FAKE_APISERVER_H_
