// A main() for a fuzz harness built without libFuzzer: feeds every file named on the
// command line (for a directory, each regular file in it, in name order) to
// LLVMFuzzerTestOneInput once. So the committed corpus and regression inputs run in
// every preset's ctest — release, ASan+UBSan, TSan — and a crash, a sanitizer report or
// a failed property names its input first (on stderr). Fails if given no input at all:
// a regression test that ran nothing would pass without testing anything.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (std::filesystem::is_regular_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "no such input: %s\n", argv[i]);
      return 1;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs given\n");
    return 1;
  }
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 1;
    }
    std::fprintf(stderr, "input %s (%zu bytes)\n", path.c_str(), data.size());
    // An exactly sized heap copy, as libFuzzer passes: a read one past the end is then
    // one AddressSanitizer sees (a std::string's buffer has room, and a terminator).
    const std::unique_ptr<std::uint8_t[]> exact(new std::uint8_t[data.size()]);
    std::memcpy(exact.get(), data.data(), data.size());
    LLVMFuzzerTestOneInput(exact.get(), data.size());
  }
  std::printf("%zu inputs ran\n", inputs.size());
  return 0;
}
