#include "client/client.h"

#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "client/api_error.h"
#include "client/object_parser.h"

namespace informerd::client {
namespace {

namespace od = simdjson::ondemand;

std::string Escape(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A query string built one parameter at a time.
class Query {
 public:
  void Add(absl::string_view key, absl::string_view value) {
    if (value.empty()) return;
    absl::StrAppend(&query_, query_.empty() ? "?" : "&", key, "=", Escape(value));
  }
  const std::string& str() const { return query_; }

 private:
  std::string query_;
};

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

absl::Status ListError(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("list response: ", what));
}

}  // namespace

WatchStream::~WatchStream() { transport_->Cancel(id_); }

absl::StatusOr<std::unique_ptr<Client>> Client::Create(Options options) {
  std::unique_ptr<Client> client(new Client(std::move(options)));
  const RestConfig& config = client->options_.config;
  absl::StatusOr<std::unique_ptr<Credentials>> credentials =
      Credentials::Create(config, {.clock = client->options_.clock});
  if (!credentials.ok()) return credentials.status();
  client->credentials_ = *std::move(credentials);
  absl::StatusOr<std::unique_ptr<Transport>> transport = Transport::Create({
      .host = config.host,
      .tls = config.tls,
      .proxy_url = config.proxy_url,
      .disable_compression = config.disable_compression,
      .user_agent = client->options_.user_agent,
      .qps = client->options_.qps,
      .burst = client->options_.burst,
      .clock = client->options_.clock,
  });
  if (!transport.ok()) return transport.status();
  client->transport_ = *std::move(transport);
  Client* c = client.get();
  absl::StatusOr<std::unique_ptr<Discovery>> discovery = Discovery::Create(
      {.fetch = [c](const std::string& path,
                    const std::string& accept) -> absl::StatusOr<Discovery::Response> {
        absl::StatusOr<RawResponse> r =
            c->Send(HttpRequest{.path = path, .headers = {{"Accept", accept}}});
        if (!r.ok()) return r.status();
        return Discovery::Response{std::move(r->content_type), std::move(r->body)};
      }});
  if (!discovery.ok()) return discovery.status();
  client->discovery_ = *std::move(discovery);
  return client;
}

Client::~Client() {
  // Stop the transport (and every callback) before the rest goes away.
  transport_.reset();
}

absl::StatusOr<Client::RawResponse> Client::Send(HttpRequest request) {
  if (transport_->OnTransportThread()) {
    return absl::FailedPreconditionError(
        "Client: a blocking request from a watch callback would wait for its own thread");
  }
  if (request.timeout == absl::ZeroDuration()) request.timeout = options_.request_timeout;
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<Credentials::Auth> auth = credentials_->Get();
    if (!auth.ok()) return auth.status();
    HttpRequest r = request;
    r.headers.insert(r.headers.end(), auth->headers.begin(), auth->headers.end());
    r.client_cert_pem = auth->client_cert_pem;
    r.client_key_pem = auth->client_key_pem;

    struct Sync {
      Mutex mu;
      bool done ABSL_GUARDED_BY(mu) = false;
      absl::Status status ABSL_GUARDED_BY(mu);
      RawResponse response ABSL_GUARDED_BY(mu);
    } sync;
    transport_->Start(
        std::move(r),
        {.on_headers =
             [&sync](int code, const std::vector<std::pair<std::string, std::string>>& headers) {
               MutexLock lock(&sync.mu);
               sync.response.status = code;
               sync.response.headers = headers;
               for (const auto& [k, v] : headers) {
                 if (k == "content-type") sync.response.content_type = v;
               }
             },
         .on_data =
             [&sync](absl::string_view chunk) {
               MutexLock lock(&sync.mu);
               sync.response.body.append(chunk.data(), chunk.size());
               return true;
             },
         .on_done =
             [&sync](absl::Status s) {
               MutexLock lock(&sync.mu);
               sync.status = std::move(s);
               sync.done = true;
             }});
    MutexLock lock(&sync.mu);
    sync.mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync.mu) { return sync.done; });
    if (IsUnauthorized(sync.status) && attempt == 0) {
      credentials_->Invalidate(auth->generation);
      continue;
    }
    if (!sync.status.ok()) return sync.status;
    return std::move(sync.response);
  }
}

absl::StatusOr<std::string> Client::ResourcePath(const GroupVersionResource& gvr,
                                                 const std::string& namespace_name,
                                                 const std::string& name, ResourceInfo* out) {
  absl::StatusOr<ResourceInfo> info = discovery_->Resource(gvr);
  if (!info.ok()) return info.status();
  if (!info->namespaced && !namespace_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(gvr.resource, " are cluster-scoped: no namespace"));
  }
  if (info->namespaced && namespace_name.empty() && !name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(gvr.resource, " are namespaced: a namespace is required"));
  }
  std::string path = info->BasePath();
  if (!namespace_name.empty()) absl::StrAppend(&path, "/namespaces/", Escape(namespace_name));
  absl::StrAppend(&path, "/", gvr.resource);
  if (!name.empty()) absl::StrAppend(&path, "/", Escape(name));
  if (out != nullptr) *out = *std::move(info);
  return path;
}

absl::StatusOr<std::shared_ptr<const Object>> Client::SendForObject(HttpRequest request) {
  absl::StatusOr<RawResponse> r = Send(std::move(request));
  if (!r.ok()) return r.status();
  return Object::Parse(r->body);
}

absl::StatusOr<std::shared_ptr<const Object>> Client::Get(const GroupVersionResource& gvr,
                                                          const std::string& namespace_name,
                                                          const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("Get: name is required");
  absl::StatusOr<std::string> path = ResourcePath(gvr, namespace_name, name);
  if (!path.ok()) return path.status();
  return SendForObject(HttpRequest{.path = *path});
}

absl::StatusOr<std::shared_ptr<const Object>> Client::Create(const GroupVersionResource& gvr,
                                                             const std::string& namespace_name,
                                                             const std::string& json) {
  absl::StatusOr<std::string> path = ResourcePath(gvr, namespace_name, "");
  if (!path.ok()) return path.status();
  return SendForObject(HttpRequest{.method = "POST", .path = *path, .body = json});
}

absl::StatusOr<std::shared_ptr<const Object>> Client::Update(const GroupVersionResource& gvr,
                                                             const std::string& namespace_name,
                                                             const std::string& name,
                                                             const std::string& json) {
  if (name.empty()) return absl::InvalidArgumentError("Update: name is required");
  absl::StatusOr<std::string> path = ResourcePath(gvr, namespace_name, name);
  if (!path.ok()) return path.status();
  return SendForObject(HttpRequest{.method = "PUT", .path = *path, .body = json});
}

absl::StatusOr<std::shared_ptr<const Object>> Client::Patch(const GroupVersionResource& gvr,
                                                            const std::string& namespace_name,
                                                            const std::string& name,
                                                            PatchType type,
                                                            const std::string& patch) {
  if (name.empty()) return absl::InvalidArgumentError("Patch: name is required");
  absl::StatusOr<std::string> path = ResourcePath(gvr, namespace_name, name);
  if (!path.ok()) return path.status();
  const char* content_type = type == PatchType::kMerge ? "application/merge-patch+json"
                             : type == PatchType::kStrategicMerge
                                 ? "application/strategic-merge-patch+json"
                                 : "application/json-patch+json";
  return SendForObject(HttpRequest{.method = "PATCH",
                                   .path = *path,
                                   .headers = {{"Content-Type", content_type}},
                                   .body = patch});
}

absl::Status Client::Delete(const GroupVersionResource& gvr, const std::string& namespace_name,
                            const std::string& name, const DeleteOptions& options) {
  if (name.empty()) return absl::InvalidArgumentError("Delete: name is required");
  absl::StatusOr<std::string> path = ResourcePath(gvr, namespace_name, name);
  if (!path.ok()) return path.status();
  std::string body = R"({"kind":"DeleteOptions","apiVersion":"v1")";
  if (!options.propagation_policy.empty()) {
    absl::StrAppend(&body, ",\"propagationPolicy\":", JsonQuote(options.propagation_policy));
  }
  if (options.grace_period_seconds) {
    absl::StrAppend(&body, ",\"gracePeriodSeconds\":", *options.grace_period_seconds);
  }
  if (!options.precondition_uid.empty() || !options.precondition_resource_version.empty()) {
    absl::StrAppend(&body, ",\"preconditions\":{");
    bool comma = false;
    if (!options.precondition_uid.empty()) {
      absl::StrAppend(&body, "\"uid\":", JsonQuote(options.precondition_uid));
      comma = true;
    }
    if (!options.precondition_resource_version.empty()) {
      absl::StrAppend(&body, comma ? "," : "", "\"resourceVersion\":",
                      JsonQuote(options.precondition_resource_version));
    }
    absl::StrAppend(&body, "}");
  }
  absl::StrAppend(&body, "}");
  return Send(HttpRequest{.method = "DELETE", .path = *path, .body = body}).status();
}

absl::StatusOr<ListResult> Client::List(const GroupVersionResource& gvr,
                                        const ListOptions& options) {
  ResourceInfo info;
  absl::StatusOr<std::string> path = ResourcePath(gvr, options.namespace_name, "", &info);
  if (!path.ok()) return path.status();
  Query q;
  q.Add("labelSelector", options.label_selector);
  q.Add("fieldSelector", options.field_selector);
  q.Add("resourceVersion", options.resource_version);
  q.Add("resourceVersionMatch", options.resource_version_match);
  if (options.limit > 0) q.Add("limit", absl::StrCat(options.limit));
  q.Add("continue", options.continue_token);
  absl::StatusOr<RawResponse> r = Send(HttpRequest{.path = *path + q.str()});
  if (!r.ok()) return r.status();

  // Parse the list in place: give the body simdjson's padding.
  std::string& body = r->body;
  body.reserve(body.size() + Object::kPadding);
  od::parser parser;
  od::document doc;
  od::object root;
  if (auto err = parser.iterate(body.data(), body.size(), body.capacity()).get(doc)) {
    return ListError(simdjson::error_message(err));
  }
  if (doc.get_object().get(root)) return ListError("not a JSON object");
  ListResult result;
  ObjectParser object_parser;
  const std::string api_version = gvr.GroupVersion();
  ObjectParseOptions parse_options{.default_kind = info.kind,
                                   .default_api_version = api_version,
                                   .compact = false,
                                   .drop_managed_fields = options.drop_managed_fields};
  const char* end = body.data() + body.size();
  for (auto field : root) {
    std::string_view key;
    od::value v;
    if (field.unescaped_key().get(key) || field.value().get(v)) return ListError("malformed field");
    if (key == "metadata") {
      od::object meta;
      if (v.get_object().get(meta)) return ListError("metadata is not an object");
      for (auto mf : meta) {
        std::string_view mk, s;
        od::value mv;
        if (mf.unescaped_key().get(mk) || mf.value().get(mv)) return ListError("malformed metadata");
        if (mk == "resourceVersion") {
          if (mv.get_string().get(s)) return ListError("metadata.resourceVersion is not a string");
          result.resource_version.assign(s);
        } else if (mk == "continue") {
          if (mv.get_string().get(s)) return ListError("metadata.continue is not a string");
          result.continue_token.assign(s);
        } else if (mk == "remainingItemCount") {
          int64_t n = 0;
          if (!mv.get_int64().get(n)) result.remaining_item_count = n;
        }
      }
    } else if (key == "items") {
      od::json_type type;
      if (v.type().get(type)) return ListError("malformed items");
      if (type == od::json_type::null) continue;
      od::array items;
      if (v.get_array().get(items)) return ListError("items is not an array");
      for (auto item : items) {
        od::value iv;
        if (item.get(iv)) return ListError("malformed item");
        absl::StatusOr<std::shared_ptr<const Object>> object =
            object_parser.Parse(iv, end, parse_options);
        if (!object.ok()) {
          return ListError(absl::StrCat("item ", result.items.size(), ": ", object.status().message()));
        }
        result.items.push_back(*std::move(object));
      }
    }
  }
  return result;
}

absl::StatusOr<std::unique_ptr<WatchStream>> Client::Watch(const GroupVersionResource& gvr,
                                                           const WatchOptions& options,
                                                           WatchHandler handler) {
  absl::StatusOr<std::string> path = ResourcePath(gvr, options.namespace_name, "");
  if (!path.ok()) return path.status();
  Query q;
  q.Add("watch", "true");
  q.Add("labelSelector", options.label_selector);
  q.Add("fieldSelector", options.field_selector);
  q.Add("resourceVersion", options.resource_version);
  if (options.allow_bookmarks) q.Add("allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) q.Add("timeoutSeconds", absl::StrCat(options.timeout_seconds));
  if (options.send_initial_events.has_value()) {
    q.Add("sendInitialEvents", *options.send_initial_events ? "true" : "false");
    q.Add("resourceVersionMatch", "NotOlderThan");
  }
  absl::StatusOr<Credentials::Auth> auth = credentials_->Get();
  if (!auth.ok()) return auth.status();
  absl::StatusOr<std::unique_ptr<WatchDecoder>> decoder =
      WatchDecoder::Create({.drop_managed_fields = options.drop_managed_fields});
  if (!decoder.ok()) return decoder.status();

  // State of the stream, used only on the transport thread.
  struct State {
    std::unique_ptr<WatchDecoder> decoder;
    WatchHandler handler;
    std::vector<WatchEvent> events;
    absl::Status error;  // why the decoder ended the stream
  };
  auto state = std::make_shared<State>();
  state->decoder = *std::move(decoder);
  state->handler = std::move(handler);
  HttpRequest request{.path = *path + q.str(),
                      .headers = auth->headers,
                      .idle_timeout = options.idle_timeout,
                      .client_cert_pem = auth->client_cert_pem,
                      .client_key_pem = auth->client_key_pem,
                      .accept_compressed = false};
  Credentials* credentials = credentials_.get();
  const uint64_t generation = auth->generation;
  const uint64_t id = transport_->Start(
      std::move(request),
      {.on_data =
           [state](absl::string_view chunk) {
             absl::Status s = state->decoder->Feed(chunk, &state->events);
             if (!state->events.empty() && state->handler.on_events) {
               state->handler.on_events(state->events);
             }
             state->events.clear();
             if (!s.ok()) {
               state->error = std::move(s);
               return false;
             }
             return true;
           },
       .on_done =
           [state, credentials, generation](absl::Status s) {
             if (!state->error.ok()) {
               s = state->error;
             } else if (s.ok()) {
               s = state->decoder->Finish();
             } else if (IsUnauthorized(s)) {
               credentials->Invalidate(generation);
             }
             if (state->handler.on_close) state->handler.on_close(std::move(s));
           }});
  return std::unique_ptr<WatchStream>(new WatchStream(transport_.get(), id));
}

}  // namespace informerd::client
