#include "server/ha/queue_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/json_writer.h"
#include "client/api_error.h"
#include "google/protobuf/util/json_util.h"
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

}  // namespace

std::string QueueObjectJson(const QueueStoreOptions& options, const v1::QueueSpec& spec,
                            const std::vector<v1::InformerSpec>& informers,
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
  if (!informers.empty()) {
    std::string array = "[";
    for (size_t i = 0; i < informers.size(); ++i) {
      if (i > 0) array.push_back(',');
      array.append(ProtoJson(informers[i]));
    }
    array.push_back(']');
    out.append(R"(,"annotations":{)");
    AppendJsonString(&out, kInformersAnnotation);
    out.push_back(':');
    AppendJsonString(&out, array);
    out.push_back('}');
  }
  out.append(R"(},"spec":)");
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

absl::Status QueueStore::Save(const v1::QueueSpec& spec) {
  const std::string item = absl::StrCat(Collection(), "/", spec.name());
  const std::vector<v1::InformerSpec> informers = InformersOf(spec);
  absl::StatusOr<client::Client::RawResponse> created =
      Send("POST", Collection(), QueueObjectJson(options_, spec, informers, ""));
  if (created.ok() || !client::IsAlreadyExists(created.status())) return created.status();
  // Replace it: read its resourceVersion and write; a conflict means another write came between.
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<client::Client::RawResponse> current = Send("GET", item, "");
    if (!current.ok()) return current.status();
    simdjson::dom::parser parser;
    std::string_view rv;
    if (parser.parse(current->body).at_pointer("/metadata/resourceVersion").get_string().get(rv) !=
        simdjson::SUCCESS) {
      return absl::InternalError(
          absl::StrCat("Queue ", spec.name(), ": the API server's answer has no resourceVersion"));
    }
    absl::StatusOr<client::Client::RawResponse> updated =
        Send("PUT", item, QueueObjectJson(options_, spec, informers, std::string(rv)));
    if (updated.ok()) return absl::OkStatus();
    last = updated.status();
    if (!client::IsConflict(last)) return last;
  }
  return last;
}

absl::Status QueueStore::Remove(const std::string& name) {
  absl::StatusOr<client::Client::RawResponse> r =
      Send("DELETE", absl::StrCat(Collection(), "/", name), "");
  if (!r.ok() && client::IsNotFound(r.status()) &&
      !absl::StrContains(r.status().message(), "Queue CRD")) {
    return absl::OkStatus();
  }
  return r.status();
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
    std::string_view name_view;
    if (item.at_pointer("/metadata/name").get_string().get(name_view) != simdjson::SUCCESS) continue;
    const std::string name(name_view);
    std::string_view informers_json;
    // JSON Pointer: the annotation's "/" is written "~1".
    if (item.at_pointer(absl::StrCat("/metadata/annotations/",
                                     absl::StrReplaceAll(kInformersAnnotation, {{"/", "~1"}})))
            .get_string()
            .get(informers_json) != simdjson::SUCCESS) {
      informers_json = "";
    }
    absl::StatusOr<std::vector<v1::InformerSpec>> informers =
        ParseStoredInformers(name, absl::string_view(informers_json.data(), informers_json.size()));
    simdjson::dom::element spec;
    if (item["spec"].get(spec) != simdjson::SUCCESS) {
      out.push_back({name, absl::InvalidArgumentError(absl::StrCat("Queue ", name, ": spec: missing")),
                     std::move(informers)});
      continue;
    }
    out.push_back({name, ParseStoredSpec(name, simdjson::minify(spec)), std::move(informers)});
  }
  return out;
}

}  // namespace informerd::ha
