#include "client/test_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace informerd::client::testing {

std::string MakeTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base && *base ? base : "/tmp", "/informerd-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  return pattern;
}

void WriteFileOrDie(const std::string& path, absl::string_view content, int mode) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) {
      std::perror(tmp.c_str());
      std::abort();
    }
  }
  if (chmod(tmp.c_str(), mode) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace informerd::client::testing
