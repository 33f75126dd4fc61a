// Credentials: the identity a RestConfig names, turned into what each request carries — an
// Authorization header (bearer token, token file, basic auth or an exec plugin's token),
// impersonation headers, and an exec plugin's client certificate.
//
// Sources, as in client-go:
//   * bearer_token: used as is.
//   * bearer_token_file: read when first needed and read again whenever the file changes
//     (checked with stat on every Get, so a rotated service-account token is picked up at once)
//     or after the server rejected it (Invalidate).
//   * username/password: basic auth.
//   * exec: the plugin runs (no stdin; KUBERNETES_EXEC_INFO describes the request) and prints a
//     client.authentication.k8s.io ExecCredential; its token or client certificate is cached
//     until status.expirationTimestamp (forever without one) and the plugin runs again after
//     that, or at once after the server rejected the credential (Invalidate on a 401).
//
//   auto creds = Credentials::Create(config, {}).value();
//   absl::StatusOr<Credentials::Auth> auth = creds->Get();   // may run the plugin: can block
//   ... send the request; on 401: creds->Invalidate(auth->generation); retry once ...
//
// Thread safety: all methods may be called from any thread. Get blocks while a token file is
// read or a plugin runs; concurrent callers wait for that one run (single flight).
#ifndef INFORMERD_CLIENT_CREDENTIALS_H_
#define INFORMERD_CLIENT_CREDENTIALS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "client/rest_config.h"

namespace informerd::client {

class Credentials {
 public:
  struct Options {
    // Decides when an exec credential expired; nullptr means Clock::Real(). Must outlive this.
    Clock* clock = nullptr;
    // A plugin that has not finished after this is killed and Get fails.
    absl::Duration exec_timeout = absl::Minutes(1);
  };

  struct Auth {
    // Headers for every request: Authorization (when there is a credential) and Impersonate-*.
    std::vector<std::pair<std::string, std::string>> headers;
    // From an exec plugin that returned a client certificate (PEM); empty otherwise.
    std::string client_cert_pem;
    std::string client_key_pem;
    // Identifies this credential for Invalidate.
    uint64_t generation = 0;
  };

  static absl::StatusOr<std::unique_ptr<Credentials>> Create(const RestConfig& config,
                                                             Options options);

  // The credential to send now.
  absl::StatusOr<Auth> Get();

  // The server rejected the credential of `generation` (HTTP 401): the next Get re-reads the
  // token file or re-runs the plugin. A stale generation (already replaced) is ignored.
  void Invalidate(uint64_t generation);

  // Times the exec plugin ran (for tests and metrics).
  int exec_runs() const;

 private:
  Credentials(const RestConfig& config, Options options);
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadTokenFileLocked(Auth* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TokenFileUnchangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunExecLocked(Auth* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RestConfig config_;
  const Options options_;
  Clock* const clock_;

  mutable Mutex mu_;
  // The current credential and whether it must be fetched again before use.
  Auth auth_ ABSL_GUARDED_BY(mu_);
  bool stale_ ABSL_GUARDED_BY(mu_) = true;
  // Exec credentials: when they expire (InfiniteFuture without expirationTimestamp).
  absl::Time expiry_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Token file: identity of the version last read (changes when the file is replaced).
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  FileId token_file_id_ ABSL_GUARDED_BY(mu_);
  int exec_runs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace informerd::client

#endif  // INFORMERD_CLIENT_CREDENTIALS_H_
