#include "server/testing/daemon_process.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace informerd::testing {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

// The number after `key` ("VmRSS:", "Threads:") in /proc/<pid>/status; -1 if absent.
int64_t ProcStatusField(pid_t pid, absl::string_view key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, key)) continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(absl::StripAsciiWhitespace(rest), ' ', absl::SkipEmpty());
    int64_t value = -1;
    if (!words.empty() && absl::SimpleAtoi(words[0], &value)) return value;
  }
  return -1;
}

}  // namespace

absl::StatusOr<DaemonProcess> DaemonProcess::Start(const std::vector<std::string>& flags,
                                                   bool secure) {
  std::vector<std::string> argv = {Runfile("server/informerd"), "--metrics_listen=127.0.0.1:0"};
  if (!secure) argv.push_back("--insecure_allow_unauthenticated");
  bool listen_given = false;
  for (const std::string& f : flags) listen_given |= absl::StartsWith(f, "--listen");
  if (!listen_given) argv.push_back("--listen=127.0.0.1:0");
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  DaemonProcess d;
  d.process = *std::move(p);
  absl::StatusOr<std::string> grpc = d.process->ReadUntil("grpc: ", kStartTimeout);
  if (!grpc.ok()) return grpc.status();
  absl::StatusOr<std::string> metrics = d.process->ReadUntil("metrics: ", kStartTimeout);
  if (!metrics.ok()) return metrics.status();
  d.grpc = *grpc;
  d.metrics = *metrics;
  d.channel = grpc::CreateChannel(d.grpc, grpc::InsecureChannelCredentials());
  return d;
}

int64_t DaemonProcess::RssKb() const { return ProcStatusField(process->pid(), "VmRSS:"); }

int DaemonProcess::Threads() const {
  return static_cast<int>(ProcStatusField(process->pid(), "Threads:"));
}

std::map<std::string, int> DaemonProcess::ThreadsByName() const {
  std::map<std::string, int> names;
  const std::string tasks = absl::StrCat("/proc/", process->pid(), "/task");
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  return names;
}

double DaemonProcess::MetricValue(absl::string_view name) const {
  int status = 0;
  const std::string text = HttpGet(metrics, "/metrics", &status);
  if (status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    double value = 0;
    if (absl::ConsumePrefix(&line, name) && absl::ConsumePrefix(&line, " ") &&
        absl::SimpleAtod(line, &value)) {
      return value;
    }
  }
  return -1;
}

int DaemonProcess::MetricsSeries() const {
  int status = 0;
  const std::string text = HttpGet(metrics, "/metrics", &status);
  if (status != 200) return -1;
  int series = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) ++series;
  }
  return series;
}

std::string HttpGet(const std::string& address, const std::string& path, int* status) {
  httplib::Client c("http://" + address);
  auto res = c.Get(path.c_str());
  *status = res ? res->status : -1;
  return res ? res->body : "";
}

std::string WriteConfig(const std::string& name, const std::string& yaml) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".yaml");
  std::ofstream(path) << yaml;
  return path;
}

client::testing::FakeApiServer* SharedApiServer() {
  static client::testing::FakeApiServer* server = [] {
    auto started = client::testing::FakeApiServer::Start({});
    if (!started.ok()) {
      std::fprintf(stderr, "fake API server: %s\n", started.status().ToString().c_str());
      std::abort();
    }
    return started->release();
  }();
  return server;
}

std::string ClusterConfigYaml() {
  return absl::StrCat("clusters: [{name: fake, kubeconfig: \"",
                      SharedApiServer()->kubeconfig_path(), "\"}]\n");
}

absl::Status SeedConfigMaps(const std::string& ns, int count) {
  return SharedApiServer()
      ->Control("POST", "/_fake/seed",
                absl::StrCat(R"({"resource":"configmaps","namespace":")", ns, R"(","count":)",
                             count, "}"))
      .status();
}

}  // namespace informerd::testing
