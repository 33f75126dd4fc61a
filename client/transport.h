// Transport: HTTP/2 to one API server over libcurl's multi interface, driven by one thread.
//
// Every request of a cluster — unary calls and long-lived watches alike — runs on this one
// thread, multiplexed by curl as HTTP/2 streams over few connections: up to
// Options::max_streams_per_connection streams share a connection (kube-apiserver allows 100),
// and curl opens another connection past that. Connections are reused for the transport's life.
// Nothing blocks per request: callbacks deliver the response as it arrives.
//
//   auto transport = Transport::Create({.host = config.host, .tls = config.tls}).value();
//   uint64_t id = transport->Start(
//       {.path = "/api/v1/configmaps?watch=true", .idle_timeout = absl::Minutes(2)},
//       {.on_data = [&](absl::string_view chunk) { return decoder->Feed(chunk, &events).ok(); },
//        .on_done = [&](absl::Status s) { ... }});
//   transport->Cancel(id);  // after it returns, no callback of `id` runs
//
// Per request: connect timeout; an overall timeout for unary calls; an idle timeout for
// streams (no byte for that long — not even a bookmark — ends the request with
// DeadlineExceeded: a stalled watch is detected). Responses are decompressed (gzip, deflate,
// br, zstd) unless disabled. A non-2xx response never reaches on_data: its body is read whole
// and on_done gets it as an ApiError (api_error.h). A 429 (or a 5xx to a GET) with Retry-After
// is retried after that delay, up to max_retries times, before the error is delivered.
// Requests are admitted by a client-side token bucket (qps, burst) — a request waits (without
// holding a thread) until it may start.
//
// TLS: the server is verified against tls.ca_pem (or the system's trust store) and against
// tls.server_name instead of the URL's host when set; a client certificate is presented when
// given (per request, for exec-plugin certificates). Verification is skipped only with
// tls.insecure_skip_verify.
//
// Thread safety: Start and Cancel may be called from any thread, including from inside a
// callback. Callbacks run on the transport thread, one at a time; they must not block.
#ifndef INFORMERD_CLIENT_TRANSPORT_H_
#define INFORMERD_CLIENT_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "base/token_bucket.h"
#include "client/rest_config.h"

namespace informerd::client {

struct HttpRequest {
  std::string method = "GET";
  // Path and query, appended to Options::host, e.g. "/api/v1/namespaces/a/pods?limit=500".
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Unary requests: the whole request must finish within this (zero: no limit).
  absl::Duration timeout = absl::ZeroDuration();
  // Streams: end with DeadlineExceeded when no byte arrives for this long (zero: never).
  absl::Duration idle_timeout = absl::ZeroDuration();
  // A client certificate for this request only (PEM; e.g. from an exec plugin).
  std::string client_cert_pem;
  std::string client_key_pem;
  // Offer gzip (unless the cluster disables compression). Watches turn it off: Debian's libcurl
  // 7.88 fails mid-stream (CURLE_WRITE_ERROR, also with the curl CLI) on kube-apiserver's gzipped
  // watch streams, and a stream of small events gains little from compression anyway.
  bool accept_compressed = true;
};

struct HttpCallbacks {
  // The status and headers of a 2xx response, before its body. Optional.
  std::function<void(int status, const std::vector<std::pair<std::string, std::string>>& headers)>
      on_headers;
  // Bytes of a 2xx response body, as they arrive. Return false to end the request (on_done
  // then gets Aborted).
  std::function<bool(absl::string_view chunk)> on_data;
  // Called once, last: OK when a 2xx body ended, else why the request failed.
  std::function<void(absl::Status status)> on_done;
};

class Transport {
 public:
  struct Options {
    // https://host:port, possibly with a path prefix.
    std::string host;
    TlsConfig tls;
    std::string proxy_url;
    bool disable_compression = false;
    std::string user_agent = "informerd/0.1";
    // Client-side rate limit (client-go: 5 and 10). qps <= 0: no limit.
    double qps = 50;
    int burst = 100;
    absl::Duration connect_timeout = absl::Seconds(30);
    int max_streams_per_connection = 100;
    // Retries of 429 / 5xx responses that carry Retry-After, and the longest wait honoured.
    int max_retries = 10;
    absl::Duration max_retry_after = absl::Minutes(1);
    // Time for the rate limiter, retries and idle timeouts; nullptr: Clock::Real().
    Clock* clock = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<Transport>> Create(Options options);
  // Ends every request without calling its callbacks, then stops the thread.
  ~Transport();

  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Starts a request; returns its id. Callbacks run on the transport thread.
  uint64_t Start(HttpRequest request, HttpCallbacks callbacks);

  // Ends request `id` if it is still running. Once Cancel returns, no callback of `id` is
  // running or will run (on_done is not called). Unknown or finished ids are ignored.
  void Cancel(uint64_t id);

  // Requests started and not yet done (waiting for the rate limiter or a retry included).
  int active_requests() const;
  // Whether the caller runs on the transport thread (inside a callback).
  bool OnTransportThread() const;
  // Connections curl opened so far (a measure of multiplexing).
  int64_t connections_opened() const { return connections_opened_.load(); }

  struct Call;  // internal

 private:
  explicit Transport(Options options);
  absl::Status Init();
  void Loop();
  void Admit(Call* call);
  void Launch(Call* call);
  // Hands `call` to curl now, or holds it until a connection being opened is up.
  void Dispatch(Call* call);
  // The connection being opened is up (or failed): dispatch what waited for it.
  void OnConnectionSettled();
  void Finish(Call* call, absl::Status status);
  void Remove(Call* call);
  // Takes the call's transfer out of curl, if it is in.
  void Detach(Call* call);
  void CheckIdle(uint64_t id);
  void RunPending();
  bool Deliverable(uint64_t id);
  void Delivered();
  void Wakeup();

  struct Command {
    enum Kind { kStart, kCancel, kCheckIdle, kRunPending } kind;
    uint64_t id = 0;
    std::unique_ptr<Call> call;
  };

  const Options options_;
  Clock* const clock_;
  std::string url_prefix_;   // scheme://host:port[/prefix] as used in URLs
  std::string connect_to_;   // CURLOPT_CONNECT_TO entry for tls.server_name, or ""
  void* multi_ = nullptr;    // CURLM*
  std::unique_ptr<Timer> pending_timer_;
  std::thread thread_;
  std::thread::id thread_id_;
  std::atomic<int64_t> connections_opened_{0};

  mutable Mutex mu_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mu_);
  // Cancelled ids whose cancel command the transport thread has not processed yet.
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  uint64_t delivering_ ABSL_GUARDED_BY(mu_) = 0;  // id whose callback runs now, or 0
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // Transport thread only. Every live request is in calls_; those not yet handed to curl
  // (waiting for the rate limiter or a retry) are also in pending_, by start time.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Call>> calls_;
  std::multimap<absl::Time, uint64_t> pending_;
  // Opening connections one at a time: curl (7.88) opens a connection per transfer when many
  // are added before the first connection is up, so requests that do not fit on the open
  // connections wait in held_ until the one connection being opened (for opener_) is up.
  int in_flight_ = 0;          // transfers handed to curl
  int open_connections_ = 0;   // sockets curl holds open
  uint64_t opener_ = 0;        // request whose transfer opens a connection now, or 0
  std::deque<uint64_t> held_;
  bool opener_settled_ = false;  // set inside curl callbacks, acted on after them
  // Admission (qps > 0 only), set by Start.
  std::optional<TokenBucket> bucket_;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_TRANSPORT_H_
