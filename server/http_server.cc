#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace informerd {
namespace {

// "10.0.0.1" (or "::1") and the port of a socket's address.
void AddressOf(const sockaddr_storage& a, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    *port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    *port = ntohs(in6.sin6_port);
  } else {
    *port = 0;
  }
  *ip = text;
}

void PeerAddress(int fd, std::string* ip, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) a.ss_family = AF_UNSPEC;
  AddressOf(a, ip, port);
}

void LocalAddress(int fd, std::string* ip, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) a.ss_family = AF_UNSPEC;
  AddressOf(a, ip, port);
}

// A connection's stream: buffered reads, and every read and write waits at most its timeout and
// never past the current request's deadline.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int fd, absl::Duration read_timeout, absl::Duration write_timeout)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  void set_deadline(absl::Time deadline) { deadline_ = deadline; }
  bool buffered() const { return offset_ < size_; }

  bool is_readable() const override { return buffered() || Wait(POLLIN, read_timeout_); }
  bool is_writable() const override { return Wait(POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!Wait(POLLIN, read_timeout_)) return -1;
      ssize_t n;
      do {
        n = recv(fd_, buffer_, sizeof(buffer_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      offset_ = 0;
      size_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, size_ - offset_);
    std::memcpy(ptr, buffer_ + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!Wait(POLLOUT, write_timeout_)) return -1;
    ssize_t n;
    do {
      n = send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    PeerAddress(fd_, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    LocalAddress(fd_, &ip, &port);
  }
  socket_t socket() const override { return fd_; }

  // Whether the socket is ready for `events` within `timeout` and before the deadline.
  bool Wait(short events, absl::Duration timeout) const {
    for (;;) {
      const absl::Duration left = std::min(timeout, deadline_ - absl::Now());
      if (left <= absl::ZeroDuration()) return false;
      pollfd p{.fd = fd_, .events = events, .revents = 0};
      const int r = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (r < 0 && errno == EINTR) continue;
      return r > 0;
    }
  }

 private:
  const int fd_;
  const absl::Duration read_timeout_;
  const absl::Duration write_timeout_;
  absl::Time deadline_ = absl::InfiniteFuture();
  char buffer_[4096];
  size_t offset_ = 0;
  size_t size_ = 0;
};

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : options_(options) {
  const size_t workers = static_cast<size_t>(std::max(1, options_.workers));
  new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  set_keep_alive_timeout(std::max<time_t>(1, absl::ToInt64Seconds(options_.keep_alive_timeout)));
  set_keep_alive_max_count(static_cast<size_t>(std::max(1, options_.max_requests_per_connection)));
}

bool HttpServer::WidenBacklog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

bool HttpServer::TakePeerSlot(const std::string& peer) {
  MutexLock lock(&mu_);
  int& held = connections_by_peer_[peer];
  if (held >= options_.connections_per_peer) return false;
  ++held;
  return true;
}

void HttpServer::ReleasePeerSlot(const std::string& peer) {
  MutexLock lock(&mu_);
  auto it = connections_by_peer_.find(peer);
  if (it != connections_by_peer_.end() && --it->second <= 0) connections_by_peer_.erase(it);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  std::string peer;
  int peer_port = 0;
  PeerAddress(sock, &peer, &peer_port);
  bool ok = false;
  if (!TakePeerSlot(peer)) {
    if (options_.refused != nullptr) options_.refused->Inc();
    const std::string body =
        absl::StrCat(peer, " holds ", options_.connections_per_peer,
                     " connections to this listener, its limit; retry later\n");
    const std::string response =
        absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n",
                     "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
    (void)send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } else {
    DeadlineStream stream(
        sock, absl::Seconds(read_timeout_sec_) + absl::Microseconds(read_timeout_usec_),
        absl::Seconds(write_timeout_sec_) + absl::Microseconds(write_timeout_usec_));
    const absl::Duration keep_alive = absl::Seconds(keep_alive_timeout_sec_);
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      // Idle between requests: wait for the next one in short steps, so that stop() is not
      // held up by an idle connection.
      const absl::Time idle_until = absl::Now() + keep_alive;
      stream.set_deadline(idle_until);
      bool readable = stream.buffered();
      while (!readable && svr_sock_ != INVALID_SOCKET && absl::Now() < idle_until) {
        readable = stream.Wait(POLLIN, absl::Milliseconds(100));
      }
      if (!readable) break;
      stream.set_deadline(absl::Now() + options_.request_timeout);
      bool closed = false;
      ok = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
      if (!ok || closed) break;
    }
    ReleasePeerSlot(peer);
  }
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ok;
}

}  // namespace informerd
