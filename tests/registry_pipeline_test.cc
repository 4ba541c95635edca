// Keyed pipelines: a registry Handle as a pipeline's breaker stage, Calls that pin
// their entry for as long as they live (whatever happens to the Handle), and
// registry.execute() running a key's breaker, bulkhead and fallback in one call.
// Deterministic: a ManualClock, no threads.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "bulwark/bulkhead.h"
#include "bulwark/context.h"
#include "bulwark/pipeline.h"
#include "bulwark/registry.h"
#include "support/host_guards.h"

namespace {

using namespace std::chrono_literals;
using bulwark::EventKind;
using bulwark::ManualClock;
using bulwark::Outcome;
using bulwark::Reason;
using bulwark::State;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Reg = bulwark::BasicRegistry<std::string, Breaker>;
using Ctx = bulwark::BasicContext<ManualClock>;

enum class Err { boom };
using Result = bulwark::Expected<int, Err>;

// The only place these tests build a breaker configuration.
Breaker::Config breaker_config() {
  return {.name = "upstream", .consecutive_failures = 2, .open_duration = 30s};
}

Reg::Options options(bulwark::Nanos ttl) {
  Reg::Options o;
  o.name = "hosts";
  o.breaker = breaker_config();
  o.idle_ttl = ttl;
  o.shards = 2;
  o.detailed_metrics = true;
  return o;
}

// Evicts what can go: two steps, the first giving recently used keys their second chance.
std::size_t evict_all(Reg& reg, ManualClock& clock) {
  clock.advance(2h);
  std::size_t n = reg.evict_idle();
  clock.advance(2h);
  return n + reg.evict_idle();
}

TEST(RegistryPipeline, ACallOutlivesItsHandleAndPinsTheEntry) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  {
    auto call = [&] {
      auto handle = reg.get("k");
      return handle.try_acquire();
    }();  // the Handle is gone; the Call holds its own reference
    ASSERT_TRUE(call);
    EXPECT_EQ(evict_all(reg, clock), 0u);
    EXPECT_EQ(reg.size(), 1u);
    call->record_success();  // touches the entry: reported by ASan if it had been freed
    EXPECT_EQ(call->breaker().snapshot().successes, 1u);
    EXPECT_EQ(call->key(), "k");
  }
  EXPECT_EQ(evict_all(reg, clock), 1u);
  EXPECT_EQ(reg.size(), 0u);
}

TEST(RegistryPipeline, AHandleIsAPipelineBreakerStageWhosePermitsPin) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  auto handle = reg.get("k");
  const auto p = bulwark::pipeline(bulwark::breaker(handle));
  const Ctx ctx(clock);
  std::size_t evicted_meanwhile = 99;
  auto r = p.execute(ctx, [&]() -> Result {
    handle.reset();  // the caller lets go mid-call: the stage's Call still pins the entry
    evicted_meanwhile = evict_all(reg, clock);
    return 1;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(evicted_meanwhile, 0u);
  EXPECT_EQ(reg.find("k")->snapshot().successes, 1u);
}

TEST(RegistryPipeline, PerAttemptScopeReportsEachAttemptThroughACall) {
  ManualClock clock;
  Reg reg(options(bulwark::Nanos::zero()), clock);
  auto handle = reg.get("k");
  const auto p = bulwark::pipeline(bulwark::breaker(handle, bulwark::BreakerScope::attempt));
  const Ctx ctx(clock);
  ASSERT_FALSE(p.execute(ctx, [] { return Result(bulwark::Unexpected(Err::boom)); }));
  ASSERT_TRUE(p.execute(ctx, [] { return Result(1); }));
  const auto snap = handle->snapshot();
  EXPECT_EQ(snap.failures, 1u);
  EXPECT_EQ(snap.successes, 1u);
}

TEST(RegistryPipeline, ExecuteRunsTheKeysBreaker) {
  ManualClock clock;
  Reg reg(options(bulwark::Nanos::zero()), clock);
  const Ctx ctx(clock);
  auto ok = reg.execute("k", ctx, [] { return Result(5); });
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 5);
  for (int i = 0; i < 2; ++i) {
    auto failed = reg.execute("k", ctx, [] { return Result(bulwark::Unexpected(Err::boom)); });
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().stage, bulwark::Stage::call);
  }
  EXPECT_EQ(reg.find("k")->state(), State::open);
  int ran = 0;
  auto rejected = reg.execute("k", ctx, [&] {
    ++ran;
    return Result(1);
  });
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, Reason::breaker_open);
  EXPECT_EQ(rejected.error().attempts, 0u);
  EXPECT_EQ(ran, 0);
  // Another key has a breaker of its own.
  EXPECT_TRUE(reg.execute("other", ctx, [] { return Result(1); }));
}

TEST(RegistryPipeline, ExecutePinsTheEntryWhileTheCallRuns) {
  ManualClock clock;
  Reg reg(options(1s), clock);
  const Ctx ctx(clock);
  std::size_t evicted_meanwhile = 99;
  auto r = reg.execute("k", ctx, [&] {
    evicted_meanwhile = evict_all(reg, clock);
    return Result(1);
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(evicted_meanwhile, 0u);
  EXPECT_EQ(evict_all(reg, clock), 1u);
}

TEST(RegistryPipeline, ExecuteWithAFallbackCountsTheAnswerOnTheKey) {
  ManualClock clock;
  Reg reg(options(bulwark::Nanos::zero()), clock);
  const Ctx ctx(clock);
  std::vector<std::string> keys;
  auto sub = reg.events().subscribe(EventKind::fallback,
                                    [&](const bulwark::Event& e) { keys.emplace_back(e.key); });
  auto r = reg.execute("k", ctx, bulwark::fallback(7),
                       [] { return Result(bulwark::Unexpected(Err::boom)); });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(keys, std::vector<std::string>{"k"});
  bulwark::ComponentReading c;
  reg.find("k").metrics()->components.read_into(c);
  EXPECT_EQ(c.fallbacks[static_cast<std::size_t>(bulwark::FallbackKind::failed)], 1u);
}

// An Extra with a bulkhead and a retry budget: execute() runs the bulkhead.
using bulwark_test::HostGuards;
using GuardedReg = bulwark::BasicRegistry<std::string, Breaker, HostGuards>;

TEST(RegistryPipeline, ExecuteRunsTheExtrasBulkhead) {
  ManualClock clock;
  GuardedReg::Options o;
  o.name = "guarded";
  o.breaker = breaker_config();
  o.extra_for = [&clock](const std::string& host) {
    return HostGuards{
        bulwark::BasicBulkhead<ManualClock>({.name = host, .max_concurrent = 1}, clock),
        bulwark::BasicRetryBudget<ManualClock>(
            {.name = host, .ratio = 0.1, .min_retries_per_second = 0, .max_tokens = 1}, clock)};
  };
  GuardedReg reg(std::move(o), clock);
  const Ctx ctx(clock);
  Reason inner = Reason::cancelled;
  auto outer = reg.execute("k", ctx, [&] {
    // The key's only slot is taken by this call: a second one is turned away.
    auto nested = reg.execute("k", ctx, [] { return Result(2); });
    if (!nested) inner = nested.error().reason;
    return Result(1);
  });
  ASSERT_TRUE(outer);
  EXPECT_EQ(inner, Reason::bulkhead_full);
  // The turned-away call cancelled its breaker permit: neither success nor failure.
  const auto snap = reg.find("k")->snapshot();
  EXPECT_EQ(snap.successes, 1u);
  EXPECT_EQ(snap.failures, 0u);
}

// An Extra that names its own fallback stage.
struct WithFallback {
  bulwark::FallbackStage<int> fallback = bulwark::fallback(-1);
};
using FallbackReg = bulwark::BasicRegistry<std::string, Breaker, WithFallback>;

TEST(RegistryPipeline, ExecuteUsesTheExtrasFallback) {
  ManualClock clock;
  FallbackReg::Options o;
  o.name = "with-fallback";
  o.breaker = breaker_config();
  FallbackReg reg(std::move(o), clock);
  const Ctx ctx(clock);
  auto r = reg.execute("k", ctx, [] { return Result(bulwark::Unexpected(Err::boom)); });
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, -1);
  auto ok = reg.execute("k", ctx, [] { return Result(3); });
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 3);
}

}  // namespace
