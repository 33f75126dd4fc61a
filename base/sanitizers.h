// Whether this binary is built with AddressSanitizer or ThreadSanitizer (make test runs every C++
// test under both): tests that measure time scale their bounds by it, never their assertions.
#ifndef INFORMERD_BASE_SANITIZERS_H_
#define INFORMERD_BASE_SANITIZERS_H_

namespace informerd {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace informerd

#endif  // INFORMERD_BASE_SANITIZERS_H_
