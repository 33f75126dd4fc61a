#include "server/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace informerd::testing {

std::string Runfile(const std::string& path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (dir == nullptr) return path;
  return absl::StrCat(dir, "/", workspace != nullptr ? workspace : "informerd", "/", path);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(std::vector<std::string> argv,
                                                             Stderr err) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  if (err == Stderr::kToStdout) posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  // The child starts with default signal handling and an empty mask, whatever the test set.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return absl::InternalError(absl::StrCat("spawn ", argv[0], ": ", std::strerror(rc)));
  }
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->pid_ = pid;
  p->stdout_fd_ = out[0];
  return p;
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_) return absl::OutOfRangeError("the process's output ended");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("no line from the process in time");
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) return absl::InternalError(std::strerror(errno));
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(stdout_fd_, chunk, sizeof chunk);
    if (n < 0 && errno != EINTR) return absl::InternalError(std::strerror(errno));
    if (n == 0) eof_ = true;
    if (n > 0) buffer_.append(chunk, n);
  }
}

absl::StatusOr<std::string> Subprocess::ReadUntil(const std::string& prefix,
                                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<std::string> line = ReadLine(deadline - absl::Now());
    if (!line.ok()) return line.status();
    if (absl::StartsWith(*line, prefix)) return line->substr(prefix.size());
  }
}

absl::StatusOr<std::string> Subprocess::ReadToEnd(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string out;
  for (;;) {
    absl::StatusOr<std::string> line = ReadLine(deadline - absl::Now());
    if (absl::IsOutOfRange(line.status())) return out;
    if (!line.ok()) return line.status();
    absl::StrAppend(&out, *line, "\n");
  }
}

absl::StatusOr<Subprocess::Finished> Subprocess::Run(std::vector<std::string> argv,
                                                     absl::Duration timeout, Stderr err) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Start(std::move(argv), err);
  if (!p.ok()) return p.status();
  Finished finished;
  absl::StatusOr<std::string> output = (*p)->ReadToEnd(deadline - absl::Now());
  if (!output.ok()) return output.status();  // the destructor kills it
  finished.output = *std::move(output);
  absl::StatusOr<int> code = (*p)->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (!code.ok()) return code.status();
  finished.exit_code = *code;
  return finished;
}

void Subprocess::Signal(int signal) {
  if (!reaped_ && pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (reaped_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the process is still running");
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace informerd::testing
