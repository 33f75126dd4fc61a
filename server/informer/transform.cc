#include "server/informer/transform.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/object_parser.h"
#include "server/informer/field_path.h"
#include "simdjson.h"

namespace informerd::informer {

// One level of the object tree that the transform touches.
struct Transform::Node {
  bool drop = false;       // drop this field
  bool kept = false;       // under a keep-only parent: output this field
  bool keep_only = false;  // output only the kept children of this object
  bool whole = false;      // the end of a keep path: kept with everything below (but drops)
  std::map<std::string, std::unique_ptr<Node>, std::less<>> children;

  bool HasWork() const { return keep_only || !children.empty(); }
  const Node* Find(std::string_view key) const {
    auto it = children.find(key);
    return it == children.end() ? nullptr : it->second.get();
  }
  // Keeps this subtree whole: no level below filters, only drops still apply.
  void MakeWhole() {
    whole = true;
    keep_only = false;
    for (auto& [name, child] : children) {
      child->MakeWhole();
      child->whole = false;
    }
  }
  Node* Child(const std::string& key) {
    std::unique_ptr<Node>& child = children[key];
    if (child == nullptr) child = std::make_unique<Node>();
    return child.get();
  }
};

namespace {

namespace od = simdjson::ondemand;

od::parser& ThreadParser() {
  thread_local od::parser parser;
  return parser;
}

// The bytes of a key between its quotes, in the input buffer.
std::string_view RawKey(const od::raw_json_string& key) {
  const char* begin = key.raw();
  const char* p = begin;
  while (*p != '"') p += (*p == '\\') ? 2 : 1;
  return std::string_view(begin, p - begin);
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

absl::Status JsonError(simdjson::error_code e) {
  return absl::InvalidArgumentError(absl::StrCat("transform: ", simdjson::error_message(e)));
}

absl::Status AppendRaw(od::value value, std::string* out) {
  od::json_type type;
  if (auto e = value.type().get(type)) return JsonError(e);
  std::string_view raw;
  if (type == od::json_type::object) {
    od::object obj;
    if (auto e = value.get_object().get(obj)) return JsonError(e);
    if (auto e = obj.raw_json().get(raw)) return JsonError(e);
  } else if (type == od::json_type::array) {
    od::array arr;
    if (auto e = value.get_array().get(arr)) return JsonError(e);
    if (auto e = arr.raw_json().get(raw)) return JsonError(e);
  } else {
    raw = TrimRight(value.raw_json_token());
  }
  out->append(raw.data(), raw.size());
  return absl::OkStatus();
}

// Writes `obj` as transformed by `node` to `out`; sets `*changed` when a field is left out.
absl::Status Rewrite(od::object obj, const Transform::Node& node, std::string* out,
                     bool* changed) {
  out->push_back('{');
  bool first = true;
  for (auto field : obj) {
    od::raw_json_string raw_key;
    if (auto e = field.key().get(raw_key)) return JsonError(e);
    const std::string_view key = RawKey(raw_key);
    od::value value;
    if (auto e = field.value().get(value)) return JsonError(e);
    const Transform::Node* child = node.Find(key);
    const bool output =
        child != nullptr ? !child->drop && (!node.keep_only || child->kept) : !node.keep_only;
    if (!output) {
      *changed = true;
      continue;  // On-Demand skips the unread value
    }
    if (!first) out->push_back(',');
    first = false;
    out->push_back('"');
    out->append(key.data(), key.size());
    out->append("\":");
    if (child != nullptr && child->HasWork()) {
      od::json_type type;
      if (auto e = value.type().get(type)) return JsonError(e);
      if (type == od::json_type::object) {
        od::object sub;
        if (auto e = value.get_object().get(sub)) return JsonError(e);
        if (absl::Status s = Rewrite(sub, *child, out, changed); !s.ok()) return s;
        continue;
      }
    }
    if (absl::Status s = AppendRaw(value, out); !s.ok()) return s;
  }
  out->push_back('}');
  return absl::OkStatus();
}

// The end of a value starting where `value` stands (a JSON object, array or scalar), in the
// input buffer; consumes the value.
absl::StatusOr<const char*> ValueEnd(od::value value) {
  od::json_type type;
  if (auto e = value.type().get(type)) return JsonError(e);
  std::string_view raw;
  if (type == od::json_type::object) {
    od::object obj;
    if (auto e = value.get_object().get(obj)) return JsonError(e);
    if (auto e = obj.raw_json().get(raw)) return JsonError(e);
  } else if (type == od::json_type::array) {
    od::array arr;
    if (auto e = value.get_array().get(arr)) return JsonError(e);
    if (auto e = arr.raw_json().get(raw)) return JsonError(e);
  } else {
    raw = TrimRight(value.raw_json_token());
  }
  return raw.data() + raw.size();
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Drop-only transforms: finds the byte ranges of the fields to drop, following only the paths
// that lead to them (On-Demand skips everything else). A dropped field takes the bytes up to the
// next field's key (its comma included); a dropped last field takes the comma before it instead
// (merging with dropped neighbours). Ranges come in document order and never overlap.
absl::Status DropSpans(od::object obj, const Transform::Node& node,
                       std::vector<std::pair<const char*, const char*>>* spans) {
  // A dropped field whose end depends on whether another field follows.
  const char* pending_begin = nullptr;
  const char* pending_end = nullptr;
  for (auto field : obj) {
    od::raw_json_string raw_key;
    if (auto e = field.key().get(raw_key)) return JsonError(e);
    const char* key_begin = raw_key.raw() - 1;  // the key's opening quote
    if (pending_begin != nullptr) {
      spans->emplace_back(pending_begin, key_begin);
      pending_begin = nullptr;
    }
    const Transform::Node* child = node.Find(RawKey(raw_key));
    if (child == nullptr) continue;  // skipped unread
    od::value value;
    if (auto e = field.value().get(value)) return JsonError(e);
    if (child->drop) {
      absl::StatusOr<const char*> end = ValueEnd(value);
      if (!end.ok()) return end.status();
      pending_begin = key_begin;
      pending_end = *end;
      continue;
    }
    if (child->children.empty()) continue;
    od::json_type type;
    if (auto e = value.type().get(type)) return JsonError(e);
    if (type != od::json_type::object) continue;
    od::object sub;
    if (auto e = value.get_object().get(sub)) return JsonError(e);
    if (absl::Status s = DropSpans(sub, *child, spans); !s.ok()) return s;
  }
  if (pending_begin != nullptr) {
    // The last field: merge with dropped fields right before it, then take the comma before.
    const char* begin = pending_begin;
    while (!spans->empty() && spans->back().second == begin) {
      begin = spans->back().first;
      spans->pop_back();
    }
    const char* before = begin - 1;
    while (IsSpace(*before)) --before;
    if (*before == ',') begin = before;
    spans->emplace_back(begin, pending_end);
  }
  return absl::OkStatus();
}

// The canonical text of a path: dotted, with bracketed segments where a key contains a dot.
std::string CanonicalPath(const FieldPath& path) {
  std::string out;
  for (const std::string& segment : path.segments()) {
    if (segment.find('.') != std::string::npos || segment.find('[') != std::string::npos) {
      absl::StrAppend(&out, "['", segment, "']");
    } else {
      absl::StrAppend(&out, out.empty() ? "" : ".", segment);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transform>> Transform::Create(TransformOptions options) {
  if (options.metadata_only && !options.keep_paths.empty()) {
    return absl::InvalidArgumentError("transform: keep_paths and metadata_only exclude each other");
  }
  auto root = std::make_unique<Node>();
  std::vector<std::string> drops;
  std::vector<std::string> keeps;
  std::vector<std::string> needles;

  if (options.metadata_only || !options.keep_paths.empty()) {
    root->keep_only = true;
    for (const char* always : {"apiVersion", "kind", "metadata"}) {
      Node* node = root->Child(always);
      node->kept = true;
      node->whole = true;
    }
  }
  for (const std::string& text : options.keep_paths) {
    absl::StatusOr<FieldPath> path = FieldPath::Parse(text);
    if (!path.ok()) return absl::InvalidArgumentError(absl::StrCat("keep path: ", path.status().message()));
    Node* node = root.get();
    const auto& segments = path->segments();
    for (size_t i = 0; i < segments.size(); ++i) {
      node = node->Child(segments[i]);
      node->kept = true;
      if (node->whole) break;  // a shorter keep path keeps all of it already
      if (i + 1 < segments.size()) {
        node->keep_only = true;
      } else {
        node->MakeWhole();
      }
    }
    keeps.push_back(CanonicalPath(*path));
  }
  std::vector<std::string> drop_paths = std::move(options.drop_paths);
  if (options.strip_managed_fields) drop_paths.push_back("metadata.managedFields");
  for (const std::string& text : drop_paths) {
    absl::StatusOr<FieldPath> path = FieldPath::Parse(text);
    if (!path.ok()) return absl::InvalidArgumentError(absl::StrCat("drop path: ", path.status().message()));
    Node* node = root.get();
    for (const std::string& segment : path->segments()) node = node->Child(segment);
    node->drop = true;
    needles.push_back(absl::StrCat("\"", path->segments().back(), "\":"));
    drops.push_back(CanonicalPath(*path));
  }
  std::sort(drops.begin(), drops.end());
  drops.erase(std::unique(drops.begin(), drops.end()), drops.end());
  std::sort(keeps.begin(), keeps.end());
  keeps.erase(std::unique(keeps.begin(), keeps.end()), keeps.end());
  std::string fingerprint;
  if (options.metadata_only) fingerprint = "metadata-only";
  if (!keeps.empty()) absl::StrAppend(&fingerprint, "keep(", absl::StrJoin(keeps, ","), ")");
  if (!drops.empty()) {
    absl::StrAppend(&fingerprint, fingerprint.empty() ? "" : ";", "drop(", absl::StrJoin(drops, ","), ")");
  }
  if (root->keep_only) needles.clear();  // projections always parse
  std::sort(needles.begin(), needles.end());
  needles.erase(std::unique(needles.begin(), needles.end()), needles.end());
  return std::unique_ptr<Transform>(
      new Transform(std::move(root), std::move(needles), std::move(fingerprint)));
}

Transform::Transform(std::unique_ptr<Node> root, std::vector<std::string> needles,
                     std::string fingerprint)
    : root_(std::move(root)), needles_(std::move(needles)), fingerprint_(std::move(fingerprint)) {}

Transform::~Transform() = default;

bool Transform::identity() const { return !root_->HasWork(); }

absl::StatusOr<ObjectPtr> Transform::Apply(ObjectPtr object) const {
  if (identity()) return object;
  const absl::string_view json = object->json();
  if (!root_->keep_only) {
    bool maybe = false;
    for (const std::string& needle : needles_) {
      if (json.find(needle) != absl::string_view::npos) {
        maybe = true;
        break;
      }
    }
    if (!maybe) return object;
  }
  od::parser& parser = ThreadParser();
  od::document doc;
  if (auto e = parser.iterate(json.data(), json.size(), json.size() + client::Object::kPadding).get(doc)) {
    return JsonError(e);
  }
  od::object root;
  if (auto e = doc.get_object().get(root)) return JsonError(e);
  std::string out;
  if (!root_->keep_only) {
    // Dropping only: cut the dropped fields out of the bytes.
    std::vector<std::pair<const char*, const char*>> spans;
    if (absl::Status s = DropSpans(root, *root_, &spans); !s.ok()) return s;
    if (spans.empty()) return object;
    out.reserve(json.size() + client::Object::kPadding);
    const char* at = json.data();
    for (const auto& [begin, end] : spans) {
      out.append(at, begin - at);
      at = end;
    }
    out.append(at, json.data() + json.size() - at);
  } else {
    out.reserve(json.size() + client::Object::kPadding);
    bool changed = false;
    if (absl::Status s = Rewrite(root, *root_, &out, &changed); !s.ok()) return s;
    if (!changed) return object;
  }
  // Parse the result in place (its capacity leaves simdjson's padding) with this thread's parsers:
  // no copy, no parser allocation per object.
  const size_t size = out.size();
  out.resize(size + client::Object::kPadding, '\0');
  od::document rewritten;
  if (auto e = parser.iterate(out.data(), size, out.size()).get(rewritten)) return JsonError(e);
  od::value value;
  if (auto e = rewritten.get_value().get(value)) return JsonError(e);
  thread_local client::ObjectParser object_parser;
  client::ObjectParseOptions options;
  options.compact = false;  // rewritten from compact spans: already compact
  return object_parser.Parse(value, out.data() + size, options);
}

}  // namespace informerd::informer
