// Instances whose wall clocks disagree, over MemoryFleetStore in virtual time: the
// store's clock (the world's) is the only one open periods, votes, counts and window
// levels are kept in, so a clock 5 s ahead or behind changes nothing. Nothing sleeps.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "bulwark/redis/fleet.h"
#include "fleet_world.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using testing::World;

constexpr auto kSyncInterval = 200ms;

// An instance whose wall clock is the world's plus `skew_ms`.
struct Instance : testing::FleetMember<Breaker> {
  Instance(World& w, std::string id, std::int64_t skew_ms, std::uint32_t quorum = 1)
      : FleetMember(
            Breaker::Config{.name = "inventory", .consecutive_failures = 3, .open_duration = 10s},
            w.clock,
            FleetConfig{.instance = std::move(id),
                        .quorum = quorum,
                        .sync_interval = kSyncInterval,
                        .lease_duration = 2s,
                        .wall_ms = [&w, skew_ms] { return w.wall + skew_ms; }},
            w.store) {}
  // The rejection's retry_after, or -1 ms if the breaker admitted the call.
  std::chrono::nanoseconds retry_after() {
    auto p = breaker.try_acquire();
    if (p) return -1ms;
    return p.error().retry_after;
  }
};

void expect_within_one_sync(std::chrono::nanoseconds got, std::chrono::nanoseconds want) {
  EXPECT_LE(got, want);
  EXPECT_GT(got, want - kSyncInterval);
}

TEST(FleetSkewTest, InstancesAheadAndBehindAdoptTheOpenPeriodTheStoreHolds) {
  World w;
  Instance a(w, "a", 0), b(w, "b", +5000), c(w, "c", -5000);
  a.sync(), b.sync(), c.sync();
  a.fail();
  w.advance(150ms);  // within one sync interval of the opening
  a.sync();
  b.sync(), c.sync();
  EXPECT_EQ(b.key().decided_by, "a");
  expect_within_one_sync(a.retry_after(), 10s);
  expect_within_one_sync(b.retry_after(), 10s);
  expect_within_one_sync(c.retry_after(), 10s);
  // The open ends for the whole fleet at once: just before, all reject; after, none.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(a.retry_after());
  w.advance(left - 1ms);
  EXPECT_EQ(b.retry_after(), 1ms);
  EXPECT_EQ(c.retry_after(), 1ms);
  w.advance(1ms);
  EXPECT_EQ(a.retry_after(), -1ms);
  EXPECT_EQ(b.retry_after(), -1ms);
  EXPECT_EQ(c.retry_after(), -1ms);
}

TEST(FleetSkewTest, AnOpenDecidedByASkewedInstanceLastsItsPeriodEverywhere) {
  World w;
  Instance a(w, "a", 0), b(w, "b", +5000), c(w, "c", -5000);
  a.sync(), b.sync(), c.sync();
  c.fail();  // behind: its until_ms is 5 s in the store's past
  c.sync();
  a.sync(), b.sync();
  EXPECT_EQ(a.key().decided_by, "c");
  expect_within_one_sync(a.retry_after(), 10s);
  expect_within_one_sync(b.retry_after(), 10s);
  // The store holds it open until its own now + 10 s.
  const auto rec = decode_record(w.store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(rec) << rec.error();
  EXPECT_EQ(rec->until_ms, w.wall + 10'000);
  EXPECT_EQ(a.key().until_ms, w.wall + 10'000);
}

TEST(FleetSkewTest, SkewedVotesCountTowardsTheQuorumWithinTheWindow) {
  World w;
  Instance a(w, "a", 0, 2), b(w, "b", +5000, 2), c(w, "c", -5000, 2);
  a.sync(), b.sync(), c.sync();
  c.fail();
  c.sync();
  a.sync(), b.sync();
  EXPECT_EQ(a.breaker.state(), State::closed);  // one vote of two
  w.advance(1s);
  b.fail();
  b.sync();  // c's vote, 1 s old by the store's clock, still counts
  a.sync();
  EXPECT_EQ(a.breaker.state(), State::open);
  EXPECT_EQ(a.key().decided_by, "b");
  expect_within_one_sync(a.retry_after(), 10s);
}

// The half-open lease is asked for near the end of the open period by the store's
// clock: an instance 5 s ahead does not ask 5 s early, one behind does not ask late.
TEST(FleetSkewTest, TheLeaseIsAskedForNearTheEndByTheStoresClock) {
  World w;
  Instance a(w, "a", 0), b(w, "b", +5000), c(w, "c", -5000);
  a.sync(), b.sync(), c.sync();
  a.fail();
  a.sync(), b.sync(), c.sync();
  w.advance(5s);
  b.sync(), c.sync();
  EXPECT_FALSE(b.key().lease_holder);
  EXPECT_FALSE(c.key().lease_holder);
  EXPECT_EQ(w.store.get_raw("inventory").value_or("").rfind("v1|open|", 0), 0u);
  w.advance(4700ms);  // within two sync intervals of the end
  c.sync();
  b.sync(), a.sync();
  EXPECT_TRUE(c.key().lease_holder);
  EXPECT_FALSE(b.key().lease_holder);
  EXPECT_FALSE(a.key().lease_holder);
}

// The store's side alone: requests whose now_ms disagree by 10 s.
TEST(FleetSkewTest, TheStoreKeepsOnlyItsOwnTimes) {
  std::int64_t store_ms = 1'700'000'000'000;
  MemoryFleetStore store([&store_ms] { return store_ms; });
  auto request = [&](std::string who, std::int64_t skew_ms) {
    SyncRequest r;
    r.instance = std::move(who);
    r.now_ms = store_ms + skew_ms;
    r.count_bucket_ms = 1000;
    r.count_buckets = 2;
    r.window_ttl_ms = 600;
    return r;
  };
  auto ahead = request("ahead", +5000), behind = request("behind", -5000);
  FleetOp window{FleetOp::Kind::window, "inventory"};
  window.calls = 4, window.failures = 1;
  FleetOp count{FleetOp::Kind::count, "inventory"};
  count.failures = 1;
  ahead.ops = {window, count};
  behind.ops = {window, count};
  auto r1 = store.exchange(ahead);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->server_ms, store_ms);
  auto r2 = store.exchange(behind);
  ASSERT_TRUE(r2);
  // Both levels are fresh and both counts fall in the same bucket of the store's clock.
  EXPECT_EQ(r2->windows.at(0), "8|2|0|2");
  EXPECT_EQ(r2->counts.at(0).failures, "2");
  // An open's end: the remaining time of the sender, from the store's now.
  auto open = request("behind", -5000);
  open.ops.push_back({FleetOp::Kind::window_open, "inventory", TransitionReason::failure_rate,
                      open.now_ms + 3000});
  ASSERT_TRUE(store.exchange(open));
  auto rec = decode_record(store.get_raw("inventory").value_or(""));
  ASSERT_TRUE(rec) << rec.error();
  EXPECT_EQ(rec->until_ms, store_ms + 3000);
  // An end already past for the sender is the store's now, never earlier.
  auto late = request("ahead", +5000);
  late.ops.push_back(
      {FleetOp::Kind::assert_open, "other", TransitionReason::manual, late.now_ms - 7000});
  ASSERT_TRUE(store.exchange(late));
  rec = decode_record(store.get_raw("other").value_or(""));
  ASSERT_TRUE(rec) << rec.error();
  EXPECT_EQ(rec->until_ms, store_ms);
}

// A store that drops or garbles its time: what a broken backend could send.
class TimelessStore final : public FleetStore {
 public:
  explicit TimelessStore(FleetStore& inner) : inner_(inner) {}
  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override {
    auto reply = inner_.exchange(request);
    if (reply && lie) reply->server_ms = *lie;
    return reply;
  }
  std::optional<std::int64_t> lie;

 private:
  FleetStore& inner_;
};

TEST(FleetSkewTest, AReplyWithoutAValidStoreTimeIsRefusedAsMalformed) {
  World w;
  TimelessStore timeless(w.store);
  Instance a(w, "a", 0);
  Breaker breaker(Breaker::Config{.name = "inventory", .consecutive_failures = 3}, w.clock);
  Fleet b(FleetConfig{.instance = "b",
                      .count_bucket = 1s,
                      .count_buckets = 2,
                      .wall_ms = [&w] { return w.wall; }},
          timeless);
  b.attach(breaker);
  a.fail();
  a.sync();
  breaker.try_acquire()->record_success();  // counted by the first exchange only
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-5}}) {
    timeless.lie = bad;
    const auto s = b.sync();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->malformed, 1u);
    EXPECT_EQ(s->adopted, 0u);
    EXPECT_EQ(breaker.state(), State::closed);
    const FleetReading r = b.reading();
    EXPECT_NE(r.last_malformed.find("server_ms " + std::to_string(bad)), std::string::npos)
        << r.last_malformed;
  }
  EXPECT_EQ(b.reading().malformed_values, 2u);
  timeless.lie.reset();
  const auto s = b.sync();  // the refused reply is read again
  ASSERT_TRUE(s);
  EXPECT_EQ(s->adopted, 1u);
  EXPECT_EQ(breaker.state(), State::open);
  // The store added b's success once, though two of its replies were refused.
  SyncRequest totals;
  totals.instance = "c";
  totals.now_ms = w.wall;
  totals.count_bucket_ms = 1000;
  totals.count_buckets = 2;
  totals.ops.push_back({FleetOp::Kind::count, "inventory"});
  const auto t = w.store.exchange(totals);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->counts.at(0).successes, "1");
}

}  // namespace
}  // namespace bulwark::redis
