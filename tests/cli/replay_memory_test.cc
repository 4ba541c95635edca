// `bulwark replay` streams: its memory does not grow with the trace's length. The trace
// (1,000,000 rows; 200,000 under sanitizers, which slow everything down) is generated
// on the fly into the child's standard input, and the child's peak RSS (wait4) is
// compared with its peak on a trace ten times shorter. A replay that kept anything per
// row — 8 bytes would do — would exceed the bound.

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "process.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BULWARK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BULWARK_SANITIZED 1
#endif
#endif

namespace bulwark::testing {
namespace {

#ifdef BULWARK_SANITIZED
constexpr std::uint64_t kRows = 200'000;
#else
constexpr std::uint64_t kRows = 1'000'000;
#endif
constexpr int kKeys = 50;

// Rows 1 ms apart over 50 keys, durations 1..300 ms, mostly successes with bursts of
// failures that make the breakers open and close. Deterministic.
void generate(int fd, std::uint64_t rows) {
  std::string buf = "t_ms,key,duration_ms,outcome\n";
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  for (std::uint64_t i = 0; i < rows; ++i) {
    const bool burst = (i / 20'000) % 5 == 3;
    const std::uint64_t r = next() % 1000;
    const char* outcome = (burst && r < 600) || r < 10 ? "failure" : r < 20 ? "ignored" : "success";
    buf += std::to_string(i) + ",service-" + std::to_string(i % kKeys) + "," +
           std::to_string(1 + next() % 300) + "," + outcome + "\n";
    if (buf.size() > (1 << 16)) {
      if (!write_all(fd, buf.data(), buf.size())) return;
      buf.clear();
    }
  }
  write_all(fd, buf.data(), buf.size());
}

struct Replayed {
  CliRun run;
  std::uint64_t calls = 0;  // permitted + rejected, over every key's summary
  int keys = 0;
  std::uint64_t opened = 0;
};

Replayed replay_generated(const std::string& config, std::uint64_t rows) {
  Replayed r;
  r.run = run({"replay", "--config", config, "-"}, "", [&](int fd) { generate(fd, rows); });
  std::size_t at = 0;
  while ((at = r.run.out.find("{\"key\":", at)) != std::string::npos) {
    auto field = [&](const char* name) {
      const std::size_t p = r.run.out.find(std::string("\"") + name + "\":", at);
      return std::stoull(r.run.out.substr(p + std::string(name).size() + 3));
    };
    r.calls += field("permitted") + field("rejected");
    r.opened += field("opened");
    ++r.keys;
    ++at;
  }
  return r;
}

TEST(ReplayMemory, AMillionRowTraceStreamsInBoundedMemory) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's shadow memory and per-thread history grow with the work done, not
  // with what the program keeps: peak RSS says nothing about the replay here. The bound
  // is checked in the release and ASan builds.
  GTEST_SKIP() << "peak RSS is not the program's own under ThreadSanitizer";
#endif
  const std::string config = temp_path("breaker");
  std::ofstream(config) << "[breaker]\n"
                           "kind = \"time\"\n"
                           "window.length = \"10s\"\n"
                           "failure_rate = 0.3\n"
                           "slow_call_rate = 0.5\n"
                           "slow_call_duration = \"250ms\"\n"
                           "minimum_calls = 20\n"
                           "open_duration = \"5s\"\n"
                           "half_open.fraction = 0.2\n"
                           "half_open.probes = 5\n";
  const Replayed small = replay_generated(config, kRows / 10);
  const Replayed big = replay_generated(config, kRows);
  std::remove(config.c_str());
  ASSERT_EQ(small.run.status, 0) << small.run.err;
  ASSERT_EQ(big.run.status, 0) << big.run.err;
  EXPECT_EQ(big.keys, kKeys);
  EXPECT_EQ(big.calls, kRows) << "every row was asked for";
  EXPECT_GT(big.opened, 0u) << "the bursts of failures open the breakers";
  const long bound_kb = small.run.max_rss_kb + static_cast<long>(kRows * 8 / 1024);
  EXPECT_LE(big.run.max_rss_kb, bound_kb)
      << "peak RSS " << big.run.max_rss_kb << " KiB for " << kRows << " rows vs "
      << small.run.max_rss_kb << " KiB for " << kRows / 10;
  std::printf("peak RSS: %ld KiB for %llu rows, %ld KiB for %llu rows\n", small.run.max_rss_kb,
              static_cast<unsigned long long>(kRows / 10), big.run.max_rss_kb,
              static_cast<unsigned long long>(kRows));
}

}  // namespace
}  // namespace bulwark::testing
