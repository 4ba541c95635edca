// What the fleet adopts, and how it comes back from what went wrong: an instance
// restarted under its own id, stored opens out of bounds, adopted opens longer than the
// local period, records lost by the store, keys nobody here attached, and manual resets.
// Over MemoryFleetStore, in virtual time (fleet_world.h). Nothing sleeps.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bulwark/redis/fleet.h"
#include "fleet_world.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using testing::World;

// The only place these tests build a breaker configuration: open for 10 s, growing to
// 80 s when `growth` is set.
Breaker::Config breaker_config(std::string name, bool growth = false) {
  Breaker::Config c{.name = std::move(name), .consecutive_failures = 3, .open_duration = 10s};
  if (growth) c.open_growth = {.multiplier = 2.0, .max = 80s};
  return c;
}

FleetConfig fleet_config(World& w, std::string id) {
  return FleetConfig{
      .instance = std::move(id), .sync_interval = 200ms, .lease_duration = 2s, .wall_ms = [&w] {
        return w.wall;
      }};
}

struct Instance : testing::FleetMember<Breaker> {
  Instance(World& w, std::string id, bool growth = false)
      : FleetMember(breaker_config("inventory", growth), w.clock, fleet_config(w, std::move(id)),
                    w.store) {}
  // The breaker's answer now: its retry_after, or nullopt if it admits the call.
  std::optional<Nanos> retry_after() {
    auto p = breaker.try_acquire();
    if (p) return std::nullopt;
    return p.error().retry_after;
  }
};

std::string open_record(std::int64_t until_ms, const std::string& by, std::uint64_t seq,
                        TransitionReason reason = TransitionReason::consecutive_failures) {
  return encode_record(FleetRecord{SharedState::open, reason, until_ms, by, seq});
}

// An instance that opened a key, crashed and came back under the same id (a pod name)
// finds its previous run's record in the store: not its own decision of this run, so it
// adopts it like any other instance's, and holds the key open until the same end.
TEST(FleetRecoveryTest, AnInstanceRestartedUnderItsOwnIdAdoptsTheOpenItsPreviousRunPublished) {
  World w;
  auto a = std::make_unique<Instance>(w, "pod-a");
  Instance b(w, "pod-b");
  a->fail();
  a->sync(), b.sync();
  ASSERT_EQ(b.breaker.state(), State::open);
  EXPECT_EQ(a->fleet.reading().adopted_opens, 0u) << "its own record of this run";
  w.advance(3s);
  a.reset();  // crashed
  Instance again(w, "pod-a");
  again.sync();
  EXPECT_EQ(again.breaker.state(), State::open);
  EXPECT_EQ(again.retry_after(), Nanos(7s));
  EXPECT_EQ(again.key().decided_by, "pod-a");
  EXPECT_EQ(again.key().decision, Decision::shared);
  EXPECT_EQ(again.fleet.reading().adopted_opens, 1u);
  // Its own later decisions are its own again: its next opening comes back unadopted.
  w.advance(7s);
  again.sync(), b.sync();
  ASSERT_TRUE(again.key().lease_holder || b.key().lease_holder);
}

// A well-formed open whose end is absurdly far (centuries, or the largest int64) is not
// adopted: it is refused, counted and named, the breaker stays as it was, no arithmetic
// overflows (UBSan), and the instance's own next opening replaces it in the store.
TEST(FleetRecoveryTest, AStoredOpenLongerThanAnyOpenPeriodIsRefusedAndReplacedByTheOwnOpen) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  for (const std::int64_t left_ms :
       std::vector<std::int64_t>{max - 1'700'000'000'000, 100'000'000'000'000'000,
                                 9'223'372'036'854, 3'155'760'000'000, 10'001}) {
    std::string trace = "the stored open ends ";
    trace += std::to_string(left_ms);
    SCOPED_TRACE(trace);
    World w;
    Instance a(w, "a"), b(w, "b");
    a.sync(), b.sync();
    w.store.put_raw("inventory", open_record(w.wall + left_ms, "mallory", 1));
    const SyncSummary s = a.sync();
    EXPECT_EQ(s.refused, 1u);
    EXPECT_EQ(a.breaker.state(), State::closed);
    const FleetReading r = a.fleet.reading();
    EXPECT_EQ(r.refused_opens, 1u);
    EXPECT_NE(r.last_refused.find("key 'inventory'"), std::string::npos) << r.last_refused;
    EXPECT_NE(r.last_refused.find("longest open period (10000 ms)"), std::string::npos)
        << r.last_refused;
    EXPECT_FALSE(a.key().shared_open);
    b.sync();
    EXPECT_EQ(b.breaker.state(), State::closed);
    // a's own opening goes to the store over it, and b adopts that.
    a.fail();
    a.sync(), b.sync();
    const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->instance, "a");
    EXPECT_EQ(stored->until_ms, w.wall + 10'000);
    EXPECT_EQ(b.breaker.state(), State::open);
    EXPECT_EQ(b.retry_after(), Nanos(10s));
  }
}

// At the bound: an open lasting exactly the longest open period is adopted.
TEST(FleetRecoveryTest, AStoredOpenOfExactlyTheLongestPeriodIsAdopted) {
  World w;
  Instance a(w, "a");
  a.sync();
  w.store.put_raw("inventory", open_record(w.wall + 10'000, "b", 1));
  EXPECT_EQ(a.sync().refused, 0u);
  EXPECT_EQ(a.breaker.state(), State::open);
  EXPECT_EQ(a.retry_after(), Nanos(10s));
}

// Another instance's breaker reached a longer open period by growing (failed probes):
// an instance adopting it reports the time actually left, not its own shorter period.
TEST(FleetRecoveryTest, AnAdoptedOpenLongerThanTheLocalPeriodReportsTheTimeLeft) {
  World w;
  Instance a(w, "a", true), b(w, "b", true);
  a.sync(), b.sync();
  w.store.put_raw("inventory",
                  open_record(w.wall + 40'000, "c", 1, TransitionReason::probe_failed));
  a.sync();
  ASSERT_EQ(a.breaker.state(), State::open);
  EXPECT_EQ(a.retry_after(), Nanos(40s));
  w.advance(15s);
  EXPECT_EQ(a.retry_after(), Nanos(25s));
  const BreakerSnapshot snap = a.breaker.snapshot();
  EXPECT_EQ(snap.open_duration - snap.time_in_state, Nanos(25s));
  // A newcomer adopting the same open later agrees.
  b.sync();
  EXPECT_EQ(b.retry_after(), Nanos(25s));
  w.advance(25s);
  auto probe = a.breaker.try_acquire();
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe->is_probe());
}

// The store lost an open key's record (Redis evicted it under maxmemory): an instance
// holding the key open publishes it again at its next sync, and a newcomer adopts it.
TEST(FleetRecoveryTest, AnOpenRecordTheStoreLostIsPublishedAgainByAnInstanceHoldingIt) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  ASSERT_EQ(b.breaker.state(), State::open);
  w.advance(2s);
  w.store.erase_raw("inventory");
  b.sync();
  const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(stored) << "not published again";
  EXPECT_EQ(stored->state, SharedState::open);
  EXPECT_EQ(stored->until_ms, w.wall + 8'000);
  Instance late(w, "late");
  late.sync();
  EXPECT_EQ(late.breaker.state(), State::open);
  EXPECT_EQ(late.retry_after(), Nanos(8s));
  a.sync();
  EXPECT_EQ(a.fleet.reading().adopted_opens, 1u);  // b's re-publication: the same end
  EXPECT_EQ(a.retry_after(), Nanos(8s));
}

// The other side of it: an instance that has not read the close yet must not bring the
// open back when the close's record is the one lost.
TEST(FleetRecoveryTest, AnInstanceThatMissedACloseDoesNotReopenTheKeyWhenTheCloseIsLost) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  w.advance(9700ms);
  a.sync(), b.sync();  // a holds the lease
  w.advance(300ms);
  a.breaker.try_acquire()->record_success();
  a.sync();  // the close
  w.store.erase_raw("inventory");
  b.sync();
  EXPECT_FALSE(w.store.get_raw("inventory")) << "b brought back an open the fleet closed";
}

// Records of keys this instance never attached are kept only while they can matter to a
// later attach() (an open, until its end), and never more than a bound.
TEST(FleetRecoveryTest, RecordsOfKeysNotAttachedAreKeptWhileOpenAndBounded) {
  World w;
  Fleet a(
      FleetConfig{
          .instance = "a", .max_changes_per_sync = 100000, .wall_ms = [&w] { return w.wall; }},
      w.store);
  constexpr int kKeys = 12'000;
  auto ends_in = [](int i) { return std::int64_t{1'000} + i * 2 / 3; };  // 1 to 9 s from now
  std::uint64_t seq = 0;
  for (int i = 0; i < kKeys; ++i) {
    // Every tenth a close.
    std::string key = "k";
    key += std::to_string(i);
    if (i % 10 == 0) {
      w.store.put_raw(
          key, encode_record(FleetRecord{SharedState::closed, TransitionReason::probes_succeeded, 0,
                                         "b", ++seq}));
    } else {
      w.store.put_raw(key, open_record(w.wall + ends_in(i), "b", ++seq));
    }
  }
  ASSERT_TRUE(a.sync());
  EXPECT_EQ(a.reading().unattached_records, FleetReading::kMaxUnattachedRecords);
  // The latest-ending are the ones kept: a breaker attached for one of them adopts it.
  Breaker late(breaker_config("k11999"), w.clock);
  a.attach(late);
  ASSERT_TRUE(a.sync());
  EXPECT_EQ(late.state(), State::open);
  EXPECT_EQ(a.reading().unattached_records, FleetReading::kMaxUnattachedRecords - 1);
  w.advance(5s);  // the first half ended
  ASSERT_TRUE(a.sync());
  std::uint64_t running = 0;
  for (int i = 0; i < kKeys - 1; ++i) running += i % 10 != 0 && ends_in(i) > 5'000 ? 1 : 0;
  EXPECT_EQ(a.reading().unattached_records, running);
  w.advance(5s);
  ASSERT_TRUE(a.sync());
  EXPECT_EQ(a.reading().unattached_records, 0u);
}

// A breaker's own reset() (an operator on one instance) acts on that instance alone:
// the fleet keeps the key open, and the instance does not adopt that open again.
TEST(FleetRecoveryTest, ABreakersOwnResetActsOnItsInstanceAlone) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();
  ASSERT_EQ(b.breaker.state(), State::open);
  b.breaker.reset();
  for (int i = 0; i < 3; ++i) {
    b.sync(), a.sync();
    w.advance(1s);
  }
  EXPECT_EQ(b.breaker.state(), State::closed) << "re-adopted the open it was reset past";
  EXPECT_EQ(a.breaker.state(), State::open) << "the reset closed the key for the fleet";
  EXPECT_TRUE(b.key().shared_open);  // the fleet still holds it open
  const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->state, SharedState::open);
  // Even read again from the start (the store restarted and a published it again).
  w.store.restart();
  a.sync(), a.sync(), b.sync(), b.sync();
  EXPECT_EQ(b.breaker.state(), State::closed);
  // A later decision of the fleet is adopted as usual.
  w.advance(7s);
  a.sync(), b.sync();  // the lease
  w.advance(300ms);
  a.breaker.try_acquire()->record_failure();  // a's probe fails: a new open
  a.sync(), b.sync();
  EXPECT_EQ(b.breaker.state(), State::open);
  EXPECT_EQ(b.key().reason, TransitionReason::probe_failed);
}

// A store that restarts empty numbers its decisions from 1 again. An instance that had
// asked for the lease of the old store's decision 1 must ask again for the new store's
// decision 1 (another open period): else no instance asks, and at its end every
// instance goes half-open and probes on its own.
TEST(FleetRecoveryTest, AfterTheStoreRestartsEmptyTheLeaseIsAskedForItsNewDecisions) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();  // decision 1: open for 10 s
  w.advance(9700ms);
  a.sync(), b.sync();  // both ask for its lease: a holds it
  ASSERT_TRUE(a.key().lease_holder);
  w.store.restart();
  w.advance(300ms);
  auto probe = a.breaker.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  probe->record_failure();  // a opens again: in the new store, decision 1 again
  a.sync(), a.sync(), b.sync(), b.sync();
  ASSERT_EQ(b.key().reason, TransitionReason::probe_failed);
  const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->sequence, 1u);
  w.advance(9700ms);
  a.sync(), b.sync();  // near its end both ask for the new decision's lease
  EXPECT_TRUE(a.key().lease_holder);
  EXPECT_FALSE(b.key().lease_holder);
  w.advance(300ms);
  EXPECT_TRUE(a.breaker.try_acquire()) << "a, the holder, probes";
  EXPECT_FALSE(b.breaker.try_acquire()) << "b waits for a's verdict";
}

// A lease granted in the reply that says the store restarted was asked for a decision the
// store no longer holds: an instance that waited for its holder would hold its breaker
// open for the lease and publish that wait as an open of the fleet's.
TEST(FleetRecoveryTest, ALeaseGrantedByARestartedStoreIsNotWaitedFor) {
  World w;
  Instance a(w, "a"), b(w, "b");
  a.fail();
  a.sync(), b.sync();  // open for 10 s
  w.advance(9700ms);
  w.store.restart();
  a.sync();  // asks the lease of the old decision: the restarted store grants it to a
  b.sync();  // asks too: a holds it
  EXPECT_FALSE(b.key().lease_holder);
  const auto left = b.retry_after();
  ASSERT_TRUE(left);
  EXPECT_LE(*left, 300ms) << "b waits for a lease of a decision the store lost";
  b.sync(), a.sync(), b.sync(), a.sync();  // both publish their opens again
  const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(stored);
  EXPECT_LE(stored->until_ms, w.wall + 300) << "the lease's wait published as the fleet's open";
}

// Fleet::reset(key) is the fleet-wide close.
TEST(FleetRecoveryTest, FleetResetClosesTheKeyForTheWholeFleet) {
  World w;
  Instance a(w, "a"), b(w, "b"), c(w, "c");
  a.fail();
  a.sync(), b.sync(), c.sync();
  ASSERT_EQ(c.breaker.state(), State::open);
  ASSERT_TRUE(b.fleet.reset("inventory"));
  EXPECT_EQ(b.breaker.state(), State::closed);
  EXPECT_FALSE(b.fleet.reset("nothing attached"));
  b.sync(), a.sync(), c.sync();
  EXPECT_EQ(a.breaker.state(), State::closed);
  EXPECT_EQ(c.breaker.state(), State::closed);
  EXPECT_EQ(c.key().reason, TransitionReason::manual);
  EXPECT_EQ(c.key().decided_by, "b");
  const auto stored = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->state, SharedState::closed);
}

}  // namespace
}  // namespace bulwark::redis
