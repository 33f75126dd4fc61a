#include "server/service/object_proto.h"

#include <string>
#include <utility>

namespace informerd::service {

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

}  // namespace informerd::service
