#include "client/object.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string_view>

#include <malloc.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
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

// Where `value` (decoded) is spelled in the input at `raw` (just after the opening quote), or
// nullptr when the spelling has escape sequences.
const char* Unescaped(std::string_view value, const char* raw) {
  if (raw[value.size()] != '"') return nullptr;
  if (std::memchr(raw, '\\', value.size()) != nullptr) return nullptr;
  return raw;
}

// Reads a string; null leaves `out` empty. Anything else is an error naming `field`.
template <typename Str>
absl::Status ReadString(od::value v, Str* out, absl::string_view field) {
  od::json_type type;
  if (auto err = v.type().get(type)) return JsonError(field, err);
  if (type == od::json_type::null) return absl::OkStatus();
  if (type != od::json_type::string) return FieldError(field, "not a string");
  const char* raw = v.raw_json_token().data() + 1;  // peeks: the token starts with '"'
  if (auto err = v.get_string().get(out->value)) return JsonError(field, err);
  out->raw = Unescaped(out->value, raw);
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

size_t AlignUp8(size_t n) { return (n + 7) & ~size_t{7}; }

// What the allocator of the Object being built is asked for and reports back. Thread-local, so
// that the allocator is stateless and adds no bytes to the shared_ptr control block.
struct TrailingRequest {
  size_t extra = 0;          // bytes wanted after the control block
  char* trailing = nullptr;  // out: where they start
  size_t chunk = 0;          // out: malloc's size of the whole allocation
};
thread_local TrailingRequest* t_trailing_request = nullptr;

// Allocates the shared_ptr block of an Object with more bytes right after it (see
// TrailingRequest): one allocation per Object instead of two.
template <typename T>
struct TrailingBytesAllocator {
  using value_type = T;
  TrailingBytesAllocator() = default;
  template <typename U>
  TrailingBytesAllocator(const TrailingBytesAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    TrailingRequest* request = t_trailing_request;
    const size_t head = n * sizeof(T);
    const size_t extra = request != nullptr ? request->extra : 0;
    char* p = static_cast<char*>(::operator new(head + extra));
    if (request != nullptr) {
      request->trailing = p + head;
      request->chunk = malloc_usable_size(p) + sizeof(size_t);  // glibc's chunk header
    }
    return reinterpret_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { ::operator delete(p); }
  template <typename U>
  bool operator==(const TrailingBytesAllocator<U>&) const {
    return true;
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

absl::Status ObjectParser::ReadFinalizers(od::value value) {
  od::json_type type;
  if (auto err = value.type().get(type)) return JsonError("metadata.finalizers", err);
  if (type == od::json_type::null) return absl::OkStatus();
  od::array arr;
  if (type != od::json_type::array || value.get_array().get(arr)) {
    return FieldError("metadata.finalizers", "not an array");
  }
  for (auto item : arr) {
    od::value v;
    if (auto err = item.get(v)) return JsonError("metadata.finalizers", err);
    Str finalizer;
    if (absl::Status s = ReadString(v, &finalizer, "metadata.finalizers[]"); !s.ok()) return s;
    finalizers_.push_back(finalizer);
  }
  return absl::OkStatus();
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

absl::Status ObjectParser::CutManagedFields(od::raw_json_string key, od::value value) {
  // The member runs from the key's opening quote to the end of its value.
  const char* member = key.raw() - 1;
  od::json_type type;
  if (auto err = value.type().get(type)) return JsonError("metadata.managedFields", err);
  std::string_view raw;
  if (type == od::json_type::array) {
    od::array array;
    if (value.get_array().get(array) || array.raw_json().get(raw)) {
      return FieldError("metadata.managedFields", "not a JSON array");
    }
  } else if (type == od::json_type::object) {
    od::object object;
    if (value.get_object().get(object) || object.raw_json().get(raw)) {
      return FieldError("metadata.managedFields", "not a JSON value");
    }
  } else {
    raw = value.raw_json_token();  // a scalar (null): its token, maybe with trailing space
    while (!raw.empty() && IsJsonSpace(raw.back())) raw.remove_suffix(1);
  }
  const char* value_end = raw.data() + raw.size();
  // Take one separating comma with it: the one before, or, when it is the first member, the one
  // after (if any), so that what remains is valid JSON.
  const char* before = member;
  while (IsJsonSpace(before[-1])) --before;
  if (before[-1] == ',') {
    fields_.cut_begin = before - 1;
    fields_.cut_end = value_end;
  } else {
    const char* after = value_end;
    while (IsJsonSpace(*after)) ++after;
    fields_.cut_begin = member;
    fields_.cut_end = *after == ',' ? after + 1 : value_end;
  }
  return absl::OkStatus();
}

absl::Status ObjectParser::ReadMetadata(od::value value, const ObjectParseOptions& options) {
  const bool read_initial_events_end = options.read_initial_events_end;
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
    } else if (key.unsafe_is_equal("creationTimestamp")) {
      s = ReadString(v, &fields_.creation_timestamp, "metadata.creationTimestamp");
    } else if (key.unsafe_is_equal("finalizers")) {
      s = ReadFinalizers(v);
    } else if (key.unsafe_is_equal("generation")) {
      od::json_type type;
      if (auto err = v.type().get(type)) return JsonError("metadata.generation", err);
      if (type != od::json_type::null) {
        if (v.get_int64().get(fields_.generation)) {
          return FieldError("metadata.generation", "not an integer");
        }
      }
    } else if (key.unsafe_is_equal("labels") || key.unsafe_is_equal("annotations")) {
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
        Str k, val;
        od::raw_json_string raw_key;
        od::value ev;
        if (auto err = entry.key().get(raw_key)) return JsonError(what, err);
        if (auto err = entry.unescaped_key().get(k.value)) return JsonError(what, err);
        if (auto err = entry.value().get(ev)) return JsonError(what, err);
        od::json_type type;
        if (ev.type().get(type) || type != od::json_type::string) {
          return FieldError(absl::StrCat(what, "[\"", absl::string_view(k.value.data(), k.value.size()), "\"]"),
                            "not a string");
        }
        const char* raw_value = ev.raw_json_token().data() + 1;
        if (ev.get_string().get(val.value)) {
          return FieldError(absl::StrCat(what, "[\"", absl::string_view(k.value.data(), k.value.size()), "\"]"),
                            "not a string");
        }
        k.raw = Unescaped(k.value, raw_key.raw());
        val.raw = Unescaped(val.value, raw_value);
        (labels ? labels_ : annotations_).emplace_back(k, val);
        if (!labels && read_initial_events_end && k.value == "k8s.io/initial-events-end") {
          fields_.initial_events_end = val.value == "true";
        }
      }
    } else if (options.drop_managed_fields && key.unsafe_is_equal("managedFields")) {
      s = CutManagedFields(key, v);
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
  annotations_.clear();
  owners_.clear();
  finalizers_.clear();

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
      s = ReadMetadata(v, options);
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

  const bool inject = fields_.kind.value.empty() && !options.default_kind.empty();
  for (std::vector<std::pair<Str, Str>>* map : {&labels_, &annotations_}) {
    auto by_key = [](const auto& a, const auto& b) { return a.first.value < b.first.value; };
    if (map->size() > 1 && !std::is_sorted(map->begin(), map->end(), by_key)) {
      std::sort(map->begin(), map->end(), by_key);
    }
  }

  // The JSON bytes: `prefix` (kind/apiVersion prepended for list items) then `body`.
  std::string prefix;
  if (inject) {
    constexpr absl::string_view kKindOpen = "{\"kind\":\"";
    constexpr absl::string_view kApiVersionOpen = "\",\"apiVersion\":\"";
    prefix = absl::StrCat(kKindOpen, options.default_kind, kApiVersionOpen,
                          options.default_api_version, "\"");
    fields_.kind = Str{std::string_view(options.default_kind.data(), options.default_kind.size()),
                       prefix.data() + kKindOpen.size()};
    fields_.api_version =
        Str{std::string_view(options.default_api_version.data(),
                             options.default_api_version.size()),
            prefix.data() + kKindOpen.size() + options.default_kind.size() + kApiVersionOpen.size()};
    // "{}" gets no comma; anything else continues after the opening brace.
    std::string_view body = Trim(raw.data() + 1, raw.data() + raw.size() - 1);
    size_t i = 0;
    while (i < body.size() && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t')) ++i;
    prefix += (i == body.size()) ? "" : ",";
    raw.remove_prefix(1);  // the opening brace is part of the prefix
  }
  // The bytes kept: `raw`, or `raw` without the cut member. Offsets into them of a byte of `raw`:
  const char* const cut_begin = fields_.cut_begin;
  const char* const cut_end = fields_.cut_end;
  const bool cut = cut_begin != nullptr && cut_begin >= raw.data() && cut_end <= raw.data() + raw.size();
  std::string_view source = raw;
  if (cut) {
    spliced_.assign(raw.data(), cut_begin - raw.data());
    spliced_.append(cut_end, raw.data() + raw.size() - cut_end);
    source = spliced_;
  }
  auto source_offset = [&](const char* p) -> size_t {
    if (!cut || p < cut_begin) return p - raw.data();
    if (p >= cut_end) return p - raw.data() - (cut_end - cut_begin);
    return std::string_view::npos;  // inside the cut member
  };
  std::string_view body = source;
  if (options.compact) {
    compacted_.resize(source.size());
    size_t out_len = 0;
    if (auto err = simdjson::minify(source.data(), source.size(), compacted_.data(), out_len)) {
      return JsonError("object", err);
    }
    body = std::string_view(compacted_.data(), out_len);
  }
  // Minifying only removes whitespace: when it removed none, the bytes are the same.
  const bool body_is_raw = body.size() == source.size();

  const size_t json_size = prefix.size() + body.size();
  // Where the stored JSON spells `s`, or npos (then `s` gets a decoded copy).
  auto locate = [&](const Str& s) -> size_t {
    if (s.raw == nullptr) return std::string_view::npos;
    if (s.raw >= prefix.data() && s.raw + s.value.size() <= prefix.data() + prefix.size()) {
      return s.raw - prefix.data();
    }
    if (body_is_raw && s.raw >= raw.data() && s.raw + s.value.size() <= raw.data() + raw.size()) {
      const size_t at = source_offset(s.raw);
      return at == std::string_view::npos ? at : prefix.size() + at;
    }
    return std::string_view::npos;
  };
  size_t copies = 0;
  auto count = [&](const Str& s) {
    if (!s.value.empty() && locate(s) == std::string_view::npos) copies += s.value.size();
  };

  // Bounds of the compact form (see Object).
  constexpr size_t kMax16 = std::numeric_limits<uint16_t>::max();
  const Str* fields[Object::kFieldCount] = {};
  fields[Object::kApiVersion] = &fields_.api_version;
  fields[Object::kKind] = &fields_.kind;
  fields[Object::kUid] = &fields_.uid;
  fields[Object::kResourceVersion] = &fields_.resource_version;
  fields[Object::kDeletionTimestamp] = &fields_.deletion_timestamp;
  fields[Object::kCreationTimestamp] = &fields_.creation_timestamp;
  for (const Str* f : fields) {
    if (f->value.size() > kMax16) return FieldError("object", "a metadata string is longer than 65535 bytes");
    count(*f);
  }
  const bool namespaced = !fields_.namespace_name.value.empty();
  const size_t key_size =
      namespaced ? fields_.namespace_name.value.size() + 1 + fields_.name.value.size()
                 : fields_.name.value.size();
  if (key_size > kMax16) return FieldError("metadata.name", "the key is longer than 65535 bytes");
  if (labels_.size() > kMax16) return FieldError("metadata.labels", "more than 65535 labels");
  if (annotations_.size() > kMax16) {
    return FieldError("metadata.annotations", "more than 65535 annotations");
  }
  if (owners_.size() > kMax16) {
    return FieldError("metadata.ownerReferences", "more than 65535 owner references");
  }
  if (finalizers_.size() > kMax16) {
    return FieldError("metadata.finalizers", "more than 65535 finalizers");
  }
  for (const std::vector<std::pair<Str, Str>>* map : {&labels_, &annotations_}) {
    for (const auto& [k, v] : *map) {
      count(k);
      count(v);
    }
  }
  for (const Str& f : finalizers_) count(f);
  for (const Owner& o : owners_) {
    count(o.api_version);
    count(o.kind);
    count(o.name);
    count(o.uid);
  }

  // The bytes after the Object (see Object's layout).
  static_assert(alignof(Object::Label) <= 8 && alignof(OwnerReference) <= 8 &&
                alignof(absl::string_view) <= 8);
  static_assert(sizeof(Object::Label) % alignof(OwnerReference) == 0);
  static_assert(sizeof(OwnerReference) % alignof(absl::string_view) == 0);
  static_assert(sizeof(Object) % 8 == 0 && alignof(Object) == 8);
  const size_t labels_offset = AlignUp8(json_size);
  const size_t annotations_offset = labels_offset + labels_.size() * sizeof(Object::Label);
  const size_t owners_offset = annotations_offset + annotations_.size() * sizeof(Object::Label);
  const size_t finalizers_offset = owners_offset + owners_.size() * sizeof(OwnerReference);
  const size_t key_offset = finalizers_offset + finalizers_.size() * sizeof(absl::string_view);
  const size_t copies_offset = key_offset + key_size;
  const size_t used = copies_offset + copies;
  const size_t total = std::max(used, json_size + Object::kPadding);
  if (total > std::numeric_limits<uint32_t>::max()) {
    return FieldError("object", "4 GiB or larger");
  }

  TrailingRequest request{.extra = total};
  t_trailing_request = &request;
  auto object = std::allocate_shared<Object>(TrailingBytesAllocator<Object>(),
                                             Object::ConstructionKey());
  t_trailing_request = nullptr;
  char* const data = request.trailing;
  if (data != reinterpret_cast<char*>(object.get() + 1)) {
    // The standard library does not put the Object last in its control block.
    return absl::InternalError("Object: unexpected shared_ptr control block layout");
  }
  object->allocated_bytes_ = static_cast<uint32_t>(
      std::min<size_t>(request.chunk, std::numeric_limits<uint32_t>::max()));
  if (!prefix.empty()) std::memcpy(data, prefix.data(), prefix.size());
  std::memcpy(data + prefix.size(), body.data(), body.size());  // body holds at least "}"
  object->json_size_ = static_cast<uint32_t>(json_size);
  // Everything after the json is read by simdjson as padding: keep every byte of it defined.
  std::memset(data + json_size, 0, total - json_size);

  char* cursor = data + copies_offset;
  // The view of `s` in the allocation: into the json, or a copy at the cursor.
  auto place = [&](const Str& s) -> absl::string_view {
    if (s.value.empty()) return absl::string_view();
    const size_t at = locate(s);
    if (at != std::string_view::npos) return absl::string_view(data + at, s.value.size());
    std::memcpy(cursor, s.value.data(), s.value.size());
    absl::string_view placed(cursor, s.value.size());
    cursor += s.value.size();
    return placed;
  };
  for (int f = 0; f < Object::kFieldCount; ++f) {
    absl::string_view placed = place(*fields[f]);
    object->offsets_[f] = placed.empty() ? 0 : static_cast<uint32_t>(placed.data() - data);
    object->sizes_[f] = static_cast<uint16_t>(placed.size());
  }
  object->generation_ = fields_.generation;
  {
    char* key = data + key_offset;
    if (namespaced) {
      std::memcpy(key, fields_.namespace_name.value.data(), fields_.namespace_name.value.size());
      key += fields_.namespace_name.value.size();
      *key++ = '/';
    }
    if (!fields_.name.value.empty()) {
      std::memcpy(key, fields_.name.value.data(), fields_.name.value.size());
    }
    object->key_size_ = static_cast<uint16_t>(key_size);
    object->namespace_size_ = static_cast<uint16_t>(fields_.namespace_name.value.size());
  }
  auto place_map = [&](const std::vector<std::pair<Str, Str>>& map, size_t offset) {
    auto* entries = reinterpret_cast<Object::Label*>(data + offset);
    for (size_t i = 0; i < map.size(); ++i) {
      absl::string_view k = place(map[i].first);
      absl::string_view v = place(map[i].second);
      new (&entries[i]) Object::Label{k, v};
    }
    return static_cast<uint16_t>(map.size());
  };
  object->label_count_ = place_map(labels_, labels_offset);
  object->annotation_count_ = place_map(annotations_, annotations_offset);
  auto* finalizers = reinterpret_cast<absl::string_view*>(data + finalizers_offset);
  for (size_t i = 0; i < finalizers_.size(); ++i) {
    new (&finalizers[i]) absl::string_view(place(finalizers_[i]));
  }
  object->finalizer_count_ = static_cast<uint16_t>(finalizers_.size());
  auto* owners = reinterpret_cast<OwnerReference*>(data + owners_offset);
  for (size_t i = 0; i < owners_.size(); ++i) {
    const Owner& o = owners_[i];
    OwnerReference* ref = new (&owners[i]) OwnerReference();
    ref->api_version = place(o.api_version);
    ref->kind = place(o.kind);
    ref->name = place(o.name);
    ref->uid = place(o.uid);
    ref->controller = o.controller;
    ref->block_owner_deletion = o.block_owner_deletion;
  }
  object->owner_count_ = static_cast<uint16_t>(owners_.size());
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

namespace {

// The value of `key` in `map`, which is sorted by key.
std::optional<absl::string_view> Lookup(absl::Span<const Object::Label> map,
                                        absl::string_view key) {
  auto it = std::lower_bound(map.begin(), map.end(), key,
                             [](const Object::Label& l, absl::string_view k) { return l.key < k; });
  if (it == map.end() || it->key != key) return std::nullopt;
  return it->value;
}

}  // namespace

Object::~Object() { delete derived_.load(std::memory_order_acquire); }

namespace {

// Serializes the first derived() call on an object without a mutex per object: an object maps
// to one of these by its address. A reader that finds another making the form waits for it
// instead of making a second copy (100 Watch streams sending one new object would otherwise
// each encode it); objects sharing a stripe only wait for each other's first call.
constexpr size_t kDerivedStripes = 64;
Mutex& DerivedStripe(const void* object) {
  static Mutex* const stripes = new Mutex[kDerivedStripes];
  return stripes[(reinterpret_cast<uintptr_t>(object) >> 6) % kDerivedStripes];
}

}  // namespace

const Object::Derived& Object::derived(
    absl::FunctionRef<std::unique_ptr<Derived>()> make) const {
  if (const Derived* d = derived_.load(std::memory_order_acquire); d != nullptr) return *d;
  MutexLock lock(&DerivedStripe(this));
  if (const Derived* d = derived_.load(std::memory_order_acquire); d != nullptr) return *d;
  const Derived* made = make().release();
  derived_.store(made, std::memory_order_release);
  return *made;
}

std::optional<absl::string_view> Object::label(absl::string_view key) const {
  return Lookup(labels(), key);
}

std::optional<absl::string_view> Object::annotation(absl::string_view key) const {
  return Lookup(annotations(), key);
}

const OwnerReference* Object::controller_ref() const {
  for (const OwnerReference& ref : owner_references()) {
    if (ref.controller) return &ref;
  }
  return nullptr;
}

}  // namespace informerd::client
