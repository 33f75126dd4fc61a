// The daemon's HTTP listeners (metrics, probes, the status page) on cpp-httplib, made safe from
// slow clients. cpp-httplib bounds each read and write, not a request: a client that sends its
// request line a byte at a time, each before the read timeout, holds a worker thread for ever,
// and with the library's 8 workers 12 such connections left the kubelet's /healthz waiting.
//
// Here a connection's each request must arrive and be answered within `request_timeout` (reads
// and writes are cut at that deadline), an idle kept-alive connection closes after
// `keep_alive_timeout`, and one client address holds at most `connections_per_peer` connections
// (more are answered 503 and closed at once): one slow or hostile client holds at most that many
// workers of `workers`, each for at most one request timeout.
#ifndef INFORMERD_SERVER_HTTP_SERVER_H_
#define INFORMERD_SERVER_HTTP_SERVER_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "httplib.h"

namespace informerd {

struct HttpServerOptions {
  absl::Duration request_timeout = absl::Seconds(10);
  absl::Duration keep_alive_timeout = absl::Seconds(2);
  int max_requests_per_connection = 100;
  int connections_per_peer = 8;
  int workers = 32;
  // Counts connections refused for connections_per_peer (may be nullptr).
  Counter* refused = nullptr;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // After bind_to_port / bind_to_any_port: the listening socket's accept queue holds `backlog`
  // connections (cpp-httplib's is 5: a burst of connections, hostile or not, left the kubelet's
  // probes waiting for SYN retransmits).
  bool WidenBacklog(int backlog = 1024);

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool TakePeerSlot(const std::string& peer);
  void ReleasePeerSlot(const std::string& peer);

  const HttpServerOptions options_;
  Mutex mu_;
  absl::flat_hash_map<std::string, int> connections_by_peer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace informerd

#endif  // INFORMERD_SERVER_HTTP_SERVER_H_
