#include "server/testing/test_pki.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace informerd::testing {
namespace {

absl::Status Run(const std::string& dir, const std::string& command) {
  const std::string line = absl::StrCat("cd '", dir, "' && ", command, " >openssl.log 2>&1");
  if (std::system(line.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("openssl failed (see ", dir, "/openssl.log): ", command));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return text.str();
}

constexpr char kNewKey[] = "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

}  // namespace

absl::StatusOr<TestPki> TestPki::Create(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  TestPki pki;
  pki.dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  if (std::system(absl::StrCat("mkdir -p '", pki.dir, "'").c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot make ", pki.dir));
  }
  if (absl::Status s = Run(pki.dir, absl::StrCat("openssl req -x509 -newkey ec -pkeyopt "
                                                 "ec_paramgen_curve:P-256 -nodes -days 1 -subj "
                                                 "/CN=test-ca -keyout ca.key -out ca.pem"));
      !s.ok()) {
    return s;
  }
  {
    std::ofstream ext(pki.dir + "/server.ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  }
  if (absl::Status s = Run(pki.dir, absl::StrCat(kNewKey, " -subj /CN=informerd -keyout "
                                                 "server.key -out server.csr && openssl x509 "
                                                 "-req -in server.csr -CA ca.pem -CAkey ca.key "
                                                 "-CAcreateserial -days 1 -extfile server.ext "
                                                 "-out server.pem"));
      !s.ok()) {
    return s;
  }
  pki.ca = pki.dir + "/ca.pem";
  pki.server_cert = pki.dir + "/server.pem";
  pki.server_key = pki.dir + "/server.key";
  absl::StatusOr<std::string> ca = Read(pki.ca);
  if (!ca.ok()) return ca.status();
  pki.ca_pem = *ca;
  return pki;
}

absl::StatusOr<TestPki::Pem> TestPki::Client(const std::string& subject) const {
  const std::string base = absl::StrReplaceAll(subject, {{"/", "_"}, {"=", "-"}, {":", "-"}});
  if (absl::Status s = Run(dir, absl::StrCat(kNewKey, " -subj '", subject, "' -keyout ", base,
                                             ".key -out ", base, ".csr && openssl x509 -req -in ",
                                             base, ".csr -CA ca.pem -CAkey ca.key "
                                             "-CAcreateserial -days 1 -out ", base, ".pem"));
      !s.ok()) {
    return s;
  }
  Pem pem;
  absl::StatusOr<std::string> cert = Read(absl::StrCat(dir, "/", base, ".pem"));
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = Read(absl::StrCat(dir, "/", base, ".key"));
  if (!key.ok()) return key.status();
  pem.cert = *cert;
  pem.key = *key;
  return pem;
}

}  // namespace informerd::testing
