// Subprocess: a child process for end-to-end tests — the informerd binary, a worker process —
// with its stdout readable line by line and its stderr left on the test's stderr.
//
//   auto daemon = Subprocess::Start({Runfile("server/informerd"), "--listen=127.0.0.1:0"}).value();
//   absl::StatusOr<std::string> line = daemon->ReadLine(absl::Seconds(30));  // "grpc: 127.0.0.1:4321"
//   daemon->Signal(SIGTERM);
//   absl::StatusOr<int> code = daemon->Wait(absl::Seconds(20));
//
// The destructor kills (SIGKILL) a child still running and reaps it.
//
// Thread safety: one thread at a time.
#ifndef INFORMERD_SERVER_TESTING_SUBPROCESS_H_
#define INFORMERD_SERVER_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace informerd::testing {

// The path of a runfile of this test, e.g. Runfile("server/informerd").
std::string Runfile(const std::string& path);

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(std::vector<std::string> argv);
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout (without the newline). DEADLINE_EXCEEDED after
  // `timeout`; OUT_OF_RANGE at the end of its output.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Reads lines until one starts with `prefix`; returns the rest of it.
  absl::StatusOr<std::string> ReadUntil(const std::string& prefix, absl::Duration timeout);
  // The rest of its stdout, each line ending in "\n", once the child closes it (exits).
  // DEADLINE_EXCEEDED after `timeout`.
  absl::StatusOr<std::string> ReadToEnd(absl::Duration timeout);
  void Signal(int signal);
  // The exit code (128 + signal when killed by one). DEADLINE_EXCEEDED if still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
  bool reaped_ = false;
  int exit_code_ = 0;
};

}  // namespace informerd::testing

#endif  // INFORMERD_SERVER_TESTING_SUBPROCESS_H_
