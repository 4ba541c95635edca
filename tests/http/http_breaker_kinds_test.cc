// Each kind of breaker a client can keep per host (Config::any_breaker): consecutive
// failures, count window, time window — each trips on a loopback upstream that fails,
// rejects, and closes again after a successful probe; the same for Client and
// AsyncClient, which share the per-host code. The open period is an hour: the probe is
// let in by a manual OPEN -> HALF_OPEN (what the period's end does), so no test waits.
// Also the per-key fallback (Config::fallback), shared by both clients the same way:
// its answers, its failures, their counters and events; and the retry events.

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/http/async_client.h"
#include "bulwark/http/client.h"
#include "bulwark/prometheus.h"
#include "upstream.h"

namespace bulwark::http {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::Upstream;
using Result = Expected<Response, Error>;

// Each kind, set to open after two failures out of two calls, for an hour.
struct Kind {
  const char* label;
  AnyBreakerConfig breaker;
  TransitionReason trips_by;
};

std::vector<Kind> kinds() {
  return {
      {"consecutive",
       BreakerConfig{.name = "kinds", .consecutive_failures = 2, .open_duration = 1h},
       TransitionReason::consecutive_failures},
      {"count_window",
       CountWindowConfig{.name = "kinds",
                         .window = {.size = 10},
                         .minimum_calls = 2,
                         .failure_rate = 1.0,
                         .open_duration = 1h},
       TransitionReason::failure_rate},
      {"time_window",
       TimeWindowConfig{.name = "kinds",
                        .window = {.length = 1h, .buckets = 4},
                        .minimum_calls = 2,
                        .failure_rate = 1.0,
                        .open_duration = 1h},
       TransitionReason::failure_rate},
  };
}

Config config_for(const Kind& k) {
  Config c;
  c.name = "kinds";
  c.any_breaker = k.breaker;
  c.retry = RetryConfig{.name = "kinds", .max_attempts = 1};
  c.detailed_metrics = true;
  c.default_timeout = 10s;
  return c;
}

// The breaker is of the configured type, not the default count window.
bool has_kind(const BreakerRef& b, const Kind& k) {
  switch (k.breaker.index()) {
    case 1:
      return b.get_if<CircuitBreaker>() != nullptr;
    case 2:
      return b.get_if<CountWindowBreaker>() != nullptr;
    default:
      return b.get_if<TimeWindowBreaker>() != nullptr;
  }
}

struct Heard {
  std::vector<TransitionInfo> transitions;
  int rejections = 0;
};

Subscription listen(Heard& heard, auto& client) {
  return client.subscribe(EventKind::transition | EventKind::rejection, [&heard](const Event& e) {
    if (e.kind == EventKind::transition)
      heard.transitions.push_back(std::get<TransitionInfo>(e.info));
    else
      ++heard.rejections;
  });
}

// What both clients must show after: fail, fail (trips), rejected, probe ok (closes).
void expect_trip_and_recovery(const Kind& k, const std::vector<Result>& results, const Heard& heard,
                              const BreakerRef& breaker, int served, const std::string& metrics) {
  SCOPED_TRACE(k.label);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].error().kind, ErrorKind::status);
  EXPECT_EQ(results[1].error().kind, ErrorKind::status);
  EXPECT_EQ(results[2].error().kind, ErrorKind::rejected_by_breaker);
  ASSERT_TRUE(results[3]) << results[3].error().message;
  EXPECT_EQ(results[3]->body, "ok");
  EXPECT_EQ(served, 3) << "the rejected request never reached the server";
  ASSERT_TRUE(breaker);
  EXPECT_TRUE(has_kind(breaker, k));
  EXPECT_EQ(breaker->state(), State::closed);
  ASSERT_EQ(heard.transitions.size(), 3u);
  EXPECT_EQ(heard.transitions[0].to, State::open);
  EXPECT_EQ(heard.transitions[0].reason, k.trips_by);
  EXPECT_EQ(heard.transitions[1].to, State::half_open);
  EXPECT_EQ(heard.transitions[2].to, State::closed);
  EXPECT_EQ(heard.transitions[2].reason, TransitionReason::probes_succeeded);
  EXPECT_EQ(heard.rejections, 1);
  // detailed_metrics: the transitions by from/to that the flapping alert counts.
  EXPECT_NE(metrics.find("bulwark_circuitbreaker_transitions_total{name=\"kinds\",key=\""),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("from=\"closed\",to=\"open\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("bulwark_circuitbreaker_state{"), std::string::npos);
}

// The OPEN period's end, without waiting for it.
void end_open_period(const BreakerRef& b) {
  b.visit([](auto& breaker) { ASSERT_TRUE(breaker.transition_to(State::half_open)); });
}

TEST(HttpBreakerKinds, EachKindTripsAndRecoversInTheSyncClient) {
  for (const Kind& k : kinds()) {
    std::atomic<bool> healthy{false};
    Upstream up([&](int, const httplib::Request&, httplib::Response& res) {
      if (healthy)
        res.set_content("ok", "text/plain");
      else
        res.status = 503;
    });
    Client client(config_for(k));
    Heard heard;
    Subscription sub = listen(heard, client);
    std::vector<Result> results;
    results.push_back(client.get(up.url("/a")));
    results.push_back(client.get(up.url("/b")));
    results.push_back(client.get(up.url("/c")));
    const BreakerRef breaker = client.breaker_for(up.url("/"));
    ASSERT_TRUE(breaker);
    EXPECT_EQ(breaker->state(), State::open);
    end_open_period(breaker);
    healthy = true;
    results.push_back(client.get(up.url("/d")));
    std::ostringstream metrics;
    client.write_metrics(metrics);
    expect_trip_and_recovery(k, results, heard, breaker, up.requests(), metrics.str());
  }
}

TEST(HttpBreakerKinds, EachKindTripsAndRecoversInTheAsyncClient) {
  for (const Kind& k : kinds()) {
    std::atomic<bool> healthy{false};
    Upstream up([&](int, const httplib::Request&, httplib::Response& res) {
      if (healthy)
        res.set_content("ok", "text/plain");
      else
        res.status = 503;
    });
    ::asio::io_context io;
    AsyncClient client(io.get_executor(), config_for(k));
    Heard heard;
    Subscription sub = listen(heard, client);
    const BreakerRef breaker = client.breaker_for(up.url("/"));
    std::vector<Result> results;
    ::asio::co_spawn(
        io,
        [&]() -> ::asio::awaitable<void> {
          for (int i = 0; i < 3; ++i) results.push_back(co_await client.async_get(up.url("/x")));
          end_open_period(breaker);
          healthy = true;
          results.push_back(co_await client.async_get(up.url("/y")));
        },
        ::asio::detached);
    io.run();
    std::ostringstream metrics;
    client.write_metrics(metrics);
    expect_trip_and_recovery(k, results, heard, breaker, up.requests(), metrics.str());
  }
}

// A configuration the chosen kind rejects is refused when the client is built.
TEST(HttpBreakerKinds, AnInvalidBreakerOfAnyKindIsRefused) {
  Config c;
  c.any_breaker = TimeWindowConfig{.name = "bad", .minimum_calls = 0, .failure_rate = 0.5};
  EXPECT_THROW(Client{c}, InvalidConfig);
  c.any_breaker = BreakerConfig{.name = "", .consecutive_failures = 1};
  EXPECT_THROW(Client{c}, InvalidConfig);
}

// The fallback answers for a failing key, in both clients: once for a request whose
// attempts failed (kind "failed"), once for one the open breaker refused ("rejected");
// a key it declines (nullopt) keeps its error; a fallback that fails leaves the
// request's error and counts a failure. Counters in stats(), metrics and events.
Config fallback_config(const std::string& declined) {
  Config c;
  c.name = "fb";
  c.breaker = {.name = "fb", .consecutive_failures = 1, .open_duration = 1h};
  c.retry = RetryConfig{.name = "fb", .max_attempts = 1};
  c.default_timeout = 10s;
  c.fallback = [declined](const std::string& key, const Request& req,
                          const Error&) -> std::optional<Expected<Response, Error>> {
    if (key == declined) return std::nullopt;
    if (req.url.ends_with("/broken-fallback")) return Unexpected(Error{});
    Response r;
    r.status = 200;
    r.body = "cached";
    return r;
  };
  return c;
}

struct FallbackHeard {
  std::vector<FallbackKind> kinds;
};

void expect_fallbacks(const std::vector<Result>& r, const ClientStats& s,
                      const FallbackHeard& heard, const std::string& metrics) {
  ASSERT_EQ(r.size(), 4u);
  ASSERT_TRUE(r[0]) << r[0].error().message;  // the attempt failed: the fallback answers
  EXPECT_EQ(r[0]->body, "cached");
  ASSERT_TRUE(r[1]) << r[1].error().message;  // the breaker refused: the fallback answers
  EXPECT_EQ(r[1]->body, "cached");
  ASSERT_FALSE(r[2]);  // the fallback failed: the request's own error
  EXPECT_EQ(r[2].error().kind, ErrorKind::rejected_by_breaker);
  ASSERT_FALSE(r[3]);  // declined for that key: the error stands
  EXPECT_EQ(r[3].error().kind, ErrorKind::status);
  EXPECT_EQ(s.fallbacks_used, 2u);
  EXPECT_EQ(s.fallbacks_failed, 1u);
  ASSERT_EQ(heard.kinds.size(), 2u);
  EXPECT_EQ(heard.kinds[0], FallbackKind::failed);
  EXPECT_EQ(heard.kinds[1], FallbackKind::rejected);
  EXPECT_NE(metrics.find("bulwark_fallback_calls_total{"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kind=\"rejected\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kind=\"failed\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("bulwark_http_client_fallback_used_total{client=\"fb\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("bulwark_http_client_fallback_failed_total{client=\"fb\"} 1"),
            std::string::npos)
      << metrics;
}

TEST(HttpFallback, AnswersForAFailingKeyInTheSyncClient) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  Upstream other([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  Client client(fallback_config(other.url("")));
  FallbackHeard heard;
  Subscription sub = client.subscribe(EventKind::fallback, [&](const Event& e) {
    heard.kinds.push_back(std::get<FallbackInfo>(e.info).kind);
  });
  std::vector<Result> r;
  r.push_back(client.get(up.url("/a")));
  r.push_back(client.get(up.url("/b")));
  r.push_back(client.get(up.url("/broken-fallback")));
  r.push_back(client.get(other.url("/a")));
  std::ostringstream metrics;
  client.write_metrics(metrics);
  expect_fallbacks(r, client.stats(), heard, metrics.str());
  EXPECT_EQ(up.requests(), 1);
}

TEST(HttpFallback, AnswersForAFailingKeyInTheAsyncClient) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  Upstream other([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), fallback_config(other.url("")));
  FallbackHeard heard;
  Subscription sub = client.subscribe(EventKind::fallback, [&](const Event& e) {
    heard.kinds.push_back(std::get<FallbackInfo>(e.info).kind);
  });
  std::vector<Result> r;
  const std::vector<std::string> urls = {up.url("/a"), up.url("/b"), up.url("/broken-fallback"),
                                         other.url("/a")};
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        for (const std::string& url : urls) r.push_back(co_await client.async_get(url));
      },
      ::asio::detached);
  io.run();
  std::ostringstream metrics;
  client.write_metrics(metrics);
  expect_fallbacks(r, client.stats(), heard, metrics.str());
  EXPECT_EQ(up.requests(), 1);
}

// Each retry is an event, with what became of the failed attempt's Retry-After: the
// first 503 says "Retry-After: 0" (honoured), the second a malformed one (ignored,
// the backoff applies), the third attempt succeeds. The same in both clients.
void retry_after_server(int n, httplib::Response& res) {
  if (n == 1) {
    res.status = 503;
    res.set_header("Retry-After", "0");
  } else if (n == 2) {
    res.status = 503;
    res.set_header("Retry-After", "soon");
  } else {
    res.set_content("ok", "text/plain");
  }
}

Config retry_config() {
  Config c;
  c.name = "re";
  c.breaker = {.name = "re", .consecutive_failures = 100, .open_duration = 1h};
  c.retry = RetryConfig{.name = "re", .max_attempts = 3, .backoff = Backoff::constant(1ms)};
  c.default_timeout = 10s;
  return c;
}

void expect_retries(const Result& r, const std::vector<Event>& heard,
                    const std::vector<std::string>& lines, const std::string& key) {
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(heard.size(), 2u);
  const auto first = std::get<RetryInfo>(heard[0].info);
  EXPECT_EQ(first.attempt, 2u);
  EXPECT_EQ(first.retry_after, RetryAfterUse::honoured);
  EXPECT_EQ(first.retry_after_delay, Nanos::zero());
  const auto second = std::get<RetryInfo>(heard[1].info);
  EXPECT_EQ(second.attempt, 3u);
  EXPECT_EQ(second.retry_after, RetryAfterUse::ignored);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("event=retry name=re key=" + key + " attempt=2 retry_after=honoured"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("attempt=3 retry_after=ignored"), std::string::npos) << lines[1];
}

TEST(HttpRetryEvents, EachRetrySaysWhatBecameOfRetryAfterInTheSyncClient) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { retry_after_server(n, res); });
  Client client(retry_config());
  std::vector<Event> heard;
  std::vector<std::string> lines;
  Subscription sub = client.subscribe(EventKind::retry, [&](const Event& e) {
    heard.push_back(e);
    lines.push_back(to_logfmt(e));
  });
  const Result r = client.get(up.url("/"));
  expect_retries(r, heard, lines, up.url(""));
}

TEST(HttpRetryEvents, EachRetrySaysWhatBecameOfRetryAfterInTheAsyncClient) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { retry_after_server(n, res); });
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), retry_config());
  std::vector<Event> heard;
  std::vector<std::string> lines;
  Subscription sub = client.subscribe(EventKind::retry, [&](const Event& e) {
    heard.push_back(e);
    lines.push_back(to_logfmt(e));
  });
  std::optional<Result> r;
  const std::string url = up.url("/");
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { r.emplace(co_await client.async_get(url)); },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(r);
  expect_retries(*r, heard, lines, up.url(""));
}

// The async client's one bulkhead is not the registry's: its refusals still reach
// subscribe() as rejection events, with the refused request's key. The first request
// holds the only slot while its transfer runs; the second, started behind it on the
// same executor, finds none (max_wait zero).
TEST(HttpAsyncBulkheadEvents, TheClientWideBulkheadsRejectionIsAnEvent) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  Config c = retry_config();
  c.bulkhead = {.name = "one-at-a-time", .max_concurrent = 1};
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), c);
  std::vector<std::string> heard;
  Subscription sub = client.subscribe(EventKind::rejection, [&](const Event& e) {
    EXPECT_TRUE(std::holds_alternative<BulkheadRejectionInfo>(e.info));
    heard.push_back(to_logfmt(e));
  });
  std::optional<Result> first, second;
  const std::string url = up.url("/");
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { first.emplace(co_await client.async_get(url)); },
      ::asio::detached);
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { second.emplace(co_await client.async_get(url)); },
      ::asio::detached);
  io.run();
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(*first);
  ASSERT_FALSE(*second);
  EXPECT_EQ(second->error().kind, ErrorKind::bulkhead_full);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0].find("event=rejection name=one-at-a-time key=" + up.url("") +
                          " component=bulkhead reason=full"),
            std::string::npos)
      << heard[0];
}

}  // namespace
}  // namespace bulwark::http
