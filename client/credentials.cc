#include "client/credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/read_file.h"
#include "yaml-cpp/yaml.h"

extern char** environ;

namespace informerd::client {
namespace {

constexpr size_t kMaxPluginOutput = 1 << 20;

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::BytesToHexString(std::string(1, c)));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// KUBERNETES_EXEC_INFO: the ExecCredential the plugin is asked for.
std::string ExecInfo(const RestConfig& config) {
  std::string spec = "\"interactive\":false";
  if (config.exec->provide_cluster_info) {
    absl::StrAppend(&spec, ",\"cluster\":{\"server\":", JsonQuote(config.host));
    if (!config.tls.server_name.empty()) {
      absl::StrAppend(&spec, ",\"tls-server-name\":", JsonQuote(config.tls.server_name));
    }
    if (config.tls.insecure_skip_verify) absl::StrAppend(&spec, ",\"insecure-skip-tls-verify\":true");
    if (!config.tls.ca_pem.empty()) {
      absl::StrAppend(&spec, ",\"certificate-authority-data\":",
                      JsonQuote(absl::Base64Escape(config.tls.ca_pem)));
    }
    if (!config.proxy_url.empty()) {
      absl::StrAppend(&spec, ",\"proxy-url\":", JsonQuote(config.proxy_url));
    }
    absl::StrAppend(&spec, "}");
  }
  return absl::StrCat("{\"kind\":\"ExecCredential\",\"apiVersion\":",
                      JsonQuote(config.exec->api_version), ",\"spec\":{", spec, "}}");
}

struct PluginResult {
  int exit_code = 0;
  std::string out;
  std::string err;
};

std::string PluginName(const ExecConfig& exec) { return absl::StrCat("exec plugin ", exec.command); }

absl::StatusOr<PluginResult> RunPlugin(const RestConfig& config, absl::Duration timeout) {
  const ExecConfig& exec = *config.exec;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(e)));
  }
  // Environment: ours, then the plugin's env entries, then KUBERNETES_EXEC_INFO.
  std::vector<std::string> env;
  auto overridden = [&](absl::string_view entry) {
    absl::string_view name = entry.substr(0, entry.find('='));
    if (name == "KUBERNETES_EXEC_INFO") return true;
    for (const auto& [k, v] : exec.env) {
      if (k == name) return true;
    }
    return false;
  };
  for (char** e = environ; e && *e; ++e) {
    if (!overridden(*e)) env.emplace_back(*e);
  }
  for (const auto& [k, v] : exec.env) env.push_back(absl::StrCat(k, "=", v));
  env.push_back(absl::StrCat("KUBERNETES_EXEC_INFO=", ExecInfo(config)));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {exec.command};
  args.insert(args.end(), exec.args.begin(), exec.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, exec.command.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    std::string msg = absl::StrCat(PluginName(exec), ": cannot run it: ", std::strerror(rc));
    if (!exec.install_hint.empty()) absl::StrAppend(&msg, "\n", exec.install_hint);
    return absl::FailedPreconditionError(msg);
  }

  PluginResult result;
  const absl::Time deadline = absl::Now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    // Rounded up: a wait truncated to whole milliseconds would give up to 1 ms early.
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    const int64_t wait_ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(wait_ms, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[8192];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        if (sinks[i]->size() < kMaxPluginOutput) sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(PluginName(exec), ": did not finish within ",
                                                    absl::FormatDuration(timeout)));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

struct ExecCredential {
  std::string token;
  std::string cert_pem;
  std::string key_pem;
  absl::Time expiry = absl::InfiniteFuture();
};

absl::StatusOr<ExecCredential> ParseExecCredential(const ExecConfig& exec,
                                                   const std::string& out) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(PluginName(exec), ": output is not a valid ExecCredential: ", why));
  };
  try {
    YAML::Node root = YAML::Load(out);
    if (!root.IsMap()) return bad("not a JSON object");
    auto str = [](const YAML::Node& n, const char* key) {
      YAML::Node v = n[key];
      return v.IsDefined() && v.IsScalar() ? v.Scalar() : std::string();
    };
    if (str(root, "kind") != "ExecCredential") return bad("kind is not ExecCredential");
    if (str(root, "apiVersion") != exec.api_version) {
      return bad(absl::StrCat("apiVersion is \"", str(root, "apiVersion"), "\", expected \"",
                              exec.api_version, "\""));
    }
    YAML::Node status = root["status"];
    if (!status.IsDefined() || !status.IsMap()) return bad("status is missing");
    ExecCredential cred;
    cred.token = str(status, "token");
    cred.cert_pem = str(status, "clientCertificateData");
    cred.key_pem = str(status, "clientKeyData");
    if (cred.token.empty() && cred.cert_pem.empty()) {
      return bad("status has neither token nor clientCertificateData");
    }
    if (cred.cert_pem.empty() != cred.key_pem.empty()) {
      return bad("status.clientCertificateData and status.clientKeyData must come together");
    }
    const std::string expiry = str(status, "expirationTimestamp");
    if (!expiry.empty()) {
      std::string err;
      if (!absl::ParseTime(absl::RFC3339_full, expiry, &cred.expiry, &err)) {
        return bad(absl::StrCat("status.expirationTimestamp \"", expiry, "\": ", err));
      }
    }
    return cred;
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Credentials>> Credentials::Create(const RestConfig& config,
                                                                 Options options) {
  if (config.exec && config.exec->interactive_mode == "Always") {
    return absl::FailedPreconditionError(absl::StrCat(
        PluginName(*config.exec),
        ": interactiveMode is Always, but informerd runs plugins without a terminal"));
  }
  return std::unique_ptr<Credentials>(new Credentials(config, options));
}

Credentials::Credentials(const RestConfig& config, Options options)
    : config_(config),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()) {}

int Credentials::exec_runs() const {
  MutexLock lock(&mu_);
  return exec_runs_;
}

void Credentials::Invalidate(uint64_t generation) {
  MutexLock lock(&mu_);
  if (generation == auth_.generation) stale_ = true;
}

namespace {
bool StatFile(const std::string& path, dev_t* dev, ino_t* ino, off_t* size, int64_t* mtime_ns,
              int* err) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *err = errno;
    return false;
  }
  *dev = st.st_dev;
  *ino = st.st_ino;
  *size = st.st_size;
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}
}  // namespace

absl::Status Credentials::ReadTokenFileLocked(Auth* next) {
  FileId id;
  int err = 0;
  if (!StatFile(config_.bearer_token_file, &id.dev, &id.ino, &id.size, &id.mtime_ns, &err)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "cannot read token file ", config_.bearer_token_file, ": ", std::strerror(err)));
  }
  absl::StatusOr<std::string> token = ReadFile(config_.bearer_token_file, 1 << 20);
  if (!token.ok()) return absl::UnauthenticatedError(token.status().message());
  std::string trimmed(absl::StripAsciiWhitespace(*token));
  if (trimmed.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("token file ", config_.bearer_token_file, " is empty"));
  }
  token_file_id_ = id;
  next->headers.emplace_back("Authorization", absl::StrCat("Bearer ", trimmed));
  return absl::OkStatus();
}

bool Credentials::TokenFileUnchangedLocked() {
  FileId id;
  int err = 0;
  return StatFile(config_.bearer_token_file, &id.dev, &id.ino, &id.size, &id.mtime_ns, &err) &&
         id == token_file_id_;
}

absl::Status Credentials::RunExecLocked(Auth* next) {
  ++exec_runs_;
  absl::StatusOr<PluginResult> run = RunPlugin(config_, options_.exec_timeout);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    std::string msg = absl::StrCat(PluginName(*config_.exec), ": exited with status ",
                                   run->exit_code);
    absl::string_view err = absl::StripAsciiWhitespace(run->err);
    if (!err.empty()) absl::StrAppend(&msg, ": ", err.substr(0, 2000));
    return absl::UnauthenticatedError(msg);
  }
  absl::StatusOr<ExecCredential> cred = ParseExecCredential(*config_.exec, run->out);
  if (!cred.ok()) return absl::UnauthenticatedError(cred.status().message());
  if (!cred->token.empty()) {
    next->headers.emplace_back("Authorization", absl::StrCat("Bearer ", cred->token));
  }
  next->client_cert_pem = cred->cert_pem;
  next->client_key_pem = cred->key_pem;
  expiry_ = cred->expiry;
  return absl::OkStatus();
}

absl::Status Credentials::RefreshLocked() {
  const bool token_file = config_.bearer_token.empty() && !config_.bearer_token_file.empty();
  const bool exec = config_.exec.has_value();
  if (!stale_) {
    if (exec) {
      if (clock_->Now() < expiry_) return absl::OkStatus();
    } else if (token_file) {
      if (TokenFileUnchangedLocked()) return absl::OkStatus();
    } else {
      return absl::OkStatus();
    }
  }
  Auth next;
  next.generation = auth_.generation + 1;
  absl::Status s;
  if (!config_.bearer_token.empty()) {
    next.headers.emplace_back("Authorization", absl::StrCat("Bearer ", config_.bearer_token));
  } else if (token_file) {
    s = ReadTokenFileLocked(&next);
  } else if (!config_.username.empty() || !config_.password.empty()) {
    next.headers.emplace_back(
        "Authorization",
        absl::StrCat("Basic ", absl::Base64Escape(absl::StrCat(config_.username, ":",
                                                               config_.password))));
  } else if (exec) {
    s = RunExecLocked(&next);
  }
  if (!s.ok()) {
    stale_ = true;
    return s;
  }
  if (!config_.impersonate_user.empty()) {
    next.headers.emplace_back("Impersonate-User", config_.impersonate_user);
  }
  for (const std::string& g : config_.impersonate_groups) {
    next.headers.emplace_back("Impersonate-Group", g);
  }
  if (!config_.impersonate_uid.empty()) {
    next.headers.emplace_back("Impersonate-Uid", config_.impersonate_uid);
  }
  auth_ = std::move(next);
  stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<Credentials::Auth> Credentials::Get() {
  MutexLock lock(&mu_);
  if (absl::Status s = RefreshLocked(); !s.ok()) return s;
  return auth_;
}

}  // namespace informerd::client
