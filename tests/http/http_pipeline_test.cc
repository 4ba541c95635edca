// The pipeline against a real HTTP server on 127.0.0.1.
//
// Every assertion is on what the server saw (request counts, headers) or on the
// pipeline's typed result — never on wall-clock latency. Where timing matters, the
// server holds requests until the test releases them, so a loaded machine only makes
// a test slower, not flaky.

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/pipeline.h"
#include "upstream.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

// A client closing a connection the server still writes to must not kill the test.
const bool kIgnoreSigpipe = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

// What a call to the upstream reports: an HTTP status (0 for a transport error such as
// a timeout or a refused connection) and the server's Retry-After, if any.
struct HttpError {
  int status = 0;
  httplib::Error transport = httplib::Error::Success;
  std::optional<Nanos> after;

  // 5xx, 429 and transport errors are the dependency's fault; other 4xx are ours.
  Outcome outcome() const {
    return status == 0 || status >= 500 || status == 429 ? Outcome::failure : Outcome::ignored;
  }
  std::optional<Nanos> retry_after() const { return after; }
};

// A GET that gives the server only the time the context has left.
Expected<std::string, HttpError> http_get(int port, const std::string& path, const Context& ctx) {
  httplib::Client client("127.0.0.1", port);
  const Nanos budget = std::min<Nanos>(ctx.remaining(), 10s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(budget);
  client.set_connection_timeout(us);
  client.set_read_timeout(us);
  client.set_write_timeout(us);
  httplib::Headers headers;
  if (!ctx.idempotency_key().empty())
    headers.emplace("Idempotency-Key", std::string(ctx.idempotency_key()));
  auto res = client.Get(path.c_str(), headers);
  if (!res) return Unexpected(HttpError{0, res.error(), std::nullopt});
  if (res->status >= 400) {
    std::optional<Nanos> after;
    if (res->has_header("Retry-After"))
      after = std::chrono::seconds(std::stoi(res->get_header_value("Retry-After")));
    return Unexpected(HttpError{res->status, httplib::Error::Success, after});
  }
  return res->body;
}

using testing::Upstream;

RetryConfig quick_retry(std::uint32_t attempts) {
  return RetryConfig{
      .name = "upstream", .max_attempts = attempts, .backoff = Backoff::constant(1ms)};
}

// Two 503s then 200; a retry with 5 attempts succeeds after exactly 3
// requests reached the server, all with the same idempotency key.
TEST(HttpPipeline, RetrySucceedsAfterTwoFailures) {
  Upstream upstream([](int n, const httplib::Request&, httplib::Response& res) {
    if (n < 3) {
      res.status = 503;
    } else {
      res.set_content("ok", "text/plain");
    }
  });
  RetryConfig config = quick_retry(5);
  config.idempotency_key = [] { return std::string("order-42"); };
  Retry retry(config);
  auto p = pipeline(bulwark::retry(retry), timeout(5s));
  auto r = p(Context(), [&](const Context& c) { return http_get(upstream.port(), "/", c); });
  ASSERT_TRUE(r) << to_string(r.error().reason);
  EXPECT_EQ(*r, "ok");
  EXPECT_EQ(upstream.requests(), 3);
  EXPECT_EQ(upstream.keys(), (std::vector<std::string>{"order-42", "order-42", "order-42"}));
}

// A server that always fails trips the breaker; later calls never reach it.
TEST(HttpPipeline, AlwaysFailingServerTripsTheBreaker) {
  Upstream upstream([](int, const httplib::Request&, httplib::Response& res) { res.status = 500; });
  BreakerConfig config;  // field by field: designated initializers would track its growth
  config.name = "upstream";
  config.consecutive_failures = 3;
  config.open_duration = std::chrono::hours(1);
  CircuitBreaker breaker(config);
  Retry retry(quick_retry(2));
  auto p = pipeline(bulwark::breaker(breaker), bulwark::retry(retry), timeout(5s));
  int rejected = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    auto r = p(Context(), [&](const Context& c) { return http_get(upstream.port(), "/", c); });
    ASSERT_FALSE(r);
    if (i < 3) {
      EXPECT_EQ(r.error().reason, Reason::retries_exhausted);
      ASSERT_TRUE(r.error().error);
      EXPECT_EQ(r.error().error->status, 500);
    } else {
      EXPECT_EQ(r.error().reason, Reason::breaker_open);
      // The open hour's remainder: at least the hour less the time since the start.
      EXPECT_LE(r.error().retry_after, 1h);
      EXPECT_GE(r.error().retry_after, 1h - (std::chrono::steady_clock::now() - start));
      ++rejected;
    }
  }
  EXPECT_EQ(breaker.state(), State::open);
  EXPECT_EQ(rejected, 7);
  EXPECT_EQ(upstream.requests(), 6) << "3 calls x 2 attempts, then nothing";
}

// A slow server, a short per-attempt timeout inside a longer request deadline: every
// attempt is cut by its own timeout and retried until the deadline leaves no room.
TEST(HttpPipeline, SlowServerPerAttemptTimeoutInsideDeadline) {
  Upstream upstream(Upstream::Holding{"late"});  // never answers in time
  Retry retry(quick_retry(50));
  auto p = pipeline(bulwark::retry(retry), timeout(100ms));
  const Context ctx(SteadyClock{}, {}, Deadline::after(SteadyClock{}, 600ms));
  std::vector<Nanos> given;
  auto r = p(ctx, [&](const Context& c) {
    given.push_back(c.remaining());
    return http_get(upstream.port(), "/", c);
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r.error().stage, Stage::retry);
  ASSERT_TRUE(r.error().error);
  EXPECT_EQ(r.error().error->status, 0) << "the client gave up, the server never answered";
  // How many 100 ms attempts fit is the machine's business (a stalled thread fits
  // fewer); that each was cut at its own timeout, and the last by the deadline, is not.
  EXPECT_GE(r.error().attempts, 1u);
  EXPECT_EQ(given.size(), static_cast<std::size_t>(r.error().attempts));
  EXPECT_LT(r.error().attempts, 50u) << "the deadline, not max_attempts, ended it";
  for (const Nanos g : given)
    EXPECT_LE(g, 100ms) << "no attempt was told it had more than its timeout";
  // Each attempt's request reached the server (and is still held there), no more.
  EXPECT_TRUE(upstream.wait_requests(static_cast<int>(r.error().attempts)));
  EXPECT_EQ(upstream.requests(), static_cast<int>(r.error().attempts));
}

// The bulkhead rejects beyond N concurrent calls while the server holds them.
TEST(HttpPipeline, BulkheadRejectsBeyondLimit) {
  Upstream upstream(Upstream::Holding{"done"});
  constexpr int kLimit = 2;
  Bulkhead pool({.name = "upstream", .max_concurrent = kLimit});
  auto p = pipeline(bulkhead(pool), timeout(20s));
  auto call = [&] {
    return p(Context(), [&](const Context& c) { return http_get(upstream.port(), "/", c); });
  };

  std::vector<std::optional<Expected<std::string, Failure<HttpError>>>> held(kLimit);
  std::vector<std::thread> callers;
  for (int i = 0; i < kLimit; ++i) callers.emplace_back([&, i] { held[i].emplace(call()); });
  ASSERT_TRUE(upstream.wait_in_handler(kLimit));
  EXPECT_EQ(pool.in_use(), static_cast<std::uint32_t>(kLimit));

  for (int i = 0; i < 3; ++i) {
    auto r = call();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().reason, Reason::bulkhead_full);
    EXPECT_TRUE(r.error().rejected());
  }
  EXPECT_EQ(upstream.requests(), kLimit) << "rejected calls never reached the server";

  upstream.release();
  for (auto& t : callers) t.join();
  for (auto& r : held) {
    ASSERT_TRUE(r && *r);
    EXPECT_EQ(**r, "done");
  }
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.snapshot().rejected, 3u);
  EXPECT_TRUE(call()) << "slots are free again";
}

// A storm of failing requests under a retry budget: server-side retries stay within
// ratio x requests, where without the budget every request would be tried 4 times.
TEST(HttpPipeline, RetryBudgetBoundsAStorm) {
  Upstream upstream([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  RetryBudget budget(
      {.name = "upstream", .ratio = 0.1, .min_retries_per_second = 0, .max_tokens = 100});
  Retry retry(quick_retry(4), &budget);
  auto p = pipeline(bulwark::retry(retry), timeout(5s));
  constexpr int kThreads = 4, kPerThread = 50, kRequests = kThreads * kPerThread;
  std::atomic<int> budget_stops{0}, exhausted{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kPerThread; ++i) {
          auto r =
              p(Context(), [&](const Context& c) { return http_get(upstream.port(), "/", c); });
          EXPECT_FALSE(r);
          if (!r && r.error().reason == Reason::budget_exhausted) ++budget_stops;
          if (!r && r.error().reason == Reason::retries_exhausted) ++exhausted;
        }
      });
    }
  }
  const int retries = upstream.requests() - kRequests;
  EXPECT_LE(retries, kRequests / 10) << "retries exceeded 10% of requests";
  EXPECT_GT(retries, 0) << "the budget let some retries through";
  EXPECT_EQ(budget_stops + exhausted, kRequests);
  EXPECT_GT(budget_stops.load(), kRequests / 2);
  EXPECT_EQ(static_cast<int>(retry.snapshot().retries), retries);
}

}  // namespace
}  // namespace bulwark
