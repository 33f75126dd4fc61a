// The floor of decoding one watch event the way informerd does: the least work any decoder of the
// event line must do to hand on what informerd's WatchDecoder hands on — the event's type, the
// object's identity (metadata.name, namespace, uid, resourceVersion) and the object's bytes in
// memory of its own — and nothing else. It is simdjson's On-Demand pass (the structural index of
// the whole line, which skipping the rest needs), those fields read as string views, and one
// copy of the object's JSON into a reused buffer. No labels, owners or finalizers are read, no
// key is built, nothing is allocated: informerd's decoder does all of that on top, so a ratio
// against this floor shows what those cost.
//
//   MetadataFloor floor;
//   if (!floor.Decode(line_with_padding, line_size)) { /* not a watch event */ }
//
// Used by bench/watch_decode_benchmark (decoding) and bench/informer_benchmark (ingestion).
//
// Thread safety: one MetadataFloor per thread.
#ifndef INFORMERD_BENCH_METADATA_FLOOR_H_
#define INFORMERD_BENCH_METADATA_FLOOR_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "simdjson.h"

namespace informerd::bench {

class MetadataFloor {
 public:
  // `data` must have simdjson::SIMDJSON_PADDING readable bytes after `size`. Returns false when
  // the line is not a watch event with an object holding the four fields.
  bool Decode(const char* data, size_t size) {
    namespace od = simdjson::ondemand;
    od::document doc;
    if (parser_.iterate(data, size, size + simdjson::SIMDJSON_PADDING).get(doc)) return false;
    od::object event;
    if (doc.get_object().get(event)) return false;
    bool have_type = false;
    bool have_object = false;
    for (auto field : event) {
      od::raw_json_string key;
      od::value value;
      if (field.key().get(key) || field.value().get(value)) return false;
      if (key.unsafe_is_equal("type")) {
        if (value.get_string().get(type_)) return false;
        have_type = true;
      } else if (key.unsafe_is_equal("object")) {
        if (!ReadObject(value, data + size)) return false;
        have_object = true;
      }
    }
    return have_type && have_object;
  }

  std::string_view type() const { return type_; }
  std::string_view name() const { return name_; }
  std::string_view resource_version() const { return resource_version_; }
  const std::string& object_json() const { return copy_; }

 private:
  // Reads the identity fields, then copies the object's bytes: from its first token to the token
  // after its closing brace, where the walk left the iterator.
  bool ReadObject(simdjson::ondemand::value value, const char* line_end) {
    namespace od = simdjson::ondemand;
    const char* begin = value.raw_json_token().data();
    od::object object;
    if (value.get_object().get(object)) return false;
    int found = 0;
    for (auto field : object) {
      od::raw_json_string key;
      od::value v;
      if (field.key().get(key) || field.value().get(v)) return false;
      if (!key.unsafe_is_equal("metadata")) continue;
      od::object metadata;
      if (v.get_object().get(metadata)) return false;
      for (auto m : metadata) {
        od::raw_json_string mk;
        od::value mv;
        if (m.key().get(mk) || m.value().get(mv)) return false;
        std::string_view* into = mk.unsafe_is_equal("name")              ? &name_
                                 : mk.unsafe_is_equal("namespace")       ? &namespace_
                                 : mk.unsafe_is_equal("uid")             ? &uid_
                                 : mk.unsafe_is_equal("resourceVersion") ? &resource_version_
                                                                         : nullptr;
        if (into == nullptr) continue;
        if (mv.get_string().get(*into)) return false;
        ++found;
      }
    }
    const char* end = line_end;
    const char* next = nullptr;
    if (!value.current_location().get(next) && next != nullptr && next <= line_end) end = next;
    while (end > begin && end[-1] != '}') --end;
    copy_.assign(begin, end - begin);
    return found >= 3;  // cluster-scoped objects have no namespace
  }

  simdjson::ondemand::parser parser_;
  std::string_view type_, name_, namespace_, uid_, resource_version_;
  std::string copy_;
};

}  // namespace informerd::bench

#endif  // INFORMERD_BENCH_METADATA_FLOOR_H_
