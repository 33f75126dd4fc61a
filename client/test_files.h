// Test helpers: a fresh temporary directory per call and small file writers.
//
// Thread safety: reentrant.
#ifndef INFORMERD_CLIENT_TEST_FILES_H_
#define INFORMERD_CLIENT_TEST_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace informerd::client::testing {

// A new empty directory under $TEST_TMPDIR (or /tmp). Aborts the test binary if it cannot.
std::string MakeTempDir();

// Writes `content` to `path` atomically (write to a temporary file, then rename), so a reader
// sees the old or the new file, never a mix; `mode` applies to the new file.
void WriteFileOrDie(const std::string& path, absl::string_view content, int mode = 0644);

}  // namespace informerd::client::testing

#endif  // INFORMERD_CLIENT_TEST_FILES_H_
