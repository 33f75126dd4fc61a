#include "client/kube_apiserver.h"

#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/fake_apiserver.h"
#include "client/test_files.h"

namespace informerd::client::testing {

std::unique_ptr<KubeApiServer> KubeApiServer::Start() {
  const std::string root = WorkspaceRoot();
  if (root.empty()) return nullptr;
  std::unique_ptr<KubeApiServer> server(new KubeApiServer());
  server->kubeconfig_ = MakeTempDir() + "/kubeconfig";
  // Bazel runs tests without HOME; Go's caches (for a rebuild) live under the real one.
  const passwd* user = getpwuid(getuid());
  const std::string command =
      absl::StrCat("HOME=", user != nullptr ? user->pw_dir : "/root", " ", root,
                   "/testing/kube/start --timeout 240 --kubeconfig-out ", server->kubeconfig_);
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return nullptr;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), out) != nullptr) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(buffer);
    if (absl::ConsumePrefix(&line, "pid: ")) (void)absl::SimpleAtoi(line, &server->pid_);
  }
  if (pclose(out) != 0 || server->pid_ <= 0) return nullptr;
  return server;
}

KubeApiServer::~KubeApiServer() {
  if (pid_ <= 0) return;
  // Not our child (the script detaches it): wait for its exit through a pidfd.
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  kill(pid_, SIGTERM);
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 60000);
    close(fd);
  }
}

absl::Status CreateNamespace(Client& client, const std::string& name) {
  return client
      .Create({"", "v1", "namespaces"}, "",
              absl::StrCat(R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")", name,
                           "\"}}"))
      .status();
}

}  // namespace informerd::client::testing
