// The API's form of a cached object (objects.proto): its JSON bytes, copied once, and the
// metadata the informer parsed. The one conversion every service uses.
//
//   v1::GetResponse response;
//   ObjectToProto(*object, response.mutable_object());
//
// ObjectWire is the same v1::Object as wire bytes, made once per object and kept on it
// (client::Object::derived), so that the many Watch streams that send one object share its bytes
// instead of converting and serializing it each (watch_encoding.h). Its JSON is not copied: the
// wire form points into the object's own bytes.
//
// Thread safety: functions of their arguments; ObjectWireOf may be called on one object from any
// number of threads.
#ifndef INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
#define INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_

#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "client/object.h"
#include "informerd/v1/objects.pb.h"

namespace informerd::service {

void ObjectToProto(const client::Object& object, v1::Object* out);

// A serialized v1::Object in three parts, in this order: the json field's tag and length
// (`json_field`), the JSON itself (`json`: the object's own bytes, shared rather than copied),
// and the metadata field (`metadata`, serialized deterministically: maps by key). Together they
// are exactly the bytes SerializeToString gives for ObjectToProto's message.
struct ObjectWire {
  char json_field[8] = {};
  uint8_t json_field_size = 0;
  grpc::Slice json;
  grpc::Slice metadata;
  size_t size() const { return json_field_size + json.size() + metadata.size(); }
};

// The wire form of `object`, made on the first call and shared afterwards. Its slices are
// reference-counted, so a message holding them stays valid after the object goes: `json` keeps
// the object's allocation (not the object) alive through a weak reference, which makes no
// cycle with the object that holds this form. Memory: the serialized metadata (a few hundred
// bytes) for as long as the object lives, once anything asked for it.
// REQUIRES: object != nullptr.
const ObjectWire& ObjectWireOf(const std::shared_ptr<const client::Object>& object);

// Test hook: how many times ObjectWireOf encoded an object, since the process started.
uint64_t ObjectWireEncodings();

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
