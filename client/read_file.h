// ReadFile: a whole file as a string, or an error that names the path and the OS reason.
//
// Thread safety: reentrant.
#ifndef INFORMERD_CLIENT_READ_FILE_H_
#define INFORMERD_CLIENT_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace informerd::client {

// NotFound, PermissionDenied or FailedPrecondition ("cannot read PATH: REASON") on failure.
// Files larger than `max_bytes` are refused.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_READ_FILE_H_
