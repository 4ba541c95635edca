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
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adaptive_setup.h"
#include "bulwark/config_error.h"
#include "bulwark/deadline_header.h"
#include "bulwark/http/async_client.h"
#include "bulwark/prometheus.h"
#include "upstream.h"

namespace bulwark::http {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::adaptive_series;
using bulwark::testing::AdaptiveSeries;
using bulwark::testing::has_line;
using bulwark::testing::RejectionLog;
using bulwark::testing::steady_adaptive_limit;
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

// Makes `n` GETs of `url` one after another on `io`, runs it, and returns the results.
std::vector<Result> gets_in_turn(::asio::io_context& io, AsyncClient& client,
                                 const std::string& url, int n) {
  std::vector<Result> out;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        for (int i = 0; i < n; ++i) out.push_back(co_await client.async_get(url));
      },
      ::asio::detached);
  io.run();
  return out;
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
  Upstream up(Upstream::Holding{"late"});
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
  Upstream up(Upstream::Holding{"late"});
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

// write_metrics: the host's breaker and retry series count what the requests did, the
// client's own counters count requests and attempts, and the bulkhead — one for the
// whole async client — is reported as the client's, with its rejection counted.
TEST(HttpAsyncClient, WriteMetricsReportsTheOriginAndTheClientBulkhead) {
  Upstream* self = nullptr;
  Upstream up([&](int n, const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/held") self->hold();
    if (n == 1)
      res.status = 503;  // the first request is retried once
    else
      res.set_content("ok", "text/plain");
  });
  self = &up;
  ::asio::io_context io;
  Config c = quick();
  c.name = "svc";
  c.bulkhead.max_concurrent = 1;  // no max_wait: a request finding it full is rejected
  AsyncClient client(io.get_executor(), c);
  std::optional<Result> a, b, held, rejected;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        a.emplace(co_await client.async_get(up.url("/a")));  // 503, then 200
        b.emplace(co_await client.async_get(up.url("/b")));  // 200
        // One request holds the only slot while a second finds it taken.
        spawn(io, client, {.url = up.url("/held")}, held);
        rejected.emplace(co_await client.async_get(up.url("/b")));
        up.release();
      },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(a && b && held && rejected);
  ASSERT_TRUE(*a) << a->error().message;
  ASSERT_TRUE(*b) << b->error().message;
  ASSERT_TRUE(*held) << held->error().message;
  ASSERT_FALSE(*rejected);
  EXPECT_EQ(rejected->error().kind, ErrorKind::bulkhead_full);

  std::ostringstream out;
  client.write_metrics(out);
  const std::string text = out.str();
  const std::string key = "name=\"async-test\",key=\"" + up.url("");
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("bulwark_circuitbreaker_calls_total{" + key + "\",kind=\"successful\"} 3"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_retries_total{" + key + "\"} 1")) << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_with_retry\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_without_retry\"} 2"))
      << text;
  EXPECT_TRUE(has("bulwark_http_client_requests_total{client=\"svc\"} 4")) << text;
  EXPECT_TRUE(has("bulwark_http_client_attempts_total{client=\"svc\"} 4")) << text;
  EXPECT_TRUE(has("bulwark_http_client_requests_in_flight{client=\"svc\"} 0")) << text;
  EXPECT_TRUE(has("bulwark_http_client_bulkhead_max_allowed_concurrent_calls{client=\"svc\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_http_client_bulkhead_concurrent_calls{client=\"svc\"} 0")) << text;
  EXPECT_TRUE(has("bulwark_http_client_bulkhead_rejected_calls_total{client=\"svc\"} 1")) << text;
  // The per-host bulkheads are not the ones that gate requests: not reported.
  EXPECT_EQ(text.find("bulwark_bulkhead_max_allowed_concurrent_calls{"), std::string::npos) << text;

  std::ostringstream prefixed;
  client.write_metrics(prefixed, prometheus::ExpositionOptions{.prefix = "x"});
  EXPECT_NE(prefixed.str().find("\nx_http_client_requests_total{client=\"svc\"} 4\n"),
            std::string::npos);
  EXPECT_THROW(client.write_metrics(prefixed, prometheus::ExpositionOptions{.prefix = "1 bad"}),
               InvalidConfig);
}

// Config::adaptive_limit: the origin's adaptive limit gates requests in place of the
// client's bulkhead. With the limit at 1 one held request takes it and a second is
// refused at once, as a `rejection` event; the metrics show the limit and the refusal.
TEST(HttpAsyncClient, AdaptiveLimitPerHostRefusesAtTheLimitAndIsInTheMetrics) {
  Upstream up(Upstream::Holding{"ok"});
  ::asio::io_context io;
  Config c = quick();
  c.name = "svc";
  c.adaptive_limit = steady_adaptive_limit("svc-limit", 1);
  AsyncClient client(io.get_executor(), c);
  RejectionLog rejections(client);
  std::optional<Result> held, rejected;
  std::string during;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        spawn(io, client, {.url = up.url("/held")}, held);
        rejected.emplace(co_await client.async_get(up.url("/b")));
        std::ostringstream out;
        client.write_metrics(out);
        during = out.str();
        up.release();
      },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(held && rejected);
  ASSERT_TRUE(*held) << held->error().message;
  ASSERT_FALSE(*rejected);
  EXPECT_EQ(rejected->error().kind, ErrorKind::bulkhead_full);
  EXPECT_EQ(rejected->error().attempts, 0u);
  EXPECT_EQ(rejections.seen(), std::vector<std::string>{"svc-limit " + up.url("")});

  EXPECT_EQ(adaptive_series(during, "svc-limit", up.url("")),
            (AdaptiveSeries{.limit = "1", .inflight = "1", .rejections = "1"}))
      << during;
  // The client's bulkhead gated nothing.
  EXPECT_TRUE(
      has_line(during, "bulwark_http_client_bulkhead_rejected_calls_total{client=\"svc\"} 0"))
      << during;
  std::ostringstream after;
  client.write_metrics(after);
  EXPECT_EQ(adaptive_series(after.str(), "svc-limit", up.url("")).inflight, "0") << after.str();
}

// Deadline propagation: the async client's attempts carry the time they have left when
// they are sent: never more than the client had when the request started. (Not the
// server's receipt + value against the client's deadline: that runs late by the
// transit time, which the server's margin is for; a slow build showed it.)
TEST(HttpAsyncClient, DeadlineHeaderCarriesTheRemainingTimeToTheServer) {
  std::mutex mu;
  std::string value;
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    value = req.get_header_value("X-Request-Timeout");
    res.set_content("ok", "text/plain");
  });
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), quick());
  const Context ctx = Context(SteadyClock{}).with_timeout(2s);
  const Ticks start = now_ticks(SteadyClock{});
  std::optional<Result> r;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        auto op = client.async_request({.url = up.url()}, ctx);  // GCC 12: not in the co_await
        r.emplace(co_await std::move(op));
      },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(r && *r);
  std::lock_guard lock(mu);
  const auto seen = parse_timeout_header(value);
  ASSERT_TRUE(seen) << value;
  EXPECT_LE(seen->count(), ctx.deadline().ticks() - start) << value;
  // What a server reading it at `start` would take as its deadline: not past the client's.
  auto d = parse_deadline_header(value, Nanos::zero(), start);
  ASSERT_TRUE(d);
  EXPECT_LE(*d, ctx.deadline()) << value;
}

// breaker_for: the origin's breaker, the one the requests went through: OPEN once the
// server has failed consecutive_failures times; another origin's stays CLOSED.
TEST(HttpAsyncClient, BreakerForReportsTheOriginsBreakerOpen) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  ::asio::io_context io;
  Config c = quick(1);
  c.breaker.consecutive_failures = 3;
  AsyncClient client(io.get_executor(), c);
  const std::vector<Result> results = gets_in_turn(io, client, up.url("/x"), 4);
  ASSERT_EQ(results.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(results[i].error().kind, ErrorKind::status);
  EXPECT_EQ(results[3].error().kind, ErrorKind::rejected_by_breaker);
  EXPECT_EQ(up.requests(), 3);
  const BreakerRef breaker = client.breaker_for(up.url("/anything"));
  ASSERT_NE(breaker, nullptr);
  EXPECT_EQ(breaker->state(), State::open);
  EXPECT_EQ(client.breaker_for("http://127.0.0.1:1/")->state(), State::closed);
  EXPECT_EQ(client.breaker_for("not a url"), nullptr);
}

// on_transition: the listener hears CLOSED -> OPEN of the failing origin, with the
// origin as the key, on the executor's thread (here the test's, which runs io).
TEST(HttpAsyncClient, OnTransitionHearsTheOriginsBreakerOpen) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  ::asio::io_context io;
  Config c = quick(1);
  c.breaker.consecutive_failures = 2;
  AsyncClient client(io.get_executor(), c);
  std::vector<std::pair<std::string, TransitionInfo>> heard;
  std::vector<std::thread::id> threads;
  Subscription sub = client.on_transition([&](const Event& e) {
    heard.emplace_back(std::string(e.key), std::get<TransitionInfo>(e.info));
    threads.push_back(std::this_thread::get_id());
  });
  (void)gets_in_turn(io, client, up.url("/x"), 2);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, up.url(""));
  EXPECT_EQ(heard[0].second.from, State::closed);
  EXPECT_EQ(heard[0].second.to, State::open);
  EXPECT_EQ(heard[0].second.reason, TransitionReason::consecutive_failures);
  EXPECT_EQ(threads[0], std::this_thread::get_id());
}

}  // namespace
}  // namespace bulwark::http
