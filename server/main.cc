// informerd: the daemon. `informerd --help` lists the flags (server/flags.h); server/config.h
// documents the config file. A bad flag or config ends it with "ERROR: ..." and status 1
// (--check-config stops there: "config: valid" and status 0 when there is none). On
// start it prints one line per listener, for people and for scripts:
//   grpc: 127.0.0.1:7470
//   metrics: 127.0.0.1:7471
//   status: 127.0.0.1:7472       (with --status-listen)
// SIGTERM or SIGINT shuts it down gracefully (server/daemon.h); a second one ends it at once.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "base/flags.h"
#include "base/log.h"
#include "client/api_error.h"
#include "server/daemon.h"
#include "server/flags.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  informerd::ParseFlags(argc, argv, informerd::kFlagsUsage);
  absl::StatusOr<informerd::DaemonConfig> config = informerd::ConfigFromFlags();
  if (!config.ok()) return informerd::FlagError(config.status());
  if (absl::GetFlag(FLAGS_check_config)) {
    std::printf("config: valid\n");
    return 0;
  }
  // Logs go to stderr; stdout carries only the address lines scripts read.
  spdlog::set_default_logger(spdlog::stderr_color_mt("informerd"));
  spdlog::set_level(*informerd::ParseLogLevel(config->log_level));  // validated
  informerd::SetLogFormat(*informerd::ParseLogFormat(config->log_format));  // validated

  // Signals are taken by sigwait below, not by whichever thread they hit.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<informerd::Daemon>> daemon =
      informerd::Daemon::Start(*std::move(config));
  if (!daemon.ok()) {
    std::fprintf(stderr, "informerd: %s\n", informerd::client::DescribeStatus(daemon.status()).c_str());
    return 1;
  }
  for (const std::string& address : (*daemon)->grpc_addresses()) {
    std::printf("grpc: %s\n", address.c_str());
  }
  if (!(*daemon)->metrics_address().empty()) {
    std::printf("metrics: %s\n", (*daemon)->metrics_address().c_str());
  }
  if (!(*daemon)->status_address().empty()) {
    std::printf("status: %s\n", (*daemon)->status_address().c_str());
  }
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("informerd: {} received, shutting down", strsignal(signal_number));
  // A second signal while shutting down ends the process at once.
  std::thread([signals]() mutable {
    int again = 0;
    sigwait(&signals, &again);
    std::_Exit(130);
  }).detach();
  (*daemon)->Shutdown();
  spdlog::info("informerd: stopped");
  return 0;
}
