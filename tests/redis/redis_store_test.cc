// RedisFleetStore against servers that misbehave as no real redis-server does
// (fake_server.h): one that trickles its reply a byte at a time, one that sends half a
// reply and falls silent, one that answers one request twice. The deadline holds
// whatever the server does, a connection is never read again once it is out of step,
// and the store can be destroyed with an exchange in the middle of a reply.

#include "bulwark/redis/redis_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "redis/fake_server.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::FakeServer;

// The only place these tests build a store configuration.
RedisConfig config(int port, std::chrono::milliseconds timeout = 200ms) {
  return RedisConfig{.port = port,
                     .prefix = "{test}:fleet:",
                     .timeout = timeout,
                     .reconnect_min = 1ms,
                     .reconnect_max = 1ms};
}

SyncRequest request() {
  SyncRequest r;
  r.instance = "a";
  r.now_ms = 1'700'000'000'000;
  return r;
}

// Answers SCRIPT LOAD with a hash, as Redis does.
bool load_script(int fd, const std::atomic<bool>& running) {
  if (!FakeServer::read_until(fd, "return out", running)) return false;
  std::string hash = "$40\r\n";
  hash.append(40, 'a');
  hash += "\r\n";
  return FakeServer::send_all(fd, hash);
}

// A reply the script could have given to a request of no ops.
std::string empty_reply() {
  std::string r = "*8\r\n";
  for (const std::string e : {"inc", "1700000000000", "0", "0", "0", "0", "0", "0"}) {
    r += '$';
    r += std::to_string(e.size());
    r += "\r\n";
    r += e;
    r += "\r\n";
  }
  return r;
}

// Waits (bounded, generously) until `flag` is set.
bool eventually(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A server that answers a byte at a time, forever, never lets a single read wait long:
// only one deadline for the whole exchange can end it.
TEST(RedisStoreTest, ATricklingServerCannotHoldAnExchangePastItsDeadline) {
  FakeServer server([](int fd, const std::atomic<bool>& running) {
    if (!FakeServer::read_until(fd, "SCRIPT", running)) return;
    // A bulk string of a million bytes, sent a byte every 5 ms (for 20 s at most, so
    // that a store without a deadline fails this test instead of hanging it).
    std::atomic<bool> bounded{true};
    std::thread stop([&] {
      for (int i = 0; i < 2000 && running.load() && bounded.load(); ++i)
        std::this_thread::sleep_for(10ms);
      bounded = false;
    });
    FakeServer::trickle(fd, "$1000000\r\n", 'x', 5ms, bounded);
    bounded = false;
    stop.join();
  });
  RedisFleetStore store(config(server.port()));
  auto r = store.exchange(request());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, StoreError::Kind::timeout) << r.error().message;
  EXPECT_NE(r.error().message.find("no answer by the deadline"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(store.connected());
}

// The request's own deadline, when sooner than the store's timeout, is the one kept.
TEST(RedisStoreTest, TheRequestsDeadlineIsKeptWhenItIsSooner) {
  FakeServer server([](int fd, const std::atomic<bool>& running) {
    if (load_script(fd, running)) FakeServer::until_closed(fd, running);  // then silence
  });
  RedisFleetStore store(config(server.port(), 60s));
  SyncRequest req = request();
  req.deadline = std::chrono::steady_clock::now() + 100ms;
  auto r = store.exchange(req);  // would wait 60 s without it (the ctest TIMEOUT is 120 s)
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, StoreError::Kind::timeout) << r.error().message;
  EXPECT_EQ(store.timeout(), 60s);
}

// Two replies for one request: the second is not left to be read as the answer to the
// next request. The connection is dropped, and the next exchange makes a new one.
TEST(RedisStoreTest, AServerThatAnswersOneRequestTwiceIsDroppedNotReadLater) {
  FakeServer server([](int fd, const std::atomic<bool>& running) {
    if (!load_script(fd, running)) return;
    if (!FakeServer::read_until(fd, "EVALSHA", running)) return;
    FakeServer::send_all(fd, empty_reply() + empty_reply());
    FakeServer::until_closed(fd, running);
  });
  RedisFleetStore store(config(server.port()));
  auto r = store.exchange(request());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, StoreError::Kind::protocol) << r.error().message;
  EXPECT_NE(r.error().message.find("more than one reply"), std::string::npos);
  EXPECT_FALSE(store.connected());
}

// Lifetime: the store destroyed while another thread's exchange waits in the middle of
// a reply. The destructor waits for that exchange (its deadline), which fails cleanly;
// then the connection is closed with its half reply. Under ASan: nothing freed is
// touched, nothing leaks.
TEST(RedisStoreTest, DestroyedWhileAnExchangeWaitsMidReplyItWaitsThenCloses) {
  std::atomic<bool> half_sent{false};
  FakeServer server([&](int fd, const std::atomic<bool>& running) {
    if (!load_script(fd, running)) return;
    if (!FakeServer::read_until(fd, "EVALSHA", running)) return;
    FakeServer::send_all(fd, "*8\r\n$3\r\ninc\r\n$13\r\n17000");  // half a reply
    half_sent = true;
    FakeServer::until_closed(fd, running);
  });
  auto store = std::make_unique<RedisFleetStore>(config(server.port(), 300ms));
  Expected<SyncReply, StoreError> result = Unexpected(StoreError{StoreError::Kind::protocol, ""});
  std::thread sync([&] { result = store->exchange(request()); });
  ASSERT_TRUE(eventually(half_sent));
  // A second exchange at the same time is refused, and disturbs nothing.
  auto concurrent = store->exchange(request());
  ASSERT_FALSE(concurrent);
  EXPECT_EQ(concurrent.error().kind, StoreError::Kind::rejected);
  EXPECT_NE(concurrent.error().message.find("already running"), std::string::npos);
  store.reset();  // waits for the exchange on `sync`
  sync.join();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, StoreError::Kind::timeout) << result.error().message;
}

// Lifetime: destroyed right after an exchange gave up in the middle of a reply (the
// rest of it still arriving): the connection was dropped then, nothing is read later.
TEST(RedisStoreTest, DestroyedAfterAnExchangeGaveUpMidReply) {
  FakeServer server([](int fd, const std::atomic<bool>& running) {
    if (!load_script(fd, running)) return;
    if (!FakeServer::read_until(fd, "EVALSHA", running)) return;
    FakeServer::trickle(fd, empty_reply(), ' ', 50ms, running);
  });
  auto store = std::make_unique<RedisFleetStore>(config(server.port(), 100ms));
  auto r = store->exchange(request());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, StoreError::Kind::timeout);
  store.reset();
}

}  // namespace
}  // namespace bulwark::redis
