// DaemonProcess: a real informerd child process for end-to-end tests — started with flags,
// its gRPC and metrics addresses read from its start-up lines, a channel to it, and what a
// test measures from outside (/proc: RSS and threads; /metrics: series).
//
//   absl::StatusOr<DaemonProcess> d = DaemonProcess::Start({"--config=" + path});
//   auto stub = v1::Queues::NewStub(d->channel);
//   int64_t rss = d->RssKb();
//
// The fake API server (testing/apiserver) shared by a test binary is SharedApiServer();
// ClusterConfigYaml() is a config file's `clusters:` naming it.
//
// Thread safety: a DaemonProcess belongs to one thread; the free functions may be called from any.
#ifndef INFORMERD_SERVER_TESTING_DAEMON_PROCESS_H_
#define INFORMERD_SERVER_TESTING_DAEMON_PROCESS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/fake_apiserver.h"
#include "grpcpp/grpcpp.h"
#include "server/testing/subprocess.h"

namespace informerd::testing {

struct DaemonProcess {
  // Runs server/informerd with `flags` (plus --metrics_listen=127.0.0.1:0, --listen=127.0.0.1:0
  // unless a --listen is given, and --insecure_allow_unauthenticated unless `secure`: tests of
  // authentication pass their own TLS and cluster flags).
  static absl::StatusOr<DaemonProcess> Start(const std::vector<std::string>& flags,
                                             bool secure = false);

  // VmRSS and Threads of /proc/<pid>/status; -1 when unreadable.
  int64_t RssKb() const;
  int Threads() const;
  // The daemon's threads by name (/proc/<pid>/task/*/comm): how many bear each name.
  std::map<std::string, int> ThreadsByName() const;
  // The number of series lines of /metrics (neither comments nor blank); -1 on failure.
  int MetricsSeries() const;
  // The value of the series without labels `name` on /metrics (informerd_heap_in_use_bytes,
  // say); -1 when it is absent or /metrics fails.
  double MetricValue(absl::string_view name) const;

  std::unique_ptr<Subprocess> process;
  std::string grpc;     // host:port
  std::string metrics;  // host:port
  std::shared_ptr<grpc::Channel> channel;
};

// GET http://address/path: the body ("" on failure), `*status` the HTTP status or -1.
std::string HttpGet(const std::string& address, const std::string& path, int* status);
// Writes `yaml` to <test tmpdir>/<name>.yaml; returns the path.
std::string WriteConfig(const std::string& name, const std::string& yaml);
// One fake API server per test binary, started on first use (aborts when it cannot start).
client::testing::FakeApiServer* SharedApiServer();
// "clusters: [{name: fake, kubeconfig: ...}]\n" for SharedApiServer().
std::string ClusterConfigYaml();
// Creates `count` ConfigMaps in namespace `ns` of SharedApiServer().
absl::Status SeedConfigMaps(const std::string& ns, int count);

}  // namespace informerd::testing

#endif  // INFORMERD_SERVER_TESTING_DAEMON_PROCESS_H_
