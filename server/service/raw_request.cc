// ParseRawRequest: see raw_request.h.
#include "server/service/raw_request.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

using google::protobuf::internal::WireFormatLite;

// The name the error gives field `number` of `message`'s type.
std::string FieldName(const google::protobuf::Message& message, int number) {
  const google::protobuf::FieldDescriptor* field =
      message.GetDescriptor()->FindFieldByNumber(number);
  return field != nullptr ? field->name() : absl::StrCat("field ", number);
}

// Why `bytes`, which do not parse as `message`'s type, do not: the first top-level field that
// does not parse on its own, or its tag or length that cannot be read.
absl::Status Blame(const google::protobuf::Message& message, const std::string& bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(bytes.size()));
  std::unique_ptr<google::protobuf::Message> alone(message.New());
  for (;;) {
    const int start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;  // the end, or a tag that is not one
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    if (!WireFormatLite::SkipField(&in, tag)) {
      return InvalidField(FieldName(message, number), "malformed: truncated or a bad wire type");
    }
    // Alone, so that a field that is well framed but not valid (a wrong wire type for its
    // declared type, a string that is not UTF-8, a nested message that does not parse) is named.
    alone->Clear();
    if (!alone->ParseFromArray(data + start, in.CurrentPosition() - start)) {
      return InvalidField(FieldName(message, number),
                          "malformed: not a valid value of the field's type");
    }
  }
  return InvalidField("request",
                      absl::StrCat("not a valid ", message.GetDescriptor()->full_name()));
}

}  // namespace

absl::Status ParseRawRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* out) {
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = raw.Dump(&slices); !s.ok()) {
    return InvalidField("request", absl::StrCat("unreadable: ", s.error_message()));
  }
  // Requests are small: one contiguous copy keeps the parse and the blame simple.
  std::string bytes;
  bytes.reserve(raw.Length());
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (out->ParseFromString(bytes)) return absl::OkStatus();
  out->Clear();
  return Blame(*out, bytes);
}

}  // namespace informerd::service
