// Unix-socket listeners whose peers are known by their credentials (SO_PEERCRED), so calls over
// them can be authenticated by the peer's uid.
//
//   UnixPeers peers;
//   auto listener = UnixListener::Start("/run/informerd.sock", server.get(), &peers).value();
//   std::optional<ucred> who = peers.Find(context->peer());   // for a call on that socket
//
// gRPC's own unix listener does not expose the peer's socket, so informerd accepts connections
// itself, reads SO_PEERCRED, records it under the connection's file descriptor, and hands the
// connection to the server (grpc::AddInsecureChannelFromFd), whose calls then report the peer
// "fd:<n>". A descriptor number is reused only after its connection is closed, and the new
// connection's credentials are recorded before the server sees it, so a live call always finds
// its own peer's credentials.
//
// Thread safety: UnixPeers is thread-safe. UnixListener runs one accept thread; Stop (also the
// destructor) ends it and removes the socket file.
#ifndef INFORMERD_SERVER_AUTH_UNIX_PEERS_H_
#define INFORMERD_SERVER_AUTH_UNIX_PEERS_H_

#include <sys/socket.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"

namespace grpc {
class Server;
}

namespace informerd::auth {

class UnixPeers {
 public:
  void Record(int fd, const ucred& cred);
  // The credentials of a call's peer ("fd:<n>"), if it came through a UnixListener.
  std::optional<ucred> Find(absl::string_view peer) const;

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<int, ucred> by_fd_ ABSL_GUARDED_BY(mu_);
};

class UnixListener {
 public:
  // Listens on `path` ("unix:///p", "unix:/p" or "/p"; an existing socket file is replaced) with
  // mode 0660. UNAVAILABLE naming the path when it cannot.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(absl::string_view address,
                                                             grpc::Server* server,
                                                             UnixPeers* peers);
  ~UnixListener();
  void Stop();

 private:
  UnixListener(std::string path, int fd, grpc::Server* server, UnixPeers* peers)
      : path_(std::move(path)), fd_(fd), server_(server), peers_(peers) {}
  void Accept();

  const std::string path_;
  const int fd_;
  grpc::Server* const server_;
  UnixPeers* const peers_;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace informerd::auth

#endif  // INFORMERD_SERVER_AUTH_UNIX_PEERS_H_
