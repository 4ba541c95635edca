// RedisClusterStore: the slot arithmetic, replies that are not what Redis sends (a fake
// server), sharded groups on one redis-server, and a real six-node Redis Cluster that
// the suite starts itself (redis_cluster.h): groups spread over the masters, an open
// reaching every instance, a slot migrated under the fleet (ASK, then MOVED), a master
// paused (SIGSTOP) and one killed (SIGKILL) with its replica taking over. Breakers run on
// a ManualClock and the fleets' wall clock is a variable; what the cluster does on its
// own (a failover settling) is polled, bounded, never timed.

#include "redis/redis_cluster.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/redis/cluster_store.h"
#include "bulwark/redis/fleet.h"
#include "redis/fake_server.h"
#include "redis/redis_server.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using bulwark::testing::FakeServer;
using bulwark::testing::RedisCluster;
using bulwark::testing::RedisServer;

constexpr int kKeys = 12;

std::string key_name(int k) { return "svc-" + std::to_string(k); }

// One instance: its own store, kKeys breakers, one Fleet over them.
struct Instance {
  Instance(std::string id, ClusterConfig cc, ManualClock& clock, const std::int64_t& wall)
      : store(std::move(cc)),
        fleet(FleetConfig{.instance = std::move(id), .wall_ms = [&wall] { return wall; }}, store) {
    for (int k = 0; k < kKeys; ++k) {
      breakers.push_back(std::make_unique<Breaker>(
          Breaker::Config{.name = key_name(k), .consecutive_failures = 3, .open_duration = 60s},
          clock));
      fleet.attach(*breakers.back());
    }
  }
  void fail(int k) {
    for (int i = 0; i < 3; ++i) {
      if (auto p = breakers[static_cast<std::size_t>(k)]->try_acquire()) p->record_failure();
    }
  }
  bool open(int k) const { return breakers[static_cast<std::size_t>(k)]->state() == State::open; }
  // A sync that answered for every group.
  bool sync_whole() {
    const auto errors = fleet.reading().sync_errors;
    auto s = fleet.sync();
    return s && fleet.reading().sync_errors == errors;
  }

  RedisClusterStore store;
  std::vector<std::unique_ptr<Breaker>> breakers;
  Fleet fleet;  // last: destroyed first
};

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(ClusterSlots, Crc16AndKeySlotAsRedisComputesThem) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);
  EXPECT_EQ(crc16(""), 0);
  EXPECT_EQ(key_slot("123456789"), 0x31C3 & 16383);
  // Only the hash tag is hashed; an empty tag hashes the whole key.
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16("foo{}{bar}") & 16383);
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo"), 12182);  // CLUSTER KEYSLOT foo
}

TEST(ClusterSlots, GroupPrefixesAndOneGroupKeepsThePrefix) {
  ClusterConfig one{.redis = RedisConfig{.prefix = "{bulwark}:fleet:"}};
  RedisClusterStore a(one);
  EXPECT_EQ(a.group_prefix(0), "{bulwark}:fleet:");
  EXPECT_EQ(a.group_of("anything"), 0u);
  ClusterConfig four{.redis = RedisConfig{.prefix = "{bulwark}:fleet:"}, .groups = 4};
  RedisClusterStore b(four);
  EXPECT_EQ(b.group_prefix(0), "{bulwark:00}:fleet:");
  EXPECT_EQ(b.group_prefix(3), "{bulwark:03}:fleet:");
  std::set<std::uint32_t> used;
  for (int k = 0; k < 40; ++k) used.insert(b.group_of(key_name(k)));
  EXPECT_EQ(used.size(), 4u);
  EXPECT_THROW(RedisClusterStore(ClusterConfig{.groups = 0}), InvalidConfig);
  EXPECT_THROW(RedisClusterStore(ClusterConfig{.seeds = {"nohost"}}), InvalidConfig);
}

// A server that answers the first command ending in `after` with `reply`, then waits.
FakeServer::Handler answer(std::string after, std::string reply) {
  return [after, reply](int fd, const std::atomic<bool>& running) {
    if (FakeServer::read_until(fd, after, running)) FakeServer::send_all(fd, reply);
    FakeServer::until_closed(fd, running);
  };
}

Expected<SyncReply, StoreError> exchange_with(int port, bool cluster) {
  RedisClusterStore store(ClusterConfig{
      .redis = RedisConfig{.port = port, .timeout = 2s, .reconnect_min = 1ms, .reconnect_max = 2ms},
      .cluster = cluster});
  SyncRequest req;
  req.instance = "a";
  req.now_ms = now_ms();
  return store.exchange(req);
}

TEST(ClusterSlots, ASlotMapThatIsNotOneIsAProtocolError) {
  const std::pair<const char*, const char*> bad_maps[] = {
      {":7\r\n", "is not an array"},
      {"*1\r\n:7\r\n", "is not [start, end, master"},
      {"*1\r\n*3\r\n:0\r\n:20000\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n", "no slot range"},
      {"*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n", "no slot range"},
      {"*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n:1\r\n:1\r\n", "names no master"},
      {"*1\r\n*3\r\n:0\r\n:3\r\n*1\r\n$1\r\nx\r\n", "names no master"},
  };
  for (const auto& [map, what] : bad_maps) {
    // SCRIPT LOAD's reply (a hash), then the map.
    FakeServer fake(
        answer("SLOTS\r\n", std::string("$40\r\n") + std::string(40, 'a') + "\r\n" + map));
    auto r = exchange_with(fake.port(), true);
    ASSERT_FALSE(r) << map;
    EXPECT_EQ(r.error().kind, StoreError::Kind::protocol) << r.error().message;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  }
}

TEST(ClusterSlots, AScriptReplyOfAnotherTypeIsAProtocolError) {
  FakeServer fake(answer("EVAL", std::string("$40\r\n") + std::string(40, 'a') + "\r\n:5\r\n"));
  auto r = exchange_with(fake.port(), false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, StoreError::Kind::protocol) << r.error().message;
}

// A cluster node (a fake) whose slot map gives it every slot, and that answers the
// script with `reply`.
Expected<SyncReply, StoreError> script_answered_with(const std::string& reply) {
  std::atomic<int> own{0};
  FakeServer fake([&](int fd, const std::atomic<bool>& running) {
    if (!FakeServer::read_until(fd, "SLOTS\r\n", running)) return;
    FakeServer::send_all(fd, "$40\r\n" + std::string(40, 'a') +
                                 "\r\n*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:" +
                                 std::to_string(own.load()) + "\r\n");
    if (FakeServer::read_until(fd, "EVAL", running)) FakeServer::send_all(fd, reply);
    FakeServer::until_closed(fd, running);
  });
  own = fake.port();
  return exchange_with(fake.port(), true);
}

TEST(ClusterSlots, RedirectsAndRepliesThatAreNotWhatRedisSendsAreErrors) {
  const int refused = bulwark::testing::free_port();
  struct Case {
    std::string reply;
    StoreError::Kind kind;
    const char* what;
  } cases[] = {
      {"-MOVED 99999 127.0.0.1:1\r\n", StoreError::Kind::rejected, "MOVED 99999"},
      {"-MOVED 5 nowhere\r\n", StoreError::Kind::rejected, "MOVED 5 nowhere"},
      {"-ASK 5 127.0.0.1:" + std::to_string(refused) + "\r\n", StoreError::Kind::unavailable,
       "connecting to 127.0.0.1:"},
      {"-CLUSTERDOWN The cluster is down\r\n", StoreError::Kind::unavailable, "CLUSTERDOWN"},
      {"*4\r\n$1\r\na\r\n$1\r\n1\r\n*0\r\n:1\r\n", StoreError::Kind::protocol, "non-string"},
      {":1\r\n", StoreError::Kind::protocol, "something else"},
  };
  for (const Case& c : cases) {
    auto r = script_answered_with(c.reply);
    ASSERT_FALSE(r) << c.reply;
    EXPECT_EQ(r.error().kind, c.kind) << c.reply << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(c.what), std::string::npos) << r.error().message;
  }
}

// A standalone fake redis-server that keeps, per group prefix, a counter and an
// incarnation, answers SCRIPT LOAD, EVALSHA (the script's reply for ops that write
// nothing), GET of <prefix>seq and <prefix>id, and TIME, and records every command: the
// exact sequence a store sends.
class ScriptedRedis {
 public:
  struct Group {
    std::uint64_t seq = 0;
    std::string id;  // "": the keys are gone (expired, flushed); the script makes new ones
  };
  ScriptedRedis()
      : server_([this](int fd, const std::atomic<bool>& running) { serve(fd, running); }) {}
  int port() const { return server_.port(); }
  // The commands since the last call: "EVALSHA <prefix>", "GET <key>", "TIME", "SCRIPT".
  std::vector<std::string> take() {
    std::lock_guard lock(mu_);
    return std::exchange(log_, {});
  }
  void set(const std::string& prefix, Group g) {
    std::lock_guard lock(mu_);
    groups_[prefix] = std::move(g);
  }
  // Until the next script call, every GET is answered MOVED to this same server (as a
  // node answers while its slot's ownership changes).
  void move_gets() {
    std::lock_guard lock(mu_);
    moved_ = true;
  }

 private:
  static std::string bulk(const std::string& v) {
    return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  std::string answer(const std::vector<std::string>& cmd) {
    std::lock_guard lock(mu_);
    const std::string& name = cmd[0];
    if (name == "SCRIPT") {
      log_.push_back("SCRIPT");
      return bulk(std::string(40, 'a'));
    }
    if (name == "CLUSTER") {  // CLUSTER SLOTS: every slot is this server's
      log_.push_back("CLUSTER");
      return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n" + bulk("127.0.0.1") + ":" +
             std::to_string(server_.port()) + "\r\n";
    }
    if (name == "TIME") {
      log_.push_back("TIME");
      return "*2\r\n" + bulk("1700000000") + bulk("123456");
    }
    if (name == "GET") {
      log_.push_back("GET " + cmd[1]);
      if (moved_) {
        return "-MOVED " + std::to_string(key_slot(cmd[1])) +
               " 127.0.0.1:" + std::to_string(server_.port()) + "\r\n";
      }
      for (auto& [prefix, g] : groups_) {
        if (g.id.empty()) continue;
        if (cmd[1] == prefix + "seq") return bulk(std::to_string(g.seq));
        if (cmd[1] == prefix + "id") return bulk(g.id);
      }
      return "$-1\r\n";
    }
    // EVALSHA sha 1 <prefix>seq ARGV...: ARGV[8] (the op count) is cmd[11].
    const std::string prefix = cmd[3].substr(0, cmd[3].size() - 3);
    log_.push_back(name + " " + prefix);
    moved_ = false;
    Group& g = groups_[prefix];
    if (g.id.empty()) g.id = prefix + "#" + std::to_string(++incarnations_);
    const int ops = std::stoi(cmd[11]);
    std::string out = bulk(g.id) + bulk("1700000000123") + bulk(std::to_string(g.seq)) + bulk("0") +
                      bulk("0") + bulk("0") + bulk(std::to_string(ops));
    for (int i = 0; i < ops; ++i) out += bulk("0");
    out += bulk("0");
    return "*" + std::to_string(8 + ops) + "\r\n" + out;
  }
  void serve(int fd, const std::atomic<bool>& running) {
    std::string buf;
    while (running.load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return;
      buf.append(chunk, static_cast<std::size_t>(n));
      // Whole RESP arrays of bulk strings, answered in order.
      for (;;) {
        std::vector<std::string> cmd;
        std::size_t at = 0;
        const auto head = buf.find("\r\n");
        if (buf.empty() || buf[0] != '*' || head == std::string::npos) break;
        const int count = std::stoi(buf.substr(1, head - 1));
        at = head + 2;
        bool whole = true;
        for (int i = 0; i < count && whole; ++i) {
          const auto end = buf.find("\r\n", at);
          if (end == std::string::npos) {
            whole = false;
            break;
          }
          const std::size_t len = std::stoul(buf.substr(at + 1, end - at - 1));
          if (end + 2 + len + 2 > buf.size()) {
            whole = false;
            break;
          }
          cmd.push_back(buf.substr(end + 2, len));
          at = end + 2 + len + 2;
        }
        if (!whole) break;
        buf.erase(0, at);
        if (!FakeServer::send_all(fd, answer(cmd))) return;
      }
    }
  }

  std::mutex mu_;
  std::vector<std::string> log_;
  std::map<std::string, Group> groups_;
  int incarnations_ = 0;
  bool moved_ = false;
  FakeServer server_;  // last: stopped first
};

// What one quiet or busy exchange sends, command by command: the script only for a group
// with ops, or whose counter moved, whose keys are gone, or whose heartbeat is due; the
// cheap read (GET seq, GET id, TIME) for every other group, in the same exchange.
TEST(ClusterQuiet, AGroupWithNothingToSayGetsTheReadAndNoScript) {
  ScriptedRedis redis;
  RedisClusterStore store(
      ClusterConfig{.redis = RedisConfig{.port = redis.port(), .prefix = "{q}:", .timeout = 2s},
                    .cluster = false,
                    .groups = 2,
                    .heartbeat = 10s});
  const std::string g0 = store.group_prefix(0), g1 = store.group_prefix(1);
  const std::vector<std::string> read0 = {"GET " + g0 + "seq", "GET " + g0 + "id", "TIME"};
  const std::vector<std::string> read1 = {"GET " + g1 + "seq", "GET " + g1 + "id", "TIME"};
  auto cat = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  SyncRequest req;
  req.instance = "a";
  req.now_ms = 1'000'000;
  auto sync = [&] {
    auto r = store.exchange(req);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (r) req.cursor = r->sequence;
    return r;
  };
  // First: the script everywhere (nothing known yet), no read.
  auto first = sync();
  ASSERT_TRUE(first);
  EXPECT_EQ(redis.take(), (std::vector<std::string>{"SCRIPT", "EVAL " + g0, "EVAL " + g1}));
  // Quiet: the reads only; the reply is the groups' incarnations, cursors and TIME.
  req.now_ms += 1000;
  auto quiet = sync();
  ASSERT_TRUE(quiet);
  EXPECT_EQ(redis.take(), cat(read0, read1));
  EXPECT_EQ(quiet->incarnation, first->incarnation);
  EXPECT_EQ(quiet->sequence, first->sequence);
  EXPECT_EQ(quiet->server_ms, 1'700'000'000'123);
  EXPECT_TRUE(quiet->changes.empty());
  // Another instance decided something in group 1: its script, in the same exchange.
  redis.set(g1, {.seq = 3, .id = g1 + "#2"});
  req.now_ms += 1000;
  auto moved = sync();
  ASSERT_TRUE(moved);
  EXPECT_EQ(redis.take(), cat(cat(read0, read1), {"EVALSHA " + g1}));
  EXPECT_EQ(moved->sequence, 3u);
  req.now_ms += 1000;
  (void)sync();
  EXPECT_EQ(redis.take(), cat(read0, read1));  // caught up: quiet again
  // Group 0's keys are gone (expired, flushed): its script runs, a new incarnation.
  redis.set(g0, {});
  req.now_ms += 1000;
  auto gone = sync();
  ASSERT_TRUE(gone);
  EXPECT_EQ(redis.take(), cat(cat(read0, read1), {"EVALSHA " + g0}));
  EXPECT_NE(gone->incarnation, moved->incarnation);
  // Another incarnation under the same counter: the script too.
  redis.set(g1, {.seq = 3, .id = g1 + "#other"});
  req.now_ms += 1000;
  (void)sync();
  EXPECT_EQ(redis.take(), cat(cat(read0, read1), {"EVALSHA " + g1}));
  // An op for group 1: its script at once, the read for group 0 only.
  FleetOp op;
  op.kind = FleetOp::Kind::close;
  op.reason = TransitionReason::probes_succeeded;
  for (int k = 0;; ++k) {
    op.key = key_name(k);
    if (store.group_of(op.key) == 1) break;
  }
  req.ops = {op};
  req.now_ms += 1000;
  (void)sync();
  EXPECT_EQ(redis.take(), cat(read0, {"EVALSHA " + g1}));
  req.ops.clear();
  // The heartbeat: 10 s after a group's last script, its script again, no read first.
  // Group 0's last script ran at +4 s, group 1's at +6 s (virtual time, the requests').
  req.now_ms += 7000;  // +13 s
  (void)sync();
  EXPECT_EQ(redis.take(), cat(read0, read1));
  req.now_ms += 1000;  // +14 s: group 0's is due
  (void)sync();
  EXPECT_EQ(redis.take(), cat({"EVALSHA " + g0}, read1));
  req.now_ms += 2000;  // +16 s: group 1's is due
  (void)sync();
  EXPECT_EQ(redis.take(), cat(read0, {"EVALSHA " + g1}));
  // A wall clock that steps back: the script, to be safe.
  req.now_ms -= 60'000;
  (void)sync();
  EXPECT_EQ(redis.take(), (std::vector<std::string>{"EVALSHA " + g0, "EVALSHA " + g1}));
  EXPECT_EQ(store.heartbeat(), 10s);
  EXPECT_THROW(RedisClusterStore(ClusterConfig{.heartbeat = 24h}), InvalidConfig);
  EXPECT_EQ(RedisClusterStore(ClusterConfig{}).heartbeat(), 5min);
}

// A read redirected (MOVED) becomes the group's script at the node named, in the same
// exchange; the next exchange reads the slot map again and is quiet.
TEST(ClusterQuiet, ARedirectedReadBecomesTheScriptAtTheNodeNamed) {
  ScriptedRedis redis;
  RedisClusterStore store(
      ClusterConfig{.redis = RedisConfig{.port = redis.port(), .prefix = "{r}:", .timeout = 2s},
                    .cluster = true,
                    .heartbeat = 10s});
  const std::string g = store.group_prefix(0);
  const std::vector<std::string> read = {"GET " + g + "seq", "GET " + g + "id", "TIME"};
  SyncRequest req;
  req.instance = "a";
  req.now_ms = 1'000'000;
  auto sync = [&] {
    auto r = store.exchange(req);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (r) req.cursor = r->sequence;
    req.now_ms += 1000;
    return r.has_value();
  };
  ASSERT_TRUE(sync());
  EXPECT_EQ(redis.take(), (std::vector<std::string>{"SCRIPT", "CLUSTER", "EVALSHA " + g}));
  ASSERT_TRUE(sync());
  EXPECT_EQ(redis.take(), read);
  redis.move_gets();
  ASSERT_TRUE(sync());
  auto moved = read;
  moved.push_back("EVALSHA " + g);
  EXPECT_EQ(redis.take(), moved);
  EXPECT_EQ(store.redirects(), 1u);
  ASSERT_TRUE(sync());
  auto after = read;
  after.insert(after.begin(), "CLUSTER");
  EXPECT_EQ(redis.take(), after);
}

// Standalone: groups on one server, the same protocol.
TEST(ClusterStandalone, GroupsOnOneServerShareOpens) {
  if (const auto why = bulwark::testing::redis_server_missing(); !why.empty()) {
    if (bulwark::testing::servers_required()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  RedisServer server;
  ASSERT_TRUE(server.start());
  ManualClock clock;
  std::int64_t wall = now_ms();
  const ClusterConfig cc{.redis = RedisConfig{.port = server.port(), .prefix = "{sa}:fleet:"},
                         .cluster = false,
                         .groups = 4};
  Instance a("a", cc, clock, wall), b("b", cc, clock, wall);
  ASSERT_TRUE(a.sync_whole());
  ASSERT_TRUE(b.sync_whole());
  for (int k = 0; k < kKeys; ++k) a.fail(k);
  ASSERT_TRUE(a.sync_whole());
  ASSERT_TRUE(b.sync_whole());
  for (int k = 0; k < kKeys; ++k) EXPECT_TRUE(b.open(k)) << key_name(k);
  for (std::uint32_t g = 0; g < 4; ++g)
    EXPECT_FALSE(server.scan(a.store.group_prefix(g) + "k:*").empty()) << g;
  // Nothing under the unsharded prefix: every key is in its group.
  EXPECT_TRUE(server.scan("{sa}:fleet:*").empty());
}

// A server restarted from a snapshot holding exactly the keys it had: the counter and
// incarnation read the same, but the Redis process is another (its run_id), which only
// the script notices. A reconnect sends the script, not the read: a new incarnation.
TEST(ClusterStandalone, ARestartFromAnIdenticalSnapshotRunsTheScriptAndMakesANewIncarnation) {
  if (const auto why = bulwark::testing::redis_server_missing(); !why.empty()) {
    if (bulwark::testing::servers_required()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  char dir[] = "/tmp/bulwark-redis-snap-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  RedisServer server({}, dir);
  ASSERT_TRUE(server.start());
  RedisClusterStore store(ClusterConfig{.redis = RedisConfig{.port = server.port(),
                                                             .prefix = "{snap}:fleet:",
                                                             .reconnect_min = 1ms,
                                                             .reconnect_max = 1ms},
                                        .cluster = false,
                                        .groups = 2});
  SyncRequest req;
  req.instance = "a";
  req.now_ms = now_ms();
  auto first = store.exchange(req);
  ASSERT_TRUE(first) << first.error().message;
  req.cursor = first->sequence;
  const auto scripts = store.script_calls();
  auto quiet = store.exchange(req);
  ASSERT_TRUE(quiet);
  EXPECT_EQ(store.script_calls(), scripts);  // quiet: reads only
  ASSERT_EQ(server.command({"SAVE"}), "OK");
  server.kill();
  ASSERT_TRUE(server.start());
  EXPECT_EQ(server.command({"EXISTS", store.group_prefix(0) + "seq"}), "1");
  // The first exchange after the restart may fail on the dead connection; a later one
  // (bounded) answers, through a new connection: the scripts, a new incarnation.
  Expected<SyncReply, StoreError> after = Unexpected(StoreError{});
  for (int i = 0; i < 50 && !(after = store.exchange(req)); ++i) {
    std::this_thread::sleep_for(5ms);  // the 1 ms reconnect backoff
  }
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_NE(after->incarnation, first->incarnation);
  server.stop();
  std::remove(server.snapshot().c_str());
  ::rmdir(dir);
}

TEST(ClusterStandalone, AuthOnTheConnection) {
  if (const auto why = bulwark::testing::redis_server_missing(); !why.empty()) {
    if (bulwark::testing::servers_required()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  RedisServer server({"--requirepass", "s3cret"});
  ASSERT_TRUE(server.start());
  auto store_with = [&](std::string password) {
    return std::make_unique<RedisClusterStore>(
        ClusterConfig{.redis = RedisConfig{.port = server.port(), .password = std::move(password)},
                      .cluster = false,
                      .groups = 2});
  };
  SyncRequest req;
  req.instance = "a";
  req.now_ms = now_ms();
  auto good = store_with("s3cret")->exchange(req);
  EXPECT_TRUE(good) << (good ? "" : good.error().message);
  auto bad_password = store_with("wrong")->exchange(req);
  ASSERT_FALSE(bad_password);
  EXPECT_EQ(bad_password.error().kind, StoreError::Kind::rejected);
  EXPECT_NE(bad_password.error().message.find("AUTH refused"), std::string::npos)
      << bad_password.error().message;
}

// The suite's cluster: started once, torn down (every process killed) at the end.
class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!bulwark::testing::redis_server_missing().empty()) return;
    if (std::system("command -v redis-cli >/dev/null 2>&1") != 0) return;
    cluster_ = std::make_unique<RedisCluster>();
    start_error_ = cluster_->start();
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    if (!cluster_) {
      const std::string why = "redis-server or redis-cli is not installed";
      if (bulwark::testing::servers_required()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    ASSERT_EQ(start_error_, "");
    ASSERT_TRUE(cluster_->wait_ok());
  }
  ClusterConfig config(std::string prefix, std::uint32_t groups = 8) {
    return ClusterConfig{.redis = RedisConfig{.port = cluster_->seed_port(),
                                              .prefix = std::move(prefix),
                                              .timeout = 300ms,
                                              .reconnect_min = 1ms,
                                              .reconnect_max = 5ms},
                         .groups = groups};
  }
  std::unique_ptr<Instance> make(std::string id, const ClusterConfig& cc) {
    return std::make_unique<Instance>(std::move(id), cc, clock, wall);
  }
  // Syncs every instance until each answered for every group and `done` holds: bounded.
  template <class Done>
  bool settle(std::vector<Instance*> all, Done done, int rounds = 150) {
    for (int i = 0; i < rounds; ++i) {
      bool whole = true;
      for (Instance* x : all) whole = x->sync_whole() && whole;
      if (whole && done()) return true;
      std::this_thread::sleep_for(20ms);  // the cluster settling, the nodes' backoff
    }
    return false;
  }

  ManualClock clock;
  std::int64_t wall = now_ms();
  static inline std::unique_ptr<RedisCluster> cluster_;
  static inline std::string start_error_;
};

TEST_F(RedisClusterTest, GroupsSpreadOverTheMastersAtTheSlotsRedisComputes) {
  const ClusterConfig cc = config("{spread}:fleet:");
  auto a = make("a", cc);
  ASSERT_TRUE(a->sync_whole()) << a->fleet.reading().last_error;
  std::set<std::string> nodes;
  for (std::uint32_t g = 0; g < cc.groups; ++g) {
    const std::string prefix = a->store.group_prefix(g);
    EXPECT_EQ(cluster_->servers().front()->command({"CLUSTER", "KEYSLOT", prefix + "seq"}),
              std::to_string(key_slot(prefix)));
    nodes.insert(a->store.node_of(g));
    // The group's keys live on the master that serves its slot.
    RedisServer* owner = cluster_->master_of_slot(key_slot(prefix));
    ASSERT_NE(owner, nullptr);
    EXPECT_EQ(a->store.node_of(g), "127.0.0.1:" + std::to_string(owner->port()));
    EXPECT_EQ(owner->command({"EXISTS", prefix + "seq"}), "1") << prefix;
  }
  EXPECT_EQ(nodes.size(), 3u);  // 8 groups over 3 masters
  // One connection per node, kept from one sync to the next: each master counts the
  // store's and the one asking.
  ASSERT_TRUE(a->sync_whole());
  for (const auto& n : cluster_->nodes()) {
    if (!n.master) continue;
    const std::string info = cluster_->server(n.port)->command({"INFO", "clients"});
    EXPECT_NE(info.find("connected_clients:2\r\n"), std::string::npos) << n.port << ": " << info;
  }
}

TEST_F(RedisClusterTest, AnOpenOnOneInstanceReachesAll) {
  const ClusterConfig cc = config("{reach}:fleet:");
  auto a = make("a", cc), b = make("b", cc), c = make("c", cc);
  ASSERT_TRUE(settle({a.get(), b.get(), c.get()}, [] { return true; }));
  for (int k = 0; k < kKeys; ++k) a->fail(k);
  ASSERT_TRUE(a->sync_whole());
  ASSERT_TRUE(b->sync_whole());
  ASSERT_TRUE(c->sync_whole());
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_TRUE(b->open(k)) << key_name(k);
    EXPECT_TRUE(c->open(k)) << key_name(k);
  }
}

TEST_F(RedisClusterTest, ASlotMigratedUnderTheFleetIsFollowedByAskThenMoved) {
  const ClusterConfig cc = config("{move}:fleet:");
  auto a = make("a", cc), b = make("b", cc);
  ASSERT_TRUE(settle({a.get(), b.get()}, [] { return true; }));
  for (int k = 0; k < kKeys; ++k) a->fail(k);
  ASSERT_TRUE(a->sync_whole());
  // Group 0's slot moves to another master: keys first (ASK while the slot migrates),
  // then the slot itself (MOVED).
  const int slot = key_slot(a->store.group_prefix(0));
  RedisServer* from = cluster_->master_of_slot(slot);
  ASSERT_NE(from, nullptr);
  RedisServer* to = nullptr;
  for (const auto& n : cluster_->nodes()) {
    if (n.master && n.port != from->port()) to = cluster_->server(n.port);
  }
  ASSERT_NE(to, nullptr);
  const std::string s = std::to_string(slot);
  ASSERT_EQ(to->command({"CLUSTER", "SETSLOT", s, "IMPORTING", cluster_->node_id(from)}), "OK");
  ASSERT_EQ(from->command({"CLUSTER", "SETSLOT", s, "MIGRATING", cluster_->node_id(to)}), "OK");
  for (const std::string& key : from->scan(a->store.group_prefix(0) + "*")) {
    ASSERT_EQ(from->command({"MIGRATE", "127.0.0.1", std::to_string(to->port()), key, "0", "5000"}),
              "OK")
        << key;
  }
  const auto redirects = a->store.redirects();
  ASSERT_TRUE(a->sync_whole()) << a->fleet.reading().last_error;
  EXPECT_GT(a->store.redirects(), redirects);  // ASK: the keys are gone from `from`
  for (const auto& n : cluster_->nodes()) {
    if (!n.master) continue;
    cluster_->server(n.port)->command({"CLUSTER", "SETSLOT", s, "NODE", cluster_->node_id(to)});
  }
  ASSERT_TRUE(cluster_->wait_ok());
  const auto before = b->store.redirects();
  ASSERT_TRUE(b->sync_whole()) << b->fleet.reading().last_error;
  EXPECT_GT(b->store.redirects(), before);  // MOVED: b's map still named `from`
  EXPECT_EQ(b->store.node_of(0), "127.0.0.1:" + std::to_string(to->port()));
  for (int k = 0; k < kKeys; ++k) EXPECT_TRUE(b->open(k)) << key_name(k);
  // A newcomer reads every decision where it now lives.
  auto c = make("c", cc);
  ASSERT_TRUE(c->sync_whole()) << c->fleet.reading().last_error;
  for (int k = 0; k < kKeys; ++k) EXPECT_TRUE(c->open(k)) << key_name(k);
}

TEST_F(RedisClusterTest, APausedMasterCostsOnlyItsGroupsAndTheyCatchUpAfter) {
  const ClusterConfig cc = config("{pause}:fleet:");
  auto a = make("a", cc), b = make("b", cc);
  ASSERT_TRUE(settle({a.get(), b.get()}, [] { return true; }));
  RedisServer* paused = cluster_->master_of_slot(key_slot(a->store.group_prefix(0)));
  ASSERT_NE(paused, nullptr);
  const std::string paused_name = "127.0.0.1:" + std::to_string(paused->port());
  cluster_->pause(paused);
  for (int k = 0; k < kKeys; ++k) a->fail(k);
  // The syncs return (by their deadline), answered by the other masters: their keys'
  // opens reach b; the paused master's keys wait.
  auto sa = a->fleet.sync();
  auto sb = b->fleet.sync();
  ASSERT_TRUE(sa);
  ASSERT_TRUE(sb);
  EXPECT_EQ(a->fleet.reading().last_error.rfind("partial", 0), 0u) << a->fleet.reading().last_error;
  int reached = 0, waiting = 0;
  for (int k = 0; k < kKeys; ++k) {
    const bool on_paused = a->store.node_of(a->store.group_of(key_name(k))) == paused_name;
    if (on_paused) {
      ++waiting;
      EXPECT_FALSE(b->open(k)) << key_name(k);
    } else {
      ++reached;
      EXPECT_TRUE(b->open(k)) << key_name(k);
    }
    // The request path never waits: each breaker answers at once, open or closed.
    EXPECT_FALSE(a->breakers[static_cast<std::size_t>(k)]->try_acquire());
  }
  EXPECT_GT(reached, 0);
  EXPECT_GT(waiting, 0);
  cluster_->resume(paused);
  ASSERT_TRUE(cluster_->wait_ok());
  EXPECT_TRUE(settle({a.get(), b.get()}, [&] {
    for (int k = 0; k < kKeys; ++k) {
      if (!b->open(k)) return false;
    }
    return true;
  })) << a->fleet.reading().last_error;
}

// The cluster's masters' counts of one command since their last CONFIG RESETSTAT, by port.
std::map<int, long> calls_of(RedisCluster& cluster, const std::string& command) {
  std::map<int, long> out;
  for (const auto& n : cluster.nodes()) {
    if (!n.master || n.failed) continue;
    const std::string stats = cluster.server(n.port)->command({"INFO", "commandstats"});
    const std::string tag = "cmdstat_" + command + ":calls=";
    const auto at = stats.find(tag);
    out[n.port] = at == std::string::npos ? 0 : std::stol(stats.substr(at + tag.size()));
  }
  return out;
}
void reset_stats(RedisCluster& cluster) {
  for (const auto& n : cluster.nodes()) {
    if (n.master && !n.failed) cluster.server(n.port)->command({"CONFIG", "RESETSTAT"});
  }
}
long total(const std::map<int, long>& m) {
  long sum = 0;
  for (const auto& [port, n] : m) sum += n;
  return sum;
}

TEST_F(RedisClusterTest, AQuietSyncRunsNoScriptAndADecisionRunsItOnlyWhereItWasMade) {
  const ClusterConfig cc = config("{quiet}:fleet:");
  auto a = make("a", cc), b = make("b", cc);
  ASSERT_TRUE(settle({a.get(), b.get()}, [] { return true; }));
  // Quiet: b's sync reads every group (GET seq, GET id, TIME) and runs no script.
  reset_stats(*cluster_);
  const auto scripts = b->store.script_calls();
  ASSERT_TRUE(b->sync_whole()) << b->fleet.reading().last_error;
  EXPECT_EQ(total(calls_of(*cluster_, "evalsha")), 0);
  EXPECT_EQ(total(calls_of(*cluster_, "get")), 2 * static_cast<long>(cc.groups));
  EXPECT_EQ(total(calls_of(*cluster_, "time")), static_cast<long>(cc.groups));
  EXPECT_EQ(b->store.script_calls(), scripts);
  // a opens one key of group g: a's sync runs g's script only; b's next sync finds g's
  // counter moved, runs g's script only, on g's node, and adopts the open.
  const int k = 5;
  const std::uint32_t g = a->store.group_of(key_name(k));
  RedisServer* owner = cluster_->master_of_slot(key_slot(a->store.group_prefix(g)));
  ASSERT_NE(owner, nullptr);
  a->fail(k);
  reset_stats(*cluster_);
  ASSERT_TRUE(a->sync_whole()) << a->fleet.reading().last_error;
  EXPECT_EQ(total(calls_of(*cluster_, "evalsha")), 1);
  reset_stats(*cluster_);
  ASSERT_TRUE(b->sync_whole()) << b->fleet.reading().last_error;
  EXPECT_TRUE(b->open(k));
  const auto evals = calls_of(*cluster_, "evalsha");
  EXPECT_EQ(total(evals), 1);
  EXPECT_EQ(evals.at(owner->port()), 1);
  // b checks the open it now holds (an assert_open op, the Fleet's periodic check:
  // something to say, in g only), then, caught up, is quiet again.
  reset_stats(*cluster_);
  ASSERT_TRUE(b->sync_whole());
  EXPECT_EQ(total(calls_of(*cluster_, "evalsha")), 1);
  EXPECT_EQ(calls_of(*cluster_, "evalsha").at(owner->port()), 1);
  reset_stats(*cluster_);
  ASSERT_TRUE(b->sync_whole());
  EXPECT_EQ(total(calls_of(*cluster_, "evalsha")), 0);
}

TEST_F(RedisClusterTest, AFlushedNodeIsNoticedByTheReadAndTheOpensArePublishedAgain) {
  const ClusterConfig cc = config("{flush}:fleet:");
  auto a = make("a", cc), b = make("b", cc);
  ASSERT_TRUE(settle({a.get(), b.get()}, [] { return true; }));
  for (int k = 0; k < kKeys; ++k) a->fail(k);
  ASSERT_TRUE(a->sync_whole());
  ASSERT_TRUE(b->sync_whole());
  ASSERT_TRUE(a->sync_whole());  // quiet now
  const auto scripts = a->store.script_calls();
  ASSERT_TRUE(a->sync_whole());
  ASSERT_EQ(a->store.script_calls(), scripts);
  // Group 0's node loses everything (its connections stay): the reads find its groups'
  // keys missing, their scripts start new incarnations, and a and b publish their opens
  // again, which a newcomer reads.
  RedisServer* flushed = cluster_->master_of_slot(key_slot(a->store.group_prefix(0)));
  ASSERT_NE(flushed, nullptr);
  ASSERT_EQ(flushed->command({"FLUSHALL"}), "OK");
  ASSERT_TRUE(flushed->scan(a->store.group_prefix(0) + "*").empty());
  auto c = make("c", cc);
  EXPECT_TRUE(settle({a.get(), b.get(), c.get()},
                     [&] {
                       for (int k = 0; k < kKeys; ++k) {
                         if (!c->open(k)) return false;
                       }
                       return true;
                     }))
      << a->fleet.reading().last_error << " / " << c->fleet.reading().last_error;
  EXPECT_EQ(flushed->command({"EXISTS", a->store.group_prefix(0) + "seq"}), "1");
}

TEST_F(RedisClusterTest, TheHeartbeatRunsTheScriptOfAQuietGroupAndRenewsItsKeys) {
  ClusterConfig cc = config("{beat}:fleet:");
  cc.heartbeat = 60s;
  auto a = make("a", cc);
  ASSERT_TRUE(settle({a.get()}, [] { return true; }));
  ASSERT_TRUE(a->sync_whole());
  // Shorten group 0's TTLs, as if the group had been quiet for most of idle_ttl.
  const std::string seq = a->store.group_prefix(0) + "seq";
  RedisServer* owner = cluster_->master_of_slot(key_slot(seq));
  ASSERT_NE(owner, nullptr);
  ASSERT_EQ(owner->command({"PEXPIRE", seq, "600000"}), "1");
  // Quiet syncs before the heartbeat is due renew nothing: no script.
  wall += 59'000;
  const auto scripts = a->store.script_calls();
  ASSERT_TRUE(a->sync_whole());
  EXPECT_EQ(a->store.script_calls(), scripts);
  EXPECT_LE(std::stol(owner->command({"PTTL", seq})), 600'000);
  // The heartbeat (the fleet's wall clock, virtual here): every group's script, whose
  // refresh gives the keys idle_ttl again.
  wall += 1000;
  ASSERT_TRUE(a->sync_whole());
  EXPECT_EQ(a->store.script_calls(), scripts + cc.groups);
  EXPECT_GT(std::stol(owner->command({"PTTL", seq})), 600'000);
}

// Last: it leaves a master dead.
TEST_F(RedisClusterTest, AKilledMasterWhoseReplicaTakesOverKeepsTheFleetsOpens) {
  const ClusterConfig cc = config("{fail}:fleet:");
  auto a = make("a", cc), b = make("b", cc);
  ASSERT_TRUE(settle({a.get(), b.get()}, [] { return true; }));
  for (int k = 0; k < kKeys; ++k) a->fail(k);
  ASSERT_TRUE(a->sync_whole());
  ASSERT_TRUE(b->sync_whole());
  RedisServer* victim = cluster_->master_of_slot(key_slot(a->store.group_prefix(0)));
  ASSERT_NE(victim, nullptr);
  const std::string victim_id = cluster_->node_id(victim);
  RedisServer* replica = nullptr;
  for (const auto& n : cluster_->nodes()) {
    if (!n.master && n.master_id == victim_id) replica = cluster_->server(n.port);
  }
  ASSERT_NE(replica, nullptr);
  victim->kill();
  // The instances keep syncing: the victim's groups fail, the others answer.
  (void)a->fleet.sync();
  (void)b->fleet.sync();
  ASSERT_EQ(replica->command({"CLUSTER", "FAILOVER", "TAKEOVER"}), "OK");
  ASSERT_TRUE(cluster_->wait_ok());
  // Replication is asynchronous: say the victim's last writes never reached the replica,
  // none of group 0's keys among them.
  int in_group0 = 0;
  for (int k = 0; k < kKeys; ++k) in_group0 += a->store.group_of(key_name(k)) == 0;
  ASSERT_GT(in_group0, 0);
  for (const std::string& key : replica->scan(a->store.group_prefix(0) + "*"))
    replica->command({"DEL", key});
  // Every instance answers for every group again (none wedged), and a newcomer reads
  // every open: group 0's published again by a and b, the new master being another
  // incarnation.
  auto c = make("c", cc);
  EXPECT_TRUE(settle({a.get(), b.get(), c.get()},
                     [&] {
                       for (int k = 0; k < kKeys; ++k) {
                         if (!c->open(k)) return false;
                       }
                       return true;
                     }))
      << a->fleet.reading().last_error << " / " << c->fleet.reading().last_error;
  const std::string replica_name = "127.0.0.1:" + std::to_string(replica->port());
  EXPECT_EQ(c->store.node_of(0), replica_name);
}

}  // namespace
}  // namespace bulwark::redis
