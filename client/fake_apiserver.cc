#include "client/fake_apiserver.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kubeconfig.h"
#include "client/test_files.h"

extern char** environ;

namespace informerd::client::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Builds out/fake-apiserver unless it is newer than every source of testing/apiserver.
absl::StatusOr<std::string> EnsureBinary() {
  if (const char* bin = std::getenv("INFORMERD_FAKE_APISERVER"); bin && *bin) return std::string(bin);
  const std::string root = WorkspaceRoot();
  if (root.empty()) return absl::FailedPreconditionError("cannot find the source tree");
  const passwd* pw = getpwuid(getuid());
  const std::string home = pw != nullptr ? pw->pw_dir : "/root";
  const std::string script = absl::StrCat(
      "set -e; cd ", ShellQuote(root), "; mkdir -p out; exec 9>out/fake-apiserver.lock; flock 9; ",
      "if [ ! -x out/fake-apiserver ] || [ -n \"$(find testing/apiserver -name '*.go' -newer "
      "out/fake-apiserver -print -quit)\" ]; then ",
      "cd testing/apiserver && HOME=", ShellQuote(home), " GOTOOLCHAIN=local ",
      "PATH=/usr/local/go/bin:/usr/lib/go/bin:$PATH go build -o ../../out/fake-apiserver "
      "./cmd/fake-apiserver; fi");
  const std::string command = absl::StrCat("/bin/sh -c ", ShellQuote(script), " >&2");
  if (std::system(command.c_str()) != 0) {
    return absl::FailedPreconditionError("building out/fake-apiserver failed (see the log)");
  }
  return root + "/out/fake-apiserver";
}

}  // namespace

std::string WorkspaceRoot() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "";
  const std::string runfile = absl::StrCat(srcdir, "/", workspace, "/client/fake_apiserver.h");
  char resolved[PATH_MAX];
  if (realpath(runfile.c_str(), resolved) == nullptr) return "";
  std::string path(resolved);
  const std::string suffix = "/client/fake_apiserver.h";
  if (!absl::EndsWith(path, suffix)) return "";
  return path.substr(0, path.size() - suffix.size());
}

absl::StatusOr<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(Options options) {
  absl::StatusOr<std::string> binary = EnsureBinary();
  if (!binary.ok()) return binary.status();
  std::unique_ptr<FakeApiServer> server(new FakeApiServer());
  server->kubeconfig_ = MakeTempDir() + "/kubeconfig";
  std::vector<std::string> args = {*binary, "--addr", "127.0.0.1:0", "--kubeconfig-out",
                                   server->kubeconfig_};
  if (options.tls) args.push_back("--tls");
  args.insert(args.end(), options.extra_flags.begin(), options.extra_flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  int rc = posix_spawn(&server->pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  server->stdout_fd_ = out[0];
  if (rc != 0) {
    server->pid_ = -1;
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", *binary, ": ", std::strerror(rc)));
  }
  // Wait (blocking read, no polling) for "listening on URL\n".
  std::string line;
  char c;
  for (;;) {
    ssize_t n = read(server->stdout_fd_, &c, 1);
    if (n <= 0) return absl::FailedPreconditionError("fake-apiserver exited before listening");
    if (c == '\n') {
      if (absl::StartsWith(line, "listening on ")) break;
      line.clear();
    } else {
      line += c;
    }
  }
  absl::StatusOr<RestConfig> config = LoadKubeconfig({.paths = {server->kubeconfig_}});
  if (!config.ok()) return config.status();
  server->config_ = *std::move(config);
  return server;
}

FakeApiServer::~FakeApiServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> FakeApiServer::ControlOnce(absl::string_view method,
                                                   absl::string_view path,
                                                   absl::string_view body) const {
  CURL* e = curl_easy_init();
  std::string url = absl::StrCat(config_.host, path);
  std::string response;
  std::string data(body);
  std::string m(method);
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_blob ca{const_cast<char*>(config_.tls.ca_pem.data()), config_.tls.ca_pem.size(),
               CURL_BLOB_COPY};
  curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
  if (!data.empty()) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, data.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(data.size()));
  }
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION,
                   +[](char* p, size_t s, size_t n, void* out) -> size_t {
                     static_cast<std::string*>(out)->append(p, s * n);
                     return s * n;
                   });
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &response);
  CURLcode rc = curl_easy_perform(e);
  long code = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(e);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(method, " ", path, ": ", curl_easy_strerror(rc)));
  }
  if (code < 200 || code >= 300) {
    return absl::FailedPreconditionError(absl::StrCat(method, " ", path, ": HTTP ", code, ": ", response));
  }
  return response;
}

absl::StatusOr<std::string> FakeApiServer::Control(absl::string_view method,
                                                   absl::string_view path,
                                                   absl::string_view body) const {
  // A connection-level failure is retried: tests inject faults that reset or refuse every
  // connection, and a control call racing with one of them must not fail the test.
  absl::StatusOr<std::string> result;
  for (int attempt = 0; attempt < 10; ++attempt) {
    result = ControlOnce(method, path, body);
    if (result.ok() || !absl::IsUnavailable(result.status())) return result;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return result;
}

}  // namespace informerd::client::testing
