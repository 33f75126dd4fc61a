// Command lines through Abseil's flags, in one style for every informerd binary: flags defined
// with ABSL_FLAG (underscores) and given as Kubernetes components spell theirs, with dashes
// (`--leader-elect-lease-duration=15s`; the underscored spelling is accepted too), `--help`
// (or `-h`) generated from the definitions in the dashed spelling, `--helpfull` and
// `--help=substring` as Abseil prints them, `--flagfile=PATH` (one flag per line, in Abseil's
// spelling), `--fromenv`, `--undefok`, and errors in Abseil's words:
//
//   ERROR: Unknown command line flag 'informer'. Did you mean --informers?
//   ERROR: Illegal value 'x' specified for flag 'informers'
//   ERROR: Illegal value '0' specified for flag 'informers': expected 1..100000
//
// on stderr, exit status 1. The first two come from Abseil as it parses; the third is a value of
// the right type that the program refuses afterwards (a range, a file that cannot be read, a flag
// that needs another): IllegalValue and friends build it, FlagError prints it.
//
//   ABSL_FLAG(int, informers, 1000, "How many informers to ensure (1..100000).");
//   int main(int argc, char** argv) {
//     informerd::ParseFlags(argc, argv, "many_informers: ...");
//     if (absl::Status s = informerd::CheckRange(FLAGS_informers, 1, 100000); !s.ok()) {
//       return informerd::FlagError(s);
//     }
#ifndef INFORMERD_BASE_FLAGS_H_
#define INFORMERD_BASE_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace informerd {

// Parses the command line; `usage` heads `--help`, which lists the flags of every informerd source
// the binary links (not Abseil's or gRPC's own: `--helpfull` shows those too). A bad flag ends the
// process as Abseil does (above). Arguments that are not flags are an error unless `positional` is
// given, which receives them.
void ParseFlags(int argc, char** argv, absl::string_view usage,
                std::vector<std::string>* positional = nullptr);

// The command line `args` (argv[0] first) with each flag's name in Abseil's spelling: dashes in
// a name that is a defined flag's with underscores become underscores ("--leader-elect" becomes
// "--leader_elect"); values, arguments that are not flags and everything after "--" are left
// as they are. A name no flag has ends the process with the error above, naming the closest
// flag when one is near (unless --undefok is given, which Abseil then applies); --help, -h
// and --helpshort print `usage` and the flags and exit 0.
std::vector<std::string> KubernetesSpelling(const std::vector<std::string>& args,
                                            absl::string_view usage);

// INVALID_ARGUMENT, in Abseil's words with the reason added:
//   Illegal value '<its value>' specified for flag '<name>': <why>
absl::Status IllegalValue(const absl::CommandLineFlag& flag, absl::string_view why);
template <typename T>
absl::Status IllegalValue(const absl::Flag<T>& flag, absl::string_view why) {
  return IllegalValue(absl::GetFlagReflectionHandle(flag), why);
}

// INVALID_ARGUMENT "Missing the value for flag '<name>': <why>" (Abseil's words for `--name`
// with no value) for a flag the program cannot do without.
template <typename T>
absl::Status MissingFlag(const absl::Flag<T>& flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Missing the value for flag '",
                                                 absl::GetFlagReflectionHandle(flag).Name(),
                                                 "': ", why));
}

// IllegalValue unless min <= the flag's value <= max.
template <typename T>
absl::Status CheckRange(const absl::Flag<T>& flag, T min, T max) {
  const T value = absl::GetFlag(flag);
  if (value >= min && value <= max) return absl::OkStatus();
  return IllegalValue(flag, absl::StrCat("expected ", min, "..", max));
}

// IllegalValue unless the flag is a positive, finite duration.
absl::Status CheckPositive(const absl::Flag<absl::Duration>& flag);

// Prints "ERROR: <status's message>" to stderr and returns 1, Abseil's exit status for a bad flag:
// `return FlagError(s);` from main.
int FlagError(const absl::Status& status);

}  // namespace informerd

#endif  // INFORMERD_BASE_FLAGS_H_
