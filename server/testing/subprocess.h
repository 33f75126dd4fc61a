// Subprocess: a child process for end-to-end tests — the informerd binary, a worker process —
// with its stdout readable line by line and its stderr left on the test's stderr (or merged into
// its stdout); Run for one that is run to its end, its output and exit code read whole.
//
//   auto daemon = Subprocess::Start({Runfile("server/informerd"), "--listen=127.0.0.1:0"}).value();
//   absl::StatusOr<std::string> line = daemon->ReadLine(absl::Seconds(30));  // "grpc: 127.0.0.1:4321"
//   daemon->Signal(SIGTERM);
//   absl::StatusOr<int> code = daemon->Wait(absl::Seconds(20));
//
//   absl::StatusOr<Subprocess::Finished> help = Subprocess::Run(
//       {Runfile("bench/load"), "--help"}, absl::Seconds(60), Subprocess::Stderr::kToStdout);
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
  // Where the child's stderr goes: the test's stderr, or into its stdout, read with it.
  enum class Stderr { kInherit, kToStdout };
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(std::vector<std::string> argv,
                                                           Stderr err = Stderr::kInherit);

  // A child run to its end: all it wrote, and its exit code.
  struct Finished {
    int exit_code = -1;
    std::string output;
  };
  // Starts `argv`, reads its output to the end and reaps it; DEADLINE_EXCEEDED (the child
  // killed) when that takes longer than `timeout`.
  static absl::StatusOr<Finished> Run(std::vector<std::string> argv, absl::Duration timeout,
                                      Stderr err = Stderr::kInherit);
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
