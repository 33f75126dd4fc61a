// ObjectParser: builds Objects from simdjson On-Demand values; the one place where the metadata
// of an object is read. Used by Object::Parse, the watch decoder and the list decoder.
//
// Internal to client/: this header includes simdjson.h, so a file that includes it must be
// compiled with SIMDJSON_COPTS (see client/BUILD.bazel).
//
// Thread safety: an ObjectParser holds scratch space; use one per thread (or per decoder).
#ifndef INFORMERD_CLIENT_OBJECT_PARSER_H_
#define INFORMERD_CLIENT_OBJECT_PARSER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"
#include "simdjson.h"

namespace informerd::client {

struct ObjectParseOptions {
  // List items of built-in types come without kind and apiVersion; when these are set and the
  // item has no kind, `"kind":K,"apiVersion":V,` is prepended, so that an object from a LIST has
  // the same bytes as the same object from a WATCH (client-go fills them in the same way).
  absl::string_view default_kind;
  absl::string_view default_api_version;
  // Also report metadata.annotations["k8s.io/initial-events-end"] (for watch BOOKMARKs).
  bool read_initial_events_end = false;
  // Remove insignificant whitespace from the stored bytes. The API server sends compact JSON,
  // so decoders of its streams may turn this off; Object::Parse keeps it on.
  bool compact = true;
  // Leave metadata.managedFields out of the stored bytes, cut while the object is read: the
  // informers' default transform (strip managedFields) done in the one parse of the object
  // instead of a second pass over the stored copy.
  bool drop_managed_fields = false;
};

class ObjectParser {
 public:
  ObjectParser() = default;

  // Reads the object `value`, which must be a JSON object inside a document whose bytes end at
  // `doc_end` (the end of the input, padding excluded). Sets `*initial_events_end` when
  // options.read_initial_events_end and the annotation is "true".
  absl::StatusOr<std::shared_ptr<const Object>> Parse(simdjson::ondemand::value value,
                                                      const char* doc_end,
                                                      const ObjectParseOptions& options,
                                                      bool* initial_events_end = nullptr);

 private:
  // A string as read: its decoded value (a view into the simdjson parser's string buffer, valid
  // until its next document) and, when the JSON spells it without escape sequences, where its
  // bytes are in the input (so the Object can point into its own copy of the JSON).
  struct Str {
    std::string_view value;
    const char* raw = nullptr;
  };
  struct Owner {
    Str api_version, kind, name, uid;
    bool controller = false;
    bool block_owner_deletion = false;
  };
  struct Fields {
    Str api_version, kind, name, namespace_name, uid, resource_version, deletion_timestamp,
        creation_timestamp;
    int64_t generation = 0;
    bool initial_events_end = false;
    // With drop_managed_fields: the bytes of the managedFields member to leave out (with one
    // comma that separates it from a neighbour), or null.
    const char* cut_begin = nullptr;
    const char* cut_end = nullptr;
  };
  absl::Status ReadMetadata(simdjson::ondemand::value value, const ObjectParseOptions& options);
  // Records in fields_ the bytes of the managedFields member whose key `key` is and whose value
  // `value` is (not read yet).
  absl::Status CutManagedFields(simdjson::ondemand::raw_json_string key,
                                simdjson::ondemand::value value);
  absl::Status ReadFinalizers(simdjson::ondemand::value value);
  absl::Status ReadOwner(simdjson::ondemand::value value, Owner* owner);

  Fields fields_;
  std::vector<std::pair<Str, Str>> labels_;
  std::vector<std::pair<Str, Str>> annotations_;
  std::vector<Owner> owners_;
  std::vector<Str> finalizers_;
  std::string compacted_;  // scratch: the minified bytes when options.compact
  std::string spliced_;    // scratch: the bytes without a cut member
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_OBJECT_PARSER_H_
