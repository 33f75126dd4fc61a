// Tests of the wire encoding of Watch messages: what a subscriber's regular v1::WatchResponse
// parser makes of the bytes must be what ObjectToProto-based conversion builds, byte for byte,
// for every event type and option, and an object is encoded once however often it is sent.
#include "server/service/watch_encoding.h"

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/object.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "informerd/v1/informers.pb.h"
#include "server/service/object_proto.h"

namespace informerd::service {
namespace {

using informer::Notification;
using informer::ObjectPtr;

ObjectPtr Parse(const std::string& json) {
  absl::StatusOr<std::shared_ptr<const client::Object>> o = client::Object::Parse(json);
  EXPECT_TRUE(o.ok()) << o.status();
  return *o;
}

// An object with every metadata field ObjectToProto copies, `rv` as its resourceVersion.
ObjectPtr Full(const std::string& rv, const std::string& payload = "x") {
  return Parse(absl::StrCat(
      R"({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns",)",
      R"("uid":"u-1","resourceVersion":")", rv, R"(","generation":7,)",
      R"("creationTimestamp":"2026-01-01T00:00:00Z","deletionTimestamp":"2026-01-02T00:00:00Z",)",
      R"("labels":{"app":"web","tier":"front"},"annotations":{"a":"b"},"finalizers":["f1","f2"],)",
      R"("ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u-0",)",
      R"("controller":true}]},)",
      R"("spec":{"payload":")", payload, R"("}})"));
}

// The message a writer holds, finished.
grpc::ByteBuffer Finished(WatchResponseWriter& writer) {
  grpc::ByteBuffer message;
  writer.Finish(&message);
  return message;
}

// The bytes of a message, as one string.
std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

std::string Deterministic(const v1::WatchResponse& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  EXPECT_TRUE(message.SerializeToCodedStream(&coded));
  coded.Trim();
  return out;
}

// The event as the service built it before it wrote bytes itself: a v1::WatchEvent filled with
// ObjectToProto.
v1::WatchEvent Reference(const Notification& n, bool include_old_object) {
  v1::WatchEvent e;
  switch (n.type) {
    case Notification::Type::kAdd:
      e.set_type(v1::WatchEvent::ADDED);
      e.set_initial(n.is_in_initial_list);
      break;
    case Notification::Type::kUpdate:
      e.set_type(v1::WatchEvent::UPDATED);
      if (include_old_object && n.old_object != nullptr) {
        ObjectToProto(*n.old_object, e.mutable_old_object());
      }
      break;
    case Notification::Type::kDelete:
      e.set_type(v1::WatchEvent::DELETED);
      e.set_tombstone(n.final_state_unknown);
      break;
    case Notification::Type::kResnapshot:
      e.set_type(v1::WatchEvent::RESNAPSHOT);
      e.set_resnapshot_keys(n.resnapshot_keys);
      return e;
  }
  if (n.object != nullptr) ObjectToProto(*n.object, e.mutable_object());
  return e;
}

TEST(WatchEncodingTest, EveryEventTypeAndOptionParsesAsTheConvertedEvent) {
  const ObjectPtr old_object = Full("10", "old");
  const ObjectPtr object = Full("11", "new");
  const ObjectPtr minimal = Parse(R"({"metadata":{"name":"m"}})");
  std::vector<Notification> all;
  for (bool initial : {false, true}) {
    all.push_back(
        {.type = Notification::Type::kAdd, .object = object, .is_in_initial_list = initial});
  }
  all.push_back({.type = Notification::Type::kAdd, .object = minimal});
  all.push_back({.type = Notification::Type::kUpdate, .object = object, .old_object = old_object});
  all.push_back({.type = Notification::Type::kUpdate, .object = object});  // no old one known
  for (bool unknown : {false, true}) {
    all.push_back(
        {.type = Notification::Type::kDelete, .object = object, .final_state_unknown = unknown});
  }
  all.push_back({.type = Notification::Type::kResnapshot, .resnapshot_keys = 3});
  all.push_back({.type = Notification::Type::kResnapshot, .resnapshot_keys = 300000});
  all.push_back({.type = Notification::Type::kResnapshot});

  for (bool include_old_object : {false, true}) {
    WatchResponseWriter writer;
    v1::WatchResponse want;
    for (const Notification& n : all) {
      EncodedEvent e = EncodeEvent(n, include_old_object);
      v1::WatchEvent reference = Reference(n, include_old_object);
      EXPECT_EQ(e.size(), reference.ByteSizeLong());
      // One event alone: the exact bytes of the converted message.
      WatchResponseWriter alone;
      alone.Add(e);
      v1::WatchResponse one;
      *one.add_events() = reference;
      EXPECT_EQ(Bytes(Finished(alone)), Deterministic(one))
          << "include_old_object " << include_old_object << ": " << reference.ShortDebugString();
      *want.add_events() = std::move(reference);
      writer.Add(std::move(e));
    }
    writer.Add(EncodeSynced());
    want.add_events()->set_type(v1::WatchEvent::SYNCED);
    EXPECT_EQ(writer.events(), want.events_size());
    const std::string bytes = Bytes(Finished(writer));
    v1::WatchResponse got;
    ASSERT_TRUE(got.ParseFromString(bytes));
    EXPECT_EQ(bytes, Deterministic(want));
    ASSERT_EQ(got.events_size(), want.events_size());
    for (int i = 0; i < got.events_size(); ++i) {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got.events(i), want.events(i)))
          << i << ": " << got.events(i).ShortDebugString();
    }
    EXPECT_EQ(bytes.size(), want.ByteSizeLong());
    EXPECT_EQ(writer.events(), 0);  // Finish starts over
    EXPECT_EQ(writer.bytes(), 0u);
  }
}

TEST(WatchEncodingTest, AnObjectIsEncodedOnceAndItsBytesAreSharedBySubscribers) {
  grpc::ByteBuffer in_flight;
  v1::WatchResponse want;
  {
    const ObjectPtr object = Full("12");
    const Notification n{
        .type = Notification::Type::kUpdate, .object = object, .old_object = object};
    const uint64_t before = ObjectWireEncodings();
    // Two subscribers, one with the old object too: the same bytes, encoded once.
    WatchResponseWriter a, b;
    a.Add(EncodeEvent(n, /*include_old_object=*/false));
    b.Add(EncodeEvent(n, /*include_old_object=*/true));
    EXPECT_EQ(ObjectWireEncodings() - before, 1u);
    // The messages point at the object's own JSON (not a copy) and at its one metadata encoding.
    const auto* const json = reinterpret_cast<const uint8_t*>(object->json().data());
    const uint8_t* const metadata = ObjectWireOf(object).metadata.begin();
    auto count = [](const std::vector<grpc::Slice>& slices, const uint8_t* at) {
      int n = 0;
      for (const grpc::Slice& s : slices) n += s.begin() == at;
      return n;
    };
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(Finished(a).Dump(&slices).ok());
    EXPECT_EQ(count(slices, json), 1) << "the message copied the object's JSON";
    EXPECT_EQ(count(slices, metadata), 1) << "the message copied the object's metadata";
    b.Finish(&in_flight);
    ASSERT_TRUE(in_flight.Dump(&slices).ok());
    EXPECT_EQ(count(slices, json), 2);  // object and old_object
    EXPECT_EQ(count(slices, metadata), 2);
    v1::WatchEvent* e = want.add_events();
    e->set_type(v1::WatchEvent::UPDATED);
    ObjectToProto(*object, e->mutable_object());
    ObjectToProto(*object, e->mutable_old_object());
    EXPECT_EQ(ObjectWireEncodings() - before, 1u);
  }
  // The object is gone; a message still in flight holds valid bytes (its JSON slice keeps the
  // object's allocation: under ASan a read of freed memory here fails the test).
  v1::WatchResponse got;
  ASSERT_TRUE(got.ParseFromString(Bytes(in_flight)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, want));
}

}  // namespace
}  // namespace informerd::service
