// Runs a fuzz target without libFuzzer (GCC builds, CI): every file of the corpus directories
// given, then --mutations inputs made from them by a seeded generator (byte flips, interesting
// values, insertions, deletions, duplicated ranges, splices). A crash or a sanitizer report fails
// the run; so does an empty corpus.
//   fuzz_<target>_check [--mutations N] [--seed S] DIR_OR_FILE...
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

std::string Mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = corpus[rng() % corpus.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const std::size_t n = s.size();
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (n > 0) s[rng() % n] = static_cast<char>(s[rng() % n] ^ (1 << (rng() % 8)));
        break;
      case 1: {  // an interesting value
        static const unsigned char kValues[] = {0, 1, 0x7f, 0x80, 0xff, 0xfe, 0x40};
        if (n > 0) s[rng() % n] = static_cast<char>(kValues[rng() % sizeof(kValues)]);
        break;
      }
      case 2:  // insert random bytes
        s.insert(n == 0 ? 0 : rng() % n, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // delete a range
        if (n > 0) {
          const std::size_t at = rng() % n;
          s.erase(at, 1 + rng() % std::min<std::size_t>(16, n - at));
        }
        break;
      case 4:  // duplicate a range
        if (n > 0) {
          const std::size_t at = rng() % n;
          s.insert(rng() % n, s.substr(at, 1 + rng() % 32));
        }
        break;
      case 5: {  // splice with another input
        const std::string& other = corpus[rng() % corpus.size()];
        if (!other.empty())
          s = s.substr(0, n == 0 ? 0 : rng() % n) + other.substr(rng() % other.size());
        break;
      }
    }
  }
  return s;
}

int Run(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t mutations = 0, seed = 1;
  std::vector<std::string> corpus;
  auto read = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = std::stoull(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (std::filesystem::is_directory(argv[i])) {
      for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
        if (e.is_regular_file()) read(e.path());
      }
    } else {
      read(argv[i]);
    }
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no corpus: give seed files or directories\n");
    return 2;
  }
  for (const auto& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  for (std::uint64_t i = 0; i < mutations; ++i) Run(Mutate(corpus, rng));
  std::printf("%zu corpus inputs and %llu mutations ran\n", corpus.size(),
              static_cast<unsigned long long>(mutations));
  return 0;
}
