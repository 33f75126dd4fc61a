// Watch messages as wire bytes: see watch_encoding.h.
#include "server/service/watch_encoding.h"

#include <cstring>
#include <utility>

#include "informerd/v1/informers.pb.h"
#include "server/service/object_proto.h"

namespace informerd::service {
namespace {

using informer::Notification;

// Protobuf wire types used here.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;

constexpr uint8_t Tag(int field, uint32_t wire_type) {
  return static_cast<uint8_t>((static_cast<uint32_t>(field) << 3) | wire_type);
}

// Appends `v` as a varint to `out` (room for 10 bytes).
char* PutVarint(uint64_t v, char* out) {
  while (v >= 0x80) {
    *out++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<char>(v);
  return out;
}

// Writes into a fixed buffer of small fields; all the fields of one part fit (checked by size).
class SmallWriter {
 public:
  explicit SmallWriter(char* out) : begin_(out), at_(out) {}
  void Varint(int field, uint64_t v) {
    *at_++ = static_cast<char>(Tag(field, kVarint));
    at_ = PutVarint(v, at_);
  }
  void LengthOf(int field, size_t length) {
    *at_++ = static_cast<char>(Tag(field, kLengthDelimited));
    at_ = PutVarint(length, at_);
  }
  // Appends `bytes` verbatim.
  void Raw(const char* bytes, size_t n) {
    std::memcpy(at_, bytes, n);
    at_ += n;
  }
  uint8_t size() const { return static_cast<uint8_t>(at_ - begin_); }

 private:
  char* const begin_;
  char* at_;
};

v1::WatchEvent::Type TypeOf(Notification::Type t) {
  switch (t) {
    case Notification::Type::kAdd:
      return v1::WatchEvent::ADDED;
    case Notification::Type::kUpdate:
      return v1::WatchEvent::UPDATED;
    case Notification::Type::kDelete:
      return v1::WatchEvent::DELETED;
    case Notification::Type::kResnapshot:
      return v1::WatchEvent::RESNAPSHOT;
  }
  return v1::WatchEvent::TYPE_UNSPECIFIED;
}

}  // namespace

EncodedEvent EncodeEvent(const Notification& n, bool include_old_object) {
  EncodedEvent e;
  // Fields in number order (type, object, old_object, initial, tombstone, resnapshot_keys), each
  // written only when it is not its default, as protobuf's own serializer does.
  SmallWriter head(e.head_.bytes);
  head.Varint(v1::WatchEvent::kTypeFieldNumber, TypeOf(n.type));
  size_t size = 0;
  if (n.type != Notification::Type::kResnapshot && n.object != nullptr) {
    const ObjectWire& wire = ObjectWireOf(n.object);
    head.LengthOf(v1::WatchEvent::kObjectFieldNumber, wire.size());
    head.Raw(wire.json_field, wire.json_field_size);
    e.object_json_ = wire.json;
    e.object_metadata_ = wire.metadata;
    size += wire.json.size() + wire.metadata.size();
  }
  e.head_.size = head.size();
  if (n.type == Notification::Type::kUpdate && include_old_object && n.old_object != nullptr) {
    const ObjectWire& wire = ObjectWireOf(n.old_object);
    SmallWriter middle(e.middle_.bytes);
    middle.LengthOf(v1::WatchEvent::kOldObjectFieldNumber, wire.size());
    middle.Raw(wire.json_field, wire.json_field_size);
    e.old_object_json_ = wire.json;
    e.old_object_metadata_ = wire.metadata;
    e.middle_.size = middle.size();
    size += wire.json.size() + wire.metadata.size();
  }
  SmallWriter tail(e.tail_.bytes);
  if (n.type == Notification::Type::kAdd && n.is_in_initial_list) {
    tail.Varint(v1::WatchEvent::kInitialFieldNumber, 1);
  }
  if (n.type == Notification::Type::kDelete && n.final_state_unknown) {
    tail.Varint(v1::WatchEvent::kTombstoneFieldNumber, 1);
  }
  if (n.type == Notification::Type::kResnapshot && n.resnapshot_keys != 0) {
    tail.Varint(v1::WatchEvent::kResnapshotKeysFieldNumber, n.resnapshot_keys);
  }
  e.tail_.size = tail.size();
  e.size_ = size + e.head_.size + e.middle_.size + e.tail_.size;
  return e;
}

EncodedEvent EncodeSynced() {
  EncodedEvent e;
  SmallWriter head(e.head_.bytes);
  head.Varint(v1::WatchEvent::kTypeFieldNumber, v1::WatchEvent::SYNCED);
  e.head_.size = head.size();
  e.size_ = e.head_.size;
  return e;
}

void WatchResponseWriter::Add(EncodedEvent event) {
  char header[11];
  SmallWriter w(header);
  w.LengthOf(v1::WatchResponse::kEventsFieldNumber, event.size_);
  pending_.append(header, w.size());
  event.head_.AppendTo(&pending_);
  AddObject(std::move(event.object_json_), std::move(event.object_metadata_));
  event.middle_.AppendTo(&pending_);
  AddObject(std::move(event.old_object_json_), std::move(event.old_object_metadata_));
  event.tail_.AppendTo(&pending_);
  ++events_;
  bytes_ += event.size_;
}

void WatchResponseWriter::AddObject(grpc::Slice json, grpc::Slice metadata) {
  for (grpc::Slice* part : {&json, &metadata}) {
    if (part->size() == 0) continue;
    Flush();
    slices_.push_back(std::move(*part));
  }
}

void WatchResponseWriter::Flush() {
  if (pending_.empty()) return;
  // A copy; up to 23 bytes (one event's headers) it is inlined in the slice, not allocated.
  slices_.emplace_back(pending_);
  pending_.clear();
}

void WatchResponseWriter::Finish(grpc::ByteBuffer* out) {
  Flush();
  grpc::ByteBuffer message(slices_.data(), slices_.size());
  out->Swap(&message);
  slices_.clear();
  events_ = 0;
  bytes_ = 0;
}

}  // namespace informerd::service
