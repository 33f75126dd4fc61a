// A main for libFuzzer targets under Bazel (gcc, no libFuzzer): runs the target over every
// file of the seed corpus directories given as arguments (relative to the runfiles), then over
// deterministic mutations of them (truncations, bit flips, spliced pairs). `--flips=N` sets the
// bit-flipped variants per seed (targets whose inputs are slow to run pass fewer). It finds no new
// inputs — tools/fuzz does that — but keeps every seed and simple variants passing under
// each sanitizer of `make test`.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "base/flags.h"

ABSL_FLAG(int, flips, 200, "Bit-flipped variants run per seed (0..100000).");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  informerd::ParseFlags(argc, argv,
                        "runs a fuzz target over its seed corpora and their mutations: "
                        "[--flips=N] CORPUS_DIR...",
                        &dirs);
  if (absl::Status s = informerd::CheckRange(FLAGS_flips, 0, 100000); !s.ok()) {
    return informerd::FlagError(s);
  }
  const int flip_variants = absl::GetFlag(FLAGS_flips);
  std::vector<std::string> seeds;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  for (std::string dir : dirs) {
    if (srcdir != nullptr && workspace != nullptr) dir = std::string(srcdir) + "/" + workspace + "/" + dir;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) {
      std::fprintf(stderr, "cannot open corpus %s\n", dir.c_str());
      return 1;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    closedir(d);
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds\n");
    return 1;
  }
  std::mt19937 rng(1234);
  size_t runs = 0;
  for (const std::string& seed : seeds) {
    Run(seed);
    for (size_t cut = 0; cut < seed.size(); cut += 1 + seed.size() / 64) Run(seed.substr(0, cut));
    for (int i = 0; i < flip_variants && !seed.empty(); ++i) {
      std::string m = seed;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        m[rng() % m.size()] ^= static_cast<char>(1u << (rng() % 8));
      }
      Run(m);
      ++runs;
    }
    for (const std::string& other : seeds) {
      Run(seed.substr(0, seed.size() / 2) + other.substr(other.size() / 2));
      ++runs;
    }
  }
  std::printf("ran %zu seeds and %zu variants\n", seeds.size(), runs);
  return 0;
}
