// The fleet protocol over MemoryFleetStore: several instances, each with its own
// breaker for the same key, in virtual time (ManualClock for the breakers, a variable
// for the wall clock and the leases). Nothing sleeps.

#include "bulwark/redis/fleet.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/redis/prometheus.h"
#include "bulwark/registry.h"
#include "fleet_world.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;

// The only place these tests build a breaker configuration.
Breaker::Config breaker_config(std::string name) {
  return Breaker::Config{.name = std::move(name), .consecutive_failures = 3, .open_duration = 10s};
}

using testing::World;

struct Instance : testing::FleetMember<Breaker> {
  Instance(World& w, std::string id, std::uint32_t quorum = 1)
      : FleetMember(breaker_config("inventory"), w.clock,
                    FleetConfig{.instance = std::move(id),
                                .quorum = quorum,
                                .sync_interval = 200ms,
                                .lease_duration = 2s,
                                .wall_ms = [&w] { return w.wall; }},
                    w.store) {}
};

TEST(FleetRecordTest, RoundTripsAndRejectsMalformedValues) {
  const FleetRecord r{SharedState::open, TransitionReason::failure_rate, 1234, "web-1", 7};
  const std::string text = encode_record(r);
  EXPECT_EQ(text, "v1|open|failure_rate|1234|web-1|7");
  auto back = decode_record(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->reason, TransitionReason::failure_rate);
  EXPECT_EQ(back->until_ms, 1234);
  EXPECT_EQ(back->instance, "web-1");
  EXPECT_EQ(back->sequence, 7u);
  for (const char* bad :
       {"", "garbage", "v2|open|manual|1|a|1", "v1|ajar|manual|1|a|1", "v1|open|bored|1|a|1",
        "v1|open|manual|-5|a|1", "v1|open|manual|x|a|1", "v1|open|manual|0|a|1",
        "v1|open|manual|1|a b|1", "v1|open|manual|1|a|0", "v1|open|manual|1|a|1|extra",
        "v1|open|manual|99999999999999999999999|a|1"}) {
    auto d = decode_record(bad);
    EXPECT_FALSE(d) << bad;
  }
  EXPECT_NE(decode_record("v1|ajar|manual|1|a|1").error().find("unknown state 'ajar'"),
            std::string::npos);
}

TEST(FleetConfigTest, BadConfigurationIsRejectedNamingTheField) {
  MemoryFleetStore store;
  EXPECT_THROW(Fleet(FleetConfig{.instance = ""}, store), InvalidConfig);
  EXPECT_THROW(Fleet(FleetConfig{.instance = "has space"}, store), InvalidConfig);
  try {
    Fleet f(FleetConfig{.instance = "a", .quorum = 0}, store);
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "quorum");
  }
  ManualClock clock;
  Breaker b1(breaker_config("k"), clock), b2(breaker_config("k"), clock);
  Fleet f(FleetConfig{.instance = "a"}, store);
  f.attach(b1);
  EXPECT_THROW(f.attach(b2), InvalidConfig);  // the same key twice
}

TEST(FleetTest, AnOpeningOnOneInstanceOpensAllAfterOneSyncEach) {
  World w;
  Instance a(w, "a"), b(w, "b"), c(w, "c");
  a.sync(), b.sync(), c.sync();
  a.fail();
  ASSERT_EQ(a.breaker.state(), State::open);
  EXPECT_EQ(b.breaker.state(), State::closed);
  a.sync();
  b.sync();
  c.sync();
  EXPECT_EQ(b.breaker.state(), State::open);
  EXPECT_EQ(c.breaker.state(), State::open);
  EXPECT_EQ(b.key().decision, Decision::shared);
  EXPECT_EQ(b.key().decided_by, "a");
  EXPECT_EQ(b.key().reason, TransitionReason::consecutive_failures);
  EXPECT_EQ(a.key().decision, Decision::shared);  // its vote reached the quorum of 1
  // The same end everywhere: b rejects until a's period is over.
  auto rej = b.breaker.try_acquire();
  ASSERT_FALSE(rej);
  EXPECT_EQ(rej.error().retry_after, 10s);
  EXPECT_EQ(b.fleet.reading().adopted_opens, 1u);
}

// on_queued wakes the application's sync for what it has to publish: an opening, the
// close that ends a shared open, and Fleet::reset(); not the fleet's own decisions
// adopted by sync(), nor a manual transition of the breaker (this instance's alone).
TEST(FleetTest, OnQueuedReportsLocalDecisionsToWakeTheSync) {
  World w;
  std::vector<std::pair<std::string, State>> woken;
  Breaker breaker(breaker_config("inventory"), w.clock);
  Fleet fleet(FleetConfig{.instance = "a",
                          .lease_duration = 2s,
                          .on_queued = [&](const std::string& key,
                                           State to) { woken.emplace_back(key, to); },
                          .wall_ms = [&w] { return w.wall; }},
              w.store);
  fleet.attach(breaker);
  Instance b(w, "b");
  ASSERT_TRUE(fleet.sync());
  b.fail();  // b's opening, adopted by a's sync: not a's own decision
  b.sync();
  ASSERT_TRUE(fleet.sync());
  ASSERT_EQ(breaker.state(), State::open);
  EXPECT_TRUE(woken.empty());
  ASSERT_TRUE(breaker.transition_to(State::closed));  // an operator closes it here alone
  EXPECT_TRUE(woken.empty());
  for (int i = 0; i < 3; ++i) {
    if (auto p = breaker.try_acquire()) p->record_failure();
  }
  ASSERT_EQ(breaker.state(), State::open);
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0], (std::pair<std::string, State>("inventory", State::open)));
  ASSERT_TRUE(fleet.reset("inventory"));  // the fleet-wide close
  ASSERT_EQ(woken.size(), 2u);
  EXPECT_EQ(woken[1], (std::pair<std::string, State>("inventory", State::closed)));
}

TEST(FleetTest, TheLeaseHolderProbesAndItsCloseClosesEveryone) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  ASSERT_EQ(b.breaker.state(), State::open);
  // Near the end of the open period both ask for the lease; a asks first and gets it.
  w.advance(9700ms);
  a.sync(), b.sync();
  EXPECT_TRUE(a.key().lease_holder);
  EXPECT_FALSE(b.key().lease_holder);
  w.advance(300ms);  // the shared period is over
  auto probe = a.breaker.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  EXPECT_FALSE(b.breaker.try_acquire()) << "b waits for a's verdict";
  probe->record_success();
  ASSERT_EQ(a.breaker.state(), State::closed);
  a.sync(), b.sync();
  EXPECT_EQ(b.breaker.state(), State::closed);
  EXPECT_EQ(b.fleet.reading().adopted_closes, 1u);
  EXPECT_TRUE(b.breaker.try_acquire());
}

TEST(FleetTest, AFailedProbeReopensEveryoneUntilTheNewEnd) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  w.advance(9700ms);
  a.sync(), b.sync();
  w.advance(300ms);
  auto probe = a.breaker.try_acquire();
  ASSERT_TRUE(probe);
  probe->record_failure();
  ASSERT_EQ(a.breaker.state(), State::open);
  a.sync(), b.sync();
  EXPECT_EQ(b.key().reason, TransitionReason::probe_failed);
  auto rej = b.breaker.try_acquire();
  ASSERT_FALSE(rej);
  EXPECT_EQ(rej.error().retry_after, 10s);  // the prober's new period, not the lease
}

TEST(FleetTest, WithoutAVerdictTheOthersProbeOnceTheLeaseExpires) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  w.advance(9700ms);
  a.sync(), b.sync();
  w.advance(1900ms);  // a holds the lease but never reports (it died)
  EXPECT_FALSE(b.breaker.try_acquire());
  w.advance(100ms);
  auto probe = b.breaker.try_acquire();
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe->is_probe());
}

// The default lease is derived per key from the key's own traffic on each instance:
// 2 x sync_interval + probe timeout + 8 mean gaps between probes (calls/s x probe
// fraction), within the breaker's longest open period. A waiting instance stays open
// that long past the lease, where a fixed 2 s lease would already let it probe.
TEST(FleetTest, TheDefaultLeaseIsDerivedFromTheKeysCallRate) {
  World w;
  const auto config = [] {
    auto c = breaker_config("reviews");
    c.open_duration = 30s;
    c.half_open.fraction = 0.10;
    return c;
  };
  const auto fleet_config = [&w](std::string id) {
    return FleetConfig{
        .instance = std::move(id), .sync_interval = 200ms, .wall_ms = [&w] { return w.wall; }};
  };
  testing::FleetMember<Breaker> a(config(), w.clock, fleet_config("a"), w.store,
                                  AttachOptions{.probe_timeout = 800ms});
  testing::FleetMember<Breaker> b(config(), w.clock, fleet_config("b"), w.store,
                                  AttachOptions{.probe_timeout = 800ms});
  // Nothing seen yet: the longest open period.
  EXPECT_EQ(a.key().lease_ms, 30'000);
  // a: 8 calls/s, b: 4 calls/s (admitted or rejected: the offered traffic counts).
  int ticks = 0;
  auto tick = [&](bool a_calls, bool b_calls) {
    w.advance(std::chrono::milliseconds(125));
    ++ticks;
    if (a_calls) {
      if (auto p = a.breaker.try_acquire()) p->record_success();
    }
    if (b_calls && ticks % 2 == 0) {
      if (auto p = b.breaker.try_acquire()) p->record_success();
    }
    // Syncs every 250 ms here; the lease is asked 2 x 200 ms (the configured interval)
    // before the open period ends.
    if (ticks % 2 == 0) a.sync(), b.sync();
  };
  for (int i = 0; i < 480; ++i) tick(true, true);  // a minute
  EXPECT_NEAR(a.key().calls_per_second, 8.0, 0.3);
  EXPECT_NEAR(b.key().calls_per_second, 4.0, 0.2);
  // 400 + 800 + 8 / (8 x 0.1) s and 400 + 800 + 8 / (4 x 0.1) s.
  EXPECT_NEAR(static_cast<double>(a.key().lease_ms), 11'200, 600);
  EXPECT_NEAR(static_cast<double>(b.key().lease_ms), 21'200, 1'200);
  // b's own opening, shared; b's calls go on (rejected: still counted), a's stop.
  b.fail();
  ASSERT_EQ(b.breaker.state(), State::open);
  for (int i = 0; i < 4; ++i) tick(false, true);
  ASSERT_EQ(a.breaker.state(), State::open);
  const std::int64_t until = b.key().until_ms;
  while (w.wall < until - 100) tick(false, true);
  // Both asked for the lease; a's sync came first and holds it; b waits for its verdict
  // as long as b's own derived lease.
  ASSERT_TRUE(a.key().lease_holder);
  ASSERT_FALSE(b.key().lease_holder);
  const std::int64_t lease = b.key().lease_ms;
  EXPECT_NEAR(static_cast<double>(lease), 21'200, 1'200);
  while (w.wall < until + lease - 1'000) tick(false, false);  // a never reports
  EXPECT_FALSE(b.breaker.try_acquire()) << "b still waits for a's verdict";
  EXPECT_EQ(b.breaker.state(), State::open);
  while (w.wall < until + lease) tick(false, false);
  (void)b.breaker.try_acquire();  // probe drawn or not, b now probes on its own
  EXPECT_EQ(b.breaker.state(), State::half_open);
}

// An explicit lease is every key's, whatever its traffic; a negative one is refused.
TEST(FleetTest, AnExplicitLeaseIsKeptAsGiven) {
  World w;
  Instance a(w, "a");
  for (int i = 0; i < 100; ++i) {
    w.advance(100ms);
    if (auto p = a.breaker.try_acquire()) p->record_success();
    a.sync();
  }
  EXPECT_EQ(a.key().lease_ms, 2'000);
  EXPECT_NEAR(a.key().calls_per_second, 0.0, 0.0);  // not measured: not needed
  MemoryFleetStore store;
  try {
    Fleet f(FleetConfig{.instance = "a", .lease_duration = -1ms}, store);
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "lease_duration");
  }
}

TEST(FleetTest, QuorumTwoKeepsASickInstanceOpenAlone) {
  World w;
  Instance a(w, "a", 2), b(w, "b", 2), c(w, "c", 2);
  a.fail();  // only a's own calls fail
  a.sync(), b.sync(), c.sync();
  EXPECT_EQ(a.breaker.state(), State::open);
  EXPECT_EQ(b.breaker.state(), State::closed);
  EXPECT_EQ(c.breaker.state(), State::closed);
  EXPECT_EQ(a.key().decision, Decision::local);
  EXPECT_FALSE(a.key().shared_open);
  // A second instance's opening within the window makes it the fleet's.
  w.advance(1s);
  b.fail();
  b.sync(), c.sync(), a.sync();
  EXPECT_EQ(c.breaker.state(), State::open);
  EXPECT_EQ(c.key().decided_by, "b");
  EXPECT_EQ(a.key().decision, Decision::shared);
}

TEST(FleetTest, QuorumVotesExpireAfterTheWindow) {
  World w;
  Instance a(w, "a", 2), b(w, "b", 2);
  a.fail();
  a.sync();
  w.advance(11s);  // a's vote is older than the 10 s window
  b.fail();
  b.sync(), a.sync();
  EXPECT_FALSE(b.key().shared_open);
}

TEST(FleetTest, ALocalOnlyOpenIsNotClosedByAnOldFleetClose) {
  World w;
  Instance a(w, "a", 2), b(w, "b", 2);
  a.fail(), b.fail();
  a.sync(), b.sync(), a.sync();
  ASSERT_TRUE(a.key().shared_open);
  w.advance(9700ms);
  a.sync(), b.sync();
  w.advance(300ms);
  a.breaker.try_acquire()->record_success();  // a's probe closes the key fleet-wide
  a.sync(), b.sync();
  ASSERT_EQ(b.breaker.state(), State::closed);
  // A newcomer whose own calls fail opens alone; reading the fleet's earlier close on
  // its first sync does not close it.
  Instance c(w, "c", 2);
  c.fail();
  c.sync();
  EXPECT_EQ(c.breaker.state(), State::open);
  EXPECT_EQ(c.key().decision, Decision::local);
  EXPECT_EQ(a.breaker.state(), State::closed);
}

TEST(FleetTest, ANewInstanceAdoptsTheFleetStateOnItsFirstSync) {
  World w;
  Instance a(w, "a");
  a.fail();
  a.sync();
  w.advance(4s);
  Instance late(w, "late");
  late.sync();
  EXPECT_EQ(late.breaker.state(), State::open);
  auto rej = late.breaker.try_acquire();
  ASSERT_FALSE(rej);
  EXPECT_EQ(rej.error().retry_after, 6s);
}

TEST(FleetTest, AnOutageLeavesEveryoneLocalAndTheyCatchUpAfter) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.sync(), b.sync();
  w.store.set_down(true);
  a.fail();
  EXPECT_FALSE(a.fleet.sync());
  EXPECT_FALSE(b.fleet.sync());
  EXPECT_EQ(b.breaker.state(), State::closed);  // carries on locally
  const FleetReading r = a.fleet.reading();
  EXPECT_EQ(r.sync_errors, 1u);
  EXPECT_FALSE(r.connected);
  EXPECT_NE(r.last_error.find("unavailable"), std::string::npos);
  w.store.set_down(false);
  a.sync(), b.sync();  // a's opening was not lost: the failed sync made it re-read
  EXPECT_EQ(b.breaker.state(), State::open);
}

TEST(FleetTest, AStoreThatRestartsEmptyGetsTheOpenKeysBack) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  w.store.restart();
  a.sync();  // notices the new incarnation
  a.sync();  // re-publishes
  Instance late(w, "late");
  late.sync();
  EXPECT_EQ(late.breaker.state(), State::open);
  EXPECT_EQ(late.key().decided_by, "a");
}

TEST(FleetTest, AStoredValueThatIsNotARecordIsRemovedCountedAndNamed) {
  World w;
  Instance a(w, "a");
  a.sync();
  w.store.put_raw("inventory", "v1|open|manual|soon|x|1");
  const SyncSummary s = a.sync();
  EXPECT_EQ(s.repairs, 1u);
  const FleetReading r = a.fleet.reading();
  EXPECT_EQ(r.store_repairs, 1u);
  EXPECT_NE(r.last_repair.find("k:inventory"), std::string::npos) << r.last_repair;
  EXPECT_NE(r.last_repair.find("until_ms"), std::string::npos) << r.last_repair;
  EXPECT_EQ(a.breaker.state(), State::closed);
  EXPECT_FALSE(w.store.get_raw("inventory"));
  EXPECT_EQ(a.sync().repairs, 0u);  // gone: nothing to repair twice
}

TEST(FleetTest, QueueOverflowIsCountedAndRecoveredByARescan) {
  World w;
  std::vector<std::unique_ptr<Breaker>> breakers;
  Fleet fleet(FleetConfig{.instance = "a", .queue_capacity = 2, .wall_ms = [&w] { return w.wall; }},
              w.store);
  for (int i = 0; i < 4; ++i) {
    breakers.push_back(std::make_unique<Breaker>(
        breaker_config(std::string("k").append(std::to_string(i))), w.clock));
    fleet.attach(*breakers.back());
  }
  for (auto& b : breakers) {
    for (int i = 0; i < 3; ++i) b->try_acquire()->record_failure();
  }
  ASSERT_TRUE(fleet.sync());
  EXPECT_EQ(fleet.reading().dropped_transitions, 1u);
  Breaker other(breaker_config("k3"), w.clock);
  Fleet peer(FleetConfig{.instance = "b", .wall_ms = [&w] { return w.wall; }}, w.store);
  peer.attach(other);
  ASSERT_TRUE(peer.sync());
  EXPECT_EQ(other.state(), State::open);  // k3's transition was dropped, then re-read
}

TEST(FleetCountsTest, CallsAreCountedFleetWidePerBucket) {
  World w;
  auto config = [&w](std::string id) {
    return FleetConfig{
        .instance = std::move(id), .count_bucket = 1s, .count_buckets = 3, .wall_ms = [&w] {
          return w.wall;
        }};
  };
  Breaker ba(breaker_config("inventory"), w.clock), bb(breaker_config("inventory"), w.clock);
  Fleet a(config("a"), w.store), b(config("b"), w.store);
  a.attach(ba);
  b.attach(bb);
  for (int i = 0; i < 3; ++i) ba.try_acquire()->record_success();
  ba.try_acquire()->record_failure();
  bb.try_acquire()->record_failure();
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());
  EXPECT_EQ(b.reading().keys[0].fleet_successes, 3u);
  EXPECT_EQ(b.reading().keys[0].fleet_failures, 2u);
  // Nothing new: nothing sent, the last totals stay.
  auto idle = a.sync();
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->published, 0u);
  // Three buckets later the old calls have left the window.
  w.advance(3s);
  ba.try_acquire()->record_success();
  ASSERT_TRUE(a.sync());
  EXPECT_EQ(a.reading().keys[0].fleet_successes, 1u);
  EXPECT_EQ(a.reading().keys[0].fleet_failures, 0u);
}

TEST(FleetRegistryTest, RegistryEntriesAreSharedUnderTheirKeys) {
  MemoryFleetStore store;
  auto registry = [] {
    return std::make_unique<Registry<std::string>>(Registry<std::string>::Options{
        .name = "upstreams",
        .breaker = {.name = "upstream", .consecutive_failures = 1, .open_duration = 60s}});
  };
  auto ra = registry(), rb = registry();
  Fleet a(FleetConfig{.instance = "a"}, store), b(FleetConfig{.instance = "b"}, store);
  for (const char* host : {"host-1", "host-2"}) {
    a.attach_handle(host, ra->get(host));
    b.attach_handle(host, rb->get(host));
  }
  ra->try_acquire(std::string("host-2"))->record_failure();
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());
  EXPECT_EQ(rb->get("host-2")->state(), State::open);
  EXPECT_EQ(rb->get("host-1")->state(), State::closed);
  EXPECT_EQ(b.reading().keys[1].decided_by, "a");
}

TEST(FleetCatchUpTest, ANewInstanceCatchesUpOverSeveralSyncsOfBoundedReplies) {
  World w;
  std::vector<std::unique_ptr<Breaker>> old_breakers, new_breakers;
  Fleet old_one(FleetConfig{.instance = "old", .wall_ms = [&w] { return w.wall; }}, w.store);
  Fleet new_one(
      FleetConfig{.instance = "new", .max_changes_per_sync = 2, .wall_ms = [&w] { return w.wall; }},
      w.store);
  for (int i = 0; i < 5; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    old_breakers.push_back(std::make_unique<Breaker>(breaker_config(key), w.clock));
    new_breakers.push_back(std::make_unique<Breaker>(breaker_config(key), w.clock));
    old_one.attach(*old_breakers.back());
    new_one.attach(*new_breakers.back());
    for (int f = 0; f < 3; ++f) old_breakers.back()->try_acquire()->record_failure();
  }
  ASSERT_TRUE(old_one.sync());
  auto open_count = [&] {
    int n = 0;
    for (auto& b : new_breakers) n += b->state() == State::open ? 1 : 0;
    return n;
  };
  std::vector<std::size_t> changes;
  for (int i = 0; i < 3; ++i) {
    auto s = new_one.sync();
    ASSERT_TRUE(s);
    changes.push_back(s->changes);
  }
  EXPECT_EQ(changes, (std::vector<std::size_t>{2, 2, 1}));
  EXPECT_EQ(open_count(), 5);
}

TEST(FleetPrometheusTest, TheReadingIsExposed) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  std::ostringstream out;
  write_prometheus(out, b.fleet.reading());
  const std::string text = out.str();
  for (const char* line : {
           "bulwark_fleet_syncs_total{instance=\"b\"} 1\n",
           "bulwark_fleet_adopted_total{instance=\"b\",kind=\"open\"} 1\n",
           "bulwark_fleet_connected{instance=\"b\"} 1\n",
           "bulwark_fleet_rtt_seconds_count{instance=\"b\"} 1\n",
           "bulwark_fleet_rtt_seconds_bucket{instance=\"b\",le=\"+Inf\"} 1\n",
           "bulwark_fleet_key_shared_open{instance=\"b\",key=\"inventory\"} 1\n",
           "bulwark_fleet_key_decision{instance=\"b\",key=\"inventory\",decision=\"shared\","
           "decided_by=\"a\",reason=\"consecutive_failures\"} 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
}

}  // namespace
}  // namespace bulwark::redis
