// The API's form of a cached object (objects.proto): its JSON bytes, copied once, and the
// metadata the informer parsed. The one conversion every service uses.
//
//   v1::GetResponse response;
//   ObjectToProto(*object, response.mutable_object());
//
// ObjectProtoBytes is the same v1::Object already serialized, made once per object and kept on it
// (client::Object::derived), so that the many Watch streams that send one object share its bytes
// instead of converting and serializing it each (watch_encoding.h).
//
// Thread safety: functions of their arguments; ObjectProtoBytes may be called on one object from
// any number of threads.
#ifndef INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
#define INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_

#include <grpcpp/support/slice.h>

#include <cstdint>

#include "client/object.h"
#include "informerd/v1/objects.pb.h"

namespace informerd::service {

void ObjectToProto(const client::Object& object, v1::Object* out);

// The serialized v1::Object of `object` (ObjectToProto's, serialized deterministically: maps by
// key), made on the first
// call and shared afterwards: the slice is reference-counted, so a message holding it stays valid
// after the object goes. Memory: about the object's JSON size more, for as long as the object
// lives, once anything asked for it.
const grpc::Slice& ObjectProtoBytes(const client::Object& object);

// Test hook: how many times ObjectProtoBytes encoded an object, since the process started.
uint64_t ObjectProtoEncodings();

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
