// TestPki: certificates for tests of TLS and client-certificate authentication, made with the
// openssl command line in a directory of the test's: a CA, a serving certificate for 127.0.0.1
// and localhost, and client certificates with a chosen subject.
//
//   TestPki pki = TestPki::Create("pki").value();
//   pki.server_cert, pki.server_key, pki.ca              // paths of PEM files
//   absl::StatusOr<TestPki::Pem> alice = pki.Client("/CN=alice/O=dev");
//
// Thread safety: plain values; Client runs openssl.
#ifndef INFORMERD_SERVER_TESTING_TEST_PKI_H_
#define INFORMERD_SERVER_TESTING_TEST_PKI_H_

#include <string>

#include "absl/status/statusor.h"

namespace informerd::testing {

struct TestPki {
  struct Pem {
    std::string cert;  // contents
    std::string key;
  };

  // A new CA under <test tmpdir>/<name>, and a serving certificate it signed.
  static absl::StatusOr<TestPki> Create(const std::string& name);
  // A client certificate for `subject` ("/CN=alice/O=dev"), signed by this CA.
  absl::StatusOr<Pem> Client(const std::string& subject) const;

  std::string dir;
  std::string ca;           // path
  std::string ca_pem;       // contents
  std::string server_cert;  // path
  std::string server_key;   // path
};

}  // namespace informerd::testing

#endif  // INFORMERD_SERVER_TESTING_TEST_PKI_H_
