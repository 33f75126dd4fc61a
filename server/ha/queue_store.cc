#include "server/ha/queue_store.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/json_writer.h"
#include "client/api_error.h"
#include "google/protobuf/util/json_util.h"
#include "server/service/status.h"
#include "simdjson.h"

namespace informerd::ha {
namespace {

constexpr absl::string_view kApiPath = "/apis/informerd.io/v1alpha1";

// Proto JSON with lowerCamelCase names, as the config file has them. Our specs have no Any
// fields, so printing cannot fail.
std::string ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = false;
  (void)google::protobuf::util::MessageToJsonString(m, &out, print);
  return out;
}

// Parses proto JSON into *m, unknown fields refused; the library's message on error.
std::string ParseProtoJson(absl::string_view json, google::protobuf::Message* m) {
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;
  auto s = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), m, parse);
  return s.ok() ? "" : std::string(s.message());
}

// An annotation's value ("" when absent). JSON Pointer writes the key's "/" as "~1".
std::string_view Annotation(simdjson::dom::element item, absl::string_view key) {
  std::string_view value;
  if (item.at_pointer(absl::StrCat("/metadata/annotations/",
                                   absl::StrReplaceAll(key, {{"/", "~1"}})))
          .get_string()
          .get(value) != simdjson::SUCCESS) {
    return "";
  }
  return value;
}

// One stored object; nullopt when it has no name.
std::optional<StoredQueue> ParseStoredQueue(simdjson::dom::element item) {
  std::string_view name_view;
  if (item.at_pointer("/metadata/name").get_string().get(name_view) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  StoredQueue out;
  out.name = std::string(name_view);
  std::string_view rv;
  if (item.at_pointer("/metadata/resourceVersion").get_string().get(rv) == simdjson::SUCCESS) {
    out.resource_version = std::string(rv);
  }
  const std::string_view epoch = Annotation(item, kEpochAnnotation);
  if (!absl::SimpleAtoi(absl::string_view(epoch.data(), epoch.size()), &out.epoch)) out.epoch = 0;
  const std::string_view informers = Annotation(item, kInformersAnnotation);
  out.informers =
      ParseStoredInformers(out.name, absl::string_view(informers.data(), informers.size()));
  simdjson::dom::element spec;
  if (item["spec"].get(spec) != simdjson::SUCCESS) {
    out.spec = absl::InvalidArgumentError(absl::StrCat("Queue ", out.name, ": spec: missing"));
  } else {
    out.spec = ParseStoredSpec(out.name, simdjson::minify(spec));
  }
  return out;
}

}  // namespace

std::string QueueObjectJson(const QueueStoreOptions& options, const v1::QueueSpec& spec,
                            const std::vector<v1::InformerSpec>& informers, uint64_t epoch,
                            absl::string_view resource_version) {
  const std::string spec_json = ProtoJson(spec);
  std::string out = R"({"apiVersion":"informerd.io/v1alpha1","kind":"Queue","metadata":{"name":)";
  AppendJsonString(&out, spec.name());
  out.append(R"(,"namespace":)");
  AppendJsonString(&out, options.namespace_name);
  if (!resource_version.empty()) {
    out.append(R"(,"resourceVersion":)");
    AppendJsonString(&out, resource_version);
  }
  out.append(R"(,"labels":{)");
  AppendJsonString(&out, kLeaseLabel);
  out.push_back(':');
  AppendJsonString(&out, options.lease_name);
  out.push_back('}');
  out.append(R"(,"annotations":{)");
  AppendJsonString(&out, kEpochAnnotation);
  out.push_back(':');
  AppendJsonString(&out, absl::StrCat(epoch));
  if (!informers.empty()) {
    std::string array = "[";
    for (size_t i = 0; i < informers.size(); ++i) {
      if (i > 0) array.push_back(',');
      array.append(ProtoJson(informers[i]));
    }
    array.push_back(']');
    out.push_back(',');
    AppendJsonString(&out, kInformersAnnotation);
    out.push_back(':');
    AppendJsonString(&out, array);
  }
  out.append(R"(}},"spec":)");
  out.append(spec_json);
  out.push_back('}');
  return out;
}

absl::StatusOr<v1::QueueSpec> ParseStoredSpec(absl::string_view object_name,
                                              absl::string_view spec_json) {
  v1::QueueSpec spec;
  if (std::string why = ParseProtoJson(spec_json, &spec); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Queue ", object_name, ": spec: not an informerd.v1.QueueSpec: ", why));
  }
  if (spec.name() != object_name) {
    return absl::InvalidArgumentError(absl::StrCat("Queue ", object_name, ": spec.name: \"",
                                                   spec.name(), "\" is not the object's name"));
  }
  return spec;
}

absl::StatusOr<std::vector<v1::InformerSpec>> ParseStoredInformers(absl::string_view object_name,
                                                                   absl::string_view json) {
  std::vector<v1::InformerSpec> out;
  if (json.empty()) return out;
  simdjson::dom::parser parser;
  simdjson::dom::array items;
  if (parser.parse(json.data(), json.size()).get_array().get(items) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("Queue ", object_name, ": annotation ",
                                                   kInformersAnnotation, ": not a JSON array"));
  }
  size_t i = 0;
  for (simdjson::dom::element item : items) {
    const std::string text = simdjson::minify(item);
    v1::InformerSpec spec;
    if (std::string why = ParseProtoJson(text, &spec); !why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Queue ", object_name, ": annotation ",
                                                     kInformersAnnotation, "[", i,
                                                     "]: not an informerd.v1.InformerSpec: ", why));
    }
    out.push_back(std::move(spec));
    ++i;
  }
  return out;
}

QueueStore::QueueStore(client::Client* client, QueueStoreOptions options)
    : client_(client), options_(std::move(options)) {}

std::string QueueStore::Collection() const {
  return absl::StrCat(kApiPath, "/namespaces/", options_.namespace_name, "/queues");
}

absl::StatusOr<client::Client::RawResponse> QueueStore::Send(std::string method, std::string path,
                                                             std::string body) {
  client::HttpRequest request;
  request.method = std::move(method);
  request.path = std::move(path);
  request.headers = {{"Accept", "application/json"}};
  if (!body.empty()) request.headers.push_back({"Content-Type", "application/json"});
  request.body = std::move(body);
  request.timeout = options_.request_timeout;
  absl::StatusOr<client::Client::RawResponse> r = client_->Send(std::move(request));
  if (!r.ok() && client::IsNotFound(r.status()) &&
      absl::StrContains(r.status().message(), "the server could not find the requested resource")) {
    absl::Status hinted(r.status().code(),
                        absl::StrCat("storing queue specs needs the Queue CRD "
                                     "(queues.informerd.io, deploy/crd/queues.yaml): ",
                                     r.status().message()));
    r.status().ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
      hinted.SetPayload(url, payload);
    });
    return hinted;
  }
  return r;
}

std::vector<v1::InformerSpec> QueueStore::InformersOf(const v1::QueueSpec& spec) const {
  std::vector<v1::InformerSpec> out;
  if (options_.informer_spec == nullptr) return out;
  std::vector<std::string> ids;
  for (const v1::QueueSource& source : spec.sources()) {
    ids.push_back(source.informer_id());
    if (source.has_index()) ids.push_back(source.index().informer_id());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (const std::string& id : ids) {
    if (std::optional<v1::InformerSpec> s = options_.informer_spec(id)) out.push_back(*s);
  }
  return out;
}

absl::StatusOr<std::optional<StoredQueue>> QueueStore::Read(const std::string& name) {
  absl::StatusOr<client::Client::RawResponse> r =
      Send("GET", absl::StrCat(Collection(), "/", name), "");
  if (!r.ok()) {
    if (client::IsNotFound(r.status()) && !absl::StrContains(r.status().message(), "Queue CRD")) {
      return std::optional<StoredQueue>();
    }
    return r.status();
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(r->body).get(doc) != simdjson::SUCCESS) {
    return absl::InternalError(absl::StrCat("Queue ", name, ": the API server's answer is not JSON"));
  }
  std::optional<StoredQueue> stored = ParseStoredQueue(doc);
  if (!stored.has_value() || stored->resource_version.empty()) {
    return absl::InternalError(
        absl::StrCat("Queue ", name, ": the API server's answer has no name or resourceVersion"));
  }
  return stored;
}

absl::Status QueueStore::CheckTerm(const StoredQueue& stored, uint64_t epoch) const {
  if (stored.epoch <= epoch) return absl::OkStatus();
  return service::Error(
      absl::StatusCode::kUnavailable, v1::NOT_LEADER,
      absl::StrCat("Queue ", stored.name, " was written by a later leader's term (epoch ",
                   stored.epoch, " > this replica's ", epoch,
                   "): this replica no longer leads its replica set; retry at the leader"),
      {{"queue", stored.name}});
}

absl::Status QueueStore::Save(const v1::QueueSpec& spec) {
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  const std::string item = absl::StrCat(Collection(), "/", spec.name());
  const std::vector<v1::InformerSpec> informers = InformersOf(spec);
  // Replace what is there if this term may: read its term and resourceVersion, write on that
  // version; a conflict means another write came between, so read again. Create when absent.
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<std::optional<StoredQueue>> current = Read(spec.name());
    if (!current.ok()) return current.status();
    absl::StatusOr<client::Client::RawResponse> written;
    if (!current->has_value()) {
      written = Send("POST", Collection(), QueueObjectJson(options_, spec, informers, epoch, ""));
      if (written.ok()) return absl::OkStatus();
      last = written.status();
      if (!client::IsAlreadyExists(last)) return last;
      continue;
    }
    if (absl::Status s = CheckTerm(**current, epoch); !s.ok()) return s;
    written = Send("PUT", item,
                   QueueObjectJson(options_, spec, informers, epoch, (*current)->resource_version));
    if (written.ok()) return absl::OkStatus();
    last = written.status();
    if (!client::IsConflict(last) && !client::IsNotFound(last)) return last;
  }
  return last;
}

absl::Status QueueStore::Remove(const std::string& name) {
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<std::optional<StoredQueue>> current = Read(name);
    if (!current.ok()) return current.status();
    if (!current->has_value()) return absl::OkStatus();  // nothing to remove
    if (absl::Status s = CheckTerm(**current, epoch); !s.ok()) return s;
    std::string options = R"({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{)"
                          R"("resourceVersion":)";
    AppendJsonString(&options, (*current)->resource_version);
    options.append("}}");
    absl::StatusOr<client::Client::RawResponse> r =
        Send("DELETE", absl::StrCat(Collection(), "/", name), std::move(options));
    if (r.ok() || client::IsNotFound(r.status())) return absl::OkStatus();
    last = r.status();
    if (!client::IsConflict(last)) return last;
  }
  return last;
}

absl::StatusOr<StoredQueue> QueueStore::Claim(StoredQueue stored) {
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  absl::Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (absl::Status s = CheckTerm(stored, epoch); !s.ok()) return s;
    if (!stored.spec.ok()) return stored;  // not a spec: left as it is, reported by the caller
    if (stored.epoch == epoch) return stored;
    const std::vector<v1::InformerSpec> none;
    absl::StatusOr<client::Client::RawResponse> written =
        Send("PUT", absl::StrCat(Collection(), "/", stored.name),
             QueueObjectJson(options_, *stored.spec, stored.informers.ok() ? *stored.informers : none,
                             epoch, stored.resource_version));
    if (written.ok()) {
      stored.epoch = epoch;
      return stored;
    }
    last = written.status();
    if (!client::IsConflict(last)) return last;
    absl::StatusOr<std::optional<StoredQueue>> current = Read(stored.name);
    if (!current.ok()) return current.status();
    if (!current->has_value()) {
      return absl::NotFoundError(absl::StrCat("Queue ", stored.name, " was removed meanwhile"));
    }
    stored = **std::move(current);
  }
  return last;
}

absl::StatusOr<uint64_t> QueueStore::HighestEpoch() {
  absl::StatusOr<std::vector<StoredQueue>> all = List();
  if (!all.ok()) return all.status();
  uint64_t highest = 0;
  for (const StoredQueue& q : *all) highest = std::max(highest, q.epoch);
  return highest;
}

absl::StatusOr<std::vector<StoredQueue>> QueueStore::List() {
  std::string path = absl::StrCat(Collection(), "?labelSelector=", kLeaseLabel, "%3D",
                                  options_.lease_name);
  absl::StatusOr<client::Client::RawResponse> r = Send("GET", std::move(path), "");
  if (!r.ok()) return r.status();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(r->body).get(doc) != simdjson::SUCCESS) {
    return absl::InternalError("the API server's QueueList is not JSON");
  }
  simdjson::dom::array items;
  if (doc["items"].get_array().get(items) != simdjson::SUCCESS) {
    return std::vector<StoredQueue>{};  // "items": null
  }
  std::vector<StoredQueue> out;
  for (simdjson::dom::element item : items) {
    if (std::optional<StoredQueue> q = ParseStoredQueue(item)) out.push_back(*std::move(q));
  }
  return out;
}

}  // namespace informerd::ha
