// A store that answers for some keys only (as RedisClusterStore does when one group's
// node fails): the ops it could not deliver are marked lost, and the Fleet sends them
// again at a later sync instead of taking them as done. In virtual time, over
// MemoryFleetStore.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "redis/fleet_world.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using testing::FleetMember;
using testing::World;

// Forwards to `inner` the ops of the keys not in `down`; marks the others lost.
class PartialStore final : public FleetStore {
 public:
  explicit PartialStore(FleetStore& inner) : inner_(inner) {}
  Expected<SyncReply, StoreError> exchange(const SyncRequest& req) override {
    SyncRequest sent = req;
    sent.ops.clear();
    for (const FleetOp& op : req.ops) {
      if (down.count(op.key) == 0) sent.ops.push_back(op);
    }
    auto reply = inner_.exchange(sent);
    if (!reply || sent.ops.size() == req.ops.size()) return reply;
    SyncReply out = *reply;
    out.written.clear();
    out.lease_holders.clear();
    out.counts.clear();
    out.windows.clear();
    out.partial_error = "a group's node is down";
    std::size_t w = 0, l = 0, c = 0, v = 0;
    for (const FleetOp& op : req.ops) {
      const bool lost = down.count(op.key) != 0;
      out.lost.push_back(lost ? 1 : 0);
      out.written.push_back(lost ? 0 : reply->written[w++]);
      if (op.kind == FleetOp::Kind::lease)
        out.lease_holders.push_back(lost ? "" : reply->lease_holders[l++]);
      if (op.kind == FleetOp::Kind::count)
        out.counts.push_back(lost ? SyncReply::RawCounts{"0", "0"} : reply->counts[c++]);
      if (op.kind == FleetOp::Kind::window)
        out.windows.push_back(lost ? "0|0|0|0" : reply->windows[v++]);
    }
    return out;
  }
  std::set<std::string> down;

 private:
  FleetStore& inner_;
};

Breaker::Config config(std::string name) {
  return Breaker::Config{.name = std::move(name), .consecutive_failures = 3, .open_duration = 10s};
}

TEST(FleetPartial, AnOpenWhoseGroupWasDownIsVotedAgainOnceItAnswers) {
  World w;
  PartialStore partial(w.store);
  FleetMember<Breaker> a(config("inventory"), w.clock,
                         FleetConfig{.instance = "a", .wall_ms = [&w] { return w.wall; }}, partial);
  FleetMember<Breaker> b(config("inventory"), w.clock,
                         FleetConfig{.instance = "b", .wall_ms = [&w] { return w.wall; }}, w.store);
  a.sync(), b.sync();
  partial.down.insert("inventory");
  a.fail();
  a.sync();  // answered, but the vote was not delivered
  EXPECT_EQ(a.fleet.reading().last_error.rfind("partial: ", 0), 0u);
  EXPECT_FALSE(a.fleet.reading().connected);
  b.sync();
  EXPECT_EQ(b.breaker.state(), State::closed);
  partial.down.clear();
  a.sync();  // the vote again
  b.sync();
  EXPECT_EQ(b.breaker.state(), State::open);
  EXPECT_TRUE(a.fleet.reading().connected);
}

TEST(FleetPartial, ACloseWhoseGroupWasDownIsSentAgain) {
  World w;
  PartialStore partial(w.store);
  FleetMember<Breaker> a(config("inventory"), w.clock,
                         FleetConfig{.instance = "a", .wall_ms = [&w] { return w.wall; }}, partial);
  FleetMember<Breaker> b(config("inventory"), w.clock,
                         FleetConfig{.instance = "b", .wall_ms = [&w] { return w.wall; }}, w.store);
  a.sync(), b.sync();
  b.fail();
  b.sync(), a.sync();
  ASSERT_EQ(a.breaker.state(), State::open);  // adopted from b
  partial.down.insert("inventory");
  a.fleet.reset("inventory");  // closes the key for the whole fleet: lost this time
  a.sync();
  b.sync();
  EXPECT_EQ(b.breaker.state(), State::open);
  partial.down.clear();
  a.sync();
  b.sync();
  EXPECT_EQ(b.breaker.state(), State::closed);
}

TEST(FleetPartial, CountsOfAGroupThatWasDownAreSentAgain) {
  World w;
  PartialStore partial(w.store);
  FleetMember<Breaker> a(
      config("inventory"), w.clock,
      FleetConfig{.instance = "a", .count_bucket = 1s, .wall_ms = [&w] { return w.wall; }},
      partial);
  a.sync();
  partial.down.insert("inventory");
  for (int i = 0; i < 2; ++i) {
    if (auto p = a.breaker.try_acquire()) p->record_success();
  }
  a.sync();
  partial.down.clear();
  a.sync();
  EXPECT_EQ(a.key().fleet_successes, 2u);
}

}  // namespace
}  // namespace bulwark::redis
