#include "client/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace informerd::client {

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  auto fail = [&](int err) {
    std::string msg = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::FailedPreconditionError(msg);
  };
  if (path.empty()) return absl::InvalidArgumentError("cannot read a file with an empty path");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return fail(err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read ", path, ": larger than ", max_bytes, " bytes"));
    }
  }
  ::close(fd);
  return out;
}

}  // namespace informerd::client
