// Reflector: client-go's Reflector — keeps a DeltaFIFO in step with the API server for one
// resource: list (paginated) then watch from the list's resourceVersion, and start over as the
// server and the network require. It never gives up.
//
//   auto reflector = Reflector::Create({.name = "pods", .lister_watcher = lw, .store = fifo,
//                                       .known_objects = &cache}).value();
//   reflector->Start();
//   ReflectorStatus s = reflector->status();  // state, last error, last synced RV, counters
//
// The cycle (docs/semantics.md §2, "The reflector"), as steps on the reflector executor
// (informer_threads.h) — a reflector has no thread of its own: a step runs when something it
// waits for happens (a watch ends, its initial events are in, a backoff is over), and waits by
// returning:
//   1. Sync. With use_streaming_list, a watch with sendInitialEvents=true: its events fill a
//      temporary set until the bookmark annotated k8s.io/initial-events-end, then Replace, and the
//      same stream goes on as the watch. If that fails (e.g. a server without WatchList), a
//      paginated list: pages of page_size with continue tokens, then Replace. An expired continue
//      token lists everything again in one unpaged request.
//      List resourceVersion (client-go's relistResourceVersion): "0" the first time (served by the
//      watch cache), then the last synced RV; "" (a consistent read) when that RV was reported
//      expired or too large — the list is retried at once with "". Lists at an RV other than
//      "0" are unpaged unless the server paged the first list (so they come from the watch cache).
//   2. Watch from the last synced RV with bookmarks and timeoutSeconds random in
//      [min_watch_timeout, 2*min_watch_timeout). Events go to the FIFO (Added/Updated/Deleted);
//      every event and bookmark advances the last synced RV. Events of another kind than
//      expected_kind are dropped with a log line.
//   3. When the watch ends:
//        * closed by the server: watch again at once — unless it lasted under
//          very_short_watch with no event, which is an error (relist after a backoff);
//        * 410 Expired / Gone (at start or mid-stream): relist after a backoff, at the last synced
//          RV (LIST with an RV means "not older than", so that usually succeeds);
//        * 429, refused or dropped connections, 5xx, broken streams: back off, then watch again
//          from the last synced RV without relisting (if that RV is gone meanwhile, the server
//          says 410 and we relist);
//        * no byte and no event for stall_timeout (informerd extension): torn down and resumed at
//          once from the last synced RV;
//        * any other error (401, 403, 404, ...): relist after a backoff.
//   Backoffs (backoff.h): 800 ms doubling to 30 s with jitter, reset after 2 minutes of health;
//   one backoff precedes every relist, as client-go's BackoffUntil does.
//
// Listed objects (and the initial events of a streaming list) are transformed
// (Options::transform) before they are kept, and an object whose key, uid and resourceVersion
// match the cache's (Options::known_objects) is replaced by the cached one: a relist holds only
// what changed, never a second copy of the cache. Live watch events are queued as received, so
// that the transport's thread only decodes; the FIFO's consumer applies the same (idempotent)
// transform before storing.
//
// Thread safety: every public method may be called from any thread. Steps (list requests
// included) run one at a time on the executor; watch callbacks run on the ListerWatcher's thread.
// Stop waits for a step in progress (a list) to return.
#ifndef INFORMERD_SERVER_INFORMER_REFLECTOR_H_
#define INFORMERD_SERVER_INFORMER_REFLECTOR_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/executor.h"
#include "base/hash.h"
#include "base/mutex.h"
#include "server/informer/backoff.h"
#include "server/informer/delta_fifo.h"
#include "server/informer/lister_watcher.h"
#include "server/informer/transform.h"

namespace informerd::informer {

struct ReflectorOptions {
  // Names the reflector in logs and status, e.g. "v1/pods".
  std::string name;
  // Required; must outlive the reflector.
  ListerWatcher* lister_watcher = nullptr;
  DeltaFIFO* store = nullptr;
  // The informer's cache, to reuse unchanged objects during relists. Optional.
  const KnownObjects* known_objects = nullptr;
  // Applied to listed objects before they are queued (live events are left to the consumer).
  // Optional.
  const Transform* transform = nullptr;
  // Events whose object has another kind are dropped ("" accepts any).
  std::string expected_kind;
  int64_t page_size = 500;
  bool use_streaming_list = true;
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration very_short_watch = absl::Seconds(1);
  // Zero disables stall detection.
  absl::Duration stall_timeout = absl::Minutes(3);
  BackoffOptions backoff;
  // nullptr: Clock::Real(). Must outlive the reflector.
  Clock* clock = nullptr;
  // Seeds the jitter and watch timeouts; 0 picks a random seed.
  uint64_t seed = 0;
  // Runs the reflector's steps; nullptr: ReflectorExecutor(). Must outlive the reflector.
  Executor* executor = nullptr;
};

enum class ReflectorState {
  kIdle,        // not started
  kListing,     // a list or the initial phase of a streaming list is in progress
  kWatching,
  kBackingOff,  // waiting before the next attempt
  kStopped,
};

absl::string_view ReflectorStateName(ReflectorState state);

struct ReflectorStatus {
  ReflectorState state = ReflectorState::kIdle;
  std::string last_sync_resource_version;
  // The last error (OK if none yet) and when it happened; errors recorded so far.
  absl::Status last_error;
  uint64_t errors = 0;
  absl::Time last_error_time = absl::InfinitePast();
  // In kBackingOff: when the wait ends.
  absl::Time backoff_until = absl::InfinitePast();
  // Backoff waits begun so far.
  uint64_t backoffs = 0;
  // Completed syncs (lists and streaming lists) and how many were streaming.
  uint64_t syncs = 0;
  uint64_t streaming_syncs = 0;
  uint64_t list_requests = 0;
  uint64_t watches_started = 0;
  uint64_t events = 0;     // watch events queued (bookmarks excluded)
  uint64_t bookmarks = 0;
  uint64_t stalls = 0;
  uint64_t wrong_kind_dropped = 0;
  uint64_t streaming_list_fallbacks = 0;
  // The server rejected sendInitialEvents: lists only from now on.
  bool streaming_list_unsupported = false;
};

class Reflector {
 public:
  static absl::StatusOr<std::unique_ptr<Reflector>> Create(ReflectorOptions options);
  ~Reflector();  // Stops.
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Starts the cycle. Once only.
  void Start();
  // Ends the watch, interrupts a backoff and waits for a list in progress. Not from a callback.
  void Stop();

  ReflectorStatus status() const;
  std::string LastSyncResourceVersion() const;

 private:
  explicit Reflector(ReflectorOptions options);

  // ---- the cycle: steps ----
  // Where the cycle stands between steps. client-go runs it as BackoffUntil(ListAndWatch): a
  // round (sync, then watch until a relist is needed) with a backoff before every round but the
  // first; within a round, a watch that failed transiently is retried after a backoff.
  enum class Phase {
    kStart,           // the first round begins without a backoff
    kInitialEvents,   // a streaming list's stream is open; its initial events are arriving
    kWatching,        // a watch session is open
    kBackoffRound,    // backing off before the next round
    kBackoffRewatch,  // backing off before watching again from the last synced RV
  };
  // Runs on the executor whenever scheduled: moves the cycle on from phase_, or returns when
  // what it waits for has not happened yet.
  void Step();
  // A round: a streaming list when allowed, else (or when it fails) list and watch.
  void BeginRound();
  // A streaming list's stream changed: its initial events are in (the stream goes on as the
  // watch), or it ended or stalled first (fall back to a list).
  void CheckInitialEvents();
  // A paginated list, then a watch from its RV; a failed list ends the round.
  void ListThenWatch();
  void OpenPlainWatch();
  // A watch session changed: when it ended, decide what follows (see the cycle above).
  void CheckWatch();
  // The round ended (with why, when it failed): back off, then the next round.
  void EndRound(const absl::Status& status);
  void StartBackoff(Phase then);
  // Paginated list (with the expired-RV retry) and Replace.
  absl::Status ListAndReplace();
  struct Listed {
    std::vector<ObjectPtr> items;
    std::string resource_version;
    bool paginated = false;
  };
  absl::StatusOr<Listed> ListAll(const std::string& resource_version);

  // ---- watch sessions ----
  // Opens a watch into watch_ as a new session. A failure to open ends the session at once.
  void OpenWatch(const WatchRequest& request, bool initial_phase);
  void OnEvents(uint64_t session, std::vector<client::WatchEvent>& events);
  void OnClose(uint64_t session, absl::Status status);
  void OnStallTimer();
  // Applies one event; REQUIRES: the session is current.
  void ApplyEventLocked(client::WatchEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Transform, then reuse of the cached object when unchanged.
  ObjectPtr Prepare(ObjectPtr object) const;
  ObjectPtr TransformOnly(ObjectPtr object) const;
  std::string RelistResourceVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t WatchTimeoutSeconds();
  bool Stopping() const;
  void SetState(ReflectorState state);
  void RecordError(const absl::Status& status);

  const ReflectorOptions options_;
  Clock* const clock_;

  mutable Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  ReflectorStatus status_ ABSL_GUARDED_BY(mu_);
  bool last_sync_rv_unavailable_ ABSL_GUARDED_BY(mu_) = false;
  bool paginated_result_ ABSL_GUARDED_BY(mu_) = false;
  bool backoff_fired_ ABSL_GUARDED_BY(mu_) = false;

  // The current watch session; callbacks of other sessions are ignored. Its state is two
  // independent machines (the combinations that exist are exactly their product):
  //   how the stream stands:  kOpen -> kStalled (stall timer) -> kEnded, or kOpen -> kEnded
  //                           (the stream closed; session_end_status_ says how). Events apply
  //                           only while not kEnded.
  //   its initial events:     kNone (a plain watch), or kArriving -> kDone (a streaming list:
  //                           collected in initial_ until the initial-events-end bookmark,
  //                           which Replaces the store). A streaming list given up is kNone.
  enum class SessionStream { kOpen, kStalled, kEnded };
  enum class InitialEvents { kNone, kArriving, kDone };
  uint64_t session_ ABSL_GUARDED_BY(mu_) = 0;
  SessionStream session_stream_ ABSL_GUARDED_BY(mu_) = SessionStream::kOpen;
  absl::Status session_end_status_ ABSL_GUARDED_BY(mu_);
  uint64_t session_events_ ABSL_GUARDED_BY(mu_) = 0;  // bookmarks included
  absl::Time session_started_ ABSL_GUARDED_BY(mu_);
  InitialEvents initial_events_ ABSL_GUARDED_BY(mu_) = InitialEvents::kNone;
  absl::flat_hash_map<absl::string_view, ObjectPtr, StringHash, StringEq> initial_
      ABSL_GUARDED_BY(mu_);

  // Used by steps only (they run one at a time), and by Stop once no step runs.
  Phase phase_ = Phase::kStart;
  std::unique_ptr<WatchHandle> watch_;
  Backoff backoff_;
  std::mt19937_64 rng_;

  std::unique_ptr<Timer> backoff_timer_;
  std::unique_ptr<Timer> stall_timer_;
  // Last: destroyed (stopped) first.
  std::unique_ptr<SerialTask> task_;
};

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_REFLECTOR_H_
