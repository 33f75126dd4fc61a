#include "client/watch_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/api_error.h"
#include "client/object_parser.h"

namespace informerd::client {
namespace {

namespace od = simdjson::ondemand;

constexpr size_t kInitialCapacity = 64 << 10;
// A buffer grown past this for one large event is given back once it is empty again.
constexpr size_t kShrinkAbove = 4 << 20;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

absl::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded: return "ADDED";
    case WatchEventType::kModified: return "MODIFIED";
    case WatchEventType::kDeleted: return "DELETED";
    case WatchEventType::kBookmark: return "BOOKMARK";
  }
  return "UNKNOWN";
}

struct WatchDecoder::Parsers {
  od::parser json;
  ObjectParser object;
};

absl::StatusOr<std::unique_ptr<WatchDecoder>> WatchDecoder::Create(Options options) {
#if defined(__AVX2__) && defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("bmi") ||
      !__builtin_cpu_supports("pclmul")) {
    return absl::FailedPreconditionError(
        "this build of informerd decodes JSON with AVX2; the CPU does not support it");
  }
#endif
  if (options.max_event_bytes == 0) {
    return absl::InvalidArgumentError("WatchDecoder::Options.max_event_bytes must be positive");
  }
  return std::unique_ptr<WatchDecoder>(new WatchDecoder(options));
}

WatchDecoder::WatchDecoder(Options options)
    : options_(options), parsers_(std::make_unique<Parsers>()) {}

WatchDecoder::~WatchDecoder() = default;

absl::Status WatchDecoder::Fail(absl::Status status) {
  error_ = status;
  return status;
}

void WatchDecoder::Reserve(size_t n) {
  if (end_ + n + Object::kPadding <= capacity_) return;
  const size_t live = end_ - begin_;
  const size_t need = live + n + Object::kPadding;
  if (need <= capacity_ && begin_ >= live) {
    // Enough room once the consumed prefix is dropped, and the move is cheap relative to it.
    std::memmove(buf_.get(), buf_.get() + begin_, live);
  } else {
    size_t cap = std::max(kInitialCapacity, capacity_);
    while (cap < need) cap *= 2;
    std::unique_ptr<char[]> grown(new char[cap]);
    if (live > 0) std::memcpy(grown.get(), buf_.get() + begin_, live);
    buf_ = std::move(grown);
    capacity_ = cap;
  }
  stream_offset_ += begin_;
  scan_ -= begin_;
  end_ = live;
  begin_ = 0;
}

void WatchDecoder::Append(const char* data, size_t n) {
  Reserve(n);
  std::memcpy(buf_.get() + end_, data, n);
  end_ += n;
}

absl::Status WatchDecoder::Feed(absl::string_view chunk, std::vector<WatchEvent>* events) {
  if (!error_.ok()) return error_;
  const char* data = chunk.data();
  size_t n = chunk.size();
  const uint64_t chunk_offset = fed_;
  fed_ += n;
  if (n == 0) return absl::OkStatus();
  size_t at = 0;
  if (begin_ != end_) {
    // An event is pending in the buffer: complete it there first.
    const void* nl = std::memchr(data, '\n', n);
    if (nl == nullptr) {
      Append(data, n);
      return DecodeBuffered(events);
    }
    at = static_cast<const char*>(nl) - data + 1;
    Append(data, at);
    if (absl::Status s = DecodeBuffered(events); !s.ok()) return s;
  }
  // The buffer is empty: decode in the chunk itself every line followed by enough bytes for
  // simdjson's padding.
  while (at < n) {
    const void* nl = std::memchr(data + at, '\n', n - at);
    if (nl == nullptr) break;
    const size_t line_end = static_cast<const char*>(nl) - data;
    if (line_end + Object::kPadding > n) break;
    if (line_end - at > options_.max_event_bytes) {
      return Fail(absl::ResourceExhaustedError(
          absl::StrCat("watch event ", events_decoded_ + 1, " is ", line_end - at,
                       " bytes, more than the limit of ", options_.max_event_bytes)));
    }
    if (absl::Status s = DecodeLine(data + at, line_end - at, n - at, chunk_offset + at, events);
        !s.ok()) {
      return Fail(std::move(s));
    }
    at = line_end + 1;
  }
  if (at < n) {
    if (begin_ == end_) stream_offset_ = chunk_offset + at;  // buf_[0] will hold chunk[at]
    Append(data + at, n - at);
    return DecodeBuffered(events);
  }
  return absl::OkStatus();
}

absl::Status WatchDecoder::DecodeBuffered(std::vector<WatchEvent>* events) {
  for (;;) {
    const char* base = buf_.get();
    const void* nl = std::memchr(base + scan_, '\n', end_ - scan_);
    if (nl == nullptr) {
      scan_ = end_;
      break;
    }
    const size_t at = static_cast<const char*>(nl) - base;
    const size_t line_begin = begin_;
    begin_ = scan_ = at + 1;
    if (at - line_begin > options_.max_event_bytes) {
      return Fail(absl::ResourceExhaustedError(
          absl::StrCat("watch event ", events_decoded_ + 1, " is ", at - line_begin,
                       " bytes, more than the limit of ", options_.max_event_bytes)));
    }
    if (absl::Status s = DecodeLine(base + line_begin, at - line_begin, capacity_ - line_begin,
                                    stream_offset_ + line_begin, events);
        !s.ok()) {
      return Fail(std::move(s));
    }
  }
  if (end_ - begin_ > options_.max_event_bytes) {
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat("watch event ", events_decoded_ + 1, " exceeds the limit of ",
                     options_.max_event_bytes, " bytes (", end_ - begin_,
                     " bytes without a newline)")));
  }
  if (begin_ == end_) {
    stream_offset_ += begin_;
    begin_ = scan_ = end_ = 0;
    if (capacity_ > kShrinkAbove) {
      buf_.reset();
      capacity_ = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status WatchDecoder::DecodeLine(const char* line, size_t len, size_t capacity,
                                      uint64_t offset, std::vector<WatchEvent>* events) {
  size_t trimmed = len;
  while (trimmed > 0 && IsSpace(line[trimmed - 1])) --trimmed;
  size_t lead = 0;
  while (lead < trimmed && IsSpace(line[lead])) ++lead;
  if (lead == trimmed) return absl::OkStatus();  // blank line
  const uint64_t ordinal = events_decoded_ + 1;
  auto broken = [&](absl::string_view why) {
    std::string head(line + lead, std::min<size_t>(trimmed - lead, 80));
    return absl::DataLossError(absl::StrCat(
        "watch stream: event ", ordinal, " at byte ", offset, " is not a watch event: ",
        why, " (starts with \"", absl::CHexEscape(head), "\")"));
  };

  od::document doc;
  if (auto err = parsers_->json.iterate(line, trimmed, capacity).get(doc)) {
    return broken(simdjson::error_message(err));
  }
  od::object obj;
  if (auto err = doc.get_object().get(obj)) {
    return broken(err == simdjson::INCORRECT_TYPE ? "not a JSON object" : simdjson::error_message(err));
  }
  std::string_view type;
  bool have_type = false;
  bool have_object = false;
  bool initial_events_end = false;
  std::shared_ptr<const Object> object;
  std::string error_json;  // the object of an ERROR event
  const char* line_end = line + trimmed;
  ObjectParseOptions parse_options;
  parse_options.compact = options_.compact;
  parse_options.drop_managed_fields = options_.drop_managed_fields;
  parse_options.read_initial_events_end = true;
  for (auto field : obj) {
    od::raw_json_string key;
    od::value v;
    if (auto err = field.key().get(key)) return broken(simdjson::error_message(err));
    if (auto err = field.value().get(v)) return broken(simdjson::error_message(err));
    if (key.unsafe_is_equal("type")) {
      // The usual types compare raw; anything else (escapes) is unescaped.
      od::raw_json_string raw;
      if (v.get_raw_json_string().get(raw)) return broken("\"type\" is not a string");
      if (raw.unsafe_is_equal("MODIFIED")) {
        type = "MODIFIED";
      } else if (raw.unsafe_is_equal("ADDED")) {
        type = "ADDED";
      } else if (raw.unsafe_is_equal("DELETED")) {
        type = "DELETED";
      } else if (raw.unsafe_is_equal("BOOKMARK")) {
        type = "BOOKMARK";
      } else if (raw.unsafe_is_equal("ERROR")) {
        type = "ERROR";
      } else if (v.get_string().get(type)) {
        // `type` lives in the parser's string buffer, which later strings do not overwrite.
        return broken("\"type\" is not a string");
      }
      have_type = true;
    } else if (key.unsafe_is_equal("object")) {
      have_object = true;
      if (have_type && type == "ERROR") {
        od::object status;
        std::string_view raw;
        if (v.get_object().get(status) || status.raw_json().get(raw)) {
          return broken("the ERROR event's object is not a JSON object");
        }
        error_json.assign(raw);
        continue;
      }
      parse_options.read_initial_events_end = !have_type || type == "BOOKMARK";
      absl::StatusOr<std::shared_ptr<const Object>> parsed =
          parsers_->object.Parse(v, line_end, parse_options, &initial_events_end);
      if (!parsed.ok()) return broken(parsed.status().message());
      object = *std::move(parsed);
    }
  }
  const char* next = nullptr;
  if (doc.current_location().get(next) != simdjson::OUT_OF_BOUNDS) {
    return broken("trailing bytes after the event");
  }
  if (!have_type) return broken("no \"type\"");
  if (!have_object) return broken("no \"object\"");
  if (type == "ERROR") {
    if (object != nullptr) error_json = std::string(object->json());  // "object" came before "type"
    absl::StatusOr<ApiError> api_error = ParseApiError(error_json, 0);
    if (!api_error.ok()) return broken(absl::StrCat("ERROR event: ", api_error.status().message()));
    return ToStatus(*api_error);
  }
  WatchEvent event;
  if (type == "ADDED") {
    event.type = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    event.type = WatchEventType::kModified;
  } else if (type == "DELETED") {
    event.type = WatchEventType::kDeleted;
  } else if (type == "BOOKMARK") {
    event.type = WatchEventType::kBookmark;
    event.initial_events_end = initial_events_end;
  } else {
    return broken(absl::StrCat("unknown event type \"", absl::CHexEscape(std::string(type)), "\""));
  }
  event.object = std::move(object);
  events->push_back(std::move(event));
  ++events_decoded_;
  return absl::OkStatus();
}

absl::Status WatchDecoder::Finish() {
  if (!error_.ok()) return error_;
  for (size_t i = begin_; i < end_; ++i) {
    if (!IsSpace(buf_[i])) {
      return Fail(absl::DataLossError(absl::StrCat(
          "watch stream ended in the middle of event ", events_decoded_ + 1, " (",
          end_ - begin_, " bytes received without the rest)")));
    }
  }
  return absl::OkStatus();
}

}  // namespace informerd::client
