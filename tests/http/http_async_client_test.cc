// bulwark::http::AsyncClient (curl's multi interface on an Asio io_context) against
// cpp-httplib servers on 127.0.0.1. The io_context runs on the test's thread; servers
// hold requests until released where timing matters.

#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/http/async_client.h"
#include "upstream.h"

namespace bulwark::http {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::Upstream;
using Result = Expected<Response, Error>;

Config quick(std::uint32_t attempts = 3) {
  Config c;
  c.name = "async-test";
  c.breaker = {.name = "async-test", .consecutive_failures = 100, .open_duration = 1h};
  c.retry = RetryConfig{
      .name = "async-test", .max_attempts = attempts, .backoff = Backoff::constant(1ms)};
  c.default_timeout = 10s;
  return c;
}

// Spawns the request on `io` and stores its result.
void spawn(::asio::io_context& io, AsyncClient& client, Request req, std::optional<Result>& out) {
  ::asio::co_spawn(
      io,
      [&client, req = std::move(req), &out]() -> ::asio::awaitable<void> {
        out.emplace(co_await client.async_request(req));
      },
      ::asio::detached);
}

TEST(HttpAsyncClient, ARequestRetriesAndSucceeds) {
  Upstream up([](int n, const httplib::Request&, httplib::Response& res) {
    if (n == 1) {
      res.status = 503;
    } else {
      res.set_content("ok", "text/plain");
    }
  });
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), quick());
  std::optional<Result> r;
  spawn(io, client, {.url = up.url("/reviews/1")}, r);
  io.run();
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r) << r->error().message;
  EXPECT_EQ((*r)->status, 200);
  EXPECT_EQ((*r)->body, "ok");
  EXPECT_EQ(up.requests(), 2);
}

// Temporaries, in the two forms that are safe with GCC 12: a Request made in a
// statement without co_await (GCC 12 destroys an aggregate temporary twice in one that
// has a co_await), and async_get in one expression. The strings are long enough to
// live on the heap, so a double destruction or a use after free is reported by
// AddressSanitizer.
TEST(HttpAsyncClient, TemporaryArgumentsAreSafe) {
  const std::string long_value(200, 'v');
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.get_header_value("X-Long") == long_value ? req.body : req.path,
                    "text/plain");
  });
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), quick());
  std::optional<Result> posted, got;
  const std::string path = "/" + std::string(100, 'p');
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        auto op = client.async_request(Request{.method = "POST",
                                               .url = up.url(path),
                                               .headers = {{"X-Long", long_value}},
                                               .body = std::string(300, 'b')},
                                       Context());
        posted.emplace(co_await std::move(op));
        got.emplace(co_await client.async_get(up.url(path), 5s, Context()));
      },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(posted && got);
  ASSERT_TRUE(*posted) << posted->error().message;
  EXPECT_EQ((*posted)->body, std::string(300, 'b'));
  ASSERT_TRUE(*got) << got->error().message;
  EXPECT_EQ((*got)->body, path);
}

TEST(HttpAsyncClient, ConcurrentRequestsOnOneThread) {
  Upstream* self = nullptr;
  constexpr int kRequests = 6;  // below the server's 8 handler threads
  Upstream up([&](int n, const httplib::Request&, httplib::Response& res) {
    if (n == kRequests) self->release();
    self->hold();  // every request is in flight before any is answered
    res.set_content("ok", "text/plain");
  });
  self = &up;
  ::asio::io_context io;
  Config c = quick();
  c.bulkhead.max_concurrent = kRequests;
  AsyncClient client(io.get_executor(), c);
  std::vector<std::optional<Result>> results(kRequests);
  for (auto& r : results) spawn(io, client, {.url = up.url()}, r);
  io.run();
  for (auto& r : results) {
    ASSERT_TRUE(r);
    ASSERT_TRUE(*r) << r->error().message;
    EXPECT_EQ((*r)->body, "ok");
  }
  EXPECT_EQ(up.requests(), kRequests) << "all were in flight at once on one thread";
}

TEST(HttpAsyncClient, CancellationAbortsTheTransfer) {
  Upstream* self = nullptr;
  Upstream up([&](int, const httplib::Request&, httplib::Response& res) {
    self->hold();
    res.set_content("late", "text/plain");
  });
  self = &up;
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), quick());
  ::asio::cancellation_signal signal;
  std::optional<Result> r;
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { r.emplace(co_await client.async_get(up.url(), 20s)); },
      ::asio::bind_cancellation_slot(signal.slot(), ::asio::detached));
  std::thread canceller([&] {
    up.wait_in_handler(1);
    ::asio::post(io, [&] { signal.emit(::asio::cancellation_type::terminal); });
  });
  io.run();
  canceller.join();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().kind, ErrorKind::cancelled);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
}

TEST(HttpAsyncClient, DeadlineCutsASlowUpstream) {
  Upstream* self = nullptr;
  Upstream up([&](int, const httplib::Request&, httplib::Response& res) {
    self->hold();
    res.set_content("late", "text/plain");
  });
  self = &up;
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), quick(1));
  std::optional<Result> r;
  spawn(io, client, {.url = up.url(), .timeout = 300ms}, r);
  io.run();  // returns while the server still holds the request
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_TRUE(r->error().kind == ErrorKind::timeout) << to_string(r->error().kind);
  EXPECT_EQ(up.requests(), 1);
}

}  // namespace
}  // namespace bulwark::http
