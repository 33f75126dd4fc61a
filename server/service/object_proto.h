// The API's form of a cached object (objects.proto): its JSON bytes, copied once, and the
// metadata the informer parsed. The one conversion every service uses.
//
//   v1::GetResponse response;
//   ObjectToProto(*object, response.mutable_object());
//
// Thread safety: a function of its arguments.
#ifndef INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
#define INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_

#include "client/object.h"
#include "informerd/v1/objects.pb.h"

namespace informerd::service {

void ObjectToProto(const client::Object& object, v1::Object* out);

}  // namespace informerd::service

#endif  // INFORMERD_SERVER_SERVICE_OBJECT_PROTO_H_
