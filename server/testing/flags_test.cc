// Every informerd binary's command line, run as a process: an unknown flag, a value of the wrong
// type, a value of the right type the binary refuses, and --flagfile, each in the one style of
// base/flags.h ("ERROR: ...", exit status 1); --help from the flag definitions.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/testing/subprocess.h"

namespace informerd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// `binary` run with `args`: its exit code and what it wrote to stdout and stderr.
Subprocess::Finished RunBinary(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Runfile(binary)};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<Subprocess::Finished> r =
      Subprocess::Run(std::move(argv), absl::Seconds(120), Subprocess::Stderr::kToStdout);
  EXPECT_TRUE(r.ok()) << binary << ": " << r.status();
  return r.value_or(Subprocess::Finished{});
}

std::string FlagFile(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, ".flags");
  std::ofstream(path) << absl::StrJoin(lines, "\n") << "\n";
  return path;
}

struct Binary {
  std::string path;
  // A flag of a type that "x" does not parse as.
  std::string typed_flag;
  // A flagfile's lines that parse but that the binary refuses, and the error's start.
  std::vector<std::string> refused;
  std::string refused_error;
  // A flag --help lists.
  std::string listed_flag;
};

void PrintTo(const Binary& b, std::ostream* os) { *os << b.path; }

class FlagsTest : public ::testing::TestWithParam<Binary> {};

TEST_P(FlagsTest, AnUnknownFlagIsNamed) {
  const Subprocess::Finished r = RunBinary(GetParam().path, {"--no_such_flag=1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, StartsWith("ERROR: Unknown command line flag 'no_such_flag'"));
}

std::string Dashed(std::string name) {
  for (char& c : name) {
    if (c == '_') c = '-';
  }
  return name;
}

TEST_P(FlagsTest, AMisspelledFlagNamesTheClosestInItsDashedSpelling) {
  const std::string listed = Dashed(GetParam().listed_flag);
  const std::string typo = listed.substr(0, listed.size() - 1);
  const Subprocess::Finished r = RunBinary(GetParam().path, {absl::StrCat("--", typo, "=1")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, StartsWith(absl::StrCat("ERROR: Unknown command line flag '", typo,
                                                "'. Did you mean --", listed, "?")));
}

TEST_P(FlagsTest, AValueOfTheWrongTypeIsNamedInEitherSpelling) {
  for (const std::string& spelling : {GetParam().typed_flag, Dashed(GetParam().typed_flag)}) {
    const Subprocess::Finished r = RunBinary(GetParam().path, {absl::StrCat("--", spelling, "=x")});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, StartsWith(absl::StrCat("ERROR: Illegal value 'x' specified for flag '",
                                                  GetParam().typed_flag, "'")));
  }
}

TEST_P(FlagsTest, AValueOfTheWrongTypeAsTheNextArgumentIsNamed) {
  const Subprocess::Finished r =
      RunBinary(GetParam().path, {absl::StrCat("--", Dashed(GetParam().typed_flag)), "x"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, StartsWith(absl::StrCat("ERROR: Illegal value 'x' specified for flag '",
                                                GetParam().typed_flag, "'")));
}

TEST_P(FlagsTest, AFlagfileIsReadAndARefusedValueIsNamedInTheSameStyle) {
  const Subprocess::Finished r =
      RunBinary(GetParam().path,
          {absl::StrCat("--flagfile=", FlagFile(GetParam().typed_flag, GetParam().refused))});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, StartsWith(absl::StrCat("ERROR: ", GetParam().refused_error)));
}

TEST_P(FlagsTest, HelpListsTheFlagsFromTheirDefinitionsDashed) {
  for (const char* help : {"--help", "-h"}) {
    const Subprocess::Finished r = RunBinary(GetParam().path, {help});
    EXPECT_EQ(r.exit_code, 0) << help << ": " << r.output;  // as Kubernetes components exit
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("\n  --", Dashed(GetParam().listed_flag))));
    if (GetParam().listed_flag.find('_') != std::string::npos) {
      EXPECT_THAT(r.output,
                  ::testing::Not(HasSubstr(absl::StrCat("\n  --", GetParam().listed_flag))));
    }
    EXPECT_THAT(r.output, HasSubstr("--helpfull"));
    // Abseil's own flags are under --helpfull only.
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("\n  --flagfile")));
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryBinary, FlagsTest,
    ::testing::Values(
        Binary{"server/informerd", "idle_timeout", {"--log_format=xml"},
               "Illegal value 'xml' specified for flag 'log_format': \"xml\" is not text or json",
               "leader_elect_identity"},
        Binary{"bench/load", "keys", {"--target=127.0.0.1:1", "--keys=0"},
               "Illegal value '0' specified for flag 'keys': expected 1..100000000", "change_rate"},
        Binary{"bench/load", "duration", {"--queue=q"}, "Missing the value for flag 'target'",
               "target"},
        Binary{"bench/load", "add_rate", {"--target=x", "--tls_ca=/nonexistent/ca.pem"},
               "Illegal value '/nonexistent/ca.pem' specified for flag 'tls_ca': cannot read "
               "/nonexistent/ca.pem",
               "tls_ca"},
        Binary{"bench/grpc_floor", "batch", {"--mode=events", "--subscribers=0"},
               "Illegal value '0' specified for flag 'subscribers': expected 1..10000",
               "event_bytes"},
        Binary{"bench/many_informers", "informers", {"--target=x", "--concurrency=2000"},
               "Illegal value '2000' specified for flag 'concurrency': expected 1..1024",
               "namespace_prefix"},
        Binary{"bench/informer_benchmark", "events", {"--mode=fast"},
               "Illegal value 'fast' specified for flag 'mode': expected sync, ingest, relist or "
               "floor",
               "compression"},
        Binary{"bench/watch_decode_benchmark", "chunk_bytes", {"--chunk_bytes=0"},
               "Illegal value '0' specified for flag 'chunk_bytes': expected 1..16777216",
               "write_streams"},
        Binary{"server/testing/hold_worker", "max_in_flight", {"--target=x", "--queue=q",
                                                               "--max_in_flight=0"},
               "Illegal value '0' specified for flag 'max_in_flight': expected 1..10000",
               "hold_ms"},
        Binary{"client/kubeconfig_fuzzer_test", "flips", {"--flips=-1"},
               "Illegal value '-1' specified for flag 'flips': expected 0..100000", "flips"}),
    [](const ::testing::TestParamInfo<Binary>& info) {
      std::string name = absl::StrCat(info.index, "_", info.param.path.substr(
                                                           info.param.path.rfind('/') + 1));
      for (char& c : name) {
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// --check-config: the file and flags validated as a start would, and nothing started (no
// listener: the config's 127.0.0.1:1 would be refused or taken).
TEST(CheckConfigTest, AValidConfigIsSaidValidAndNothingStarts) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/valid.yaml");
  std::ofstream(path) << "listen: [\"127.0.0.1:1\"]\n"
                         "insecureAllowUnauthenticated: true\n"
                         "clusters: [{name: local, inCluster: true}]\n"
                         "informers: [{name: pods, resource: {version: v1, resource: pods}}]\n";
  const Subprocess::Finished r =
      RunBinary("server/informerd", {"--check-config", absl::StrCat("--config=", path)});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "config: valid\n");
}

TEST(CheckConfigTest, AnInvalidConfigIsRefusedNamingTheKey) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/invalid.yaml");
  std::ofstream(path) << "informers: [{name: pods, resource: {version: v1, resource: pods}, "
                         "labelSelectr: app=web}]\n";
  const Subprocess::Finished r =
      RunBinary("server/informerd", {"--check_config", absl::StrCat("--config=", path)});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("informers[0]")) << r.output;
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("config: valid")));
}

TEST(PositionalTest, AnArgumentThatIsNotAFlagIsRefused) {
  const Subprocess::Finished r = RunBinary("server/informerd", {"--listen=127.0.0.1:0", "stray"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, StartsWith("ERROR: Unexpected argument 'stray'"));
}

// The daemon run with `flags` listens where they say, with no HTTP listener (they give
// --metrics-listen= in some spelling), and stops on SIGTERM.
void ExpectTheDaemonListensWhereTheFlagsSay(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {Runfile("server/informerd")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(std::move(argv));
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> grpc = (*p)->ReadUntil("grpc: ", absl::Seconds(30));
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  EXPECT_THAT(*grpc, StartsWith("127.0.0.1:"));
  // --metrics_listen= (empty): no HTTP listener, so no "metrics:" line before the output ends.
  (*p)->Signal(SIGTERM);
  absl::StatusOr<std::string> rest = (*p)->ReadUntil("metrics: ", absl::Seconds(30));
  EXPECT_FALSE(rest.ok()) << *rest;
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

// The flags a flagfile gives take effect: the daemon listens where its flagfile says.
TEST(FlagfileTest, TheDaemonRunsOnItsFlagfile) {
  ExpectTheDaemonListensWhereTheFlagsSay(
      {absl::StrCat("--flagfile=",
                    FlagFile("daemon", {"--listen=127.0.0.1:0", "--metrics_listen=",
                                        "--insecure_allow_unauthenticated", "--log_level=warn"}))});
}

// The Kubernetes spelling, with a value as the next argument, and both spellings mixed.
TEST(KubernetesSpellingTest, TheDaemonRunsOnDashedFlags) {
  ExpectTheDaemonListensWhereTheFlagsSay({"--listen", "127.0.0.1:0", "--metrics-listen=",
                                          "--insecure-allow-unauthenticated", "--log_level=warn",
                                          "--idle-timeout=90s"});
}

TEST(FlagfileTest, TheWatchStreamsGoWhereTheFlagfileSays) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/streams");
  ASSERT_EQ(system(absl::StrCat("mkdir -p '", dir, "'").c_str()), 0);
  const Subprocess::Finished r = RunBinary("bench/watch_decode_benchmark",
                       {absl::StrCat("--flagfile=", FlagFile("streams", {"--write_streams=" + dir}))});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::ifstream(dir + "/configmap-1024.jsonl").good()) << r.output;
}

}  // namespace
}  // namespace informerd::testing
