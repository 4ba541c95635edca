// Fleet windows over MemoryFleetStore: instances whose breakers judge their rate rules on
// the fleet's counts, in virtual time (ManualClock for the breakers, a variable for the
// wall clock). Nothing sleeps.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/fleet.h"
#include "bulwark/redis/prometheus.h"
#include "bulwark/registry.h"
#include "fleet_world.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock, CountWindow>;

// The only place these tests build a breaker configuration: trips at a failure rate
// of 50 % over at least 20 calls.
Breaker::Config breaker_config() {
  return Breaker::Config{.name = "inventory",
                         .window = {.size = 100},
                         .minimum_calls = 20,
                         .failure_rate = 0.5,
                         .open_duration = 10s};
}

using testing::World;

struct Instance : testing::FleetMember<Breaker> {
  Instance(World& w, std::string id, bool fleet_window, std::uint32_t quorum = 1,
           FleetStore* store = nullptr)
      : FleetMember(breaker_config(), w.clock,
                    FleetConfig{.instance = std::move(id),
                                .quorum = quorum,
                                .sync_interval = 200ms,
                                .wall_ms = [&w] { return w.wall; }},
                    store != nullptr ? *store : w.store,
                    AttachOptions{.fleet_window = fleet_window}) {}
  void calls(int failures, int successes) {
    fail(failures);
    for (int i = 0; i < successes; ++i) {
      if (auto p = breaker.try_acquire()) p->record_success();
    }
  }
  std::uint64_t local_calls() const {
    const auto w = breaker.snapshot().window;
    return w ? w->calls : 0;
  }
};

using Instances = std::vector<std::unique_ptr<Instance>>;

Instances make(World& w, int n, bool fleet_window, std::uint32_t quorum = 1) {
  Instances out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_unique<Instance>(w, "web-" + std::to_string(i), fleet_window, quorum));
  return out;
}

void sync_all(Instances& all) {
  for (auto& i : all) i->sync();
}

TEST(FleetWindowRecordTest, TheWindowMarkRoundTripsAndIsCheckedStrictly) {
  const FleetRecord r{SharedState::open, TransitionReason::failure_rate, 1234, "web-1", 7, true};
  EXPECT_EQ(encode_record(r), "v1|open|failure_rate|1234|web-1|7|window");
  auto back = decode_record(encode_record(r));
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->fleet_window);
  EXPECT_EQ(back->reason, TransitionReason::failure_rate);
  EXPECT_FALSE(decode_record("v1|open|failure_rate|1234|web-1|7")->fleet_window);
  for (const char* bad :
       {"v1|open|failure_rate|1|a|1|windows", "v1|open|failure_rate|1|a|1|",
        "v1|closed|failure_rate|0|a|1|window", "v1|open|consecutive_failures|1|a|1|window",
        "v1|open|failure_rate|1|a|1|window|x"}) {
    EXPECT_FALSE(decode_record(bad)) << bad;
  }
}

TEST(FleetWindowTest, TwentyInstancesBelowTheirMinimumTripTogetherOnTheFleetsCounts) {
  // 3 calls each, 2 of them failures: 60 calls at 67 % failures fleet-wide, but no
  // instance reaches minimum_calls = 20 alone.
  {
    World w;
    Instances alone = make(w, 20, false);
    for (auto& i : alone) i->calls(2, 1);
    sync_all(alone);
    sync_all(alone);
    for (auto& i : alone) {
      EXPECT_EQ(i->breaker.state(), State::closed);
      EXPECT_EQ(i->local_calls(), 3u);
    }
    EXPECT_FALSE(w.store.get_raw("inventory"));
  }
  World w;
  Instances fleet = make(w, 20, true);
  for (auto& i : fleet) i->calls(2, 1);
  for (auto& i : fleet) ASSERT_EQ(i->local_calls(), 3u);
  sync_all(fleet);
  // The 7th instance's sync brings the fleet to 21 calls, 14 failures: it trips and
  // shares the open in the same sync; the later ones adopt it in theirs.
  EXPECT_EQ(fleet[6]->fleet.reading().window_trips, 1u);
  EXPECT_EQ(fleet[6]->fleet.reading().syncs, 1u);  // one sync, of two exchanges
  EXPECT_EQ(w.store.exchanges(), 21u);
  for (std::size_t i = 0; i < fleet.size(); ++i) {
    EXPECT_EQ(fleet[i]->breaker.state(), i < 6 ? State::closed : State::open) << i;
  }
  const auto raw = w.store.get_raw("inventory");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->rfind("v1|open|failure_rate|", 0), 0u) << *raw;
  EXPECT_NE(raw->find("|web-6|"), std::string::npos) << *raw;
  EXPECT_EQ(raw->substr(raw->size() - 7), "|window") << *raw;
  sync_all(fleet);
  std::uint64_t trips = 0;
  for (auto& i : fleet) {
    EXPECT_EQ(i->breaker.state(), State::open);
    const FleetKeyReading k = i->key();
    EXPECT_EQ(k.decision, Decision::shared);
    EXPECT_TRUE(k.shared_open);
    EXPECT_EQ(k.reason, TransitionReason::failure_rate);
    EXPECT_TRUE(k.fleet_window_decision);
    EXPECT_EQ(k.decided_by, "web-6");
    trips += i->fleet.reading().window_trips;
  }
  EXPECT_EQ(trips, 1u);  // one trip, shared; the others adopted it
  // Everyone ends the open period together, one open_duration after the trip.
  auto rej = fleet[0]->breaker.try_acquire();
  ASSERT_FALSE(rej);
  EXPECT_EQ(rej.error().retry_after, 10s);
  auto tripped = fleet[6]->breaker.try_acquire();
  ASSERT_FALSE(tripped);
  EXPECT_EQ(tripped.error().retry_after, 10s);
}

// Slow calls: the rule is the breaker's slow_call_rate, and calls still in flight past
// slow_call_duration count when count_in_flight_slow_calls is on.
TEST(FleetWindowTest, TheSlowCallRateTripsOnTheFleetsSlowCallsInFlightIncluded) {
  Breaker::Config slow{.name = "inventory",
                       .window = {.size = 100},
                       .minimum_calls = 20,
                       .slow_call_rate = 0.5,
                       .slow_call_duration = 100ms,
                       .count_in_flight_slow_calls = true};
  World w;
  std::vector<std::unique_ptr<Breaker>> breakers;
  std::vector<std::unique_ptr<Fleet>> fleets;
  std::vector<Breaker::Permit> stuck;
  for (int i = 0; i < 5; ++i) {
    breakers.push_back(std::make_unique<Breaker>(slow, w.clock));
    fleets.push_back(std::make_unique<Fleet>(
        FleetConfig{.instance = "web-" + std::to_string(i), .wall_ms = [&w] { return w.wall; }},
        w.store));
    fleets.back()->attach(*breakers.back(), {.fleet_window = true});
    breakers.back()->try_acquire()->record_success(10ms);
    for (int k = 0; k < 3; ++k) stuck.push_back(std::move(*breakers.back()->try_acquire()));
  }
  w.advance(250ms);  // in flight past D + E (100 ms + 134 ms): counted as slow
  for (auto& b : breakers) {
    const auto window = b->snapshot().window;
    ASSERT_TRUE(window);
    ASSERT_EQ(window->in_flight_slow, 3u);
    ASSERT_EQ(b->state(), State::closed);  // 4 calls: below its minimum
  }
  for (auto& f : fleets) ASSERT_TRUE(f->sync());
  for (auto& f : fleets) ASSERT_TRUE(f->sync());
  for (auto& b : breakers) EXPECT_EQ(b->state(), State::open);
  const FleetKeyReading k = fleets[0]->reading().keys.at(0);
  EXPECT_EQ(k.reason, TransitionReason::slow_call_rate);
  EXPECT_TRUE(k.fleet_window_decision);
  EXPECT_EQ(k.decided_by, "web-4");  // 20 calls, 15 slow, with the fifth
  for (auto& p : stuck) p.record_success();
}

TEST(FleetWindowTest, ASickInstanceOpensAloneWhileTheFleetsWindowIsHealthy) {
  World w;
  Instances fleet = make(w, 20, true, 2);
  Instance& sick = *fleet[0];
  sick.calls(10, 0);  // below its minimum
  for (std::size_t i = 1; i < fleet.size(); ++i) fleet[i]->calls(0, 10);
  for (std::size_t i = 1; i < fleet.size(); ++i) fleet[i]->sync();
  sick.sync();
  const FleetKeyReading seen = sick.key();
  EXPECT_TRUE(seen.fleet_window);
  EXPECT_EQ(seen.window_calls, 200u);
  EXPECT_EQ(seen.window_failures, 10u);  // 5 %: far below 50 %
  EXPECT_EQ(seen.window_instances, 20u);
  sick.calls(10, 0);  // 20 of 20 failed: its own window trips
  ASSERT_EQ(sick.breaker.state(), State::open);
  sync_all(fleet);
  sync_all(fleet);
  EXPECT_EQ(sick.key().decision, Decision::local);
  EXPECT_FALSE(sick.key().shared_open);
  for (std::size_t i = 1; i < fleet.size(); ++i) {
    EXPECT_EQ(fleet[i]->breaker.state(), State::closed) << i;
    EXPECT_EQ(fleet[i]->fleet.reading().window_trips, 0u);
  }
  EXPECT_FALSE(w.store.get_raw("inventory"));  // one vote of the two needed
  // Open, the sick instance's window is empty: it no longer counts in the fleet's.
  fleet[1]->calls(0, 1);
  fleet[1]->sync();
  EXPECT_EQ(fleet[1]->key().window_failures, 0u);
  EXPECT_EQ(fleet[1]->key().window_instances, 19u);
}

TEST(FleetWindowTest, AnInstanceThatStopsSyncingStopsCountingAfterItsEntryExpires) {
  World w;
  Instance a(w, "a", true), b(w, "b", true);
  a.calls(9, 0);
  b.calls(5, 0);
  a.sync();
  b.sync();
  EXPECT_EQ(b.key().window_calls, 14u);
  EXPECT_EQ(b.key().window_instances, 2u);
  // a goes quiet. Its level is three sync intervals (600 ms) fresh.
  w.advance(500ms);
  b.calls(1, 0);
  b.sync();
  EXPECT_EQ(b.key().window_calls, 15u);
  w.advance(200ms);
  b.calls(1, 0);
  b.sync();
  EXPECT_EQ(b.key().window_calls, 7u);
  EXPECT_EQ(b.key().window_instances, 1u);
  // Had a kept syncing, its unchanged level would have been sent again in time.
  World v;
  Instance c(v, "c", true), d(v, "d", true);
  c.calls(9, 0);
  c.sync();
  for (int i = 0; i < 5; ++i) {
    v.advance(200ms);
    c.sync();
  }
  d.calls(1, 0);
  d.sync();
  EXPECT_EQ(d.key().window_calls, 10u);
}

TEST(FleetWindowTest, AStoreThatRestartsEmptyGetsTheFleetWindowsOpenBackWithItsMark) {
  World w;
  Instances fleet = make(w, 2, true);
  for (auto& i : fleet) i->calls(10, 0);
  sync_all(fleet);
  sync_all(fleet);
  ASSERT_EQ(fleet[0]->breaker.state(), State::open);
  w.store.restart();
  sync_all(fleet);  // a new incarnation: read again from the start, publish again
  sync_all(fleet);
  const auto raw = w.store.get_raw("inventory");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->rfind("v1|open|failure_rate|", 0), 0u) << *raw;
  EXPECT_EQ(raw->substr(raw->size() - 7), "|window") << *raw;
  for (auto& i : fleet) EXPECT_TRUE(i->key().fleet_window_decision);
}

TEST(FleetWindowTest, AnIdleKeyCostsNothing) {
  World w;
  Instance a(w, "a", true);
  EXPECT_EQ(a.sync().published, 0u);  // an empty window: no level to send
  a.calls(0, 1);
  EXPECT_EQ(a.sync().published, 1u);
  EXPECT_EQ(a.sync().published, 0u);  // unchanged, and sent 0 ms ago
}

TEST(FleetWindowTest, MalformedWindowEntriesAreCountedNamedAndNeverTrip) {
  World w;
  Instance a(w, "a", true);
  // Would trip the breaker if it were read as 1000 failures of 1000.
  w.store.put_raw_window("inventory", "ghost", "1000|1000|0|oops");
  a.calls(1, 0);
  const SyncSummary s = a.sync();
  EXPECT_EQ(s.malformed, 1u);
  EXPECT_EQ(a.breaker.state(), State::closed);
  const FleetReading r = a.fleet.reading();
  EXPECT_EQ(r.malformed_values, 1u);
  EXPECT_NE(r.last_malformed.find("inventory"), std::string::npos) << r.last_malformed;
  EXPECT_NE(r.last_malformed.find("ghost=1000|1000|0|oops"), std::string::npos) << r.last_malformed;
  // The store dropped the entry it could not read: the next totals are good again.
  a.calls(1, 0);
  EXPECT_EQ(a.sync().malformed, 0u);
  EXPECT_EQ(a.key().window_calls, 2u);
  EXPECT_EQ(a.breaker.state(), State::closed);
}

// A store whose window totals are replaced: what a broken or hostile backend could send.
class LyingStore final : public FleetStore {
 public:
  explicit LyingStore(FleetStore& inner) : inner_(inner) {}
  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override {
    auto reply = inner_.exchange(request);
    if (reply) {
      for (auto& text : reply->windows) text = lie;
    }
    return reply;
  }
  std::string lie;

 private:
  FleetStore& inner_;
};

TEST(FleetWindowTest, TotalsThatAreNotCountsAreRefused) {
  World w;
  LyingStore lying(w.store);
  Instance a(w, "a", true, 1, &lying);
  std::uint64_t expected = 0;
  for (const char* bad : {"50|90|0|1", "50|0|51|1", "50|50|0", "50|50|0|1|1", "x|50|0|1",
                          "-50|50|0|1", "50|50|0|99999999999", "", "malformed|b=1|2"}) {
    lying.lie = bad;
    a.calls(1, 0);
    EXPECT_EQ(a.sync().malformed, 1u) << bad;
    ++expected;
    EXPECT_EQ(a.breaker.state(), State::closed) << bad;
  }
  EXPECT_EQ(a.fleet.reading().malformed_values, expected);
  EXPECT_NE(a.fleet.reading().last_malformed.find("'malformed|b=1|2'"), std::string::npos);
  lying.lie = "50|30|0|4";  // well formed, and over the threshold
  a.calls(1, 0);
  EXPECT_EQ(a.sync().window_trips, 1u);
  EXPECT_EQ(a.breaker.state(), State::open);
}

TEST(FleetWindowTest, ABreakerWithoutAWindowCannotJudgeTheFleets) {
  World w;
  BasicCircuitBreaker<ManualClock> plain({.name = "inventory"}, w.clock);
  Fleet fleet(FleetConfig{.instance = "a"}, w.store);
  try {
    fleet.attach(plain, AttachOptions{.fleet_window = true});
    FAIL() << "attached";
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "fleet_window");
  }
  fleet.attach(plain);  // without the option it is fine
  EXPECT_EQ(fleet.reading().keys.size(), 1u);
}

TEST(FleetWindowTest, RegistryEntriesJudgeTheFleetsWindowUnderTheirKeys) {
  using Hosts = BasicRegistry<std::string, CountWindowBreaker>;
  auto registry = [] {
    return std::make_unique<Hosts>(
        Hosts::Options{.name = "upstreams",
                       .breaker = {.name = "upstream", .minimum_calls = 4, .failure_rate = 0.5}});
  };
  MemoryFleetStore store;
  auto ra = registry(), rb = registry();
  Fleet a(FleetConfig{.instance = "a"}, store), b(FleetConfig{.instance = "b"}, store);
  a.attach_handle("host-1", ra->get("host-1"), {.fleet_window = true});
  b.attach_handle("host-1", rb->get("host-1"), {.fleet_window = true});
  for (int i = 0; i < 2; ++i) {
    ra->try_acquire(std::string("host-1"))->record_failure();
    rb->try_acquire(std::string("host-1"))->record_failure();
  }
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());  // 4 failures of 4 between them
  ASSERT_TRUE(a.sync());
  EXPECT_EQ(ra->get("host-1")->state(), State::open);
  EXPECT_EQ(rb->get("host-1")->state(), State::open);
  EXPECT_EQ(a.reading().keys[0].decided_by, "b");
  // A registry of breakers without a window cannot.
  Registry<std::string> plain(Registry<std::string>::Options{.name = "plain"});
  EXPECT_THROW(a.attach_handle("host-2", plain.get("host-2"), {.fleet_window = true}),
               InvalidConfig);
}

TEST(FleetWindowTest, TheReadingIsExposed) {
  World w;
  Instances fleet = make(w, 2, true);
  for (auto& i : fleet) i->calls(10, 0);
  sync_all(fleet);  // web-1's sync trips on 20 failures of 20, then withdraws its level
  std::ostringstream out;
  write_prometheus(out, fleet[1]->fleet.reading());
  const std::string text = out.str();
  EXPECT_NE(text.find("bulwark_fleet_window_trips_total{instance=\"web-1\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("bulwark_fleet_key_fleet_window_decision{instance=\"web-1\",key=\"inventory\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("bulwark_fleet_key_fleet_window_calls{instance=\"web-1\",key=\"inventory\","
                      "kind=\"all\"} 10"),
            std::string::npos)
      << text;
}

// Request threads on windowed breakers while the timer's thread syncs two fleets and a
// scrape reads: under TSan this checks the window levels' reads against the calls.
TEST(FleetWindowStressTest, CallsSyncsAndScrapesRunConcurrently) {
  MemoryFleetStore store;
  CountWindowBreaker::Config config{
      .name = "k", .window = {.size = 50}, .minimum_calls = 10, .failure_rate = 0.5};
  CountWindowBreaker mine(config), theirs(config);
  Fleet a(FleetConfig{.instance = "a"}, store), b(FleetConfig{.instance = "b"}, store);
  a.attach(mine, {.fleet_window = true});
  b.attach(theirs, {.fleet_window = true});
  std::atomic<int> running{2};
  auto caller = [&running](CountWindowBreaker& br, int seed) {
    for (int i = 0; i < 4000; ++i) {
      if (auto p = br.try_acquire()) {
        if ((i + seed) % 3 == 0) {
          p->record_failure();
        } else {
          p->record_success();
        }
      }
      if (i % 500 == 0) br.reset();
    }
    running.fetch_sub(1);
  };
  std::thread t1(caller, std::ref(mine), 0), t2(caller, std::ref(theirs), 1);
  std::thread scrape([&] {
    std::ostringstream out;
    while (running.load() > 0) write_prometheus(out, a.reading());
  });
  int syncs = 0;
  while (running.load() > 0 || syncs < 10) {
    ASSERT_TRUE(a.sync());
    ASSERT_TRUE(b.sync());
    ++syncs;
  }
  t1.join();
  t2.join();
  scrape.join();
  EXPECT_EQ(a.reading().malformed_values, 0u);
  EXPECT_EQ(b.reading().malformed_values, 0u);
}

}  // namespace
}  // namespace bulwark::redis
