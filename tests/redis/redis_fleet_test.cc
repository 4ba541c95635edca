// Fleets of separate instances, each with its own connection, against a real
// redis-server that each test starts on a free loopback port and stops. Breakers run
// on a ManualClock and the fleet's wall clock is a variable the test moves; the store
// keeps every time in Redis's own clock (TIME), which is real, so what must go stale
// there is waited for (polled, bounded), and an open period read back is the store's.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"
#include "redis/fleet_world.h"
#include "redis/redis_server.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using bulwark::testing::RedisServer;

// The only place these tests build a breaker configuration.
Breaker::Config breaker_config(std::string name, std::chrono::milliseconds open = 10s) {
  return Breaker::Config{.name = std::move(name), .consecutive_failures = 3, .open_duration = open};
}

class RedisFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = bulwark::testing::redis_server_missing(); !why.empty()) {
      if (bulwark::testing::servers_required())
        FAIL() << why << ", and BULWARK_REQUIRE_SERVERS is set";
      GTEST_SKIP() << why;
    }
    if (server_args().empty()) {
      // One server for the binary, emptied for each test (restarted if a test stopped it).
      if (!shared_) shared_ = std::make_unique<RedisServer>();
      server = shared_.get();
      if (!server->running()) {
        ASSERT_TRUE(server->start()) << "redis-server did not start on port " << server->port();
      }
      ASSERT_EQ(server->command({"FLUSHALL"}), "OK");
    } else {
      own_ = std::make_unique<RedisServer>(server_args());
      server = own_.get();
      ASSERT_TRUE(server->start()) << "redis-server did not start on port " << server->port();
    }
  }
  static void TearDownTestSuite() { shared_.reset(); }
  virtual std::vector<std::string> server_args() { return {}; }

  RedisConfig redis_config() {
    return RedisConfig{.port = server->port(),
                       .prefix = "{test}:fleet:",
                       .reconnect_min = 5ms,
                       .reconnect_max = 20ms};
  }

  // The store first: a base constructed before the instance's breaker and Fleet.
  struct OwnStore {
    RedisFleetStore store;
  };
  struct Instance : OwnStore, testing::FleetMember<Breaker> {
    // `skew_ms`: this instance's wall clock is the test's plus that.
    Instance(RedisFleetTest& t, std::string id, std::uint32_t quorum, RedisConfig rc,
             std::int64_t skew_ms = 0)
        : OwnStore{RedisFleetStore(std::move(rc))},
          FleetMember(breaker_config("inventory"), t.clock,
                      FleetConfig{.instance = std::move(id),
                                  .quorum = quorum,
                                  .wall_ms = [&t, skew_ms] { return t.wall + skew_ms; }},
                      store) {}
  };
  std::unique_ptr<Instance> make(std::string id, std::uint32_t quorum = 1,
                                 std::int64_t skew_ms = 0) {
    return std::make_unique<Instance>(*this, std::move(id), quorum, redis_config(), skew_ms);
  }
  void advance(std::chrono::milliseconds d) {
    clock.advance(d);
    wall += d.count();
  }

  ManualClock clock;
  // Near the real time, so that Redis's own expiries (votes, leases) behave.
  std::int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  RedisServer* server = nullptr;
  static inline std::unique_ptr<RedisServer> shared_;
  std::unique_ptr<RedisServer> own_;  // a server of the test's own arguments
};

TEST_F(RedisFleetTest, OpenOnOneIsOpenOnAllAfterOneSyncEachAndCloseFollows) {
  auto a = make("a"), b = make("b"), c = make("c");
  a->sync(), b->sync(), c->sync();
  a->fail();
  a->sync(), b->sync(), c->sync();
  EXPECT_EQ(b->breaker.state(), State::open);
  EXPECT_EQ(c->breaker.state(), State::open);
  EXPECT_EQ(c->key().decided_by, "a");
  EXPECT_EQ(c->key().decision, Decision::shared);
  EXPECT_EQ(server->command({"GET", "{test}:fleet:k:inventory"})
                .rfind("v1|open|consecutive_failures|", 0),
            0u);

  // The lease: a asks first near the end of the period and probes; b and c wait.
  advance(9700ms);
  a->sync(), b->sync(), c->sync();
  EXPECT_TRUE(a->key().lease_holder);
  EXPECT_FALSE(b->key().lease_holder);
  EXPECT_FALSE(c->key().lease_holder);
  EXPECT_EQ(server->command({"GET", "{test}:fleet:l:inventory"}), "a");
  advance(300ms);
  auto probe = a->breaker.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  EXPECT_FALSE(b->breaker.try_acquire());
  EXPECT_FALSE(c->breaker.try_acquire());
  probe->record_success();
  a->sync(), b->sync(), c->sync();
  EXPECT_EQ(b->breaker.state(), State::closed);
  EXPECT_EQ(c->breaker.state(), State::closed);
  EXPECT_EQ(server->command({"EXISTS", "{test}:fleet:l:inventory"}), "0");
  const FleetReading r = b->fleet.reading();
  EXPECT_EQ(r.adopted_opens, 1u);
  EXPECT_EQ(r.adopted_closes, 1u);
  EXPECT_TRUE(r.connected);
  std::uint64_t rtts = 0;
  for (auto n : r.rtt_counts) rtts += n;
  EXPECT_EQ(rtts, r.syncs);
}

TEST_F(RedisFleetTest, QuorumTwoWithOneSickInstance) {
  auto a = make("a", 2), b = make("b", 2), c = make("c", 2);
  a->fail();
  a->sync(), b->sync(), c->sync();
  EXPECT_EQ(a->breaker.state(), State::open);
  EXPECT_EQ(b->breaker.state(), State::closed);
  EXPECT_EQ(c->breaker.state(), State::closed);
  EXPECT_EQ(a->key().decision, Decision::local);
  advance(1s);
  b->fail();
  b->sync(), c->sync();
  EXPECT_EQ(c->breaker.state(), State::open);
  EXPECT_EQ(c->key().decided_by, "b");
}

// Redis's time of an instance's last reply: the test's wall clock stands still through
// a sync, so it is the instance's wall clock plus the offset the reply measured.
std::int64_t store_ms(const FleetReading& r, std::int64_t wall_ms) {
  return wall_ms + r.store_clock_offset_ms;
}

// Only the remaining time travels: a opened 3 s before its sync, so the store holds the
// key open until 7 s after Redis's time of that sync, and a newcomer adopts what is left
// of it at Redis's time of its own (Redis's clock is real: some of it passed).
TEST_F(RedisFleetTest, ANewInstanceAdoptsTheFleetStateOnItsFirstSync) {
  auto a = make("a");
  a->fail();
  advance(3s);
  a->sync();
  auto late = make("late");
  late->sync();
  const auto stored = decode_record(server->command({"GET", "{test}:fleet:k:inventory"}));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->until_ms, store_ms(a->fleet.reading(), wall) + 7'000);
  auto rej = late->breaker.try_acquire();
  ASSERT_FALSE(rej);
  EXPECT_EQ(rej.error().retry_after,
            std::chrono::milliseconds(stored->until_ms - store_ms(late->fleet.reading(), wall)));
  EXPECT_LE(rej.error().retry_after, 7s);
}

// Wall clocks 30 s apart change nothing: Redis keeps the open in its own clock, and
// each instance reads the remaining time against the time Redis replied with.
TEST_F(RedisFleetTest, InstancesWhoseClocksDifferBy30sAdoptTheSameRemainingOpenPeriod) {
  auto a = make("a"), ahead = make("ahead", 1, +30'000), behind = make("behind", 1, -30'000);
  a->sync(), ahead->sync(), behind->sync();
  a->fail();
  a->sync(), ahead->sync(), behind->sync();
  auto own = a->breaker.try_acquire();
  ASSERT_FALSE(own);
  EXPECT_EQ(own.error().retry_after, 10s);
  // The record's end is Redis's time of a's sync plus 10 s, not any instance's.
  const std::int64_t until = behind->key().until_ms;
  EXPECT_EQ(until, store_ms(a->fleet.reading(), wall) + 10'000);
  for (auto [i, skew] : {std::pair{ahead.get(), 30'000}, std::pair{behind.get(), -30'000}}) {
    EXPECT_EQ(i->key().decided_by, "a");
    EXPECT_EQ(i->key().until_ms, until);
    auto rej = i->breaker.try_acquire();
    ASSERT_FALSE(rej);
    // What was left by Redis's clock when this instance's reply came.
    EXPECT_EQ(rej.error().retry_after,
              std::chrono::milliseconds(until - store_ms(i->fleet.reading(), wall + skew)));
    EXPECT_LE(rej.error().retry_after, own.error().retry_after);
  }
}

TEST_F(RedisFleetTest, KilledRedisFailsFastThenTheFleetRejoinsAndRepublishes) {
  auto a = make("a"), b = make("b");
  a->sync(), b->sync();
  a->fail();
  a->sync();
  server->kill();
  auto s = b->fleet.sync();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, StoreError::Kind::unavailable) << s.error().message;
  EXPECT_TRUE(b->breaker.try_acquire());  // carries on locally
  EXPECT_FALSE(b->fleet.reading().connected);
  EXPECT_GE(b->fleet.reading().sync_errors, 1u);

  // Back, empty: the instances notice the new incarnation and a publishes again what
  // is still open. Reconnecting waits for the backoff (5-20 ms here): poll for it.
  ASSERT_TRUE(server->start());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!a->fleet.sync() && std::chrono::steady_clock::now() < deadline) {
  }
  while (!b->fleet.sync() && std::chrono::steady_clock::now() < deadline) {
  }
  a->sync();  // re-publishes into the empty store
  b->sync();
  EXPECT_EQ(b->breaker.state(), State::open);
  EXPECT_EQ(server->command({"GET", "{test}:fleet:k:inventory"}).rfind("v1|open|", 0), 0u);
  EXPECT_GE(a->store.reconnects(), 2u);
}

TEST_F(RedisFleetTest, APausedRedisTimesOutInsteadOfHanging) {
  auto a = make("a");
  a->sync();
  server->pause();           // accepts nothing, answers nothing: a partition
  auto s = a->fleet.sync();  // returns by the store's deadline (a hang would be one)
  server->resume();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, StoreError::Kind::timeout) << s.error().message;
  // Within the backoff the store does not even try.
  auto again = a->fleet.sync();
  if (!again) {
    EXPECT_NE(again.error().message.find("next attempt"), std::string::npos);
  }
}

TEST_F(RedisFleetTest, ValuesThatAreNotRecordsAreRemovedByTheScriptCountedAndNamed) {
  auto a = make("a");
  a->sync();
  server->command({"SET", "{test}:fleet:k:inventory", "v1|open|manual|tomorrow|x|1"});
  server->command(
      {"ZADD", "{test}:fleet:changes", server->command({"INCR", "{test}:fleet:seq"}), "inventory"});
  server->command({"HSET", "{test}:fleet:k:other", "f", "v"});
  server->command(
      {"ZADD", "{test}:fleet:changes", server->command({"INCR", "{test}:fleet:seq"}), "other"});
  const SyncSummary s = a->sync();
  EXPECT_EQ(s.repairs, 2u);
  EXPECT_EQ(s.malformed, 0u);
  const FleetReading r = a->fleet.reading();
  EXPECT_EQ(r.store_repairs, 2u);
  EXPECT_NE(r.last_repair.find("k:other held a hash, not a fleet record"), std::string::npos)
      << r.last_repair;
  EXPECT_EQ(a->breaker.state(), State::closed);
  EXPECT_EQ(server->command({"EXISTS", "{test}:fleet:k:inventory"}), "0");
  EXPECT_EQ(server->command({"EXISTS", "{test}:fleet:k:other"}), "0");
  // The instance's own opening goes through.
  a->fail();
  a->sync();
  EXPECT_EQ(server->command({"GET", "{test}:fleet:k:inventory"}).rfind("v1|open|", 0), 0u);
}

TEST_F(RedisFleetTest, CallsAreCountedFleetWideAndMalformedCountsAreNamed) {
  auto config = [this](std::string id) {
    return FleetConfig{
        .instance = std::move(id), .count_bucket = 1000ms, .count_buckets = 3, .wall_ms = [this] {
          return wall;
        }};
  };
  RedisFleetStore sa(redis_config()), sb(redis_config());
  Breaker ba(breaker_config("inventory"), clock), bb(breaker_config("inventory"), clock);
  Fleet a(config("a"), sa), b(config("b"), sb);
  a.attach(ba);
  b.attach(bb);
  for (int i = 0; i < 3; ++i) ba.try_acquire()->record_success();
  ba.try_acquire()->record_failure();
  bb.try_acquire()->record_failure();
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());
  EXPECT_EQ(b.reading().keys[0].fleet_successes, 3u);
  EXPECT_EQ(b.reading().keys[0].fleet_failures, 2u);

  // A bucket that holds something else than counts is removed (its counts with it), and
  // counting goes on.
  const auto buckets = server->scan("{test}:fleet:w:inventory:*");
  ASSERT_FALSE(buckets.empty());
  for (const auto& key : buckets) server->command({"HSET", key, "s", "lots"});
  bb.try_acquire()->record_success();
  const auto s = b.sync();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->repairs, buckets.size());
  EXPECT_EQ(s->malformed, 0u);
  EXPECT_NE(b.reading().last_repair.find("w:inventory:"), std::string::npos)
      << b.reading().last_repair;
  EXPECT_NE(b.reading().last_repair.find("the count s='lots'"), std::string::npos)
      << b.reading().last_repair;
  EXPECT_EQ(b.reading().keys[0].fleet_successes, 1u);
  EXPECT_EQ(b.reading().keys[0].fleet_failures, 0u);
}

TEST_F(RedisFleetTest, ANewInstanceCatchesUpOverSeveralSyncsOfBoundedReplies) {
  RedisFleetStore so(redis_config()), sn(redis_config());
  std::vector<std::unique_ptr<Breaker>> old_breakers, new_breakers;
  Fleet old_one(FleetConfig{.instance = "old", .wall_ms = [this] { return wall; }}, so);
  Fleet new_one(
      FleetConfig{.instance = "new", .max_changes_per_sync = 2, .wall_ms = [this] { return wall; }},
      sn);
  for (int i = 0; i < 5; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    old_breakers.push_back(std::make_unique<Breaker>(breaker_config(key), clock));
    new_breakers.push_back(std::make_unique<Breaker>(breaker_config(key), clock));
    old_one.attach(*old_breakers.back());
    new_one.attach(*new_breakers.back());
    for (int f = 0; f < 3; ++f) old_breakers.back()->try_acquire()->record_failure();
  }
  ASSERT_TRUE(old_one.sync());
  std::vector<std::size_t> changes;
  for (int i = 0; i < 3; ++i) {
    auto s = new_one.sync();
    ASSERT_TRUE(s) << s.error().message;
    changes.push_back(s->changes);
  }
  EXPECT_EQ(changes, (std::vector<std::size_t>{2, 2, 1}));
  for (auto& b : new_breakers) EXPECT_EQ(b->state(), State::open);
}

// Fleet windows in Redis: ten instances, each with three calls (two failed) where
// minimum_calls is 20; the fleet's 30 calls trip every one of them.
TEST_F(RedisFleetTest, FleetWindowsTripTogetherAndBadEntriesAreRefused) {
  using Windowed = BasicCircuitBreaker<ManualClock, CountWindow>;
  const Windowed::Config config{.name = "inventory",
                                .window = {.size = 100},
                                .minimum_calls = 20,
                                .failure_rate = 0.5,
                                .open_duration = 10s};
  struct Member {
    Member(RedisConfig rc, ManualClock& clock, const std::int64_t& wall, std::string id,
           const Windowed::Config& c)
        : store(std::move(rc)),
          breaker(c, clock),
          fleet(FleetConfig{.instance = std::move(id),
                            .sync_interval = 200ms,
                            .wall_ms = [&wall] { return wall; }},
                store) {
      fleet.attach(breaker, {.fleet_window = true});
    }
    RedisFleetStore store;
    Windowed breaker;
    Fleet fleet;
  };
  std::vector<std::unique_ptr<Member>> fleet;
  for (int i = 0; i < 10; ++i)
    fleet.push_back(
        std::make_unique<Member>(redis_config(), clock, wall, "web-" + std::to_string(i), config));
  // A bad entry first: refused, named, dropped.
  server->command({"HSET", "{test}:fleet:fw:inventory", "ghost", "999|999|0|soon"});
  for (auto& m : fleet) {
    for (int i = 0; i < 2; ++i) m->breaker.try_acquire()->record_failure();
    m->breaker.try_acquire()->record_success();
  }
  const auto first = fleet[0]->fleet.sync();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->malformed, 1u);
  EXPECT_NE(fleet[0]->fleet.reading().last_malformed.find("ghost=999|999|0|soon"),
            std::string::npos)
      << fleet[0]->fleet.reading().last_malformed;
  EXPECT_EQ(fleet[0]->breaker.state(), State::closed);
  EXPECT_EQ(server->command({"HEXISTS", "{test}:fleet:fw:inventory", "ghost"}), "0");
  // Three sync intervals after the write, by Redis's clock.
  const std::int64_t expires =
      std::stoll(server->command({"PEXPIRETIME", "{test}:fleet:fw:inventory"}));
  const std::int64_t written = wall + fleet[0]->fleet.reading().store_clock_offset_ms;
  EXPECT_GE(expires - (written + 600), -1);
  EXPECT_LE(expires - (written + 600), 1'000);

  for (std::size_t i = 1; i < fleet.size(); ++i) ASSERT_TRUE(fleet[i]->fleet.sync());
  // web-6 brought the fleet to 21 calls: it tripped, and the later ones adopted.
  const std::string record = server->command({"GET", "{test}:fleet:k:inventory"});
  EXPECT_EQ(record.rfind("v1|open|failure_rate|", 0), 0u) << record;
  EXPECT_NE(record.find("|web-6|"), std::string::npos) << record;
  EXPECT_EQ(record.substr(record.size() - 7), "|window") << record;
  for (auto& m : fleet) ASSERT_TRUE(m->fleet.sync());
  for (auto& m : fleet) {
    EXPECT_EQ(m->breaker.state(), State::open);
    const FleetKeyReading k = m->fleet.reading().keys.at(0);
    EXPECT_EQ(k.decision, Decision::shared);
    EXPECT_TRUE(k.fleet_window_decision);
    EXPECT_EQ(k.reason, TransitionReason::failure_rate);
    EXPECT_EQ(k.decided_by, "web-6");
  }
  // Open, each instance withdraws its level at its next sync.
  for (auto& m : fleet) ASSERT_TRUE(m->fleet.sync());
  EXPECT_EQ(server->command({"HLEN", "{test}:fleet:fw:inventory"}), "0");
}

// An instance that stops syncing stops counting: Redis judges freshness by its own
// clock, so the test waits (polling, bounded) for a's entry to go stale while b keeps
// sending a level that changes at every sync.
TEST_F(RedisFleetTest, AFleetWindowEntryGoesStaleWhenItsInstanceStopsSyncing) {
  using Windowed = BasicCircuitBreaker<ManualClock, CountWindow>;
  const Windowed::Config config{
      .name = "inventory", .window = {.size = 1000}, .minimum_calls = 20, .failure_rate = 0.5};
  RedisFleetStore sa(redis_config()), sb(redis_config());
  Windowed ba(config, clock), bb(config, clock);
  Fleet a(FleetConfig{.instance = "a", .sync_interval = 50ms, .wall_ms = [this] { return wall; }},
          sa);
  Fleet b(FleetConfig{.instance = "b", .sync_interval = 50ms, .wall_ms = [this] { return wall; }},
          sb);
  a.attach(ba, {.fleet_window = true});
  b.attach(bb, {.fleet_window = true});
  for (int i = 0; i < 9; ++i) ba.try_acquire()->record_success();
  bb.try_acquire()->record_success();
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());
  EXPECT_EQ(b.reading().keys[0].window_calls, 10u);
  EXPECT_EQ(b.reading().keys[0].window_instances, 2u);
  advance(700ms);       // a's clock too: a sends its unchanged level again at its next sync
  std::uint64_t n = 1;  // b's calls
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  do {
    std::this_thread::sleep_for(20ms);
    bb.try_acquire()->record_success();
    ++n;
    ASSERT_TRUE(b.sync());
  } while (b.reading().keys[0].window_instances != 1 &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(b.reading().keys[0].window_calls, n);
  EXPECT_EQ(b.reading().keys[0].window_instances, 1u);
  EXPECT_EQ(server->command({"HEXISTS", "{test}:fleet:fw:inventory", "a"}), "0");
  EXPECT_EQ(server->command({"ZSCORE", "{test}:fleet:ft:inventory", "a"}), "(nil)");
  EXPECT_EQ(server->command({"HGET", "{test}:fleet:fw:inventory", "="}),
            std::to_string(n) + "|0|0|1");
  // The running sum is a cache of the entries: an unreadable one is reported and
  // rebuilt from them.
  server->command({"HSET", "{test}:fleet:fw:inventory", "=", "lots"});
  bb.try_acquire()->record_success();
  const auto s = b.sync();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->malformed, 1u);
  EXPECT_NE(b.reading().last_malformed.find("malformed|==lots"), std::string::npos)
      << b.reading().last_malformed;
  EXPECT_EQ(server->command({"HGET", "{test}:fleet:fw:inventory", "="}),
            std::to_string(n + 1) + "|0|0|1");
  ASSERT_TRUE(a.sync());  // a is back: one more entry, added to the sum
  EXPECT_EQ(a.reading().keys[0].window_calls, 9u + n + 1);
  EXPECT_EQ(a.reading().keys[0].window_instances, 2u);
}

// The same window ops, in the same order, against Redis and MemoryFleetStore: the two
// implement one protocol, so every reply's totals must agree, and both must agree with
// the sum over the fresh levels computed here. Levels come and go (calls 0 withdraws
// one), and Redis's clock moves (the test pauses a few ms between some steps) so that
// some go stale. The memory store's clock is set to the time Redis replied with, and the
// model stamps and judges levels by it too.
TEST_F(RedisFleetTest, RedisAndTheMemoryStoreSumFleetWindowsAlike) {
  RedisFleetStore redis(redis_config());
  std::int64_t store_now = 0;
  MemoryFleetStore memory([&store_now] { return store_now; });
  std::minstd_rand rng(7);
  struct Entry {
    std::uint64_t calls, failures, slow;
    std::int64_t ms;
  };
  std::map<std::string, Entry> levels;  // the model
  for (int step = 0; step < 300; ++step) {
    if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 6));
    const std::string who = "i" + std::to_string(rng() % 12);
    const std::uint64_t calls = rng() % 4 == 0 ? 0 : rng() % 50 + 1;
    const std::uint64_t failures = calls == 0 ? 0 : rng() % (calls + 1);
    const std::uint64_t slow = calls == 0 ? 0 : rng() % (calls + 1);
    SyncRequest req;
    req.instance = who;
    req.now_ms = wall;
    req.window_ttl_ms = 15;
    FleetOp op{FleetOp::Kind::window, "inventory"};
    op.calls = calls, op.failures = failures, op.slow = slow;
    req.ops.push_back(op);
    auto r = redis.exchange(req);
    ASSERT_TRUE(r) << r.error().message;
    const std::int64_t now = r->server_ms;
    ASSERT_GT(now, 0);
    store_now = now;
    auto m = memory.exchange(req);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->server_ms, now);
    if (calls == 0) {
      levels.erase(who);
    } else {
      levels[who] = Entry{calls, failures, slow, now};
    }
    std::uint64_t c = 0, f = 0, sl = 0, n = 0;
    for (auto it = levels.begin(); it != levels.end();) {
      if (it->second.ms <= now - 15) {
        it = levels.erase(it);
        continue;
      }
      c += it->second.calls, f += it->second.failures, sl += it->second.slow, ++n;
      ++it;
    }
    const std::string want = std::to_string(c) + "|" + std::to_string(f) + "|" +
                             std::to_string(sl) + "|" + std::to_string(n);
    ASSERT_EQ(r->windows.size(), 1u);
    ASSERT_EQ(m->windows.size(), 1u);
    EXPECT_EQ(r->windows[0], want) << "step " << step;
    EXPECT_EQ(m->windows[0], want) << "step " << step;
  }
}

// Expiry. Redis's own TTLs are real time: these tests use a retention and idle TTL of a
// few hundred milliseconds and poll (bounded) for what must disappear.
class RedisExpiryTest : public RedisFleetTest {
 protected:
  using Windowed = BasicCircuitBreaker<ManualClock, CountWindow>;
  // One instance: its store, its breakers, its fleet.
  struct Node {
    Node(RedisConfig rc, FleetConfig fc) : store(std::move(rc)), fleet(std::move(fc), store) {}
    Breaker& add(std::string key, ManualClock& clock, std::chrono::milliseconds open = 10s) {
      breakers.push_back(std::make_unique<Breaker>(breaker_config(std::move(key), open), clock));
      fleet.attach(*breakers.back());
      return *breakers.back();
    }
    SyncSummary sync() {
      auto s = fleet.sync();
      EXPECT_TRUE(s) << (s ? "" : s.error().message);
      return s ? *s : SyncSummary{};
    }
    RedisFleetStore store;
    std::vector<std::unique_ptr<Breaker>> breakers;
    Fleet fleet;
  };
  RedisConfig short_lived(std::chrono::milliseconds idle_ttl = 600ms) {
    RedisConfig rc = redis_config();
    rc.retention = 300ms;
    rc.idle_ttl = idle_ttl;
    return rc;
  }
  FleetConfig fleet_config(std::string id) {
    return FleetConfig{.instance = std::move(id), .wall_ms = [this] { return wall; }};
  }
  static void trip(Breaker& b) {
    for (int i = 0; i < 3; ++i) {
      if (auto p = b.try_acquire()) p->record_failure();
    }
  }
  // When the key expires, in Redis's clock (absolute: no time passes between the write
  // and this reading that could change it); -1 if never, -2 if it is gone.
  std::int64_t expires(const std::string& key) {
    return std::stoll(server->command({"PEXPIRETIME", kPrefix + key}));
  }
  bool exists(const std::string& key) { return server->command({"EXISTS", kPrefix + key}) == "1"; }
  // Polls `done` every 10 ms for up to 30 s.
  template <class F>
  static bool eventually(F done) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  const std::string kPrefix = "{test}:fleet:";
};

TEST_F(RedisExpiryTest, EveryKeyUnderThePrefixHasATtlWhileTheFleetIsActive) {
  const Windowed::Config wc{
      .name = "search", .window = {.size = 100}, .minimum_calls = 20, .failure_rate = 0.5};
  auto config = [this](std::string id) {
    FleetConfig fc = fleet_config(std::move(id));
    fc.count_bucket = 1000ms;
    fc.count_buckets = 3;
    return fc;
  };
  Node a(redis_config(), config("a")), b(redis_config(), config("b"));
  Breaker& inventory = a.add("inventory", clock);
  b.add("inventory", clock);
  Windowed sa(wc, clock), sb(wc, clock);
  a.fleet.attach(sa, {.fleet_window = true});
  b.fleet.attach(sb, {.fleet_window = true});
  trip(inventory);
  sa.try_acquire()->record_success();
  sb.try_acquire()->record_success();
  a.sync(), b.sync();
  advance(9700ms);  // near the end of the open period: a takes the half-open lease
  sa.try_acquire()->record_success();
  a.sync(), b.sync();
  std::set<std::string> kinds;
  for (const std::string& key : server->scan(kPrefix + "*")) {
    // -2: it expired since the scan, which it could only do with a TTL.
    EXPECT_NE(expires(key.substr(kPrefix.size())), -1) << key << " does not expire";
    const std::string rest = key.substr(kPrefix.size());
    kinds.insert(rest.substr(0, rest.find(':')));
  }
  EXPECT_EQ(kinds,
            (std::set<std::string>{"changes", "ft", "fw", "id", "k", "l", "run", "seq", "v", "w"}));
}

TEST_F(RedisExpiryTest, OnceTheFleetStopsEveryKeyExpires) {
  auto config = [this](std::string id) {
    FleetConfig fc = fleet_config(std::move(id));
    fc.quorum_window = 200ms;
    fc.sync_interval = 100ms;
    fc.lease_duration = 300ms;
    fc.count_bucket = 100ms;
    fc.count_buckets = 3;
    return fc;
  };
  const Windowed::Config wc{
      .name = "search", .window = {.size = 100}, .minimum_calls = 20, .failure_rate = 0.5};
  Node a(short_lived(), config("a")), b(short_lived(), config("b"));
  Breaker& inventory = a.add("inventory", clock, 200ms);
  b.add("inventory", clock, 200ms);
  Windowed sa(wc, clock);
  a.fleet.attach(sa, {.fleet_window = true});
  trip(inventory);
  sa.try_acquire()->record_success();
  a.sync(), b.sync();
  advance(150ms);  // the lease
  a.sync(), b.sync();
  EXPECT_TRUE(eventually([&] { return server->command({"DBSIZE"}) == "0"; }))
      << "left: " << server->command({"DBSIZE"}) << " keys";
}

TEST_F(RedisExpiryTest, ARecordOutlivesItsOpenPeriodByTheRetentionAndNoLonger) {
  Node a(short_lived(), fleet_config("a"));
  Breaker& inventory = a.add("inventory", clock);  // open for 10 s
  trip(inventory);
  a.sync();
  // Expiries against Redis's own clock (the record's end, the reply's time), within one
  // run of the script.
  const std::int64_t until = a.fleet.reading().keys[0].until_ms;
  const std::int64_t replied = wall + a.fleet.reading().store_clock_offset_ms;
  EXPECT_GE(expires("k:inventory") - (until + 300), -1);
  EXPECT_LE(expires("k:inventory") - (until + 300), 1'000);
  EXPECT_GE(expires("seq") - (replied + 600), -1);
  EXPECT_LE(expires("seq") - (replied + 600), 1'000);
  // The probe succeeds: the close is kept for the retention, then the key is gone and
  // an instance's next sync finds nothing wrong.
  advance(10s);
  auto probe = inventory.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  probe->record_success();
  a.sync();
  EXPECT_EQ(server->command({"GET", kPrefix + "k:inventory"}).rfind("v1|closed|", 0), 0u);
  const std::int64_t closed_at = wall + a.fleet.reading().store_clock_offset_ms;
  EXPECT_GE(expires("k:inventory") - (closed_at + 300), -1);
  EXPECT_LE(expires("k:inventory") - (closed_at + 300), 1'000);
  EXPECT_TRUE(eventually([&] { return !exists("k:inventory"); }));
  EXPECT_EQ(a.sync().malformed, 0u);
  EXPECT_EQ(server->command({"ZSCORE", kPrefix + "changes", "inventory"}), "(nil)");
}

TEST_F(RedisExpiryTest, ARecordThatExpiresWhileTheFleetRunsIsClosedNotMalformed) {
  Node a(short_lived(10s), fleet_config("a")), b(short_lived(10s), fleet_config("b"));
  // Eight long opens first: the oldest changes stay, so the per-exchange pruning (the
  // oldest 8) does not reach the short one, and reading must skip it.
  for (int i = 0; i < 8; ++i) {
    trip(a.add("k" + std::to_string(i), clock));
    b.add("k" + std::to_string(i), clock);
  }
  a.sync();
  trip(a.add("inventory", clock, 200ms));
  b.add("inventory", clock, 200ms);
  a.sync(), b.sync();
  EXPECT_EQ(b.breakers.back()->state(), State::open);
  EXPECT_TRUE(eventually([&] {
    EXPECT_EQ(a.sync().malformed, 0u);
    EXPECT_EQ(b.sync().malformed, 0u);
    return !exists("k:inventory");
  }));
  EXPECT_NE(server->command({"ZSCORE", kPrefix + "changes", "inventory"}), "(nil)");
  Node c(short_lived(10s), fleet_config("c"));
  for (int i = 0; i < 8; ++i) c.add("k" + std::to_string(i), clock);
  c.add("inventory", clock, 200ms);
  const SyncSummary s = c.sync();
  EXPECT_EQ(s.malformed, 0u);
  EXPECT_EQ(s.changes, 8u);
  EXPECT_EQ(c.breakers.front()->state(), State::open);
  EXPECT_EQ(c.breakers.back()->state(), State::closed);
  EXPECT_EQ(c.fleet.reading().keys.back().decision, Decision::none);
  EXPECT_EQ(server->command({"ZSCORE", kPrefix + "changes", "inventory"}), "(nil)");
  EXPECT_EQ(a.fleet.reading().malformed_values + b.fleet.reading().malformed_values, 0u);
}

TEST_F(RedisExpiryTest, AfterTheIdleTtlANewIncarnationBringsBackWhatIsStillOpen) {
  Node a(short_lived(), fleet_config("a")), b(short_lived(), fleet_config("b"));
  trip(a.add("inventory", clock));  // open for 10 s, longer than the idle TTL
  b.add("inventory", clock);
  a.sync(), b.sync();
  ASSERT_EQ(b.breakers[0]->state(), State::open);
  const std::string before = server->command({"GET", kPrefix + "id"});
  // Nobody syncs for the idle TTL: the counter, the incarnation and the changes go.
  EXPECT_TRUE(eventually([&] { return !exists("seq") && !exists("id") && !exists("changes"); }));
  EXPECT_TRUE(exists("k:inventory"));
  a.sync();  // a new incarnation: a reads from the start and re-publishes next time
  a.sync();
  EXPECT_NE(server->command({"GET", kPrefix + "id"}), before);
  EXPECT_NE(server->command({"ZSCORE", kPrefix + "changes", "inventory"}), "(nil)");
  b.sync();                         // b sees the new incarnation: its cursor goes back to 0
  EXPECT_EQ(b.sync().changes, 1u);  // and it reads the re-published open
  Node c(short_lived(), fleet_config("c"));
  c.add("inventory", clock);
  c.sync();
  EXPECT_EQ(c.breakers[0]->state(), State::open);
  EXPECT_EQ(c.fleet.reading().keys[0].decided_by, "a");
  EXPECT_EQ(a.fleet.reading().malformed_values + b.fleet.reading().malformed_values, 0u);
}

class RedisAuthTest : public RedisFleetTest {
  std::vector<std::string> server_args() override { return {"--requirepass", "s3cret"}; }
};

TEST_F(RedisAuthTest, PasswordIsSentAndAWrongOneIsAClearError) {
  RedisConfig wrong = redis_config();
  wrong.password = "nope";
  Instance bad(*this, "bad", 1, wrong);
  auto s = bad.fleet.sync();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, StoreError::Kind::rejected);
  EXPECT_NE(s.error().message.find("AUTH"), std::string::npos) << s.error().message;

  RedisConfig right = redis_config();
  right.password = "s3cret";
  Instance good(*this, "good", 1, right);
  good.fail();
  EXPECT_TRUE(good.fleet.sync());
}

TEST(RedisConfigTest, BadConfigurationIsRejectedNamingTheField) {
  try {
    RedisFleetStore s(RedisConfig{.port = 70000});
    FAIL();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "port");
  }
  EXPECT_THROW(RedisFleetStore(RedisConfig{.prefix = ""}), InvalidConfig);
  EXPECT_THROW(RedisFleetStore(RedisConfig{.prefix = "a b"}), InvalidConfig);
  EXPECT_THROW(RedisFleetStore(RedisConfig{.timeout = 0ms}), InvalidConfig);
}

TEST(RedisConfigTest, APrefixWithoutANonEmptyHashTagIsRefused) {
  auto refusal = [](RedisConfig rc) -> std::string {
    try {
      RedisFleetStore s(std::move(rc));
    } catch (const InvalidConfig& e) {
      return e.error().field + ": " + e.error().message;
    }
    return "accepted";
  };
  EXPECT_EQ(
      refusal(RedisConfig{.prefix = "test:fleet:"}).rfind("prefix: must contain a hash tag", 0),
      0u);
  EXPECT_EQ(
      refusal(RedisConfig{.prefix = "test{fleet:"}).rfind("prefix: must contain a hash tag", 0),
      0u);
  EXPECT_EQ(refusal(RedisConfig{.prefix = "{}:fleet:"}).rfind("prefix: has an empty hash tag", 0),
            0u);
  EXPECT_EQ(refusal(RedisConfig{.prefix = "checkout:{fleet}:"}), "accepted");
  EXPECT_EQ(refusal(RedisConfig{}), "accepted");
  EXPECT_EQ(RedisConfig{}.prefix, "{bulwark}:fleet:");
  EXPECT_EQ(refusal(RedisConfig{.retention = 0ms}).rfind("retention:", 0), 0u);
  EXPECT_EQ(refusal(RedisConfig{.retention = 2s, .idle_ttl = 1s}).rfind("idle_ttl:", 0), 0u);
}

}  // namespace
}  // namespace bulwark::redis
