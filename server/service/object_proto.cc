#include "server/service/object_proto.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace informerd::service {
namespace {

std::atomic<uint64_t> encodings{0};

// What ObjectProtoBytes keeps on the object.
class ProtoBytes final : public client::Object::Derived {
 public:
  explicit ProtoBytes(grpc::Slice bytes) : bytes(std::move(bytes)) {}
  const grpc::Slice bytes;
};

}  // namespace

void ObjectToProto(const client::Object& object, v1::Object* out) {
  out->set_json(object.json().data(), object.json().size());
  v1::ObjectMeta* meta = out->mutable_metadata();
  meta->set_namespace_(object.namespace_name().data(), object.namespace_name().size());
  meta->set_name(object.name().data(), object.name().size());
  meta->set_uid(object.uid().data(), object.uid().size());
  meta->set_resource_version(object.resource_version().data(), object.resource_version().size());
  meta->set_generation(object.generation());
  meta->set_deletion_timestamp(object.deletion_timestamp().data(),
                               object.deletion_timestamp().size());
  meta->set_key(object.key().data(), object.key().size());
  meta->set_api_version(object.api_version().data(), object.api_version().size());
  meta->set_kind(object.kind().data(), object.kind().size());
  meta->set_creation_timestamp(object.creation_timestamp().data(),
                               object.creation_timestamp().size());
  for (auto [from, to] : {std::pair(object.labels(), meta->mutable_labels()),
                          std::pair(object.annotations(), meta->mutable_annotations())}) {
    for (const client::Object::Label& entry : from) {
      (*to)[std::string(entry.key)] = std::string(entry.value);
    }
  }
  for (absl::string_view finalizer : object.finalizers()) {
    meta->add_finalizers(finalizer.data(), finalizer.size());
  }
  for (const client::OwnerReference& ref : object.owner_references()) {
    v1::OwnerReference* o = meta->add_owner_references();
    o->set_api_version(ref.api_version.data(), ref.api_version.size());
    o->set_kind(ref.kind.data(), ref.kind.size());
    o->set_name(ref.name.data(), ref.name.size());
    o->set_uid(ref.uid.data(), ref.uid.size());
    o->set_controller(ref.controller);
  }
}

const grpc::Slice& ObjectProtoBytes(const client::Object& object) {
  const client::Object::Derived& derived = object.derived([&] {
    encodings.fetch_add(1, std::memory_order_relaxed);
    v1::Object proto;
    ObjectToProto(object, &proto);
    const size_t size = proto.ByteSizeLong();
    grpc::Slice bytes(size);  // uninitialized, reference-counted (or inlined when tiny)
    // Deterministic (labels and annotations by key): the same object gives the same bytes.
    google::protobuf::io::ArrayOutputStream array(const_cast<uint8_t*>(bytes.begin()),
                                                  static_cast<int>(size));
    google::protobuf::io::CodedOutputStream out(&array);
    out.SetSerializationDeterministic(true);
    proto.SerializeWithCachedSizes(&out);
    return std::make_unique<ProtoBytes>(std::move(bytes));
  });
  // Only this file sets the object's derived form (client/object.h: one slot, one user).
  return static_cast<const ProtoBytes&>(derived).bytes;
}

uint64_t ObjectProtoEncodings() { return encodings.load(std::memory_order_relaxed); }

}  // namespace informerd::service
