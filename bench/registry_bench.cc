// The registry and the Prometheus exposition against baselines measured in the same
// run (docs/observability.md has the figures and how to read them):
//
//   build/release/bench/bulwark_bench
//   --benchmark_filter='Registry|Prometheus|Format|Closed_Acquire'
//
//   BM_Registry_LookupExisting/<keys>     try_acquire(key) + record(success) on an
//                                         existing key, keys taken in rotation; compare
//                                         with BM_Closed_AcquireRecordSuccess
//                                         (breaker_bench.cc: the bare breaker call).
//                                         Goal: <= 4x.
//   BM_Registry_Baseline_BreakerArray/<n> the bare call on n standalone breakers in the
//                                         same rotation: what the spread alone costs.
//   BM_Prometheus_Scrape_10k              gather + write 10,000 breakers; compare with
//   BM_Baseline_Format_10k                writing the very same lines, precomputed, to
//                                         the same kind of stream. Goal: <= 2x.
//   BM_Registry_TransitionEvent/<keys>   a transition event reaching its key, with
//                                         1,024 and 1,000,000 keys. Goal: ratio ~1.
//   BM_Registry_Memory_1M                 resident memory of 1,000,000 keys like
//                                         "host-123456:443", from /proc/self/statm
//                                         before and after: counter bytes_per_key (and
//                                         bytes_per_key_over_breaker). Goal: <= 200
//                                         bytes per key on top of sizeof(breaker).

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/prometheus.h"
#include "bulwark/registry.h"

namespace {

using bulwark::Outcome;
using Hosts = bulwark::Registry<std::string>;

std::string_view host_key(char (&buf)[32], int i) {
  const int n = std::snprintf(buf, sizeof buf, "host-%06d:443", i);
  return std::string_view(buf, static_cast<std::size_t>(n));
}

std::vector<std::string> host_keys(int n) {
  std::vector<std::string> keys;
  char buf[32];
  for (int i = 0; i < n; ++i) keys.emplace_back(host_key(buf, i));
  return keys;
}

// Resident set size of this process, in bytes.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// An ostream that appends to a string whose capacity survives clear(): what an HTTP
// handler building a response body does, without measuring reallocation.
class StringSink : public std::streambuf {
 public:
  std::string data;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    data.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) data.push_back(static_cast<char>(c));
    return c;
  }
};

// ---------------------------------------------------------------------------
// Memory (registered first, so no earlier benchmark's freed memory is reused)
// ---------------------------------------------------------------------------

void memory_benchmark(benchmark::State& state, bool detailed) {
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    malloc_trim(0);
    const std::size_t before = resident_bytes();
    std::size_t after = 0, reported = 0;
    {
      Hosts reg({.name = "hosts", .breaker = {.name = "upstream"}, .detailed_metrics = detailed});
      char buf[32];
      for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(reg.get(host_key(buf, i)));
      after = resident_bytes();
      reported = reg.memory().total();
      state.PauseTiming();  // the destruction is not what we measure
    }
    state.ResumeTiming();
    const double per_key = static_cast<double>(after - before) / n;
    state.counters["bytes_per_key"] = per_key;
    state.counters["bytes_per_key_over_breaker"] =
        per_key - static_cast<double>(sizeof(bulwark::CircuitBreaker));
    state.counters["reported_bytes_per_key"] = static_cast<double>(reported) / n;
    state.counters["entry_bytes"] = static_cast<double>(Hosts::kEntryBytes);
  }
}

void BM_Registry_Memory_1M(benchmark::State& state) { memory_benchmark(state, false); }
BENCHMARK(BM_Registry_Memory_1M)->Arg(1'000'000)->Iterations(1)->Unit(benchmark::kMillisecond);

// With a BreakerMetrics block per key (latency histogram, transitions, components).
void BM_Registry_Memory_Detailed(benchmark::State& state) { memory_benchmark(state, true); }
BENCHMARK(BM_Registry_Memory_Detailed)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Lookup + call
// ---------------------------------------------------------------------------

struct LookupFixture {
  explicit LookupFixture(bool ttl)
      : reg({.name = "hosts",
             .breaker = {.name = "upstream"},
             .idle_ttl = ttl ? std::chrono::nanoseconds(std::chrono::minutes(10))
                             : bulwark::Nanos::zero()}),
        keys(host_keys(4096)) {
    for (const auto& k : keys) (void)reg.get(k);
  }
  Hosts reg;
  std::vector<std::string> keys;
};

LookupFixture& lookup_fixture(bool ttl) {
  static LookupFixture without(false);
  static LookupFixture with(true);
  return ttl ? with : without;
}

void lookup_benchmark(benchmark::State& state, bool ttl) {
  LookupFixture& f = lookup_fixture(ttl);
  const std::size_t mask = static_cast<std::size_t>(state.range(0)) - 1;  // a power of two
  std::vector<std::string_view> keys(f.keys.begin(), f.keys.end());
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 1031;
  for (auto _ : state) {
    auto call = f.reg.try_acquire(keys[i++ & mask]);
    call->record_success();
  }
}

// 1 key: both threads on one breaker, as BM_Closed_AcquireRecordSuccess; 1024 keys:
// a service talking to a thousand hosts.
void BM_Registry_LookupExisting(benchmark::State& state) { lookup_benchmark(state, false); }
BENCHMARK(BM_Registry_LookupExisting)->Arg(1)->Arg(1024)->Threads(1)->Threads(2);

// The same with idle_ttl set: a lookup also pins its entry (one CAS, which sets the
// entry's "used" bit) and lets it go (one atomic subtract). No clock read per lookup:
// one lookup in 64 per thread reads the coarse clock to see whether an eviction step is
// due (registry.h, "Cost").
void BM_Registry_LookupExisting_IdleTtl(benchmark::State& state) { lookup_benchmark(state, true); }
BENCHMARK(BM_Registry_LookupExisting_IdleTtl)->Arg(1)->Arg(1024)->Threads(1)->Threads(2);

// The bare breaker call over n breakers in the same rotation (no lookup).
void BM_Registry_Baseline_BreakerArray(benchmark::State& state) {
  static const auto breakers = [] {
    std::vector<std::unique_ptr<bulwark::CircuitBreaker>> v;
    for (int i = 0; i < 4096; ++i)
      v.push_back(std::make_unique<bulwark::CircuitBreaker>(bulwark::BreakerConfig{}));
    return v;
  }();
  const std::size_t mask = static_cast<std::size_t>(state.range(0)) - 1;
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 1031;
  for (auto _ : state) {
    auto permit = breakers[i++ & mask]->try_acquire();
    permit->record_success();
  }
}
BENCHMARK(BM_Registry_Baseline_BreakerArray)->Arg(1)->Arg(1024)->Threads(1)->Threads(2);

// A miss: find() of a key that is not there (lock-free, no allocation).
void BM_Registry_FindMissing(benchmark::State& state) {
  LookupFixture& f = lookup_fixture(false);
  char buf[32];
  const std::string_view missing = host_key(buf, 999'999);
  for (auto _ : state) benchmark::DoNotOptimize(f.reg.find(missing));
}
BENCHMARK(BM_Registry_FindMissing);

// Creating keys (the slow path: the shard mutex, an entry, a std::string).
void BM_Registry_Create(benchmark::State& state) {
  std::unique_ptr<Hosts> reg;
  int i = 0;
  char buf[32];
  for (auto _ : state) {
    if (i % 100'000 == 0) {
      state.PauseTiming();
      reg = std::make_unique<Hosts>(Hosts::Options{.name = "fresh"});
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(reg->get(host_key(buf, i++ % 1'000'000)));
  }
}
BENCHMARK(BM_Registry_Create);

// A transition event reaching its key: the registry finds the entry from the breaker's
// address with one directory probe, so the cost is the same with 1,024 keys as with
// 1,000,000. Each iteration forces one of 1,024 keys (spread over all of them) open
// and closes it again: two transitions, two events carrying the key.
struct EventFixture {
  explicit EventFixture(int n) : reg({.name = "hosts", .breaker = {.name = "upstream"}}) {
    char buf[32];
    for (int i = 0; i < n; ++i) {
      auto h = reg.get(host_key(buf, i));
      if (i % (n / 1024) == 0) handles.push_back(std::move(h));
    }
    sub.emplace(reg.events().subscribe(bulwark::EventKind::transition,
                                       [this](const bulwark::Event& e) { bytes += e.key.size(); }));
  }
  Hosts reg;
  std::vector<Hosts::Handle> handles;
  std::size_t bytes = 0;
  std::optional<bulwark::Subscription> sub;
};

void BM_Registry_TransitionEvent(benchmark::State& state) {
  static EventFixture small(1024);
  static EventFixture large(1'000'000);
  EventFixture& f = state.range(0) == 1024 ? small : large;
  std::size_t i = 0;
  for (auto _ : state) {
    auto& h = f.handles[i++ & 1023];
    benchmark::DoNotOptimize(h->transition_to(bulwark::State::open));
    benchmark::DoNotOptimize(h->transition_to(bulwark::State::closed));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 2);
}
BENCHMARK(BM_Registry_TransitionEvent)->Arg(1024)->Arg(1'000'000);

// ---------------------------------------------------------------------------
// Scrape
// ---------------------------------------------------------------------------

struct ScrapeFixture {
  explicit ScrapeFixture(bool detailed)
      : reg({.name = "hosts", .breaker = {.name = "upstream"}, .detailed_metrics = detailed}) {
    char buf[32];
    for (int i = 0; i < 10'000; ++i) {
      auto call = reg.try_acquire(host_key(buf, i));
      call->record(i % 10 == 0 ? Outcome::failure : Outcome::success,
                   std::chrono::milliseconds(i % 700));
    }
    StringSink sink;
    std::ostream out(&sink);
    bulwark::prometheus::write(out, reg);
    std::istringstream in(sink.data);
    for (std::string line; std::getline(in, line);) lines.push_back(line + "\n");
    bytes = sink.data.size();
  }
  Hosts reg;
  std::vector<std::string> lines;  // one scrape, line by line
  std::size_t bytes = 0;
};

ScrapeFixture& scrape_fixture(bool detailed) {
  static ScrapeFixture plain(false);
  static ScrapeFixture full(true);
  return detailed ? full : plain;
}

void scrape_benchmark(benchmark::State& state, bool detailed) {
  ScrapeFixture& f = scrape_fixture(detailed);
  StringSink sink;
  sink.data.reserve(f.bytes * 2);
  std::ostream out(&sink);
  for (auto _ : state) {
    sink.data.clear();
    bulwark::prometheus::write(out, f.reg);
    benchmark::DoNotOptimize(sink.data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.bytes));
  state.counters["lines"] = static_cast<double>(f.lines.size());
  state.counters["bytes"] = static_cast<double>(f.bytes);
}

// The same text, from constants: the lines of one scrape, precomputed, written one by
// one to the same kind of stream. No breaker is read, no number formatted, no label
// escaped: what is left is the cost of emitting the bytes.
void baseline_benchmark(benchmark::State& state, bool detailed) {
  ScrapeFixture& f = scrape_fixture(detailed);
  StringSink sink;
  sink.data.reserve(f.bytes * 2);
  std::ostream out(&sink);
  for (auto _ : state) {
    sink.data.clear();
    for (const std::string& line : f.lines)
      out.write(line.data(), static_cast<std::streamsize>(line.size()));
    benchmark::DoNotOptimize(sink.data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.bytes));
  state.counters["lines"] = static_cast<double>(f.lines.size());
  state.counters["bytes"] = static_cast<double>(f.bytes);
}

void BM_Prometheus_Scrape_10k(benchmark::State& state) { scrape_benchmark(state, false); }
BENCHMARK(BM_Prometheus_Scrape_10k)->Unit(benchmark::kMillisecond);
void BM_Baseline_Format_10k(benchmark::State& state) { baseline_benchmark(state, false); }
BENCHMARK(BM_Baseline_Format_10k)->Unit(benchmark::kMillisecond);

// With detailed metrics: latency histograms (19 lines) and transitions per breaker.
void BM_Prometheus_Scrape_10k_Detailed(benchmark::State& state) { scrape_benchmark(state, true); }
BENCHMARK(BM_Prometheus_Scrape_10k_Detailed)->Unit(benchmark::kMillisecond);
void BM_Baseline_Format_10k_Detailed(benchmark::State& state) { baseline_benchmark(state, true); }
BENCHMARK(BM_Baseline_Format_10k_Detailed)->Unit(benchmark::kMillisecond);

// A registry of a million keys scraped as totals only (per_breaker = false): the walk.
void BM_Prometheus_Scrape_1M_TotalsOnly(benchmark::State& state) {
  static Hosts reg({.name = "hosts", .breaker = {.name = "upstream"}});
  static const bool filled = [] {
    char buf[32];
    for (int i = 0; i < 1'000'000; ++i) (void)reg.get(host_key(buf, i));
    return true;
  }();
  benchmark::DoNotOptimize(filled);
  StringSink sink;
  std::ostream out(&sink);
  for (auto _ : state) {
    sink.data.clear();
    bulwark::prometheus::write(out, reg, {.per_breaker = false});
  }
}
BENCHMARK(BM_Prometheus_Scrape_1M_TotalsOnly)->Unit(benchmark::kMillisecond);

}  // namespace
