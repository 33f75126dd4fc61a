// ThreadSanitizer suppressions for tests and the daemon binary, compiled into them.
//
// Debian's Abseil is built without TSan, so the atomic reference count of absl::Status (and
// Cord) is invisible to it: when a Status made on one thread is released on another, the
// final operator delete called from inside libabsl looks unsynchronised with earlier reads.
// Only races with a frame in Status's reference counting or inside those libraries are
// suppressed.
// The hook is looked up in the executable: tests that link this must set linkstatic = True.
extern "C" const char* __tsan_default_suppressions() {
  return "race:absl::*::Status::Unref\n"
         "race:absl::*::Status::UnrefNonInlined\n"
         "race:absl::*::status_internal::*\n"
         "race:libabsl_status.so*\n"
         "race:libabsl_cord*\n"
         // spdlog's default logger lives in Debian's uninstrumented libspdlog: its level is
         // written there and read (atomically) in our instrumented code.
         "race:spdlog::*\n"
         "race:libspdlog.so*\n"
         // Debian's gRPC is uninstrumented too: its event engine creates an epoll fd on one
         // thread and waits on it from its poller thread, synchronised inside libgrpc/libgpr.
         "race:libgrpc.so*\n"
         "race:libgpr.so*\n"
         // ... so TSan must not even record the memory accesses of the libc calls libgrpc makes
         // (recvmsg into a receive buffer on a poller thread, then parsed by the thread that
         // reads the call): every race on them would match the line above anyway, but only after
         // a report built per 8 bytes, about a millisecond each. A 1 MiB message took minutes.
         "called_from_lib:libgrpc.so\n"
         "race:libgrpc++.so*\n"
         // gRPC's parser library (call deadlines and metadata), as uninstrumented as gRPC.
         "race:libupb.so*\n"
         // A unary reactor finished from a thread of ours (the drain poller, the API-call lanes)
         // runs gRPC's header-inlined Finish against a call object that uninstrumented libgrpc++
         // set up and synchronises with its own atomics, which TSan cannot see.
         "race:grpc::internal::CallbackUnaryHandler*ServerCallbackUnaryImpl::Finish\n"
         // The same for streams: a Watch or Work reactor written to or finished from our timer
         // thread reads the call's Server, which the test's TearDown later deletes after gRPC
         // (uninstrumented) saw the call done.
         "race:grpc::internal::CallbackServerStreamingHandler*ServerCallbackWriterImpl::Finish\n"
         "race:grpc::internal::CallbackServerStreamingHandler*ServerCallbackWriterImpl::Write\n"
         "race:grpc::internal::CallbackBidiHandler*ServerCallbackReaderWriterImpl::Finish\n"
         "race:grpc::internal::CallbackBidiHandler*ServerCallbackReaderWriterImpl::Write\n"
         // The client side likewise: a blocking call copies the status message that
         // uninstrumented libgrpc wrote on its poller thread (many concurrent calls hit it).
         "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n"
         // ... and parses a received message's slices, which libgrpc's poller thread filled
         // (seen with a 2.4 MiB List read by a blocking reader).
         "race:grpc::ProtoBufferReader::Next\n"
         // absl::Mutex (used inside gRPC) keeps its deadlock-detection graph in uninstrumented
         // libabsl too.
         "race:libabsl_graphcycles_internal.so*\n"
         "race:libabsl_synchronization.so*\n"
         // ... and gRPC reads a Status (made on our thread, handed over under gRPC's own locks)
         // with uninstrumented absl code (StrAppend, Cord, ParseTime): any frame on top in one
         // of Debian's uninstrumented Abseil libraries is unverifiable for TSan.
         "race:libabsl_*\n"
         // Debian's OpenSSL, which gRPC's TLS (client and server) drives under its own locks,
         // is as uninstrumented as gRPC.
         "race:libcrypto.so*\n"
         "race:libssl.so*\n";
}
