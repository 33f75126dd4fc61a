#include "server/informer/field_path.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simdjson.h"

namespace informerd::informer {
namespace {

namespace od = simdjson::ondemand;

// One On-Demand parser per thread: its buffers are reused by every evaluation on that thread.
od::parser& ThreadParser() {
  thread_local od::parser parser;
  return parser;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

void EmitScalar(od::value value, absl::FunctionRef<void(absl::string_view)> emit) {
  od::json_type type;
  if (value.type().get(type)) return;
  switch (type) {
    case od::json_type::string: {
      std::string_view s;
      if (!value.get_string().get(s)) emit(absl::string_view(s.data(), s.size()));
      break;
    }
    case od::json_type::number: {
      std::string_view raw = TrimRight(value.raw_json_token());
      emit(absl::string_view(raw.data(), raw.size()));
      break;
    }
    case od::json_type::boolean: {
      bool b = false;
      if (!value.get_bool().get(b)) emit(b ? "true" : "false");
      break;
    }
    default:
      break;
  }
}

// Arrays nested in arrays that a path walks into, at most: the recursion below is bounded by
// this, not by whatever nesting an object from the API server has.
constexpr int kMaxNestedArrays = 32;

// Emits the values at segments[depth..] below `current`; `arrays` counts the arrays walked into
// since the last object.
void Walk(od::value current, const std::vector<std::string>& segments, size_t depth, int arrays,
          absl::FunctionRef<void(absl::string_view)> emit) {
  od::json_type type;
  if (current.type().get(type)) return;
  if (type == od::json_type::array) {
    if (arrays >= kMaxNestedArrays) return;
    // An array in the middle of the path is walked into: each element continues the path, so
    // `spec.volumes.configMap.name` visits every volume. At the end, each scalar element counts.
    od::array array;
    if (current.get_array().get(array)) return;
    for (auto element : array) {
      od::value v;
      if (element.get(v)) return;
      if (depth == segments.size()) {
        EmitScalar(v, emit);
      } else {
        Walk(v, segments, depth, arrays + 1, emit);
      }
    }
    return;
  }
  if (depth == segments.size()) {
    EmitScalar(current, emit);
    return;
  }
  od::object obj;
  if (current.get_object().get(obj)) return;
  od::value next;
  if (obj.find_field_unordered(segments[depth]).get(next)) return;
  Walk(next, segments, depth + 1, 0, emit);
}

}  // namespace

absl::StatusOr<FieldPath> FieldPath::Parse(absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("field path is empty");
  FieldPath result;
  result.text_ = std::string(path);
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("field path \"", path, "\": ", what));
  };
  size_t i = 0;
  bool expect_segment = true;  // at the start or after a dot
  while (i < path.size()) {
    if (path[i] == '[') {
      // ['key'] or ["key"]: a key that may contain dots.
      if (i + 1 >= path.size() || (path[i + 1] != '\'' && path[i + 1] != '"')) {
        return error("'[' must be followed by a quote");
      }
      const char quote = path[i + 1];
      const size_t close = path.find(quote, i + 2);
      if (close == absl::string_view::npos || close + 1 >= path.size() || path[close + 1] != ']') {
        return error("unterminated [\"...\"] segment");
      }
      if (close == i + 2) return error("empty segment");
      result.segments_.emplace_back(path.substr(i + 2, close - i - 2));
      i = close + 2;
      expect_segment = false;
      if (i < path.size() && path[i] != '.' && path[i] != '[') {
        return error("expected '.' or '[' after ']'");
      }
      if (i < path.size() && path[i] == '.') {
        ++i;
        expect_segment = true;
        if (i == path.size()) return error("empty segment");
      }
      continue;
    }
    size_t end = i;
    while (end < path.size() && path[end] != '.' && path[end] != '[') ++end;
    if (end == i) return error("empty segment");
    result.segments_.emplace_back(path.substr(i, end - i));
    i = end;
    expect_segment = false;
    if (i < path.size() && path[i] == '.') {
      ++i;
      expect_segment = true;
      if (i == path.size()) return error("empty segment");
    }
  }
  if (expect_segment) return error("empty segment");
  const auto& s = result.segments_;
  if (s.size() == 1 && s[0] == "kind") {
    result.known_ = Known::kKind;
  } else if (s.size() == 1 && s[0] == "apiVersion") {
    result.known_ = Known::kApiVersion;
  } else if (s.size() == 2 && s[0] == "metadata") {
    if (s[1] == "name") result.known_ = Known::kName;
    if (s[1] == "namespace") result.known_ = Known::kNamespace;
    if (s[1] == "uid") result.known_ = Known::kUid;
    if (s[1] == "resourceVersion") result.known_ = Known::kResourceVersion;
    if (s[1] == "generation") result.known_ = Known::kGeneration;
    if (s[1] == "deletionTimestamp") result.known_ = Known::kDeletionTimestamp;
  } else if (s.size() == 3 && s[0] == "metadata" && s[1] == "labels") {
    result.known_ = Known::kLabel;
  }
  return result;
}

void FieldPath::Values(const client::Object& object,
                       absl::FunctionRef<void(absl::string_view)> emit) const {
  auto emit_nonempty = [&](absl::string_view v) {
    if (!v.empty()) emit(v);
  };
  switch (known_) {
    case Known::kName:
      return emit_nonempty(object.name());
    case Known::kNamespace:
      return emit_nonempty(object.namespace_name());
    case Known::kUid:
      return emit_nonempty(object.uid());
    case Known::kResourceVersion:
      return emit_nonempty(object.resource_version());
    case Known::kDeletionTimestamp:
      return emit_nonempty(object.deletion_timestamp());
    case Known::kKind:
      return emit_nonempty(object.kind());
    case Known::kApiVersion:
      return emit_nonempty(object.api_version());
    case Known::kLabel:
      if (auto v = object.label(segments_[2])) emit(*v);
      return;
    case Known::kGeneration:
      // Absent and 0 look the same in the parsed metadata; read the JSON to tell them apart.
    case Known::kNone:
      break;
  }
  absl::string_view json = object.json();
  od::parser& parser = ThreadParser();
  od::document doc;
  if (parser.iterate(json.data(), json.size(), json.size() + client::Object::kPadding).get(doc)) {
    return;
  }
  od::value root;
  if (doc.get_value().get(root)) return;
  Walk(root, segments_, 0, 0, emit);
}

std::string FieldPath::FirstValue(const client::Object& object) const {
  std::string first;
  bool found = false;
  Values(object, [&](absl::string_view v) {
    if (!found) first.assign(v.data(), v.size());
    found = true;
  });
  return first;
}

}  // namespace informerd::informer
