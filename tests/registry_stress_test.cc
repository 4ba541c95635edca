// Concurrency invariants of the registry, meant to run under ThreadSanitizer and
// AddressSanitizer as well as in release:
//   * 1,000,000 keys created concurrently from 2 threads: none lost, none duplicated;
//   * eviction racing with lookups and calls never removes an entry that has a call
//     in flight, and never leaves a held reference dangling (a dead entry's payload is
//     poisoned under ASan, so touching one is a report, not a silent read);
//   * counters under concurrency add up exactly, evicted keys included;
//   * scrapes racing with eviction see registry counters that never decrease, and
//     created = evicted + live in every one.
// Sizes shrink under the sanitizers (compile-time check) so CI stays within budget;
// the full-size check runs in release.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/prometheus.h"
#include "bulwark/registry.h"
#include "support/patience.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define BULWARK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define BULWARK_SANITIZED 1
#endif
#endif

namespace {

using namespace std::chrono_literals;
using bulwark::ManualClock;
using bulwark::Outcome;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Reg = bulwark::BasicRegistry<std::string, Breaker>;

#if defined(BULWARK_SANITIZED)
constexpr int kKeys = 100'000;
constexpr int kCallsPerThread = 20'000;
#else
constexpr int kKeys = 1'000'000;
constexpr int kCallsPerThread = 200'000;
#endif

// "host-123456:443": 15 characters, written into a buffer (no allocation per lookup).
std::string_view host_key(char (&buf)[32], int i) {
  const int n = std::snprintf(buf, sizeof buf, "host-%06d:443", i);
  return std::string_view(buf, static_cast<std::size_t>(n));
}

// Built by appending: "k" + std::to_string(i) trips GCC 12's -Wrestrict false positive.
std::string named(const char* prefix, unsigned i) {
  std::string s = prefix;
  s.append(std::to_string(i));
  return s;
}

// The registry's counter samples in an exposition (counters and histogram parts),
// by series: the values that must never decrease from one scrape to the next.
std::map<std::string, double> registry_counters(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("bulwark_registry_", 0) != 0) continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    const bool counter = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    const bool histogram = name.find("_call_duration_seconds_") != std::string::npos;
    if (!counter && !histogram) continue;
    const auto sp = line.rfind(' ');
    m[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return m;
}

double gauge(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + 1 + series.size() + 1, nullptr);
}

// Twice: with plain-pointer handles (no idle_ttl), and with reference-counted ones
// (removable), whose lookups pin entries with a CAS.
class RegistryCreation : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Handles, RegistryCreation, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Counted" : "Plain"; });

TEST_P(RegistryCreation, AMillionKeysCreatedFromTwoThreadsNoneLostNoneDuplicated) {
  ManualClock clock;
  Reg::Options o;  // field by field: GCC 12 misreads a designated initializer with a runtime value
  o.name = "hosts";
  o.breaker.name = "upstream";
  o.removable = GetParam();
  Reg reg(std::move(o), clock);
  std::vector<const Breaker*> seen[2];
  std::vector<std::uint64_t> incarnation[2];
  std::atomic<int> ready{0};
  auto worker = [&](int t) {
    seen[t].assign(kKeys, nullptr);
    incarnation[t].assign(kKeys, 0);
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    char buf[32];
    // Both threads walk the same keys in the same order: they race on every creation.
    for (int i = 0; i < kKeys; ++i) {
      auto h = reg.get(host_key(buf, i));
      seen[t][static_cast<std::size_t>(i)] = &h.breaker();
      incarnation[t][static_cast<std::size_t>(i)] = h.incarnation();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();

  EXPECT_EQ(reg.size(), static_cast<std::size_t>(kKeys));
  EXPECT_EQ(reg.read().created, static_cast<std::uint64_t>(kKeys));
  std::size_t disagreements = 0;
  for (int i = 0; i < kKeys; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (seen[0][k] != seen[1][k] || incarnation[0][k] != incarnation[1][k]) ++disagreements;
  }
  EXPECT_EQ(disagreements, 0u) << "two threads got different breakers for the same key";
  std::vector<const Breaker*> all = seen[0];
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "one breaker for two keys";
  std::size_t visited = 0;
  reg.for_each([&](const Reg::EntryView&) { ++visited; });
  EXPECT_EQ(visited, static_cast<std::size_t>(kKeys));
  char buf[32];
  for (int i = 0; i < kKeys; i += 997) {
    auto h = reg.find(host_key(buf, i));
    ASSERT_TRUE(h) << i;
    EXPECT_EQ(&h.breaker(), seen[0][static_cast<std::size_t>(i)]);
    EXPECT_EQ(h.key(), host_key(buf, i));
  }
}

TEST(RegistryStress, EvictionNeverTakesAKeyWithACallInFlightAndCountersAddUp) {
  ManualClock clock;
  Reg::Options o;
  o.name = "churn";
  o.breaker = {.name = "upstream", .consecutive_failures = 3, .open_duration = 200ms};
  o.idle_ttl = 1s;
  o.evict_batch = 4;
  o.shards = 2;
  o.detailed_metrics = true;
  Reg reg(std::move(o), clock);
  constexpr int kHot = 64;
  // The callers make kCallsPerThread calls each, and go on until the scraper has scraped
  // kScrapes times and the evictor has evicted keys while they were calling: each side
  // waits for the others instead of assuming the scheduler ran them. The scraper and the
  // evictor go on until the callers are done.
  constexpr std::uint64_t kScrapes = 10;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> admitted{0}, rejected{0}, timed{0}, wrong_entry{0};
  std::atomic<std::uint64_t> scrapes{0}, evictions{0};
  bulwark::test::Patience patience;
  std::atomic<bool> gave_up{false};

  auto caller = [&](int seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::uint64_t my_admitted = 0, my_rejected = 0, my_timed = 0;
    for (int i = 0;; ++i) {
      if (i >= kCallsPerThread) {
        if (scrapes.load() >= kScrapes && evictions.load() > 0) break;
        if (patience.exhausted()) {
          gave_up.store(true);
          break;
        }
      }
      const std::string key = named("k", rng() % kHot);
      auto call = reg.try_acquire(key);
      if (!call) {
        ++my_rejected;
        continue;
      }
      ++my_admitted;
      const std::uint64_t mine = call->handle().incarnation();
      clock.advance(std::chrono::microseconds(rng() % 3000));  // long enough for idle keys to go
      // While the call is in flight its entry must stay the key's entry.
      if (auto f = reg.find(key); !f || f.incarnation() != mine) wrong_entry.fetch_add(1);
      if (reg.get(key).incarnation() != mine) wrong_entry.fetch_add(1);
      (void)call->breaker().snapshot();  // a dangling entry would be an ASan report here
      switch (rng() % 8) {
        case 0:
          call->record(Outcome::failure, std::chrono::milliseconds(1 + rng() % 900));
          break;
        case 1:
          break;  // cancelled
        case 2:
          call->ignore();
          break;
        default:
          call->record(Outcome::success, std::chrono::milliseconds(1 + rng() % 900));
          break;
      }
      ++my_timed;
      if (i % 7 == 0) {
        // Hold a handle to a key across a few other calls, then let it go.
        auto held = reg.get(named("held", rng() % 4));
        clock.advance(2s);
        if (auto f = reg.find(held.key()); !f || f.incarnation() != held.incarnation())
          wrong_entry.fetch_add(1);
      }
    }
    admitted.fetch_add(my_admitted);
    rejected.fetch_add(my_rejected);
    timed.fetch_add(my_timed);
  };
  auto evictor = [&] {
    while (!stop.load()) {
      clock.advance(300ms);
      evictions.fetch_add(reg.evict_idle(16));
    }
  };
  // Every scrape, while keys are evicted under it: the registry's counters never go
  // down from one scrape to the next (Prometheus would read a drop as a counter reset),
  // and each scrape is consistent (created = evicted + live).
  std::atomic<std::uint64_t> decreases{0}, inconsistent{0};
  std::string first_problem;  // written by the scraper only; read after join
  auto scraper = [&] {
    std::map<std::string, double> last;
    while (!stop.load()) {
      std::ostringstream out;
      bulwark::prometheus::write(out, reg);
      ASSERT_FALSE(out.str().empty());
      const std::map<std::string, double> now = registry_counters(out.str());
      for (const auto& [series, value] : now) {
        const auto it = last.find(series);
        if (it != last.end() && value < it->second) {
          if (decreases.fetch_add(1) == 0) {
            first_problem = series + " went from " + std::to_string(it->second) + " to " +
                            std::to_string(value);
          }
        }
      }
      const double created = now.at(R"(bulwark_registry_keys_created_total{registry="churn"})");
      const double evicted = now.at(R"(bulwark_registry_keys_evicted_total{registry="churn"})");
      const double keys = gauge(out.str(), R"(bulwark_registry_keys{registry="churn"})");
      if (created != evicted + keys) inconsistent.fetch_add(1);
      last = now;
      scrapes.fetch_add(1);
    }
  };
  std::thread e(evictor), s(scraper);
  std::thread c1(caller, 1), c2(caller, 2);
  c1.join();
  c2.join();
  stop.store(true);
  e.join();
  s.join();

  ASSERT_FALSE(gave_up.load()) << "in 120 s of calls, the scraper scraped " << scrapes.load()
                               << " times (of " << kScrapes << ") and the evictor evicted "
                               << evictions.load() << " keys";
  EXPECT_EQ(wrong_entry.load(), 0u) << "an entry was evicted (or replaced) while referenced";
  EXPECT_EQ(decreases.load(), 0u) << "a registry counter decreased between scrapes: "
                                  << first_problem;
  EXPECT_EQ(inconsistent.load(), 0u) << "a scrape's created != evicted + keys";
  const auto total = reg.read();
  EXPECT_GE(total.evicted, evictions.load()) << "lookups evict too, evict_idle() counts its own";
  EXPECT_EQ(total.successes + total.failures + total.ignored + total.cancelled, admitted.load());
  EXPECT_EQ(total.rejected, rejected.load());
  EXPECT_EQ(total.created, total.evicted + total.keys);
  std::uint64_t by_state = 0;
  for (auto n : total.breakers_by_state) by_state += n;
  EXPECT_EQ(by_state, total.keys);
  // Only calls that reported an outcome with a duration reach the histogram;
  // ignore() and cancelled calls don't: count those from the breaker totals.
  EXPECT_EQ(total.latency.count(), total.successes + total.failures);
  EXPECT_LE(total.latency.count(), timed.load());
}

TEST(RegistryStress, CountersOfOneHotKeyAddUpExactly) {
  ManualClock clock;
  Reg reg({.name = "hot",
           .breaker = {.name = "upstream", .consecutive_failures = 65'535},  // never reached
           .detailed_metrics = true},
          clock);
  constexpr int kThreads = 2;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        auto call = reg.try_acquire("hot");
        ASSERT_TRUE(call);
        auto* m = call->handle().metrics();
        m->components.record_retry();
        if ((i + t) % 3 == 0) m->components.record_fallback(bulwark::FallbackKind::failed);
        call->record((i % 4 == 0) ? Outcome::failure : Outcome::success,
                     std::chrono::milliseconds(1 + i % 1000));
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::uint64_t n = std::uint64_t{kThreads} * kCallsPerThread;
  auto h = reg.get("hot");
  const auto snap = h->snapshot();
  EXPECT_EQ(snap.successes + snap.failures, n);
  EXPECT_EQ(snap.failures, n / 4);
  const auto d = h.metrics()->read();
  EXPECT_EQ(d.latency.count(), n);
  EXPECT_EQ(d.components.retries, n);
  std::uint64_t sum = 0, fallbacks = 0;
  std::vector<std::uint64_t> expected(bulwark::LatencyBuckets::kCount, 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCallsPerThread; ++i) {
      const auto dur = std::chrono::milliseconds(1 + i % 1000);
      sum += static_cast<std::uint64_t>(bulwark::Nanos(dur).count());
      expected[bulwark::LatencyBuckets::index(dur)] += 1;
      if ((i + t) % 3 == 0) ++fallbacks;
    }
  }
  EXPECT_EQ(d.latency.sum_nanos, sum);
  for (std::size_t b = 0; b < expected.size(); ++b)
    EXPECT_EQ(d.latency.buckets[b], expected[b]) << b;
  EXPECT_EQ(d.components.fallbacks[1], fallbacks);
}

}  // namespace

namespace {

// Transitions routed to their entries while another thread keeps creating keys (so
// entry segments and the address directory grow under the router's lock-free reads):
// every event carries the key of the breaker that changed, and none is lost.
TEST(RegistryStress, TransitionsFindTheirKeyWhileTheRegistryGrows) {
  ManualClock clock;
  Reg::Options o;
  o.name = "growing";
  o.breaker = {.name = "upstream", .consecutive_failures = 1, .open_duration = 30s};
  o.shards = 4;
  Reg reg(std::move(o), clock);
#if defined(BULWARK_SANITIZED)
  constexpr unsigned kGrow = 20'000, kTrips = 2'000;
#else
  constexpr unsigned kGrow = 200'000, kTrips = 20'000;
#endif
  std::atomic<unsigned> events{0}, wrong{0};
  auto sub = reg.events().subscribe(bulwark::EventKind::transition, [&](const bulwark::Event& e) {
    // The tripping thread's keys are "trip<i>"; the breaker's key must match its state.
    if (e.key.rfind("trip", 0) != 0) wrong.fetch_add(1, std::memory_order_relaxed);
    events.fetch_add(1, std::memory_order_relaxed);
  });
  std::thread grower([&] {
    for (unsigned i = 0; i < kGrow; ++i) (void)reg.get(named("grow", i));
  });
  std::thread tripper([&] {
    for (unsigned i = 0; i < kTrips; ++i) {
      auto call = reg.try_acquire(named("trip", i));
      ASSERT_TRUE(call);
      call->record_failure();  // consecutive_failures = 1: CLOSED -> OPEN
    }
  });
  grower.join();
  tripper.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(events.load(), kTrips);
  EXPECT_EQ(reg.size(), kGrow + kTrips);
}

}  // namespace
