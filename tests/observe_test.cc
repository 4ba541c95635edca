// The event hub: masks, removable listeners, delivery order, and the logfmt line that
// integrations forward to logs.

#include "bulwark/observe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "bulwark/pipeline.h"
#include "bulwark/registry.h"

namespace {

using namespace std::chrono_literals;
using bulwark::Event;
using bulwark::EventHub;
using bulwark::EventKind;
using bulwark::EventMask;

Event transition(std::string_view key = "host-1:443") {
  return Event{EventKind::transition,
               "reviews",
               key,
               nullptr,
               12'500'000'000,
               bulwark::TransitionInfo{bulwark::State::closed, bulwark::State::open,
                                       bulwark::TransitionReason::consecutive_failures, 1}};
}

Event rejection() {
  return Event{EventKind::rejection,
               "reviews",
               "",
               nullptr,
               1'000'000'000,
               bulwark::RejectionInfo{bulwark::RejectReason::open, 29'500ms}};
}

TEST(EventMask, SetsOfKinds) {
  const EventMask m = EventKind::transition | EventKind::flapping;
  EXPECT_TRUE(m.contains(EventKind::transition));
  EXPECT_TRUE(m.contains(EventKind::flapping));
  EXPECT_FALSE(m.contains(EventKind::rejection));
  EXPECT_TRUE(EventMask::all().contains(EventKind::key_evicted));
  EXPECT_FALSE(EventMask::none().contains(EventKind::transition));
}

TEST(EventHub, DeliversOnlyTheKindsAListenerAskedFor) {
  EventHub hub;
  EXPECT_FALSE(hub.wants(EventKind::transition));
  std::vector<std::string> a, b;
  auto sa = hub.subscribe(EventKind::transition,
                          [&](const Event& e) { a.emplace_back(to_string(e.kind)); });
  auto sb =
      hub.subscribe(EventMask::all(), [&](const Event& e) { b.emplace_back(to_string(e.kind)); });
  EXPECT_TRUE(hub.wants(EventKind::transition));
  EXPECT_TRUE(hub.wants(EventKind::rejection));
  hub.emit(transition());
  hub.emit(rejection());
  EXPECT_EQ(a, std::vector<std::string>{"transition"});
  EXPECT_EQ(b, (std::vector<std::string>{"transition", "rejection"}));
  EXPECT_EQ(hub.size(), 2u);
}

TEST(EventHub, SubscriptionsRemoveTheirListener) {
  EventHub hub;
  int calls = 0;
  {
    auto sub = hub.subscribe(EventKind::rejection, [&](const Event&) { ++calls; });
    hub.emit(rejection());
    EXPECT_EQ(calls, 1);
  }
  EXPECT_EQ(hub.size(), 0u);
  EXPECT_FALSE(hub.wants(EventKind::rejection));  // back to one relaxed load
  hub.emit(rejection());
  EXPECT_EQ(calls, 1);

  auto kept = hub.subscribe(EventKind::rejection, [&](const Event&) { ++calls; });
  const bulwark::ListenerId id = kept.release();
  EXPECT_FALSE(kept.active());
  hub.emit(rejection());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(hub.unsubscribe(id));
  EXPECT_FALSE(hub.unsubscribe(id));
}

TEST(EventHub, MovedSubscriptionsRemoveOnce) {
  EventHub hub;
  auto a = hub.subscribe(EventKind::transition, [](const Event&) {});
  auto b = hub.subscribe(EventKind::rejection, [](const Event&) {});
  a = std::move(b);  // removes a's listener, takes b's
  EXPECT_EQ(hub.size(), 1u);
  EXPECT_TRUE(hub.wants(EventKind::rejection));
  EXPECT_FALSE(hub.wants(EventKind::transition));
  a.reset();
  a.reset();
  EXPECT_EQ(hub.size(), 0u);
}

TEST(EventHub, AThrowingListenerDoesNotStopTheOthers) {
  EventHub hub;
  int after = 0;
  auto s1 =
      hub.subscribe(EventKind::transition, [](const Event&) { throw std::runtime_error("boom"); });
  auto s2 = hub.subscribe(EventKind::transition, [&](const Event&) { ++after; });
  hub.emit(transition());
  EXPECT_EQ(after, 1);
}

TEST(EventHub, AListenerMayUnsubscribeItselfWhileBeingCalled) {
  EventHub hub;
  int calls = 0;
  bulwark::Subscription self;
  self = hub.subscribe(EventKind::transition, [&](const Event&) {
    ++calls;
    self.reset();
  });
  hub.emit(transition());
  hub.emit(transition());
  EXPECT_EQ(calls, 1);
}

TEST(Logfmt, TransitionLine) {
  EXPECT_EQ(bulwark::to_logfmt(transition()),
            "event=transition name=reviews key=host-1:443 from=closed to=open "
            "reason=consecutive_failures at=12.5");
}

TEST(Logfmt, RejectionFallbackFlappingAndKeyLines) {
  EXPECT_EQ(bulwark::to_logfmt(rejection()),
            "event=rejection name=reviews reason=open retry_after=29.5 at=1");
  Event forced = rejection();
  forced.info = bulwark::RejectionInfo{bulwark::RejectReason::forced_open, bulwark::Nanos::max()};
  EXPECT_EQ(bulwark::to_logfmt(forced),
            "event=rejection name=reviews reason=forced_open retry_after=inf at=1");
  const Event fb{EventKind::fallback,
                 "reviews",
                 "",
                 nullptr,
                 0,
                 bulwark::FallbackInfo{bulwark::FallbackKind::rejected, "breaker_open"}};
  EXPECT_EQ(bulwark::to_logfmt(fb),
            "event=fallback name=reviews kind=rejected reason=breaker_open at=0");
  const Event fl{EventKind::flapping, "reviews", "", nullptr, 0, bulwark::FlappingInfo{true, 60s}};
  EXPECT_EQ(bulwark::to_logfmt(fl), "event=flapping name=reviews flapping=true period=60 at=0");
  const Event ev{EventKind::key_evicted, "reviews", "h", nullptr, 0, bulwark::KeyInfo{90s}};
  EXPECT_EQ(bulwark::to_logfmt(ev), "event=key_evicted name=reviews key=h idle=90 at=0");
  const Event bh{EventKind::rejection,
                 "pool",
                 "h",
                 nullptr,
                 0,
                 bulwark::BulkheadRejectionInfo{bulwark::BulkheadRejectReason::deadline_exceeded}};
  EXPECT_EQ(bulwark::to_logfmt(bh),
            "event=rejection name=pool key=h component=bulkhead reason=deadline_exceeded at=0");
}

TEST(Logfmt, HostileKeysCannotForgeFields) {
  EXPECT_NE(bulwark::to_logfmt(transition("a b")).find(R"(key="a b")"), std::string::npos);
  const std::string line = bulwark::to_logfmt(transition("x to=closed\n\"q\\\x01"));
  EXPECT_NE(line.find(R"(key="x to=closed\n\"q\\\u0001")"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(bulwark::to_logfmt(transition("")).find("event=transition name=reviews from="),
            std::string::npos);
}

TEST(Event, MakeEventFromABreakerTransition) {
  const int breaker = 0;
  const bulwark::TransitionEvent t{"inventory",
                                   &breaker,
                                   bulwark::State::half_open,
                                   bulwark::State::closed,
                                   bulwark::TransitionReason::probes_succeeded,
                                   42,
                                   7};
  const Event e = bulwark::make_event(t, "k");
  EXPECT_EQ(e.kind, EventKind::transition);
  EXPECT_EQ(e.source, &breaker);
  EXPECT_EQ(e.key, "k");
  const auto& info = std::get<bulwark::TransitionInfo>(e.info);
  EXPECT_EQ(info.to, bulwark::State::closed);
  EXPECT_EQ(info.generation, 7u);
}

TEST(ForwardTransitions, AStandaloneBreakersTransitionsAndFlappingReachAHub) {
  bulwark::ManualClock clock;
  bulwark::BreakerPolicy<bulwark::ManualClock> policy(
      {.name = "solo", .consecutive_failures = 1, .open_duration = 10s, .flapping_period = 60s},
      clock);
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> breaker(policy);
  EventHub hub;
  std::vector<std::string> lines;
  auto sub = hub.subscribe(EventMask::all(),
                           [&](const Event& e) { lines.push_back(bulwark::to_logfmt(e)); });
  const auto id = bulwark::forward_transitions(policy, hub);
  breaker.try_acquire()->record(bulwark::Outcome::failure);  // t=0: opens
  clock.advance(10s);
  breaker.try_acquire()->record(bulwark::Outcome::success);  // t=10: probe closes it
  clock.advance(5s);
  breaker.try_acquire()->record(bulwark::Outcome::failure);  // t=15: reopens within 60 s
  EXPECT_TRUE(policy.remove_listener(id));
  const std::vector<std::string> expected = {
      "event=transition name=solo from=closed to=open reason=consecutive_failures at=0",
      "event=transition name=solo from=open to=half_open reason=open_period_elapsed at=10",
      "event=transition name=solo from=half_open to=closed reason=probes_succeeded at=10",
      "event=transition name=solo from=closed to=open reason=consecutive_failures at=15",
      "event=flapping name=solo flapping=true period=60 at=15",
  };
  EXPECT_EQ(lines, expected);
  EXPECT_TRUE(breaker.snapshot().flapping);
}

// ---- events that components emit through a registry, heard by real listeners ----

struct CallError {
  bulwark::Outcome outcome() const { return bulwark::Outcome::failure; }
};
using bulwark::ManualClock;
using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Ctx = bulwark::BasicContext<ManualClock>;
using Result = bulwark::Expected<int, CallError>;

Result fails(const Ctx&) { return bulwark::Unexpected(CallError{}); }
Result works(const Ctx&) { return 7; }

TEST(RegistryEvents, AFallbackStageCountedByAHandleEmitsFallbackEventsWithTheKey) {
  ManualClock clock;
  bulwark::RegistryOptions<std::string, Breaker> o;
  o.name = "hosts";
  o.breaker = {.name = "upstream", .consecutive_failures = 1, .open_duration = 30s};
  o.detailed_metrics = true;
  bulwark::BasicRegistry<std::string, Breaker> reg(std::move(o), clock);
  auto h = reg.get("db:5432");
  std::vector<std::string> lines;
  std::vector<const void*> sources;
  auto sub = reg.events().subscribe(EventKind::fallback, [&](const Event& e) {
    lines.push_back(bulwark::to_logfmt(e));
    sources.push_back(e.source);
  });
  auto p = bulwark::pipeline(bulwark::fallback(-1).counted_by(h), bulwark::breaker(h.breaker()));
  clock.advance(1s);
  EXPECT_EQ(*p(Ctx(clock), fails), -1);  // called and failed: the breaker opens
  EXPECT_EQ(*p(Ctx(clock), works), -1);  // never called: the breaker is open
  const std::vector<std::string> expected = {
      "event=fallback name=upstream key=db:5432 kind=failed reason=call_error at=1",
      "event=fallback name=upstream key=db:5432 kind=rejected reason=breaker_open at=1",
  };
  EXPECT_EQ(lines, expected);
  EXPECT_EQ(sources, (std::vector<const void*>{&h.breaker(), &h.breaker()}));
  // The same answers are counted in the key's block, as counted_by(components) would.
  const auto c = h.metrics()->read().components;
  EXPECT_EQ(c.fallbacks[static_cast<int>(bulwark::FallbackKind::failed)], 1u);
  EXPECT_EQ(c.fallbacks[static_cast<int>(bulwark::FallbackKind::rejected)], 1u);
}

// A registry's per-key bulkhead (the Extra's `bulkhead` member).
struct Pool {
  bulwark::BasicBulkhead<ManualClock> bulkhead;
};

TEST(RegistryEvents, RejectionsOfARegistrysBulkheadsReachItsListenersWithTheKey) {
  ManualClock clock;
  bulwark::RegistryOptions<std::string, Breaker, Pool> o;
  o.name = "hosts";
  o.breaker = {.name = "upstream", .consecutive_failures = 5, .open_duration = 30s};
  o.extra_for = [&clock](const std::string&) {
    return Pool{bulwark::BasicBulkhead<ManualClock>({.name = "pool", .max_concurrent = 1}, clock)};
  };
  bulwark::BasicRegistry<std::string, Breaker, Pool> reg(std::move(o), clock);
  std::vector<std::string> lines;
  std::vector<const void*> sources;
  auto sub =
      reg.events().subscribe(EventKind::rejection | EventKind::fallback, [&](const Event& e) {
        lines.push_back(bulwark::to_logfmt(e));
        sources.push_back(e.source);
        if (e.kind == EventKind::rejection) {
          EXPECT_EQ(std::get<bulwark::BulkheadRejectionInfo>(e.info).reason,
                    bulwark::BulkheadRejectReason::full);
        }
      });
  auto h = reg.get("db:5432");
  auto& pool = h.extra().bulkhead;
  auto held = pool.try_acquire();  // the only slot
  ASSERT_TRUE(held);
  clock.advance(2s);
  EXPECT_FALSE(pool.try_acquire());
  // Through a pipeline: the bulkhead stage refuses, the fallback answers.
  auto p = bulwark::pipeline(bulwark::fallback(-1).counted_by(h), bulwark::breaker(h.breaker()),
                             bulwark::bulkhead(pool));
  EXPECT_EQ(*p(Ctx(clock), works), -1);
  const std::vector<std::string> expected = {
      "event=rejection name=pool key=db:5432 component=bulkhead reason=full at=2",
      "event=rejection name=pool key=db:5432 component=bulkhead reason=full at=2",
      "event=fallback name=upstream key=db:5432 kind=rejected reason=bulkhead_full at=2",
  };
  EXPECT_EQ(lines, expected);
  EXPECT_EQ(sources, (std::vector<const void*>{&pool, &pool, &h.breaker()}));
  EXPECT_EQ(pool.snapshot().rejected, 2u);

  // Another key's bulkhead says which key it belongs to.
  auto other = reg.get("cache:6379");
  auto other_slot = other.extra().bulkhead.try_acquire();
  EXPECT_FALSE(other.extra().bulkhead.try_acquire());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3],
            "event=rejection name=pool key=cache:6379 component=bulkhead reason=full at=2");
}

// An Extra with several bulkheads hands the registry's observer on itself.
struct Pools {
  bulwark::BasicBulkhead<ManualClock> reads;
  bulwark::BasicBulkhead<ManualClock> writes;
  void observe_rejections(bulwark::BulkheadObserver o) {
    reads.observe_rejections(o);
    writes.observe_rejections(o);
  }
};

TEST(RegistryEvents, AnExtraCanHandTheObserverToSeveralBulkheads) {
  ManualClock clock;
  bulwark::RegistryOptions<int, Breaker, Pools> o;
  o.name = "partitions";
  o.breaker.name = "ledger";
  o.extra_for = [&clock](const int&) {
    return Pools{
        bulwark::BasicBulkhead<ManualClock>({.name = "reads", .max_concurrent = 1}, clock),
        bulwark::BasicBulkhead<ManualClock>({.name = "writes", .max_concurrent = 1}, clock)};
  };
  bulwark::BasicRegistry<int, Breaker, Pools> reg(std::move(o), clock);
  std::vector<std::string> lines;
  auto sub = reg.events().subscribe(
      EventKind::rejection, [&](const Event& e) { lines.push_back(bulwark::to_logfmt(e)); });
  auto h = reg.get(7);
  auto r = h.extra().reads.try_acquire();
  auto w = h.extra().writes.try_acquire();
  EXPECT_FALSE(h.extra().writes.try_acquire());
  EXPECT_FALSE(h.extra().reads.try_acquire());
  const std::vector<std::string> expected = {
      "event=rejection name=writes key=7 component=bulkhead reason=full at=0",
      "event=rejection name=reads key=7 component=bulkhead reason=full at=0",
  };
  EXPECT_EQ(lines, expected);
}

}  // namespace
