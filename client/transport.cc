#include "client/transport.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/api_error.h"

namespace informerd::client {
namespace {

constexpr size_t kMaxErrorBody = 1 << 20;

std::once_flag curl_init_once;

absl::Status CurlStatus(CURLcode code, const char* errbuf, const std::string& what) {
  std::string msg = absl::StrCat(what, ": ", curl_easy_strerror(code));
  if (errbuf != nullptr && errbuf[0] != '\0') absl::StrAppend(&msg, ": ", errbuf);
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(msg);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      return absl::FailedPreconditionError(msg);
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PROXY:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

struct Transport::Call {
  Transport* transport = nullptr;
  uint64_t id = 0;
  HttpRequest request;
  HttpCallbacks callbacks;
  std::string url;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  curl_slist* connect_to_list = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {0};
  bool in_multi = false;
  bool pending = false;
  // Response state, reset for every attempt.
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string retry_after;
  std::string error_body;
  bool headers_delivered = false;
  bool aborted = false;
  int retries = 0;
  absl::Time last_activity;
  std::unique_ptr<Timer> idle_timer;

  ~Call() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (header_list != nullptr) curl_slist_free_all(header_list);
    if (connect_to_list != nullptr) curl_slist_free_all(connect_to_list);
  }
  void Reset() {
    status = 0;
    headers.clear();
    retry_after.clear();
    error_body.clear();
    headers_delivered = false;
    aborted = false;
    errbuf[0] = '\0';
  }
  bool Success() const { return status >= 200 && status < 300; }
  std::string What() const { return absl::StrCat(request.method, " ", url); }

  static size_t OnHeader(char* data, size_t size, size_t n, void* self);
  // Socket hooks (clientp: the Transport): count connections.
  static curl_socket_t OpenSocket(void* self, curlsocktype purpose, curl_sockaddr* address);
  static int CloseSocket(void* self, curl_socket_t fd);
  static size_t OnWrite(char* data, size_t size, size_t n, void* self);
};

size_t Transport::Call::OnHeader(char* data, size_t size, size_t n, void* self) {
  Call* call = static_cast<Call*>(self);
  const size_t len = size * n;
  absl::string_view line(data, len);
  line = absl::StripTrailingAsciiWhitespace(line);
  if (absl::StartsWith(line, "HTTP/")) {
    // A status line (there may be several: 100 Continue, redirects); the last one counts.
    call->Reset();
    size_t sp = line.find(' ');
    int code = 0;
    if (sp != absl::string_view::npos && absl::SimpleAtoi(line.substr(sp + 1, 3), &code)) {
      call->status = code;
    }
    return len;
  }
  if (line.empty()) {
    if (call->id == call->transport->opener_) call->transport->opener_settled_ = true;
    // The end of a header block: deliver the headers of a final 2xx response.
    if (call->Success() && !call->headers_delivered) {
      call->headers_delivered = true;
      if (call->callbacks.on_headers) {
        Transport* t = call->transport;
        if (!t->Deliverable(call->id)) return 0;
        call->callbacks.on_headers(call->status, call->headers);
        t->Delivered();
      }
    }
    return len;
  }
  size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (name == "retry-after") call->retry_after = value;
    call->headers.emplace_back(std::move(name), std::move(value));
  }
  return len;
}

size_t Transport::Call::OnWrite(char* data, size_t size, size_t n, void* self) {
  Call* call = static_cast<Call*>(self);
  Transport* t = call->transport;
  const size_t len = size * n;
  call->last_activity = t->clock_->Now();
  if (!call->Success()) {
    if (call->error_body.size() < kMaxErrorBody) {
      call->error_body.append(data, std::min(len, kMaxErrorBody - call->error_body.size()));
    }
    return len;
  }
  if (!call->callbacks.on_data || len == 0) return len;
  if (!t->Deliverable(call->id)) return CURL_WRITEFUNC_ERROR;
  bool keep = call->callbacks.on_data(absl::string_view(data, len));
  t->Delivered();
  if (!keep) {
    call->aborted = true;
    return CURL_WRITEFUNC_ERROR;
  }
  return len;
}

namespace {

}  // namespace

curl_socket_t Transport::Call::OpenSocket(void* self, curlsocktype purpose,
                                          curl_sockaddr* address) {
  auto* t = static_cast<Transport*>(self);
  curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (fd != CURL_SOCKET_BAD && purpose == CURLSOCKTYPE_IPCXN) {
    t->connections_opened_.fetch_add(1);
    ++t->open_connections_;
  }
  return fd;
}

int Transport::Call::CloseSocket(void* self, curl_socket_t fd) {
  auto* t = static_cast<Transport*>(self);
  --t->open_connections_;
  return close(fd);
}

absl::StatusOr<std::unique_ptr<Transport>> Transport::Create(Options options) {
  if (options.host.empty()) return absl::InvalidArgumentError("Transport: host is required");
  if (options.max_streams_per_connection < 1) {
    return absl::InvalidArgumentError("Transport: max_streams_per_connection must be >= 1");
  }
  if (!options.tls.client_cert_pem.empty() && options.tls.client_key_pem.empty()) {
    return absl::InvalidArgumentError("Transport: a client certificate needs its key");
  }
  std::unique_ptr<Transport> t(new Transport(std::move(options)));
  if (absl::Status s = t->Init(); !s.ok()) return s;
  return t;
}

Transport::Transport(Options options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {}

absl::Status Transport::Init() {
  std::call_once(curl_init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  // Split the host URL, to point a server name other than the host at it (tls-server-name).
  CURLU* url = curl_url();
  std::string host = options_.host;
  while (!host.empty() && host.back() == '/') host.pop_back();
  if (curl_url_set(url, CURLUPART_URL, host.c_str(), 0) != CURLUE_OK) {
    curl_url_cleanup(url);
    return absl::InvalidArgumentError(absl::StrCat("Transport: host \"", host, "\" is not a URL"));
  }
  char *scheme = nullptr, *hostname = nullptr, *port = nullptr;
  curl_url_get(url, CURLUPART_SCHEME, &scheme, 0);
  curl_url_get(url, CURLUPART_HOST, &hostname, 0);
  curl_url_get(url, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  const std::string s = scheme ? scheme : "", h = hostname ? hostname : "", p = port ? port : "";
  curl_free(scheme);
  curl_free(hostname);
  curl_free(port);
  curl_url_cleanup(url);
  if (s != "https" && s != "http") {
    return absl::InvalidArgumentError(absl::StrCat("Transport: host \"", host, "\" is not http(s)"));
  }
  url_prefix_ = host;
  if (!options_.tls.server_name.empty() && s == "https") {
    // Connect to the host, but speak TLS (SNI and verification) to the server name.
    const std::string authority = absl::StrCat(s, "://", h);
    url_prefix_ = absl::StrCat(s, "://", options_.tls.server_name, host.substr(authority.size()));
    if (host.substr(authority.size()).empty() || host[authority.size()] != ':') {
      url_prefix_ = absl::StrCat(s, "://", options_.tls.server_name, ":", p,
                                 host.substr(authority.size()));
    }
    connect_to_ = absl::StrCat(options_.tls.server_name, ":", p, ":", h, ":", p);
  }

  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return absl::InternalError("curl_multi_init failed");
  multi_ = multi;
  curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  curl_multi_setopt(multi, CURLMOPT_MAX_CONCURRENT_STREAMS,
                    static_cast<long>(options_.max_streams_per_connection));
  if (options_.qps > 0) bucket_.emplace(options_.qps, std::max(1, options_.burst), clock_->Now());
  pending_timer_ = clock_->CreateTimer([this] {
    {
      MutexLock lock(&mu_);
      commands_.push_back(Command{Command::kRunPending, 0, nullptr});
    }
    Wakeup();
  });
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

Transport::~Transport() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  Wakeup();
  if (thread_.joinable()) thread_.join();
  pending_timer_.reset();
  if (multi_ != nullptr) curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

void Transport::Wakeup() {
  if (multi_ != nullptr) curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

uint64_t Transport::Start(HttpRequest request, HttpCallbacks callbacks) {
  auto call = std::make_unique<Call>();
  call->transport = this;
  call->request = std::move(request);
  call->callbacks = std::move(callbacks);
  call->url = url_prefix_ + call->request.path;
  uint64_t id;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
    call->id = id;
    ++active_;
    commands_.push_back(Command{Command::kStart, id, std::move(call)});
  }
  Wakeup();
  return id;
}

void Transport::Cancel(uint64_t id) {
  {
    MutexLock lock(&mu_);
    cancelled_.insert(id);
    commands_.push_back(Command{Command::kCancel, id, nullptr});
    if (std::this_thread::get_id() != thread_id_) {
      mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return delivering_ != id; });
    }
  }
  Wakeup();
}

bool Transport::OnTransportThread() const {
  MutexLock lock(&mu_);
  return std::this_thread::get_id() == thread_id_;
}

int Transport::active_requests() const {
  MutexLock lock(&mu_);
  return active_;
}

bool Transport::Deliverable(uint64_t id) {
  MutexLock lock(&mu_);
  if (cancelled_.contains(id)) return false;
  delivering_ = id;
  return true;
}

void Transport::Delivered() {
  MutexLock lock(&mu_);
  delivering_ = 0;
}

void Transport::Admit(Call* call) {
  if (!bucket_.has_value()) {
    Dispatch(call);
    return;
  }
  // Take a token now; if the bucket is in debt, wait until it is paid back.
  const absl::Time now = clock_->Now();
  const absl::Duration wait = bucket_->Reserve(now);
  if (wait <= absl::ZeroDuration()) {
    Dispatch(call);
    return;
  }
  const absl::Time start = now + wait;
  call->pending = true;
  pending_.emplace(start, call->id);
  pending_timer_->ArmAt(pending_.begin()->first);
}

void Transport::RunPending() {
  const absl::Time now = clock_->Now();
  while (!pending_.empty() && pending_.begin()->first <= now) {
    uint64_t id = pending_.begin()->second;
    pending_.erase(pending_.begin());
    auto it = calls_.find(id);
    if (it == calls_.end()) continue;
    Call* call = it->second.get();
    call->pending = false;
    if (call->retries > 0 && !call->in_multi && call->easy != nullptr && call->status != 0) {
      // A retry after Retry-After goes through the limiter again.
      call->Reset();
      Admit(call);
    } else {
      Dispatch(call);
    }
  }
  if (!pending_.empty()) pending_timer_->ArmAt(pending_.begin()->first);
}

void Transport::Dispatch(Call* call) {
  if (opener_ != 0) {
    held_.push_back(call->id);
    return;
  }
  if (in_flight_ >= open_connections_ * options_.max_streams_per_connection) {
    opener_ = call->id;  // this transfer needs a new connection: the others wait for it
  }
  Launch(call);
}

void Transport::OnConnectionSettled() {
  opener_ = 0;
  opener_settled_ = false;
  while (!held_.empty() && opener_ == 0) {
    const uint64_t id = held_.front();
    held_.pop_front();
    auto it = calls_.find(id);
    if (it != calls_.end()) Dispatch(it->second.get());
  }
}

void Transport::Detach(Call* call) {
  if (!call->in_multi) return;
  curl_multi_remove_handle(static_cast<CURLM*>(multi_), call->easy);
  call->in_multi = false;
  --in_flight_;
}

void Transport::Launch(Call* call) {
  CURLM* multi = static_cast<CURLM*>(multi_);
  if (call->easy == nullptr) {
    CURL* e = curl_easy_init();
    call->easy = e;
    const HttpRequest& r = call->request;
    curl_easy_setopt(e, CURLOPT_URL, call->url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L << 10);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 30L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION,
                     &Call::OpenSocket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION,
                     &Call::CloseSocket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
    if (r.timeout > absl::ZeroDuration()) {
      curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(r.timeout))));
    }
    // nullptr also clears what an earlier request on a reused handle asked for.
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING,
                     !options_.disable_compression && r.accept_compressed ? "" : nullptr);
    curl_easy_setopt(e, CURLOPT_USERAGENT, options_.user_agent.c_str());
    if (!connect_to_.empty()) {
      call->connect_to_list = curl_slist_append(nullptr, connect_to_.c_str());
      curl_easy_setopt(e, CURLOPT_CONNECT_TO, call->connect_to_list);
    }
    if (!options_.proxy_url.empty()) curl_easy_setopt(e, CURLOPT_PROXY, options_.proxy_url.c_str());
    // TLS.
    const TlsConfig& tls = options_.tls;
    if (tls.insecure_skip_verify) {
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    }
    if (!tls.ca_pem.empty()) {
      curl_blob blob{const_cast<char*>(tls.ca_pem.data()), tls.ca_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &blob);
    }
    const std::string& cert = r.client_cert_pem.empty() ? tls.client_cert_pem : r.client_cert_pem;
    const std::string& key = r.client_cert_pem.empty() ? tls.client_key_pem : r.client_key_pem;
    if (!cert.empty()) {
      curl_blob cert_blob{const_cast<char*>(cert.data()), cert.size(), CURL_BLOB_COPY};
      curl_blob key_blob{const_cast<char*>(key.data()), key.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert_blob);
      curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key_blob);
      curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
    // Method, headers, body.
    curl_slist* headers = nullptr;
    bool has_accept = false, has_content_type = false;
    for (const auto& [k, v] : r.headers) {
      has_accept |= absl::EqualsIgnoreCase(k, "accept");
      has_content_type |= absl::EqualsIgnoreCase(k, "content-type");
      headers = curl_slist_append(headers, absl::StrCat(k, ": ", v).c_str());
    }
    if (!has_accept) headers = curl_slist_append(headers, "Accept: application/json");
    if (!r.body.empty() && !has_content_type) {
      headers = curl_slist_append(headers, "Content-Type: application/json");
    }
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    call->header_list = headers;
    if (r.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH") {
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    }
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Call::OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, call);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Call::OnWrite);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
  }
  call->Reset();
  call->last_activity = clock_->Now();
  if (call->request.idle_timeout > absl::ZeroDuration()) {
    if (call->idle_timer == nullptr) {
      const uint64_t id = call->id;
      call->idle_timer = clock_->CreateTimer([this, id] {
        {
          MutexLock lock(&mu_);
          commands_.push_back(Command{Command::kCheckIdle, id, nullptr});
        }
        Wakeup();
      });
    }
    call->idle_timer->ArmAt(call->last_activity + call->request.idle_timeout);
  }
  CURLMcode rc = curl_multi_add_handle(multi, call->easy);
  if (rc != CURLM_OK) {
    Finish(call, absl::InternalError(absl::StrCat("curl_multi_add_handle: ", curl_multi_strerror(rc))));
    return;
  }
  call->in_multi = true;
  ++in_flight_;
}

void Transport::Finish(Call* call, absl::Status status) {
  // Remove first, so that the request no longer counts as active when on_done runs.
  std::function<void(absl::Status)> on_done = std::move(call->callbacks.on_done);
  const uint64_t id = call->id;
  Remove(call);
  if (on_done && Deliverable(id)) {
    on_done(std::move(status));
    Delivered();
  }
}

void Transport::Remove(Call* call) {
  Detach(call);
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (*it == call->id) {
      held_.erase(it);
      break;
    }
  }
  if (call->pending) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->second == call->id) {
        pending_.erase(it);
        break;
      }
    }
  }
  const uint64_t id = call->id;
  // Destroy the timer (it may be firing on the clock's thread) before dropping the call.
  call->idle_timer.reset();
  calls_.erase(id);
  {
    MutexLock lock(&mu_);
    --active_;
  }
  if (id == opener_) OnConnectionSettled();
}

void Transport::CheckIdle(uint64_t id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  Call* call = it->second.get();
  if (!call->in_multi) return;
  const absl::Time deadline = call->last_activity + call->request.idle_timeout;
  if (clock_->Now() < deadline) {
    call->idle_timer->ArmAt(deadline);
    return;
  }
  Finish(call, absl::DeadlineExceededError(absl::StrCat(
                   call->What(), ": stalled: no data for ",
                   absl::FormatDuration(call->request.idle_timeout))));
}

void Transport::Loop() {
  {
    MutexLock lock(&mu_);
    thread_id_ = std::this_thread::get_id();
  }
  CURLM* multi = static_cast<CURLM*>(multi_);
  std::deque<Command> commands;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stop_) break;
      commands.swap(commands_);
    }
    for (Command& c : commands) {
      switch (c.kind) {
        case Command::kStart: {
          Call* call = c.call.get();
          calls_.emplace(c.id, std::move(c.call));
          bool cancelled;
          {
            MutexLock lock(&mu_);
            cancelled = cancelled_.contains(c.id);
          }
          if (!cancelled) Admit(call);
          break;
        }
        case Command::kCancel: {
          auto it = calls_.find(c.id);
          if (it != calls_.end()) Remove(it->second.get());
          MutexLock lock(&mu_);
          cancelled_.erase(c.id);
          break;
        }
        case Command::kCheckIdle:
          CheckIdle(c.id);
          break;
        case Command::kRunPending:
          RunPending();
          break;
      }
    }
    commands.clear();

    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Call* call = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&call));
      const CURLcode result = msg->data.result;
      Detach(call);
      if (call->id == opener_) opener_settled_ = true;
      if (result == CURLE_OK && call->Success()) {
        Finish(call, absl::OkStatus());
        continue;
      }
      if (result == CURLE_WRITE_ERROR && call->aborted) {
        Finish(call, absl::AbortedError(absl::StrCat(call->What(), ": ended by the reader")));
        continue;
      }
      if (result != CURLE_OK) {
        bool cancelled;
        {
          MutexLock lock(&mu_);
          cancelled = cancelled_.contains(call->id);
        }
        if (cancelled) continue;  // the cancel command removes it
        Finish(call, CurlStatus(result, call->errbuf, call->What()));
        continue;
      }
      // An HTTP error. Retry-After on 429 (any verb) or 5xx (GET) is honoured.
      int retry_after = 0;
      const bool retryable = call->status == 429 ||
                             (call->status >= 500 && call->request.method == "GET");
      if (retryable && call->retries < options_.max_retries &&
          absl::SimpleAtoi(call->retry_after, &retry_after) && retry_after >= 0) {
        ++call->retries;
        absl::Duration wait = std::min(absl::Seconds(retry_after), options_.max_retry_after);
        call->pending = true;
        pending_.emplace(clock_->Now() + wait, call->id);
        pending_timer_->ArmAt(pending_.begin()->first);
        continue;
      }
      Finish(call, ApiErrorFromResponse(call->status, call->error_body, call->retry_after));
    }
    if (opener_settled_) OnConnectionSettled();
    // Transfers added just now set curl's timeout to zero: the poll returns at once for them.
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  // Stopping: drop every request without callbacks.
  while (!calls_.empty()) Remove(calls_.begin()->second.get());
}

}  // namespace informerd::client
