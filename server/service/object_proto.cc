#include "server/service/object_proto.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace informerd::service {
namespace {

std::atomic<uint64_t> encodings{0};

// What ObjectWireOf keeps on the object.
class WireForm final : public client::Object::Derived {
 public:
  ObjectWire wire;
};

// The `json` slice's reference to the object's allocation. ObjectParser makes each Object, its
// shared_ptr control block and its JSON one allocation, which lasts until the last weak
// reference goes: the JSON stays readable after the object is destroyed, while a message that
// holds the slice is being written.
void ReleaseAllocation(void* weak) {
  delete static_cast<std::weak_ptr<const client::Object>*>(weak);
}

void MetadataToProto(const client::Object& object, v1::ObjectMeta* meta) {
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

}  // namespace

void ObjectToProto(const client::Object& object, v1::Object* out) {
  out->set_json(object.json().data(), object.json().size());
  MetadataToProto(object, out->mutable_metadata());
}

const ObjectWire& ObjectWireOf(const std::shared_ptr<const client::Object>& object) {
  const client::Object::Derived& derived = object->derived([&] {
    encodings.fetch_add(1, std::memory_order_relaxed);
    auto form = std::make_unique<WireForm>();
    ObjectWire& wire = form->wire;
    const absl::string_view json = object->json();
    {
      google::protobuf::io::ArrayOutputStream array(wire.json_field, sizeof(wire.json_field));
      google::protobuf::io::CodedOutputStream out(&array);
      google::protobuf::internal::WireFormatLite::WriteTag(
          v1::Object::kJsonFieldNumber,
          google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED, &out);
      out.WriteVarint32(static_cast<uint32_t>(json.size()));
      wire.json_field_size = static_cast<uint8_t>(out.ByteCount());
    }
    wire.json = grpc::Slice(const_cast<char*>(json.data()), json.size(), ReleaseAllocation,
                            new std::weak_ptr<const client::Object>(object));
    // The message without its json: only the metadata field, as SerializeToString writes it.
    v1::Object rest;
    MetadataToProto(*object, rest.mutable_metadata());
    const size_t size = rest.ByteSizeLong();
    grpc::Slice metadata(size);  // uninitialized, reference-counted (or inlined when tiny)
    {
      // Deterministic (labels and annotations by key): the same object gives the same bytes.
      // Scoped: the stream writes its last bytes when destroyed, and an inlined slice's bytes
      // move with it.
      google::protobuf::io::ArrayOutputStream array(const_cast<uint8_t*>(metadata.begin()),
                                                    static_cast<int>(size));
      google::protobuf::io::CodedOutputStream out(&array);
      out.SetSerializationDeterministic(true);
      rest.SerializeWithCachedSizes(&out);
    }
    wire.metadata = std::move(metadata);
    return form;
  });
  // Only this file sets the object's derived form (client/object.h: one slot, one user).
  return static_cast<const WireForm&>(derived).wire;
}

uint64_t ObjectWireEncodings() { return encodings.load(std::memory_order_relaxed); }

}  // namespace informerd::service
