// The fleet against faults of a real redis-server: paused (SIGSTOP) and resumed, killed
// and restarted empty, restarted from an older snapshot, flushed, evicting under
// maxmemory, corrupt or absurd values in every key the store writes, an instance that
// restarts under its own id, and instance clocks far from Redis's.
//
// Each fault runs against a small fleet (three instances, each with its own store
// connection, a plain breaker for "inventory" and "payments" and a windowed one for
// "search" judged on the fleet's window, and fleet-wide counts on), and is judged by one
// checker, a model of what must hold afterwards, not by timings:
//   - nothing crashed, and no request waited on Redis: every store exchange ran on the
//     thread that syncs, and calls made during the fault did no store I/O;
//   - once Redis is healthy, every instance shares again within kRoundsToShare syncs
//     each: every key the model holds open is open on every instance and in the store,
//     an instance joining then adopts it on its first sync, and a new opening on one
//     instance reaches every other after one sync of each;
//   - every refusal was counted (a repair of the store, a refused open).
// One redis-server serves the whole binary (each test its own key prefix); the faults
// that stop it restart it on the same port. Every fault runs against RedisFleetStore and
// against RedisClusterStore on the same server (cluster = false, one group: the same
// keys), whose quiet syncs read the counter and incarnation instead of running the
// script, and must notice each fault all the same; and those that a Redis Cluster
// node can undergo without a restart (paused, flushed, an instance restarting, far
// clocks, corrupt values) run against RedisClusterStore on a real six-node cluster
// (redis_cluster.h), on the master of the prefix's slot. Breakers run on a ManualClock and
// each instance's wall clock is the test's variable; Redis keeps its own time, which is real.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/cluster_store.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"
#include "redis/redis_cluster.h"
#include "redis/redis_server.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Plain = BasicCircuitBreaker<ManualClock>;
using Windowed = BasicCircuitBreaker<ManualClock, CountWindow>;
using bulwark::testing::RedisCluster;
using bulwark::testing::RedisServer;

// Which store, against what.
enum class Target { fleet_store, cluster_store, real_cluster };

// Once Redis is healthy, each instance shares again within this many syncs: the first
// reconnects and sees a new incarnation (or the loss), the second publishes again what
// the store lost, the third reads what the others published.
constexpr int kRoundsToShare = 3;
constexpr auto kOpen = 600s;  // every open period: none ends while a test runs

// The only place these tests build breaker configurations.
Plain::Config plain_config(std::string name) {
  return Plain::Config{.name = std::move(name), .consecutive_failures = 3, .open_duration = kOpen};
}
Windowed::Config windowed_config() {
  return Windowed::Config{.name = "search",
                          .window = {.size = 100},
                          .minimum_calls = 20,
                          .failure_rate = 0.5,
                          .open_duration = kOpen};
}

// The store of one instance, with a tap: which threads called exchange(), and how often.
class Tap final : public FleetStore {
 public:
  Tap(RedisConfig config, Target target)
      : redis_(target == Target::fleet_store
                   ? std::unique_ptr<FleetStore>(std::make_unique<RedisFleetStore>(config))
                   : std::make_unique<RedisClusterStore>(ClusterConfig{
                         .redis = config, .cluster = target == Target::real_cluster})) {}
  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override {
    {
      std::lock_guard lock(mu_);
      threads_.insert(std::this_thread::get_id());
      ++exchanges_;
    }
    return redis_->exchange(request);
  }
  std::chrono::milliseconds timeout() const noexcept override { return redis_->timeout(); }
  std::uint64_t exchanges() const {
    std::lock_guard lock(mu_);
    return exchanges_;
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  std::unique_ptr<FleetStore> redis_;
  mutable std::mutex mu_;
  std::set<std::thread::id> threads_;
  std::uint64_t exchanges_ = 0;
};

class RedisFaultTest : public ::testing::TestWithParam<Target> {
 public:  // the fault table's steps reach the fixture from lambdas
  // One instance of the service.
  struct Node {
    Node(RedisFaultTest& t, std::string id, std::int64_t skew_ms)
        : tap(t.redis_config(), t.GetParam()),
          inventory(plain_config("inventory"), t.clock),
          payments(plain_config("payments"), t.clock),
          search(windowed_config(), t.clock),
          fleet(FleetConfig{.instance = std::move(id),
                            .quorum = t.quorum,
                            .sync_interval = 200ms,
                            .lease_duration = 2s,
                            .count_bucket = 1s,
                            .count_buckets = 10,
                            .wall_ms = [&t, skew_ms] { return t.wall + skew_ms; }},
                tap) {
      fleet.attach(inventory);
      fleet.attach(payments);
      fleet.attach(search, {.fleet_window = true});
    }
    State state(const std::string& key) const {
      if (key == "inventory") return inventory.state();
      if (key == "payments") return payments.state();
      return search.state();
    }
    void trip(const std::string& key) {
      for (int i = 0; i < 3; ++i) {
        if (key == "inventory") {
          if (auto p = inventory.try_acquire()) p->record_failure();
        } else if (key == "payments") {
          if (auto p = payments.try_acquire()) p->record_failure();
        }
      }
    }
    Tap tap;
    Plain inventory, payments;
    Windowed search;
    Fleet fleet;
  };

  static void SetUpTestSuite() {
    if (!bulwark::testing::redis_server_missing().empty()) return;
    char dir[] = "/tmp/bulwark-redis-fault-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    server_ = std::make_unique<RedisServer>(std::vector<std::string>{}, dir_);
    if (!server_->start()) server_.reset();
    if (std::system("command -v redis-cli >/dev/null 2>&1") == 0) {
      cluster_ = std::make_unique<RedisCluster>();
      cluster_error_ = cluster_->start();
    }
  }
  static void TearDownTestSuite() {
    if (server_) {
      server_->stop();
      std::remove(server_->snapshot().c_str());
    }
    server_.reset();
    cluster_.reset();
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }

  void SetUp() override {
    if (const auto why = bulwark::testing::redis_server_missing(); !why.empty()) {
      if (bulwark::testing::servers_required())
        FAIL() << why << ", and BULWARK_REQUIRE_SERVERS is set";
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(server_) << "redis-server did not start";
    if (!server_->running()) {
      ASSERT_TRUE(server_->start());
    }
    if (GetParam() == Target::real_cluster) {
      if (!cluster_) {
        if (bulwark::testing::servers_required()) FAIL() << "redis-cli is not installed";
        GTEST_SKIP() << "redis-cli is not installed";
      }
      ASSERT_EQ(cluster_error_, "");
      ASSERT_TRUE(cluster_->wait_ok());
    }
    // Each test its own prefix, so that nothing one left behind reaches another.
    static int n = 0;
    prefix = "{fault" + std::to_string(++n) + "}:fleet:";
  }
  void TearDown() override {
    nodes.clear();
    if (GetParam() == Target::real_cluster) {
      if (RedisServer* t = cluster_ ? target() : nullptr) t->command({"FLUSHALL"});
    } else if (server_ && server_->running()) {
      server_->command({"CONFIG", "SET", "maxmemory", "0"});
      server_->command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
      server_->command({"FLUSHALL"});
    }
  }

  // The server the fleet's keys live on: the one server, or the cluster's master of the
  // prefix's slot.
  RedisServer* target() const {
    if (GetParam() != Target::real_cluster) return server_.get();
    return cluster_->master_of_slot(key_slot(prefix));
  }
  // A fault this target cannot undergo: the test is skipped, saying why.
  bool single_server_only() const { return GetParam() == Target::real_cluster; }
  RedisConfig redis_config() const {
    return RedisConfig{
        .port = GetParam() == Target::real_cluster ? cluster_->seed_port() : server_->port(),
        .prefix = prefix,
        .timeout = 100ms,
        .reconnect_min = 1ms,
        .reconnect_max = 1ms};
  }
  std::string command(std::vector<std::string> args) const { return target()->command(args); }
  std::string key_of(const std::string& name) const { return prefix + name; }

  // The fleet: instances a, b, c (wall clocks skewed by `skews`, ms).
  void start_fleet(std::vector<std::int64_t> skews = {0, 0, 0}) {
    const char* ids[] = {"a", "b", "c", "d", "e"};
    for (std::size_t i = 0; i < skews.size(); ++i)
      nodes.push_back(std::make_unique<Node>(*this, ids[i], skews[i]));
  }
  // `key` opens on `node` and the fleet holds it open from then on (the model).
  void open_on(Node& node, const std::string& key) {
    node.trip(key);
    ASSERT_EQ(node.state(key), State::open);
    model_open.insert(key);
  }

  // One sync of each instance, in order; a sync the store refuses within its reconnect
  // backoff (it does not even try) is made again, so that each counted sync reached
  // Redis. True if every one succeeded. Then the virtual clocks move five seconds, so that
  // the held opens are checked at every round.
  bool round() {
    bool ok = true;
    for (auto& n : nodes) {
      const auto deadline = std::chrono::steady_clock::now() + 30s;
      for (;;) {
        auto s = n->fleet.sync();
        if (s) break;
        last_errors.push_back(s.error());
        const bool backoff =
            s.error().message.find("not connected; next attempt") != std::string::npos;
        if (!backoff || std::chrono::steady_clock::now() > deadline) {
          ok = false;
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
    clock.advance(5s);
    wall += 5'000;
    return ok;
  }

  // The model's verdict: every key held open is open on every instance, and the store
  // holds a valid open record for it; every key closed for the fleet is closed on every
  // instance.
  std::string disagreement() const {
    for (const std::string& key : model_closed) {
      for (const auto& n : nodes) {
        if (n->state(key) != State::closed)
          return n->fleet.config().instance + " has '" + key + "' " +
                 std::string(to_string(n->state(key))) + ", closed for the fleet";
      }
    }
    for (const std::string& key : model_open) {
      for (const auto& n : nodes) {
        if (n->state(key) != State::open)
          return n->fleet.config().instance + " has '" + key + "' " +
                 std::string(to_string(n->state(key)));
      }
      const auto stored = decode_record(command({"GET", key_of("k:" + key)}));
      if (!stored || stored->state != SharedState::open)
        return "the store holds no open record for '" + key + "'";
    }
    return "";
  }

  // Redis is healthy again: within kRoundsToShare rounds every instance syncs and the
  // model holds; then a newcomer adopts every open key on its first sync, and a new
  // opening reaches everyone after one sync each. Returns the rounds it took.
  void expect_sharing_again(const char* after) {
    SCOPED_TRACE(after);
    int rounds = 0;
    std::string why = "not one round";
    while (rounds < kRoundsToShare) {
      ++rounds;
      const bool ok = round();
      why = ok ? disagreement() : "a sync failed: " + last_errors.back().message;
      if (why.empty()) break;
    }
    ASSERT_TRUE(why.empty()) << "not sharing after " << rounds << " syncs each: " << why;
    {
      Node late(*this, "late", 0);
      for (int i = 0; i < 100 && !late.fleet.sync(); ++i) std::this_thread::sleep_for(1ms);
      for (const std::string& key : model_open)
        EXPECT_EQ(late.state(key), State::open) << "a newcomer did not adopt '" << key << "'";
    }
    // A new decision crosses: "payments" if it is not open yet.
    if (model_open.count("payments") == 0) {
      open_on(*nodes.front(), "payments");
      ASSERT_TRUE(round());
      EXPECT_EQ(disagreement(), "") << "a new opening did not reach every instance";
    }
    // The request path never did store I/O: every exchange ran on this thread.
    for (const auto& n : nodes) {
      const auto threads = n->tap.threads();
      EXPECT_TRUE(threads.size() == 1 && *threads.begin() == std::this_thread::get_id())
          << n->fleet.config().instance << ": an exchange ran on another thread";
    }
  }

  // Calls on every breaker, on a thread of their own, during a fault: they complete,
  // and no store exchange happens meanwhile (nothing else syncs now).
  void traffic_during_fault() {
    std::vector<std::uint64_t> before;
    for (const auto& n : nodes) before.push_back(n->tap.exchanges());
    std::thread requests([&] {
      for (auto& n : nodes) {
        for (int i = 0; i < 10; ++i) {
          if (auto p = n->inventory.try_acquire()) p->record_success();
          if (auto p = n->payments.try_acquire()) p->record_success();
          if (auto p = n->search.try_acquire()) p->record_success();
        }
      }
    });
    requests.join();
    for (std::size_t i = 0; i < nodes.size(); ++i)
      EXPECT_EQ(nodes[i]->tap.exchanges(), before[i]) << "a call did store I/O";
  }

  std::uint64_t sum(std::uint64_t FleetReading::*counter) const {
    std::uint64_t total = 0;
    for (const auto& n : nodes) total += n->fleet.reading().*counter;
    return total;
  }

  static inline std::unique_ptr<RedisServer> server_;
  static inline std::unique_ptr<RedisCluster> cluster_;
  static inline std::string cluster_error_;
  static inline std::string dir_;
  ManualClock clock;
  // Near the real time (Redis's), so that Redis's own expiries behave.
  std::int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::uint32_t quorum = 1;
  std::string prefix;
  std::vector<std::unique_ptr<Node>> nodes;
  std::set<std::string> model_open, model_closed;
  std::vector<StoreError> last_errors;
};

// A fleet with "inventory" open everywhere.
#define START_WITH_AN_OPEN_KEY()   \
  start_fleet();                   \
  ASSERT_TRUE(round());            \
  open_on(*nodes[0], "inventory"); \
  ASSERT_TRUE(round());            \
  ASSERT_EQ(disagreement(), "") << "at start"

TEST_P(RedisFaultTest, PausedAndResumed) {
  START_WITH_AN_OPEN_KEY();
  RedisServer* paused = target();
  ASSERT_NE(paused, nullptr);
  if (cluster_ && GetParam() == Target::real_cluster) {
    cluster_->pause(paused);
  } else {
    paused->pause();
  }
  for (auto& n : nodes) {
    auto s = n->fleet.sync();  // bounded by the store's deadline, never a hang
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind, StoreError::Kind::timeout) << s.error().message;
  }
  traffic_during_fault();
  if (cluster_ && GetParam() == Target::real_cluster) {
    cluster_->resume(paused);
    ASSERT_TRUE(cluster_->wait_ok());
  } else {
    paused->resume();
  }
  expect_sharing_again("after SIGCONT");
}

TEST_P(RedisFaultTest, KilledAndRestartedEmpty) {
  if (single_server_only()) GTEST_SKIP() << "a cluster node is not restarted or snapshotted here";
  START_WITH_AN_OPEN_KEY();
  server_->kill();
  std::remove(server_->snapshot().c_str());
  for (auto& n : nodes) {
    auto s = n->fleet.sync();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind, StoreError::Kind::unavailable) << s.error().message;
  }
  traffic_during_fault();
  ASSERT_TRUE(server_->start());
  expect_sharing_again("after a restart with nothing");
}

// The snapshot has "inventory" open at an older sequence; "payments" opened after it.
// Restarted from it, Redis holds less than the instances have read: they read it again
// from the start (or they would miss the decisions numbered as those they read past:
// here the fleet-wide close of "inventory"), and those holding "payments" open publish
// it again.
TEST_P(RedisFaultTest, RestartedFromAnOlderSnapshot) {
  if (single_server_only()) GTEST_SKIP() << "a cluster node is not restarted or snapshotted here";
  START_WITH_AN_OPEN_KEY();
  ASSERT_EQ(command({"SAVE"}), "OK");
  open_on(*nodes[1], "payments");
  ASSERT_TRUE(round());
  ASSERT_TRUE(round());
  ASSERT_EQ(disagreement(), "");
  server_->kill();
  traffic_during_fault();
  ASSERT_TRUE(server_->start());
  EXPECT_EQ(command({"EXISTS", key_of("k:payments")}), "0") << "not the older snapshot";
  // The first decision after the restart takes a sequence the others have read past.
  ASSERT_TRUE(nodes[0]->fleet.reset("inventory"));
  model_open.erase("inventory");
  model_closed.insert("inventory");
  expect_sharing_again("after a restart from an older snapshot");
}

TEST_P(RedisFaultTest, Flushed) {
  START_WITH_AN_OPEN_KEY();
  command({"FLUSHALL"});
  traffic_during_fault();
  expect_sharing_again("after FLUSHALL");
}

// Under maxmemory with allkeys-lru, Redis evicts the open key's record while the
// store's counters survive (the record made the least recently used key, the fillers
// next, so that LRU takes the record before any of the fleet's busy keys): the
// instances holding the key open publish it again.
TEST_P(RedisFaultTest, AnOpenRecordEvictedUnderMaxmemory) {
  if (single_server_only()) GTEST_SKIP() << "a cluster node is not restarted or snapshotted here";
  START_WITH_AN_OPEN_KEY();
  const std::string record = key_of("k:inventory");
  auto dump = [&](const std::string& key) { return command({"DUMP", key}); };
  command({"RESTORE", record, command({"PTTL", record}), dump(record), "REPLACE", "IDLETIME",
           "100000"});
  command({"SET", "filler", std::string(10'000, 'x')});
  const std::string filler = dump("filler");
  const std::string used = [&] {
    const std::string info = command({"INFO", "memory"});
    const auto at = info.find("used_memory:") + 12;
    return info.substr(at, info.find('\r', at) - at);
  }();
  command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
  command({"CONFIG", "SET", "maxmemory", std::to_string(std::stoll(used) + 1'000'000)});
  int written = 0;
  while (command({"EXISTS", record}) == "1" && written < 20'000) {
    std::string key = "filler:";
    key += std::to_string(written++);
    command({"RESTORE", key, "0", filler, "IDLETIME", "1000"});
  }
  ASSERT_EQ(command({"EXISTS", record}), "0") << "nothing evicted it";
  for (const char* kept : {"seq", "id", "run", "changes"})
    ASSERT_EQ(command({"EXISTS", key_of(kept)}), "1") << kept << " was evicted too";
  traffic_during_fault();
  command({"CONFIG", "SET", "maxmemory", "0"});
  expect_sharing_again("after the open key's record was evicted");
}

// Evicting whatever LRU picks, the fleet's own keys included.
TEST_P(RedisFaultTest, EvictedUnderMaxmemory) {
  if (single_server_only()) GTEST_SKIP() << "a cluster node is not restarted or snapshotted here";
  START_WITH_AN_OPEN_KEY();
  const std::string used = [&] {
    const std::string info = command({"INFO", "memory"});
    const auto at = info.find("used_memory:") + 12;
    return info.substr(at, info.find('\r', at) - at);
  }();
  command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
  command({"CONFIG", "SET", "maxmemory", std::to_string(std::stoll(used) + 1'000'000)});
  const std::string filler(10'000, 'x');
  int evicted_fleet_keys = 0;
  for (int written = 0; written < 20'000 && evicted_fleet_keys < 3; ++written) {
    std::string key = "filler:";
    key += std::to_string(written);
    command({"SET", key, filler});
    evicted_fleet_keys = 0;
    for (const char* k : {"seq", "id", "run", "changes", "k:inventory"})
      evicted_fleet_keys += command({"EXISTS", key_of(k)}) == "0" ? 1 : 0;
  }
  ASSERT_GE(evicted_fleet_keys, 3);
  traffic_during_fault();
  command({"CONFIG", "SET", "maxmemory", "0"});
  expect_sharing_again("after eviction");
}

// An instance that opened a key crashes and comes back under the same id.
TEST_P(RedisFaultTest, AnInstanceRestartsUnderItsOwnId) {
  START_WITH_AN_OPEN_KEY();
  nodes[0] = std::make_unique<Node>(*this, "a", 0);  // its breakers start CLOSED
  EXPECT_EQ(nodes[0]->inventory.state(), State::closed);
  expect_sharing_again("after a restarted under its own id");
}

// Instance clocks an hour behind, a day ahead, and absurdly far (1970, year 33658):
// Redis keeps every time in its own clock and only the remaining time travels, so each
// adopts what is left by Redis's clock.
TEST_P(RedisFaultTest, InstanceClocksFarFromRedis) {
  const std::int64_t now = wall;
  start_fleet({0, -3'600'000, 86'400'000, 1 - now, 1'000'000'000'000'000 - now});
  ASSERT_TRUE(round());
  open_on(*nodes[0], "inventory");
  ASSERT_TRUE(round());
  EXPECT_EQ(disagreement(), "");
  const auto stored = decode_record(command({"GET", key_of("k:inventory")}));
  ASSERT_TRUE(stored);
  for (const auto& n : nodes) {
    const FleetReading r = n->fleet.reading();
    auto rej = n->inventory.try_acquire();
    ASSERT_FALSE(rej);
    // What was left of the open at Redis's time of this instance's last reply (the
    // test's clock stood still through it, so that time is its wall clock plus the
    // measured offset); five seconds of virtual time passed since.
    const std::int64_t store_ms = n->fleet.config().wall_ms() - 5'000 + r.store_clock_offset_ms;
    if (n.get() != nodes[0].get()) {
      EXPECT_EQ(rej.error().retry_after,
                std::chrono::milliseconds(stored->until_ms - store_ms) - 5s)
          << r.instance;
    }
    EXPECT_EQ(r.refused_opens, 0u);
  }
  expect_sharing_again("with skewed clocks");
}

// Corrupt and absurd values in every key the store writes. Each case plants one, and the
// fleet must share again within kRoundsToShare syncs, the value counted where it was
// refused or repaired.
enum class Counted { repair, refused, malformed, none };
struct Plant {
  const char* what;
  std::function<void(RedisFaultTest&)> plant;
  Counted counted;
};

TEST_P(RedisFaultTest, CorruptAndAbsurdValuesInEveryKeyTheStoreWrites) {
  using Do = std::function<void(RedisFaultTest&)>;
  auto set = [](const char* key, std::string value) -> Do {
    return [key, value](RedisFaultTest& t) { t.command({"SET", t.key_of(key), value}); };
  };
  auto hash = [](const char* key) -> Do {
    return [key](RedisFaultTest& t) {
      t.command({"DEL", t.key_of(key)});
      t.command({"HSET", t.key_of(key), "f", "v"});
    };
  };
  auto list = [](const char* key) -> Do {
    return [key](RedisFaultTest& t) {
      t.command({"DEL", t.key_of(key)});
      t.command({"RPUSH", t.key_of(key), "v"});
    };
  };
  auto zadd = [](const char* key, std::string score) -> Do {
    return [key, score](RedisFaultTest& t) { t.command({"ZADD", t.key_of(key), score, "ghost"}); };
  };
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // "payments" decided as a change the instances will read: `value` stored as its
  // record, or (empty) whatever `plant` leaves there.
  auto decided = [](std::function<std::string()> value, Do plant = {}) -> Do {
    return [value, plant](RedisFaultTest& t) {
      const std::string seq = t.command({"INCR", t.key_of("seq")});
      if (plant) {
        plant(t);
      } else {
        t.command({"SET", t.key_of("k:payments"), value()});
      }
      t.command({"ZADD", t.key_of("changes"), seq, "payments"});
    };
  };
  auto fixed = [](const char* v) { return [v] { return std::string(v); }; };
  // "payments" open by another instance until 300 ms from Redis's now: the instances
  // adopt it and at once ask for its half-open lease, which `lease` has corrupted.
  auto lease_due = [decided, now_ms](Do lease) -> Do {
    return [decided, now_ms, lease](RedisFaultTest& t) {
      lease(t);
      decided([now_ms] {
        std::string r = "v1|open|consecutive_failures|";
        r += std::to_string(now_ms() + 300);
        r += "|x|1";
        return r;
      })(t);
    };
  };
  auto bucket = [now_ms](RedisFaultTest& t) {
    std::string k = "w:search:";
    k += std::to_string(now_ms() / 1000);
    return t.key_of(k);
  };
  auto in_ms = [now_ms](std::int64_t d) { return std::to_string(now_ms() + d); };
  const std::vector<Plant> cases = {
      // The sequence counter.
      {"seq: not a number", set("seq", "lots"), Counted::repair},
      {"seq: past 2^64", set("seq", "99999999999999999999"), Counted::repair},
      {"seq: negative", set("seq", "-5"), Counted::repair},
      {"seq: empty", set("seq", ""), Counted::repair},
      {"seq: 2^60, well-formed but past 2^50", set("seq", "1152921504606846976"), Counted::repair},
      {"seq: a hash", hash("seq"), Counted::repair},
      // The incarnation and the Redis process it belongs to.
      {"id: a hash", hash("id"), Counted::repair},
      {"id: a list", list("id"), Counted::repair},
      {"id: 1,000 bytes", set("id", std::string(1000, 'i')), Counted::repair},
      {"id: another incarnation", set("id", "someone@1@2.3"), Counted::none},
      {"run: a hash", hash("run"), Counted::repair},
      {"run: another process", set("run", "0123456789abcdef"), Counted::none},
      // The changes.
      {"changes: a string", set("changes", "x"), Counted::repair},
      {"changes: a hash", hash("changes"), Counted::repair},
      {"changes: an entry at +inf", zadd("changes", "+inf"), Counted::repair},
      {"changes: an entry at 2^60", zadd("changes", "1152921504606846976"), Counted::repair},
      {"changes: an entry at -5", zadd("changes", "-5"), Counted::repair},
      // A decision record.
      {"k: a hash", decided({}, hash("k:payments")), Counted::repair},
      {"k: garbage", decided(fixed("garbage")), Counted::repair},
      {"k: an end of 20 digits", decided(fixed("v1|open|manual|99999999999999999999|x|1")),
       Counted::repair},
      {"k: closed with an end", decided(fixed("v1|closed|manual|5|x|1")), Counted::repair},
      {"k: an unknown reason", decided(fixed("v1|open|bored|5|x|1")), Counted::repair},
      {"k: an open centuries away", decided([now_ms] {
         std::string r = "v1|open|consecutive_failures|";
         r += std::to_string(now_ms() + 3'155'760'000'000);
         r += "|x|1";
         return r;
       }),
       Counted::refused},
      {"k: an open until 10^17",
       decided(fixed("v1|open|consecutive_failures|100000000000000000|x|1")), Counted::refused},
      // Votes (read when someone votes: the fleet's next opening of "payments").
      {"v: a string", set("v:payments", "x"), Counted::repair},
      {"v: a vote from the future",
       [in_ms](RedisFaultTest& t) {
         t.command({"ZADD", t.key_of("v:payments"), in_ms(1'000'000'000), "ghost"});
       },
       Counted::repair},
      // The half-open lease (read when a lease is due).
      {"l: a hash", lease_due(hash("l:payments")), Counted::repair},
      {"l: a lease that never expires", lease_due(set("l:payments", "ghost")), Counted::repair},
      {"l: a holder that is not an id", lease_due([](RedisFaultTest& t) {
         t.command({"SET", t.key_of("l:payments"), "not an id!", "PX", "60000"});
       }),
       Counted::repair},
      {"l: a lease for ten years", lease_due([](RedisFaultTest& t) {
         t.command({"SET", t.key_of("l:payments"), "ghost", "PX", "315360000000"});
       }),
       Counted::repair},
      // Count buckets.
      {"w: a string",
       [bucket](RedisFaultTest& t) {
         t.command({"SET", bucket(t), "x"});
       },
       Counted::repair},
      {"w: a count that is not a number",
       [bucket](RedisFaultTest& t) {
         t.command({"HSET", bucket(t), "s", "lots"});
       },
       Counted::repair},
      {"w: a count past 2^64",
       [bucket](RedisFaultTest& t) {
         t.command({"HSET", bucket(t), "f", "99999999999999999999"});
       },
       Counted::repair},
      // Fleet window levels.
      {"fw: a string", set("fw:search", "x"), Counted::malformed},
      {"fw: a level from the future",
       [in_ms](RedisFaultTest& t) {
         t.command({"HSET", t.key_of("fw:search"), "ghost", "999|999|0|" + in_ms(1'000'000'000)});
       },
       Counted::malformed},
      {"fw: more failures than calls",
       [in_ms](RedisFaultTest& t) {
         t.command({"HSET", t.key_of("fw:search"), "ghost", "1|999|0|" + in_ms(0)});
       },
       Counted::malformed},
      {"fw: a sum that is not one",
       [](RedisFaultTest& t) {
         t.command({"HSET", t.key_of("fw:search"), "=", "lots"});
       },
       Counted::malformed},
      {"ft: a string", set("ft:search", "x"), Counted::none},
  };
  for (const Plant& c : cases) {
    SCOPED_TRACE(c.what);
    nodes.clear();
    model_open.clear();
    command({"FLUSHALL"});
    START_WITH_AN_OPEN_KEY();
    // Calls for the counts and the fleet window, so that their keys are written again.
    auto calls = [&] {
      for (auto& n : nodes) {
        EXPECT_FALSE(n->inventory.try_acquire());  // open
        for (int i = 0; i < 3; ++i) n->search.try_acquire()->record_success();
      }
    };
    calls();
    ASSERT_TRUE(round());
    const std::uint64_t repairs = sum(&FleetReading::store_repairs);
    const std::uint64_t refused = sum(&FleetReading::refused_opens);
    const std::uint64_t malformed = sum(&FleetReading::malformed_values);
    c.plant(*this);
    calls();
    traffic_during_fault();
    // The round that meets the planted value (a lease case adopts the short open here,
    // and asks for its lease in the next); then the fleet must share again as after any
    // fault.
    round();
    expect_sharing_again(c.what);
    switch (c.counted) {
      case Counted::repair:
        EXPECT_GT(sum(&FleetReading::store_repairs), repairs);
        break;
      case Counted::refused:
        EXPECT_GT(sum(&FleetReading::refused_opens), refused);
        break;
      case Counted::malformed:
        EXPECT_GT(sum(&FleetReading::malformed_values), malformed);
        break;
      case Counted::none:
        break;
    }
    if (HasFailure()) {
      for (const auto& n : nodes) {
        const FleetReading r = n->fleet.reading();
        for (const auto& k : r.keys)
          ADD_FAILURE() << r.instance << " " << k.key << ": " << to_string(k.local_state)
                        << " shared_open " << k.shared_open << " until " << k.until_ms << " by "
                        << k.decided_by << " lease " << k.lease_holder;
        ADD_FAILURE() << r.instance << ": last repair: " << r.last_repair
                      << "; last refused: " << r.last_refused
                      << "; last malformed: " << r.last_malformed
                      << "; last error: " << r.last_error;
      }
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, RedisFaultTest,
                         ::testing::Values(Target::fleet_store, Target::cluster_store,
                                           Target::real_cluster),
                         [](const ::testing::TestParamInfo<Target>& param) {
                           switch (param.param) {
                             case Target::fleet_store:
                               return "RedisFleetStore";
                             case Target::cluster_store:
                               return "RedisClusterStore";
                             case Target::real_cluster:
                               return "RedisClusterStoreOnACluster";
                           }
                           return "?";
                         });

}  // namespace
}  // namespace bulwark::redis
