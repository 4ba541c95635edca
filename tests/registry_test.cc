// The keyed registry: get-or-create, handles, per-key configuration, eviction rules,
// events and totals. Deterministic: a ManualClock, no threads (see
// registry_stress_test.cc for concurrency).

#include "bulwark/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bulwark/bulkhead.h"
#include "bulwark/retry_budget.h"
#include "support/host_guards.h"

namespace {

using namespace std::chrono_literals;
using bulwark::EventKind;
using bulwark::ManualClock;
using bulwark::Outcome;
using bulwark::State;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Reg = bulwark::BasicRegistry<std::string, Breaker>;
using Options = Reg::Options;

Options options(bulwark::Nanos ttl = bulwark::Nanos::zero()) {
  Options o;
  o.name = "hosts";
  o.breaker = {.name = "upstream", .consecutive_failures = 2, .open_duration = 30s};
  o.idle_ttl = ttl;
  o.shards = 4;
  return o;
}

// key("k", i) trips GCC 12's -Wrestrict false positive at -O3.
std::string key(std::string_view prefix, int i) {
  std::string s(prefix);
  s.append(std::to_string(i));
  return s;
}

void fail_times(Reg& reg, std::string_view key, int n) {
  for (int i = 0; i < n; ++i) {
    auto call = reg.try_acquire(key);
    ASSERT_TRUE(call.has_value());
    call->record(Outcome::failure);
  }
}

TEST(Registry, GetCreatesOnceAndReturnsTheSameBreaker) {
  ManualClock clock;
  Reg reg(options(), clock);
  EXPECT_EQ(reg.size(), 0u);
  auto a = reg.get("host-1:443");
  auto b = reg.get(std::string_view("host-1:443"));
  auto c = reg.get(std::string("host-1:443"));
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(&a.breaker(), &b.breaker());
  EXPECT_EQ(&a.breaker(), &c.breaker());
  EXPECT_EQ(a.key(), "host-1:443");
  EXPECT_EQ(a->name(), "upstream");
  EXPECT_EQ(reg.size(), 1u);
  auto other = reg.get("host-2:443");
  EXPECT_NE(&other.breaker(), &a.breaker());
  EXPECT_EQ(reg.size(), 2u);
  EXPECT_NE(a.incarnation(), other.incarnation());
}

TEST(Registry, FindNeverCreates) {
  ManualClock clock;
  Reg reg(options(), clock);
  EXPECT_FALSE(reg.find("nope"));
  EXPECT_EQ(reg.size(), 0u);
  auto h = reg.get("yes");
  auto f = reg.find("yes");
  ASSERT_TRUE(f);
  EXPECT_EQ(&f.breaker(), &h.breaker());
}

TEST(Registry, ManyKeysGrowTheTablesAndStayFindable) {
  ManualClock clock;
  Reg reg(options(), clock);
  std::vector<const Breaker*> seen;
  for (int i = 0; i < 5000; ++i) seen.push_back(&reg.get(key("k", i)).breaker());
  EXPECT_EQ(reg.size(), 5000u);
  for (int i = 0; i < 5000; ++i) {
    auto h = reg.find(key("k", i));
    ASSERT_TRUE(h) << i;
    EXPECT_EQ(&h.breaker(), seen[static_cast<std::size_t>(i)]);
  }
  EXPECT_EQ(std::set<const Breaker*>(seen.begin(), seen.end()).size(), 5000u);
  int visited = 0;
  reg.for_each([&](const Reg::EntryView&) { ++visited; });
  EXPECT_EQ(visited, 5000);
}

TEST(Registry, IntegerKeysWork) {
  ManualClock clock;
  bulwark::BasicRegistry<int, Breaker> reg({.name = "partitions"}, clock);
  for (int p = 0; p < 100; ++p) (void)reg.get(p);
  EXPECT_EQ(reg.size(), 100u);
  EXPECT_EQ(reg.find(42).key(), 42);
  std::string text;
  bulwark::append_key_text(text, 42);
  EXPECT_EQ(text, "42");
}

TEST(Registry, HandlesCountReferencesAndCopyMove) {
  ManualClock clock;
  Reg reg(options(), clock);
  Reg::Handle empty;
  EXPECT_FALSE(empty);
  auto h = reg.get("a");
  Reg::Handle copy = h;
  Reg::Handle moved = std::move(copy);
  EXPECT_FALSE(copy);  // NOLINT: moved-from handles are empty by contract
  EXPECT_TRUE(moved);
  moved.reset();
  EXPECT_FALSE(moved);
  EXPECT_TRUE(h);
}

TEST(Registry, TryAcquireRecordsOnTheKeysBreaker) {
  ManualClock clock;
  Reg reg(options(), clock);
  fail_times(reg, "flaky", 2);
  auto h = reg.get("flaky");
  EXPECT_EQ(h->state(), State::open);
  auto rejected = reg.try_acquire("flaky");
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, bulwark::RejectReason::open);
  EXPECT_EQ(reg.get("healthy")->state(), State::closed);  // one breaker per key
  const auto snap = h->snapshot();
  EXPECT_EQ(snap.failures, 2u);
  EXPECT_EQ(snap.rejected, 1u);
}

TEST(Registry, HandleTryAcquireByCopyOrByMove) {
  ManualClock clock;
  Reg reg(options(), clock);
  auto h = reg.get("a");
  {
    auto call = h.try_acquire();  // takes its own reference
    ASSERT_TRUE(call);
    call->record_success();
  }
  EXPECT_TRUE(h);
  auto call = std::move(h).try_acquire();  // hands ours over
  EXPECT_FALSE(h);                         // NOLINT
  ASSERT_TRUE(call);
  call->record_success();
  EXPECT_EQ(call->breaker().snapshot().successes, 2u);
}

TEST(Registry, CallDestroyedWithoutOutcomeIsCancelled) {
  ManualClock clock;
  Reg reg(options(), clock);
  { auto call = reg.try_acquire("a"); }
  EXPECT_EQ(reg.get("a")->snapshot().cancelled, 1u);
}

TEST(Registry, PerKeyConfigurationAndSharedDefault) {
  ManualClock clock;
  Options o = options();
  o.config_for = [](const std::string& key) -> std::optional<bulwark::BreakerConfig> {
    if (key.starts_with("fragile"))
      return bulwark::BreakerConfig{.name = "fragile", .consecutive_failures = 1};
    return std::nullopt;
  };
  Reg reg(std::move(o), clock);
  EXPECT_EQ(reg.get("fragile-1")->name(), "fragile");
  EXPECT_EQ(reg.get("fragile-1")->config().consecutive_failures, 1u);
  EXPECT_EQ(reg.get("robust")->name(), "upstream");
  fail_times(reg, "fragile-1", 1);
  fail_times(reg, "robust", 1);
  EXPECT_EQ(reg.get("fragile-1")->state(), State::open);
  EXPECT_EQ(reg.get("robust")->state(), State::closed);
}

TEST(Registry, InvalidOptionsNameTheField) {
  ManualClock clock;
  auto field_of = [](const Options& o) {
    auto ok = bulwark::validate(o);
    return ok ? std::string() : ok.error().field;
  };
  Options o = options();
  EXPECT_EQ(field_of(o), "");
  o.shards = 3;
  EXPECT_EQ(field_of(o), "shards");
  o = options();
  o.shards = 2048;
  EXPECT_EQ(field_of(o), "shards");
  o = options();
  o.idle_ttl = -1s;
  EXPECT_EQ(field_of(o), "idle_ttl");
  o = options();
  o.idle_ttl = 10us;
  EXPECT_EQ(field_of(o), "idle_ttl");
  o = options();
  o.evict_batch = 0;
  EXPECT_EQ(field_of(o), "evict_batch");
  o = options();
  o.name = "";
  EXPECT_EQ(field_of(o), "name");
  o = options();
  o.breaker.half_open.max_in_flight = 0;
  EXPECT_EQ(field_of(o), "half_open.max_in_flight");

  o = options();
  o.shards = 6;
  try {
    Reg reg(o, clock);
    FAIL() << "constructed with 6 shards";
  } catch (const bulwark::InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "shards");
    EXPECT_EQ(e.error().component, "registry 'hosts'");
  }
}

TEST(Registry, InvalidPerKeyConfigurationThrowsFromGetAndCreatesNothing) {
  ManualClock clock;
  Options o = options();
  o.config_for = [](const std::string& key) -> std::optional<bulwark::BreakerConfig> {
    if (key == "bad") return bulwark::BreakerConfig{.name = "bad", .open_duration = 0s};
    return std::nullopt;
  };
  Reg reg(std::move(o), clock);
  try {
    (void)reg.get("bad");
    FAIL() << "an invalid per-key config was accepted";
  } catch (const bulwark::InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "open_duration");
  }
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_TRUE(reg.get("good"));
}

// A per-key extra that can't move (atomics), built by extra_for.
struct Guards {
  explicit Guards(int limit_in) : limit(limit_in) {}
  Guards(const Guards&) = delete;
  int limit;
  std::atomic<int> in_use{0};
};

TEST(Registry, ExtrasAreBuiltPerKeyInPlace) {
  ManualClock clock;
  bulwark::RegistryOptions<std::string, Breaker, Guards> o;
  o.name = "with-extras";
  o.extra_for = [](const std::string& key) { return Guards(static_cast<int>(key.size())); };
  bulwark::BasicRegistry<std::string, Breaker, Guards> reg(std::move(o), clock);
  auto h = reg.get("abcd");
  EXPECT_EQ(h.extra().limit, 4);
  h.extra().in_use.fetch_add(1);
  EXPECT_EQ(reg.get("abcd").extra().in_use.load(), 1);

  bulwark::RegistryOptions<std::string, Breaker, Guards> missing;
  missing.name = "no-factory";
  auto ok = bulwark::validate(missing);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().field, "extra_for");
}

// ---- eviction ------------------------------------------------------------------

TEST(Registry, IdleClosedKeysAreEvictedAfterTheTtlAndNotBefore) {
  ManualClock clock;
  Reg reg(options(60s), clock);
  for (int i = 0; i < 100; ++i) (void)reg.get(key("k", i));
  clock.advance(59s);
  EXPECT_EQ(reg.evict_idle(), 0u);
  EXPECT_EQ(reg.size(), 100u);
  clock.advance(2s);
  EXPECT_EQ(reg.evict_idle(), 100u);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_FALSE(reg.find("k1"));
}

TEST(Registry, ALookupResetsTheIdleTime) {
  ManualClock clock;
  Reg reg(options(60s), clock);
  const auto first = reg.get("busy").incarnation();
  (void)reg.get("idle");
  clock.advance(40s);
  (void)reg.get("busy");
  clock.advance(40s);
  EXPECT_EQ(reg.evict_idle(), 1u);
  EXPECT_FALSE(reg.find("idle"));
  auto busy = reg.find("busy");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy.incarnation(), first);
}

TEST(Registry, NeverEvictsAKeyWithAHandleOrACallAlive) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  auto held = reg.get("held");
  auto call = reg.try_acquire("in-flight");
  ASSERT_TRUE(call);
  const auto held_incarnation = held.incarnation();
  clock.advance(1h);
  EXPECT_EQ(reg.evict_idle(), 0u);
  EXPECT_EQ(held->state(), State::closed);  // still a live breaker
  call->record_success();
  EXPECT_EQ(call->breaker().snapshot().successes, 1u);
  EXPECT_EQ(reg.find("held").incarnation(), held_incarnation);

  // Let go of both. "held" was just looked up: the first step gives it a second chance
  // (its idle time starts then), the next one, after the ttl, evicts it.
  held.reset();
  call = reg.try_acquire("other");  // moving another call in releases "in-flight"
  clock.advance(2s);
  std::size_t evicted = reg.evict_idle();
  clock.advance(2s);
  evicted += reg.evict_idle();
  EXPECT_EQ(evicted, 2u);  // "held" and "in-flight"; "other" is still pinned
  EXPECT_EQ(reg.size(), 1u);
}

TEST(Registry, NeverEvictsOpenHalfOpenOrForcedBreakers) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  fail_times(reg, "open", 2);
  fail_times(reg, "half-open", 2);
  (void)reg.get("forced")->transition_to(State::forced_open);
  (void)reg.get("disabled")->transition_to(State::disabled);
  (void)reg.get("closed");
  clock.advance(31s);
  {
    auto probe = reg.try_acquire("half-open");  // the probe turns it HALF_OPEN...
    ASSERT_TRUE(probe);
  }  // ...and is cancelled: still HALF_OPEN, with no call in flight
  EXPECT_EQ(reg.get("half-open")->state(), State::half_open);
  clock.advance(10min);
  EXPECT_EQ(reg.evict_idle(), 1u);  // only "closed"
  EXPECT_FALSE(reg.find("closed"));
  EXPECT_EQ(reg.find("open")->state(), State::open);
  EXPECT_EQ(reg.find("half-open")->state(), State::half_open);
  EXPECT_EQ(reg.find("forced")->state(), State::forced_open);
  EXPECT_EQ(reg.find("disabled")->state(), State::disabled);
}

TEST(Registry, EvictionHappensLazilyOnTheRequestPathInBoundedSteps) {
  ManualClock clock;
  Options o = options(60s);
  o.shards = 1;
  o.evict_batch = 4;
  Reg reg(std::move(o), clock);
  for (int i = 0; i < 64; ++i) (void)reg.get(key("k", i));
  clock.advance(2min);
  // A lookup checks once every 64 lookups (of its thread) whether a step is due: any
  // 64 consecutive lookups take exactly one look, so at most one step of at most
  // evict_batch evictions.
  for (int i = 0; i < 64; ++i) (void)reg.get("k0");
  EXPECT_GE(reg.size(), 64u - 4u);
  // More lookups, as time goes by, finish the job without anyone calling evict_idle().
  int rounds = 0;
  for (; rounds < 200 && reg.size() > 1; ++rounds) {
    clock.advance(10s);
    for (int i = 0; i < 64; ++i) (void)reg.get("k0");
  }
  EXPECT_EQ(reg.size(), 1u);      // "k0" itself is in use
  EXPECT_GE(rounds, 60 / 4 - 1);  // each step did bounded work
}

TEST(Registry, CreatingAKeyRunsAnEvictionStep) {
  ManualClock clock;
  Options o = options(60s);
  o.shards = 1;
  o.evict_batch = 1024;  // more than the table: the step sees every key
  Reg reg(std::move(o), clock);
  for (int i = 0; i < 10; ++i) (void)reg.get(key("k", i));
  clock.advance(2min);
  (void)reg.get("fresh");
  EXPECT_EQ(reg.size(), 1u);
}

TEST(Registry, RemoveNeedsARegistryThatCountsReferences) {
  ManualClock clock;
  Reg reg(options(), clock);  // no idle_ttl, not removable: handles are plain pointers
  (void)reg.get("x");
  EXPECT_FALSE(reg.remove("x"));
  EXPECT_EQ(reg.size(), 1u);
}

TEST(Registry, RemoveRefusesWhileReferenced) {
  ManualClock clock;
  Options o = options();
  o.removable = true;
  Reg reg(std::move(o), clock);
  auto h = reg.get("x");
  EXPECT_FALSE(reg.remove("x"));
  h.reset();
  EXPECT_TRUE(reg.remove("x"));
  EXPECT_FALSE(reg.remove("x"));
  EXPECT_EQ(reg.size(), 0u);
}

TEST(Registry, AnEvictedKeyComesBackAsANewEntryAndReusesMemory) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  const auto before = reg.get("k").incarnation();
  fail_times(reg, "k", 1);
  clock.advance(5s);
  EXPECT_EQ(reg.evict_idle(), 0u);  // used since the last step: a second chance
  clock.advance(5s);
  EXPECT_EQ(reg.evict_idle(), 1u);
  const auto mem = reg.memory();
  auto again = reg.get("k");
  EXPECT_NE(again.incarnation(), before);
  EXPECT_EQ(again->snapshot().failures, 0u);     // a fresh breaker
  EXPECT_EQ(reg.memory().entries, mem.entries);  // the freed entry was reused
}

TEST(Registry, TotalsIncludeEvictedKeysSoCountersNeverDecrease) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  for (int i = 0; i < 10; ++i) {
    auto call = reg.try_acquire(key("k", i));
    ASSERT_TRUE(call);
    call->record(i % 2 == 0 ? Outcome::success : Outcome::failure);
  }
  const auto before = reg.read();
  EXPECT_EQ(before.keys, 10u);
  EXPECT_EQ(before.successes, 5u);
  EXPECT_EQ(before.failures, 5u);
  clock.advance(5s);
  EXPECT_EQ(reg.evict_idle(), 10u);
  const auto after = reg.read();
  EXPECT_EQ(after.keys, 0u);
  EXPECT_EQ(after.created, 10u);
  EXPECT_EQ(after.evicted, 10u);
  EXPECT_EQ(after.successes, 5u);
  EXPECT_EQ(after.failures, 5u);
}

using bulwark_test::HostGuards;
using GuardedReg = bulwark::BasicRegistry<std::string, Breaker, HostGuards>;

GuardedReg::Options guarded_options(ManualClock& clock, bulwark::Nanos ttl) {
  GuardedReg::Options o;
  o.name = "guarded";
  o.breaker = {.name = "upstream", .consecutive_failures = 2, .open_duration = 30s};
  o.idle_ttl = ttl;
  o.shards = 2;
  o.detailed_metrics = true;
  o.extra_for = [&clock](const std::string& host) {
    return HostGuards{
        bulwark::BasicBulkhead<ManualClock>({.name = host, .max_concurrent = 1}, clock),
        bulwark::BasicRetryBudget<ManualClock>(
            {.name = host, .ratio = 0.1, .min_retries_per_second = 0, .max_tokens = 1}, clock)};
  };
  return o;
}

TEST(Registry, EvictedKeysKeepTheirComponentCountersInTheTotals) {
  ManualClock clock;
  GuardedReg reg(guarded_options(clock, 1s), clock);
  for (int i = 0; i < 3; ++i) {
    auto h = reg.get(key("k", i));
    auto slot = h.extra().bulkhead.try_acquire();
    ASSERT_TRUE(slot);
    EXPECT_FALSE(h.extra().bulkhead.try_acquire());  // full: 1 rejection per key
    EXPECT_FALSE(h.extra().budget.try_withdraw());   // empty: 1 exhaustion per key
    h.metrics()->components.record_fallback(bulwark::FallbackKind::failed);
    h.metrics()->components.bulkhead_acquired();  // a gauge: must not outlive the key
  }
  const auto before = reg.read();
  ASSERT_EQ(before.components.bulkhead_rejected, 3u);
  ASSERT_EQ(before.components.retry_budget_exhausted, 3u);
  ASSERT_EQ(before.components.fallbacks[1], 3u);
  clock.advance(5s);
  ASSERT_EQ(reg.evict_idle(), 3u);
  const auto after = reg.read();
  EXPECT_EQ(after.keys, 0u);
  // The counters stay (a drop would read as a counter reset)...
  EXPECT_EQ(after.components.bulkhead_rejected, 3u);
  EXPECT_EQ(after.components.retry_budget_exhausted, 3u);
  EXPECT_EQ(after.components.fallbacks[1], 3u);
  EXPECT_TRUE(after.components.has_bulkhead && after.components.has_retry);
  // ...the gauges go with their keys.
  EXPECT_EQ(after.components.bulkhead_in_use, 0u);
  EXPECT_EQ(after.components.bulkhead_max, 0u);
  EXPECT_EQ(after.components.budget_tokens, 0.0);
}

TEST(Registry, ARemovedKeyKeepsItsComponentCountersInTheTotalsToo) {
  ManualClock clock;
  auto o = guarded_options(clock, bulwark::Nanos::zero());
  o.removable = true;
  GuardedReg reg(std::move(o), clock);
  {
    auto h = reg.get("gone");
    auto slot = h.extra().bulkhead.try_acquire();
    EXPECT_FALSE(h.extra().bulkhead.try_acquire());
  }
  ASSERT_TRUE(reg.remove("gone"));
  EXPECT_EQ(reg.read().components.bulkhead_rejected, 1u);
}

// A scrape must not count a key both live and evicted. collect() visits the entries;
// while it is inside one of them, another thread evicts every idle key, including one
// collect() has already counted. The totals must still be exact, and the next read must
// not be lower.
TEST(Registry, AnEvictionDuringACollectCountsEachKeyOnce) {
  ManualClock clock;
  Options o = options(1s);
  o.shards = 1;
  Reg reg(std::move(o), clock);
  for (int i = 0; i < 4; ++i) reg.try_acquire(key("k", i))->record(Outcome::success);
  clock.advance(5s);  // all four are idle for longer than the TTL

  std::atomic<bool> go{false}, done{false};
  std::thread evictor([&] {
    while (!go.load()) std::this_thread::yield();
    (void)reg.evict_idle();
    done.store(true);
  });
  int visited = 0;
  const auto during = reg.collect([&](const Reg::EntryView&, const bulwark::BreakerReading&) {
    if (++visited != 2) return;
    // Entry 1 is counted. Let the evictor run: if it can evict now, it evicts entry 1
    // (and 3, 4), and collect() would then read entry 1's counters a second time in
    // the evicted totals. Give it time to try (it must wait for the shard).
    go.store(true);
    for (int i = 0; i < 200 && !done.load(); ++i) std::this_thread::sleep_for(1ms);
  });
  evictor.join();
  EXPECT_EQ(during.successes, 4u);
  EXPECT_EQ(during.keys + during.evicted, 4u);
  const auto after = reg.read();
  EXPECT_EQ(after.successes, 4u);
  EXPECT_EQ(after.evicted, 4u);
}

// ---- observability -------------------------------------------------------------

TEST(Registry, OutageStartsWhenLeavingClosedAndSurvivesReopening) {
  ManualClock clock;
  Reg reg(options(), clock);
  fail_times(reg, "k", 2);  // t=0: CLOSED -> OPEN
  auto since = [&] {
    bulwark::Ticks s = 0;
    reg.for_each([&](const Reg::EntryView& v) { s = v.outage_since; });
    return s;
  };
  EXPECT_EQ(since(), 0);
  clock.advance(30s);
  {
    auto probe = reg.try_acquire("k");  // OPEN -> HALF_OPEN at t=30
    ASSERT_TRUE(probe);
    probe->record_failure();  // HALF_OPEN -> OPEN: the same outage
  }
  EXPECT_EQ(since(), 0);
  EXPECT_EQ(reg.read().max_open_seconds, 30.0);
  clock.advance(30s);
  {
    auto probe = reg.try_acquire("k");
    ASSERT_TRUE(probe);
    probe->record_success();  // closes: the outage is over
  }
  EXPECT_EQ(since(), bulwark::detail::kNoOutage);
  EXPECT_EQ(reg.read().max_open_seconds, 0.0);
}

TEST(Registry, EventsCarryTheKeyAndListenersAreRemovable) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  std::vector<std::string> log;
  auto sub = reg.events().subscribe(bulwark::EventMask::all(), [&](const bulwark::Event& e) {
    log.push_back(std::string(to_string(e.kind)) + " " + std::string(e.name) + " " +
                  std::string(e.key));
  });
  fail_times(reg, "api:443", 2);
  EXPECT_FALSE(reg.try_acquire("api:443"));
  clock.advance(5s);
  (void)reg.get("other");  // a creation runs an eviction step; "api:443" is OPEN: stays
  EXPECT_EQ(reg.find("api:443")->state(), State::open);
  (void)reg.find("api:443")->transition_to(State::closed);
  clock.advance(5s);
  std::size_t evicted = reg.evict_idle();  // "other"; "api:443" was used: second chance
  clock.advance(5s);
  evicted += reg.evict_idle();
  EXPECT_EQ(evicted, 2u);
  ASSERT_EQ(log.size(), 7u);
  const std::vector<std::string> expected = {
      "key_created upstream api:443", "transition upstream api:443", "rejection upstream api:443",
      "key_created upstream other", "transition upstream api:443"};
  EXPECT_EQ(std::vector<std::string>(log.begin(), log.begin() + 5), expected);
  // Shards are swept in their order, not the keys'.
  EXPECT_EQ(std::set<std::string>(log.begin() + 5, log.end()),
            (std::set<std::string>{"key_evicted upstream api:443", "key_evicted upstream other"}));
  sub.reset();
  log.clear();
  fail_times(reg, "again", 2);
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(reg.events().size(), 0u);
}

TEST(Registry, TransitionEventsSayFromAndTo) {
  ManualClock clock;
  Reg reg(options(), clock);
  std::vector<std::pair<State, State>> seen;
  auto sub = reg.events().subscribe(EventKind::transition, [&](const bulwark::Event& e) {
    const auto& t = std::get<bulwark::TransitionInfo>(e.info);
    seen.emplace_back(t.from, t.to);
  });
  fail_times(reg, "k", 2);
  clock.advance(30s);
  reg.try_acquire("k")->record_success();
  const std::vector<std::pair<State, State>> expected = {{State::closed, State::open},
                                                         {State::open, State::half_open},
                                                         {State::half_open, State::closed}};
  EXPECT_EQ(seen, expected);
  const auto r = reg.read();
  EXPECT_EQ(r.transitions[bulwark::transition_index(State::closed, State::open)], 1u);
  EXPECT_EQ(r.transitions[bulwark::transition_index(State::half_open, State::closed)], 1u);
}

TEST(Registry, DetailedMetricsCountLatencyTransitionsAndComponents) {
  ManualClock clock;
  Options o = options();
  o.detailed_metrics = true;
  Reg reg(std::move(o), clock);
  {
    auto call = reg.try_acquire("k");
    ASSERT_TRUE(call);
    call->record(Outcome::success, 3ms);
    call->record(Outcome::success, 3ms);  // a second report counts nowhere
  }
  auto h = reg.get("k");
  ASSERT_NE(h.metrics(), nullptr);
  h.metrics()->components.record_fallback(bulwark::FallbackKind::rejected);
  h.metrics()->components.record_retry();
  h.metrics()->components.bulkhead_acquired();
  fail_times(reg, "k", 2);
  const auto d = h.metrics()->read();
  EXPECT_EQ(d.latency.count(), 1u);
  EXPECT_EQ(d.latency.buckets[bulwark::LatencyBuckets::index(3ms)], 1u);
  EXPECT_EQ(d.transitions[bulwark::transition_index(State::closed, State::open)], 1u);
  EXPECT_TRUE(d.components.has_fallback);
  EXPECT_EQ(d.components.fallbacks[0], 1u);
  EXPECT_EQ(d.components.retries, 1u);
  EXPECT_EQ(d.components.bulkhead_in_use, 1u);
  const auto total = reg.read();
  EXPECT_TRUE(total.has_detail);
  EXPECT_EQ(total.latency.count(), 1u);
  EXPECT_EQ(total.components.fallbacks[0], 1u);
}

TEST(Registry, MemoryIsReportedByPart) {
  ManualClock clock;
  Reg reg(options(), clock);
  EXPECT_EQ(Reg::kEntryBytes, 128u);  // one std::string key, one 64-byte breaker
  for (int i = 0; i < 1000; ++i) (void)reg.get(key("host-", i).append(":443"));
  (void)reg.get(std::string(100, 'x'));  // a key too long for the string's inline buffer
  const auto m = reg.memory();
  EXPECT_GE(m.entries, 1001u * Reg::kEntryBytes);
  EXPECT_LT(m.entries, 2 * 1001u * Reg::kEntryBytes);
  EXPECT_GE(m.index, 1001u * 8);
  EXPECT_GE(m.key_heap, 101u);
  EXPECT_LT(m.key_heap, 300u);
  EXPECT_EQ(m.metrics, 0u);
  EXPECT_EQ(reg.read().memory_bytes, m.total());
}

TEST(Registry, AForeignBreakerOnACopiedPolicyIsIgnored) {
  ManualClock clock;
  Reg reg(options(), clock);
  auto policy = reg.get("k")->policy();  // a copy escapes the registry
  Breaker stranger(policy);
  std::vector<std::string> keys;
  auto sub = reg.events().subscribe(EventKind::transition,
                                    [&](const bulwark::Event& e) { keys.emplace_back(e.key); });
  (void)stranger.transition_to(State::open);  // reaches the registry's listener: ignored
  fail_times(reg, "k", 2);
  EXPECT_EQ(keys, std::vector<std::string>{"k"});
}

// A key_created event carries the time the key was created, with or without idle_ttl.
TEST(RegistryEvents, KeyCreatedCarriesItsTime) {
  ManualClock clock;
  clock.set(5000s);
  Reg reg({.name = "r"}, clock);
  std::vector<bulwark::Ticks> created;
  auto sub = reg.events().subscribe(bulwark::EventMask::all(), [&](const bulwark::Event& e) {
    if (e.kind == EventKind::key_created) created.push_back(e.at);
  });
  auto h = reg.get("host-1");
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(created[0], bulwark::Nanos(5000s).count());
}

}  // namespace

namespace {

TEST(KeyHashing, InlineEqualityAgreesWithMemcmpAtEveryLengthAndPosition) {
  for (std::size_t n = 0; n <= 40; ++n) {
    std::string a(n, 'x');
    for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<char>('a' + (i * 7) % 26);
    EXPECT_TRUE(bulwark::detail::bytes_equal(a.data(), std::string(a).data(), n)) << n;
    for (std::size_t pos = 0; pos < n; ++pos) {
      std::string b = a;
      b[pos] = static_cast<char>(b[pos] ^ 0x20);
      EXPECT_FALSE(bulwark::detail::bytes_equal(a.data(), b.data(), n)) << n << " at " << pos;
    }
  }
}

TEST(KeyHashing, StringHashSpreadsHostKeysAndSeesEveryByte) {
  std::set<std::uint64_t> hashes;
  std::vector<std::size_t> per_shard(16, 0);
  char buf[32];
  for (int i = 0; i < 200000; ++i) {
    const int n = std::snprintf(buf, sizeof buf, "host-%06d:443", i);
    const std::uint64_t h = bulwark::detail::hash_bytes(buf, static_cast<std::size_t>(n));
    hashes.insert(h);
    // What the registry does with it: fmix64, then the low bits pick the shard.
    std::uint64_t m = h;
    m ^= m >> 33;
    m *= 0xff51afd7ed558ccdULL;
    m ^= m >> 33;
    ++per_shard[m & 15];
  }
  EXPECT_EQ(hashes.size(), 200000u);  // no 64-bit collision among similar keys
  for (std::size_t c : per_shard) {
    EXPECT_GT(c, 200000u / 16 * 9 / 10);
    EXPECT_LT(c, 200000u / 16 * 11 / 10);
  }
  // Every length and every byte position matters.
  std::set<std::uint64_t> lengths;
  const std::string zeros(64, '\0');
  for (std::size_t n = 0; n <= 64; ++n)
    lengths.insert(bulwark::detail::hash_bytes(zeros.data(), n));
  EXPECT_EQ(lengths.size(), 65u);
  for (std::size_t n = 1; n <= 40; ++n) {
    std::set<std::uint64_t> flips;
    for (std::size_t pos = 0; pos < n; ++pos) {
      std::string s(n, 'k');
      s[pos] = 'K';
      flips.insert(bulwark::detail::hash_bytes(s.data(), n));
    }
    flips.insert(bulwark::detail::hash_bytes(std::string(n, 'k').data(), n));
    EXPECT_EQ(flips.size(), n + 1) << n;
  }
}

}  // namespace

#if defined(BULWARK_REGISTRY_ASAN)
namespace {

// Under AddressSanitizer the payload of an evicted entry is poisoned: a reference kept
// past its handle (a bug) is a report, not a silent read of a reused entry. This is
// what makes the ASan run of registry_stress_test a check of "no reference dangles".
TEST(RegistryAsanDeathTest, TouchingAnEvictedBreakerIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ManualClock clock;
        Reg reg(options(1s), clock);
        const Breaker* dangling = &reg.get("k").breaker();  // the handle dies here
        clock.advance(5s);
        if (reg.evict_idle() != 1) std::abort();
        (void)dangling->state();
      },
      "use-after-poison");
}

}  // namespace
#endif

namespace {

TEST(RegistryEvents, FlappingIsForwardedWithTheKey) {
  ManualClock clock;
  Options o = options();
  o.breaker = {
      .name = "upstream", .consecutive_failures = 1, .open_duration = 10s, .flapping_period = 60s};
  Reg reg(std::move(o), clock);
  std::vector<std::string> flapping;
  auto sub = reg.events().subscribe(EventKind::flapping, [&](const bulwark::Event& e) {
    flapping.push_back(std::string(e.key) + " " + bulwark::to_logfmt(e));
  });
  fail_times(reg, "k", 1);
  clock.advance(10s);
  reg.try_acquire("k")->record_success();  // recovers
  EXPECT_TRUE(flapping.empty());
  clock.advance(30s);
  fail_times(reg, "k", 1);  // reopens 30 s after recovering: flapping
  ASSERT_EQ(flapping.size(), 1u);
  EXPECT_EQ(flapping[0], "k event=flapping name=upstream key=k flapping=true period=60 at=40");
  EXPECT_TRUE(reg.get("k")->snapshot().flapping);
}

}  // namespace

namespace {

// The registry validates the configuration type of its breaker type.
TEST(RegistryConfig, ValidatedForTheBreakersWindow) {
  ManualClock clock;
  Options o = options();
  o.breaker.consecutive_failures = 0;
  auto ok = bulwark::validate(o);
  ASSERT_FALSE(ok);  // a breaker without a window that never trips
  EXPECT_EQ(ok.error().field, "consecutive_failures");
  EXPECT_THROW(Reg(o, clock), bulwark::InvalidConfig);

  using Windowed = bulwark::BasicCircuitBreaker<ManualClock, bulwark::CountWindow>;
  bulwark::RegistryOptions<std::string, Windowed> w;
  w.name = "windowed";
  ok = bulwark::validate(w);
  ASSERT_FALSE(ok);  // a window but no trip rule
  EXPECT_EQ(ok.error().field, "failure_rate");
  w.breaker.failure_rate = 0.5;
  EXPECT_TRUE(bulwark::validate(w));

  using Timed = bulwark::BasicCircuitBreaker<ManualClock, bulwark::TimeWindow<4>>;
  bulwark::RegistryOptions<std::string, Timed> t;
  t.name = "timed";
  t.breaker.failure_rate = 0.5;
  t.breaker.window.buckets = 5;  // over this breaker type's capacity
  ok = bulwark::validate(t);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().field, "window.buckets");

  // An invalid per-key configuration: refused, nothing leaks.
  Options per_key = options();
  per_key.config_for = [](const std::string&) -> std::optional<bulwark::BreakerConfig> {
    return bulwark::BreakerConfig{.name = "never", .consecutive_failures = 0};
  };
  Reg reg(std::move(per_key), clock);
  for (int i = 0; i < 3; ++i) EXPECT_THROW((void)reg.get("k"), bulwark::InvalidConfig);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.memory().entries, 0u);  // refused before an entry was taken
}

}  // namespace

namespace {

// A transition reaches its own entry among many keys in many segments and shards
// (the entry is found from the breaker's address, not by a scan).
TEST(RegistryEvents, TransitionsFindTheirEntryAmongManyKeys) {
  ManualClock clock;
  Reg reg(options(), clock);
  for (int i = 0; i < 20000; ++i) (void)reg.get(key("host-", i));
  std::vector<std::string> keys;
  auto sub = reg.events().subscribe(EventKind::transition,
                                    [&](const bulwark::Event& e) { keys.emplace_back(e.key); });
  const std::vector<std::string> tripped = {key("host-", 0), key("host-", 9), key("host-", 777),
                                            key("host-", 19999)};
  for (const auto& k : tripped) fail_times(reg, k, 2);
  EXPECT_EQ(keys, tripped);
  for (const auto& k : tripped) EXPECT_EQ(reg.find(k)->state(), State::open);
  EXPECT_EQ(reg.read().transitions[bulwark::transition_index(State::closed, State::open)], 4u);
}

}  // namespace
