// Watch messages built as wire bytes around shared object encodings: a v1::WatchResponse whose
// events reference each object's wire form (ObjectWireOf: its serialized metadata, made once per
// object, and its JSON bytes as the object holds them) instead of copying and serializing it again
// for every subscriber. Only the few bytes that
// differ per subscriber — the event's type, initial, tombstone, resnapshot_keys and the field
// headers — are written per event.
//
//   WatchResponseWriter writer;
//   EncodedEvent event = EncodeEvent(notification, /*include_old_object=*/false);
//   if (writer.events() > 0 && writer.bytes() + event.size() > max_bytes) ...;  // next message
//   writer.Add(std::move(event));
//   grpc::ByteBuffer message;
//   writer.Finish(&message);  // parses as the v1::WatchResponse
//
// The bytes are exactly the ones SerializeToString gives for the v1::WatchResponse that
// ObjectToProto-based conversion builds: fields in number order, each once, defaults omitted.
//
// Thread safety: EncodedEvent and WatchResponseWriter are values used by one thread at a time.
#ifndef INFORMERD_SERVER_SERVICE_WATCH_ENCODING_H_
#define INFORMERD_SERVER_SERVICE_WATCH_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/informer/processor_listener.h"

namespace informerd::service {

// One v1::WatchEvent as its wire bytes: `head`, then `object`, then `middle`, then `old_object`,
// then `tail`. Each object part is its json field's header (ending `head` / `middle`), its JSON
// slice and its metadata slice; empty slices when the event has no such object.
class EncodedEvent {
 public:
  // The WatchEvent message's size (what its ByteSizeLong would be).
  size_t size() const { return size_; }

 private:
  friend EncodedEvent EncodeEvent(const informer::Notification& n, bool include_old_object);
  friend EncodedEvent EncodeSynced();
  friend class WatchResponseWriter;

  // Field headers and small fields, at most a few varints each.
  struct Small {
    char bytes[24];
    uint8_t size = 0;
    void AppendTo(std::string* out) const { out->append(bytes, size); }
  };
  Small head_;
  grpc::Slice object_json_;
  grpc::Slice object_metadata_;
  Small middle_;
  grpc::Slice old_object_json_;
  grpc::Slice old_object_metadata_;
  Small tail_;
  size_t size_ = 0;
};

// The event of `n` (ADDED, UPDATED, DELETED or RESNAPSHOT), as AddEvent filled a v1::WatchEvent
// with ObjectToProto; old_object only for an UPDATED with `include_old_object`.
EncodedEvent EncodeEvent(const informer::Notification& n, bool include_old_object);
// The SYNCED event.
EncodedEvent EncodeSynced();

// A v1::WatchResponse being assembled: `repeated WatchEvent events = 1`, event by event.
class WatchResponseWriter {
 public:
  void Add(EncodedEvent event);
  // Events added since the last Finish.
  int events() const { return events_; }
  // The events' sizes added up (each WatchEvent's own bytes, without its field header).
  size_t bytes() const { return bytes_; }
  // Makes *out the message of the events added so far (its old content dropped; grpc::ByteBuffer
  // has no move, and a copy would take a reference on every slice again); the writer starts over,
  // empty.
  void Finish(grpc::ByteBuffer* out);

 private:
  // Flushes pending_ into slices_.
  void Flush();
  // Appends an object's JSON and metadata slices (each skipped when empty).
  void AddObject(grpc::Slice json, grpc::Slice metadata);

  std::vector<grpc::Slice> slices_;
  // Small bytes between two shared slices, kept together so that they become one slice.
  std::string pending_;
  int events_ = 0;
  size_t bytes_ = 0;
};

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_WATCH_ENCODING_H_
