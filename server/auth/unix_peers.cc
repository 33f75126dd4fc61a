#include "server/auth/unix_peers.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"
#include "spdlog/spdlog.h"

namespace informerd::auth {

void UnixPeers::Record(int fd, const ucred& cred) {
  MutexLock lock(&mu_);
  by_fd_[fd] = cred;
}

std::optional<ucred> UnixPeers::Find(absl::string_view peer) const {
  int fd = 0;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(absl::string_view address,
                                                                  grpc::Server* server,
                                                                  UnixPeers* peers) {
  absl::string_view path = address;
  if (!absl::ConsumePrefix(&path, "unix://")) absl::ConsumePrefix(&path, "unix:");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: \"", address, "\": a unix socket path of 1..",
                     sizeof(addr.sun_path) - 1, " bytes is required"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const std::string p(path);
  struct stat st;
  if (::lstat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(p.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("listen: socket: ", strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::chmod(p.c_str(), 0660) != 0 || ::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("listen: cannot listen on \"", address, "\": ", strerror(err)));
  }
  std::unique_ptr<UnixListener> l(new UnixListener(p, fd, server, peers));
  l->wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (l->wake_fd_ < 0) return absl::UnavailableError("listen: eventfd failed");
  l->thread_ = std::thread([raw = l.get()] { raw->Accept(); });
  return l;
}

void UnixListener::Accept() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("unix listener {}: poll: {}", path_, strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      spdlog::warn("unix listener {}: accept: {}", path_, strerror(errno));
      if (errno == EMFILE || errno == ENFILE) ::usleep(100 * 1000);
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      spdlog::warn("unix listener {}: SO_PEERCRED: {}", path_, strerror(errno));
      ::close(conn);
      continue;
    }
    // gRPC wants a non-blocking descriptor and takes ownership of it.
    ::fcntl(conn, F_SETFL, ::fcntl(conn, F_GETFL) | O_NONBLOCK);
    peers_->Record(conn, cred);
    grpc::AddInsecureChannelFromFd(server_, conn);
  }
}

void UnixListener::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ::close(fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

UnixListener::~UnixListener() { Stop(); }

}  // namespace informerd::auth
