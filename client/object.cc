#include "client/object.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/object_parser.h"

namespace informerd::client {
namespace {

namespace od = simdjson::ondemand;

static_assert(Object::kPadding == simdjson::SIMDJSON_PADDING);

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status JsonError(absl::string_view field, simdjson::error_code err) {
  return FieldError(field, simdjson::error_message(err));
}

// Reads a string; null leaves `out` empty. Anything else is an error naming `field`.
absl::Status ReadString(od::value v, std::string_view* out, absl::string_view field) {
  od::json_type type;
  if (auto err = v.type().get(type)) return JsonError(field, err);
  if (type == od::json_type::null) return absl::OkStatus();
  if (type != od::json_type::string) return FieldError(field, "not a string");
  if (auto err = v.get_string().get(*out)) return JsonError(field, err);
  return absl::OkStatus();
}

absl::Status ReadBool(od::value v, bool* out, absl::string_view field) {
  od::json_type type;
  if (auto err = v.type().get(type)) return JsonError(field, err);
  if (type == od::json_type::null) return absl::OkStatus();
  if (type != od::json_type::boolean) return FieldError(field, "not a boolean");
  if (auto err = v.get_bool().get(*out)) return JsonError(field, err);
  return absl::OkStatus();
}

std::string_view Trim(const char* begin, const char* end) {
  while (end > begin && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\r' || end[-1] == '\t')) {
    --end;
  }
  return std::string_view(begin, end - begin);
}

// Copies `s` into the buffer at *cursor and returns a view of the copy.
absl::string_view Place(char** cursor, std::string_view s) {
  if (s.empty()) return absl::string_view();
  std::memcpy(*cursor, s.data(), s.size());
  absl::string_view placed(*cursor, s.size());
  *cursor += s.size();
  return placed;
}

// Allocates the shared_ptr block of an Object with `extra` more bytes after it, and reports
// where those start: one allocation per Object instead of two.
template <typename T>
struct TrailingBytesAllocator {
  using value_type = T;
  size_t extra;
  char** trailing;
  TrailingBytesAllocator(size_t e, char** t) : extra(e), trailing(t) {}
  template <typename U>
  TrailingBytesAllocator(const TrailingBytesAllocator<U>& o)  // NOLINT: rebinding
      : extra(o.extra), trailing(o.trailing) {}
  T* allocate(size_t n) {
    constexpr size_t kAlign = alignof(std::max_align_t);
    const size_t head = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    char* p = static_cast<char*>(::operator new(head + extra));
    if (trailing != nullptr) *trailing = p + head;
    return reinterpret_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { ::operator delete(p); }
  template <typename U>
  bool operator==(const TrailingBytesAllocator<U>& o) const {
    return extra == o.extra;
  }
};

}  // namespace

absl::Status ObjectParser::ReadOwner(od::value value, Owner* owner) {
  od::object obj;
  if (auto err = value.get_object().get(obj)) {
    return FieldError("metadata.ownerReferences[]", err == simdjson::INCORRECT_TYPE
                                                        ? "not an object"
                                                        : simdjson::error_message(err));
  }
  for (auto field : obj) {
    std::string_view key;
    od::value v;
    if (auto err = field.unescaped_key().get(key)) return JsonError("metadata.ownerReferences", err);
    if (auto err = field.value().get(v)) return JsonError("metadata.ownerReferences", err);
    absl::Status s;
    if (key == "apiVersion") {
      s = ReadString(v, &owner->api_version, "metadata.ownerReferences[].apiVersion");
    } else if (key == "kind") {
      s = ReadString(v, &owner->kind, "metadata.ownerReferences[].kind");
    } else if (key == "name") {
      s = ReadString(v, &owner->name, "metadata.ownerReferences[].name");
    } else if (key == "uid") {
      s = ReadString(v, &owner->uid, "metadata.ownerReferences[].uid");
    } else if (key == "controller") {
      s = ReadBool(v, &owner->controller, "metadata.ownerReferences[].controller");
    } else if (key == "blockOwnerDeletion") {
      s = ReadBool(v, &owner->block_owner_deletion,
                   "metadata.ownerReferences[].blockOwnerDeletion");
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ObjectParser::ReadMetadata(od::value value, bool read_annotations) {
  od::object meta;
  if (auto err = value.get_object().get(meta)) {
    return FieldError("metadata",
                      err == simdjson::INCORRECT_TYPE ? "not an object" : simdjson::error_message(err));
  }
  for (auto field : meta) {
    od::raw_json_string key;
    od::value v;
    if (auto err = field.key().get(key)) return JsonError("metadata", err);
    if (auto err = field.value().get(v)) return JsonError("metadata", err);
    absl::Status s;
    if (key.unsafe_is_equal("name")) {
      s = ReadString(v, &fields_.name, "metadata.name");
    } else if (key.unsafe_is_equal("namespace")) {
      s = ReadString(v, &fields_.namespace_name, "metadata.namespace");
    } else if (key.unsafe_is_equal("uid")) {
      s = ReadString(v, &fields_.uid, "metadata.uid");
    } else if (key.unsafe_is_equal("resourceVersion")) {
      s = ReadString(v, &fields_.resource_version, "metadata.resourceVersion");
    } else if (key.unsafe_is_equal("deletionTimestamp")) {
      s = ReadString(v, &fields_.deletion_timestamp, "metadata.deletionTimestamp");
    } else if (key.unsafe_is_equal("generation")) {
      od::json_type type;
      if (auto err = v.type().get(type)) return JsonError("metadata.generation", err);
      if (type != od::json_type::null) {
        if (v.get_int64().get(fields_.generation)) {
          return FieldError("metadata.generation", "not an integer");
        }
      }
    } else if (key.unsafe_is_equal("labels") ||
               (read_annotations && key.unsafe_is_equal("annotations"))) {
      const bool labels = key.unsafe_is_equal("labels");
      const char* what = labels ? "metadata.labels" : "metadata.annotations";
      od::json_type type;
      if (auto err = v.type().get(type)) return JsonError(what, err);
      if (type == od::json_type::null) continue;
      od::object map;
      if (type != od::json_type::object || v.get_object().get(map)) {
        return FieldError(what, "not an object");
      }
      for (auto entry : map) {
        std::string_view k, val;
        od::value ev;
        if (auto err = entry.unescaped_key().get(k)) return JsonError(what, err);
        if (auto err = entry.value().get(ev)) return JsonError(what, err);
        if (ev.get_string().get(val)) {
          return FieldError(absl::StrCat(what, "[\"", absl::string_view(k.data(), k.size()), "\"]"),
                            "not a string");
        }
        if (labels) {
          labels_.emplace_back(k, val);
        } else if (k == "k8s.io/initial-events-end") {
          fields_.initial_events_end = val == "true";
        }
      }
    } else if (key.unsafe_is_equal("ownerReferences")) {
      od::json_type type;
      if (auto err = v.type().get(type)) return JsonError("metadata.ownerReferences", err);
      if (type == od::json_type::null) continue;
      od::array arr;
      if (type != od::json_type::array || v.get_array().get(arr)) {
        return FieldError("metadata.ownerReferences", "not an array");
      }
      for (auto item : arr) {
        od::value iv;
        if (auto err = item.get(iv)) return JsonError("metadata.ownerReferences", err);
        Owner owner;
        if (absl::Status os = ReadOwner(iv, &owner); !os.ok()) return os;
        owners_.push_back(owner);
      }
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Object>> ObjectParser::Parse(
    od::value value, const char* doc_end, const ObjectParseOptions& options,
    bool* initial_events_end) {
  fields_ = Fields();
  labels_.clear();
  owners_.clear();

  const char* begin = value.raw_json_token().data();
  od::object obj;
  if (auto err = value.get_object().get(obj)) {
    return FieldError("object",
                      err == simdjson::INCORRECT_TYPE ? "not a JSON object" : simdjson::error_message(err));
  }
  for (auto field : obj) {
    od::raw_json_string key;
    od::value v;
    if (auto err = field.key().get(key)) return JsonError("object", err);
    if (auto err = field.value().get(v)) return JsonError("object", err);
    absl::Status s;
    if (key.unsafe_is_equal("metadata")) {
      s = ReadMetadata(v, options.read_initial_events_end);
    } else if (key.unsafe_is_equal("kind")) {
      s = ReadString(v, &fields_.kind, "kind");
    } else if (key.unsafe_is_equal("apiVersion")) {
      s = ReadString(v, &fields_.api_version, "apiVersion");
    }
    if (!s.ok()) return s;
  }
  // The iterator now stands on the token after the object's closing brace (or at the end).
  const char* end = doc_end;
  const char* next = nullptr;
  if (!value.current_location().get(next) && next != nullptr && next <= doc_end) end = next;
  std::string_view raw = Trim(begin, end);
  if (raw.size() < 2 || raw.front() != '{' || raw.back() != '}') {
    return FieldError("object", "could not delimit the object's bytes");
  }

  const bool inject = fields_.kind.empty() && !options.default_kind.empty();
  if (inject) {
    fields_.kind = std::string_view(options.default_kind.data(), options.default_kind.size());
    fields_.api_version =
        std::string_view(options.default_api_version.data(), options.default_api_version.size());
  }
  if (labels_.size() > 1 &&
      !std::is_sorted(labels_.begin(), labels_.end(),
                      [](const auto& a, const auto& b) { return a.first < b.first; })) {
    std::sort(labels_.begin(), labels_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  // The JSON bytes, with kind/apiVersion prepended for list items.
  std::string prefix;
  if (inject) {
    prefix = absl::StrCat("{\"kind\":\"", options.default_kind, "\",\"apiVersion\":\"",
                          options.default_api_version, "\"");
    // "{}" gets no comma; anything else continues after the opening brace.
    std::string_view body = Trim(raw.data() + 1, raw.data() + raw.size() - 1);
    size_t i = 0;
    while (i < body.size() && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t')) ++i;
    prefix += (i == body.size()) ? "" : ",";
    raw.remove_prefix(1);  // the opening brace is part of the prefix
  }

  // Sizes of the parts of the one allocation (see Object::storage_).
  const bool namespaced = !fields_.namespace_name.empty();
  size_t strings = fields_.api_version.size() + fields_.kind.size() + fields_.name.size() +
                   2 * fields_.namespace_name.size() + 1 + fields_.uid.size() +
                   fields_.resource_version.size() + fields_.deletion_timestamp.size() +
                   fields_.name.size();
  for (const auto& [k, v] : labels_) strings += k.size() + v.size();
  for (const Owner& o : owners_) {
    strings += o.api_version.size() + o.kind.size() + o.name.size() + o.uid.size();
  }
  static_assert(alignof(Object::Label) <= alignof(std::max_align_t));
  static_assert(sizeof(Object::Label) % alignof(OwnerReference) == 0);
  const size_t labels_bytes = labels_.size() * sizeof(Object::Label);
  const size_t owners_bytes = owners_.size() * sizeof(OwnerReference);
  const size_t json_max = prefix.size() + raw.size();
  char* base = nullptr;
  auto object = std::allocate_shared<Object>(
      TrailingBytesAllocator<Object>(
          labels_bytes + owners_bytes + json_max + Object::kPadding + strings, &base),
      Object::ConstructionKey());
  char* const json = base + labels_bytes + owners_bytes;
  std::memcpy(json, prefix.data(), prefix.size());
  size_t json_len = prefix.size();
  if (options.compact) {
    size_t out_len = 0;
    if (auto err = simdjson::minify(raw.data(), raw.size(), json + json_len, out_len)) {
      return JsonError("object", err);
    }
    json_len += out_len;
  } else {
    std::memcpy(json + json_len, raw.data(), raw.size());
    json_len += raw.size();
  }
  object->json_ = absl::string_view(json, json_len);
  // The padding bytes are read by simdjson but never used: zero them to keep them defined.
  std::memset(json + json_len, 0, json_max - json_len + Object::kPadding);

  char* cursor = json + json_max + Object::kPadding;
  object->api_version_ = Place(&cursor, fields_.api_version);
  object->kind_ = Place(&cursor, fields_.kind);
  object->namespace_ = Place(&cursor, fields_.namespace_name);
  object->name_ = Place(&cursor, fields_.name);
  object->uid_ = Place(&cursor, fields_.uid);
  object->resource_version_ = Place(&cursor, fields_.resource_version);
  object->deletion_timestamp_ = Place(&cursor, fields_.deletion_timestamp);
  object->generation_ = fields_.generation;
  {
    char* key_begin = cursor;
    if (namespaced) {
      Place(&cursor, fields_.namespace_name);
      *cursor++ = '/';
    }
    Place(&cursor, fields_.name);
    object->key_ = absl::string_view(key_begin, cursor - key_begin);
  }
  auto* labels = reinterpret_cast<Object::Label*>(base);
  for (size_t i = 0; i < labels_.size(); ++i) {
    absl::string_view k = Place(&cursor, labels_[i].first);
    absl::string_view v = Place(&cursor, labels_[i].second);
    new (&labels[i]) Object::Label{k, v};
  }
  object->labels_ = absl::Span<const Object::Label>(labels, labels_.size());
  auto* owners = reinterpret_cast<OwnerReference*>(base + labels_bytes);
  for (size_t i = 0; i < owners_.size(); ++i) {
    const Owner& o = owners_[i];
    OwnerReference* ref = new (&owners[i]) OwnerReference();
    ref->api_version = Place(&cursor, o.api_version);
    ref->kind = Place(&cursor, o.kind);
    ref->name = Place(&cursor, o.name);
    ref->uid = Place(&cursor, o.uid);
    ref->controller = o.controller;
    ref->block_owner_deletion = o.block_owner_deletion;
  }
  object->owner_references_ = absl::Span<const OwnerReference>(owners, owners_.size());
  if (initial_events_end != nullptr) *initial_events_end = fields_.initial_events_end;
  return std::shared_ptr<const Object>(std::move(object));
}

absl::StatusOr<std::shared_ptr<const Object>> Object::Parse(absl::string_view json) {
  simdjson::padded_string padded(json.data(), json.size());
  od::parser parser;
  od::document doc;
  if (auto err = parser.iterate(padded).get(doc)) return JsonError("object", err);
  od::value value;
  if (auto err = doc.get_value().get(value)) return JsonError("object", err);
  ObjectParser object_parser;
  absl::StatusOr<std::shared_ptr<const Object>> object =
      object_parser.Parse(value, padded.data() + padded.size(), ObjectParseOptions());
  if (!object.ok()) return object;
  // Nothing but whitespace may follow the object: the iterator must have run out of tokens.
  const char* next = nullptr;
  if (doc.current_location().get(next) != simdjson::OUT_OF_BOUNDS) {
    return FieldError("object", "trailing content after the JSON object");
  }
  return object;
}

std::optional<absl::string_view> Object::label(absl::string_view key) const {
  // labels_ is sorted by key.
  auto it = std::lower_bound(labels_.begin(), labels_.end(), key,
                             [](const Label& l, absl::string_view k) { return l.key < k; });
  if (it == labels_.end() || it->key != key) return std::nullopt;
  return it->value;
}

const OwnerReference* Object::controller_ref() const {
  for (const OwnerReference& ref : owner_references_) {
    if (ref.controller) return &ref;
  }
  return nullptr;
}

}  // namespace informerd::client
