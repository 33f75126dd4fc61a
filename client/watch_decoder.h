// WatchDecoder: turns the bytes of a Kubernetes watch response (newline-delimited JSON events,
// `{"type":"ADDED","object":{...}}\n`) into WatchEvents, whatever the chunking of the bytes.
//
// Feed it the response body as it arrives; each call returns the events that the chunk
// completed. An event may span any number of chunks (objects of many MiB are fine, up to
// Options::max_event_bytes); a chunk may hold any number of events. simdjson parses every event
// where it lies: in the chunk itself when the chunk holds it whole with simdjson's padding to
// spare, else in the decoder's buffer (kept padded), into which only such events are copied.
//
//   auto decoder = WatchDecoder::Create().value();
//   std::vector<WatchEvent> events;
//   absl::Status s = decoder->Feed(chunk, &events);   // for each chunk
//   ... deliver `events` (even when s is an error: they came before it) ...
//   if (s.ok()) s = decoder->Finish();                // at the end of the body
//
// The stream ends with an error, after which every call returns that same error:
//   * an ERROR event: its Status as an ApiError (client::IsExpired(s) for 410 Gone, ...);
//   * bytes that are not a watch event (invalid JSON, not an object, unknown type, no object,
//     bad metadata): DataLoss naming the event's ordinal and byte offset;
//   * an event larger than max_event_bytes: ResourceExhausted;
//   * Finish() with an incomplete event pending (a truncated stream): DataLoss.
//
// Thread safety: a WatchDecoder is used by one thread at a time (it is not synchronised).
#ifndef INFORMERD_CLIENT_WATCH_DECODER_H_
#define INFORMERD_CLIENT_WATCH_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/object.h"

namespace informerd::client {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };

// "ADDED", "MODIFIED", "DELETED", "BOOKMARK".
absl::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  // For BOOKMARK, an object of the watched kind with only metadata.resourceVersion set.
  std::shared_ptr<const Object> object;
  // BOOKMARK only: the k8s.io/initial-events-end annotation was "true" (a streaming list's
  // initial events are complete).
  bool initial_events_end = false;
};

class WatchDecoder {
 public:
  struct Options {
    // An event longer than this ends the stream (ResourceExhausted). Objects are at most
    // ~1.5 MiB in etcd, so the default leaves ample room.
    size_t max_event_bytes = size_t{64} << 20;
    // Remove insignificant whitespace from object bytes. The API server's watch encoder writes
    // compact JSON, so this is off by default.
    bool compact = false;
    // Leave metadata.managedFields out of the objects (ObjectParseOptions::drop_managed_fields).
    bool drop_managed_fields = false;
  };

  static absl::StatusOr<std::unique_ptr<WatchDecoder>> Create(Options options);
  static absl::StatusOr<std::unique_ptr<WatchDecoder>> Create() { return Create(Options()); }
  ~WatchDecoder();

  WatchDecoder(const WatchDecoder&) = delete;
  WatchDecoder& operator=(const WatchDecoder&) = delete;

  // Decodes `chunk`, appending every event it completes to `*events`. Returns the error that
  // ends the stream, if any (events appended before it stay valid and came first).
  absl::Status Feed(absl::string_view chunk, std::vector<WatchEvent>* events);

  // The body ended. Returns DataLoss when an incomplete event is pending, else the stream's
  // earlier error or OK.
  absl::Status Finish();

  // Events decoded so far.
  uint64_t events_decoded() const { return events_decoded_; }
  // Bytes of an incomplete event waiting for the rest.
  size_t pending_bytes() const { return end_ - begin_; }

 private:
  explicit WatchDecoder(Options options);
  // Makes room for `n` more bytes plus padding after end_.
  void Reserve(size_t n);
  // Decodes one line (without its newline) of `len` bytes at `line`, which is followed by at
  // least `capacity - len` readable bytes; `offset` is its position in the stream.
  absl::Status DecodeLine(const char* line, size_t len, size_t capacity, uint64_t offset,
                          std::vector<WatchEvent>* events);
  // Appends bytes to the buffer.
  void Append(const char* data, size_t n);
  // Decodes the complete lines in the buffer.
  absl::Status DecodeBuffered(std::vector<WatchEvent>* events);
  absl::Status Fail(absl::Status status);

  const Options options_;
  struct Parsers;
  std::unique_ptr<Parsers> parsers_;
  // buf_[begin_, end_) holds bytes not yet decoded; buf_[begin_, scan_) has no newline.
  // Invariant: capacity_ >= end_ + Object::kPadding (every line can be parsed in place).
  std::unique_ptr<char[]> buf_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t scan_ = 0;
  size_t end_ = 0;
  uint64_t stream_offset_ = 0;  // stream offset of buf_[0]
  uint64_t fed_ = 0;            // bytes fed so far
  uint64_t events_decoded_ = 0;
  absl::Status error_;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_WATCH_DECODER_H_
