// bulwark::http::Client against real cpp-httplib servers on 127.0.0.1.
//
// Assertions are on what the server saw and on the client's typed errors. Where
// timing matters the server holds requests until the test releases them, so a loaded
// machine makes a test slower, never flaky.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "adaptive_setup.h"
#include "bulwark/config_error.h"
#include "bulwark/deadline_header.h"
#include "bulwark/http/client.h"
#include "bulwark/http/retry_after.h"
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

// A client whose retries wait 1 ms, so tests run fast.
Config quick(std::uint32_t attempts = 4) {
  Config c;
  c.name = "test";
  c.breaker = {.name = "test", .consecutive_failures = 100, .open_duration = 1h};
  c.retry =
      RetryConfig{.name = "test", .max_attempts = attempts, .backoff = Backoff::constant(1ms)};
  c.default_timeout = 10s;
  return c;
}

void fail_first(int failures, int n, httplib::Response& res, int status = 503) {
  if (n <= failures) {
    res.status = status;
  } else {
    res.set_content("ok", "text/plain");
  }
}

TEST(HttpClient, GetRetriesTwo503sThenSucceeds) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { fail_first(2, n, res); });
  Client client(quick());
  auto r = client.get(up.url("/reviews/1"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(up.requests(), 3);
  EXPECT_EQ(client.stats().attempts, 3u);
}

TEST(HttpClient, MetricsExposeTheHostsPoliciesAndTheClientsCounters) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { fail_first(1, n, res); });
  Client client(quick());
  ASSERT_TRUE(client.get(up.url("/a")));  // 503, then 200
  ASSERT_TRUE(client.get(up.url("/b")));
  std::ostringstream out;
  client.write_metrics(out);
  const std::string text = out.str();
  const std::string key = "name=\"test\",key=\"" + up.url("");  // the host: scheme://host:port
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("bulwark_circuitbreaker_calls_total{" + key + "\",kind=\"successful\"} 2"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_retries_total{" + key + "\"} 1")) << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_with_retry\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_without_retry\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_http_client_requests_in_flight{client=\"test\"} 0")) << text;
  EXPECT_TRUE(has("bulwark_bulkhead_max_allowed_concurrent_calls{" + key + "\"} 64")) << text;
  EXPECT_TRUE(has("bulwark_http_client_requests_total{client=\"test\"} 2")) << text;
  EXPECT_TRUE(has("bulwark_http_client_attempts_total{client=\"test\"} 3")) << text;
  EXPECT_TRUE(has("bulwark_http_client_hostile_retry_after_total{client=\"test\"} 0")) << text;

  std::ostringstream prefixed;
  client.write_metrics(prefixed, prometheus::ExpositionOptions{.prefix = "svc"});
  EXPECT_NE(prefixed.str().find("\nsvc_http_client_requests_total{client=\"test\"} 2\n"),
            std::string::npos);
  EXPECT_THROW(client.write_metrics(prefixed, prometheus::ExpositionOptions{.prefix = "1 bad"}),
               InvalidConfig);
}

// bulwark_retry_calls_total{kind}: one per request through the host's retry, by how
// it ended (Resilience4j's kinds); a request the breaker turned away is not a call.
TEST(HttpClient, RetryCallsAreCountedByHowTheyEnded) {
  std::atomic<int> flaky{0};
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/ok") {
      res.set_content("ok", "text/plain");
    } else if (req.path == "/flaky" && flaky++ == 0) {
      res.status = 503;
    } else if (req.path == "/flaky") {
      res.set_content("ok", "text/plain");
    } else if (req.path == "/missing") {
      res.status = 404;
    } else {
      res.status = 503;
    }
  });
  Config c = quick(2);
  Client client(c);
  EXPECT_TRUE(client.get(up.url("/ok")));        // successful_without_retry
  EXPECT_TRUE(client.get(up.url("/ok")));        // successful_without_retry
  EXPECT_TRUE(client.get(up.url("/flaky")));     // successful_with_retry
  EXPECT_FALSE(client.get(up.url("/down")));     // failed_with_retry
  EXPECT_FALSE(client.get(up.url("/missing")));  // failed_without_retry (a 404: not retried)
  std::ostringstream out;
  client.write_metrics(out);
  const std::string text = out.str();
  const std::string key = "name=\"test\",key=\"" + up.url("");
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_without_retry\"} 2"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"successful_with_retry\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"failed_with_retry\"} 1")) << text;
  EXPECT_TRUE(has("bulwark_retry_calls_total{" + key + "\",kind=\"failed_without_retry\"} 1"))
      << text;
  EXPECT_TRUE(has("bulwark_retry_retries_total{" + key + "\"} 2")) << text;
  // The registry's totals add them up.
  EXPECT_TRUE(has(
      "bulwark_registry_retry_calls_total{registry=\"test\",kind=\"successful_without_retry\"} 2"))
      << text;
}

TEST(HttpClient, PostWithMadeKeyRetriesWithTheSameKey) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { fail_first(2, n, res); });
  Config c = quick();
  c.make_idempotency_keys = true;
  Client client(c);
  auto r = client.request({.method = "POST", .url = up.url("/orders"), .body = "{}"});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(up.requests(), 3);
  const auto keys = up.keys();
  EXPECT_FALSE(keys[0].empty());
  EXPECT_EQ(keys, (std::vector<std::string>{keys[0], keys[0], keys[0]}));
  EXPECT_EQ(up.methods(), (std::vector<std::string>{"POST", "POST", "POST"}));
  // The next logical operation gets a new key.
  (void)client.request({.method = "POST", .url = up.url("/orders"), .body = "{}"});
  EXPECT_NE(up.keys().back(), keys[0]);
}

TEST(HttpClient, PostWithCallerKeyUsesItOnEveryAttempt) {
  Upstream up([](int n, const httplib::Request&, httplib::Response& res) { fail_first(1, n, res); },
              "X-Request-Key");
  Config c = quick();
  c.idempotency_header = "X-Request-Key";
  Client client(c);
  auto r = client.request(
      {.method = "PATCH", .url = up.url("/orders/7"), .body = "{}", .idempotency_key = "op-7"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(up.keys(), (std::vector<std::string>{"op-7", "op-7"}));
}

TEST(HttpClient, PostWithoutKeyIsNotRetried) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { fail_first(2, n, res); });
  Client client(quick());
  auto r = client.request({.method = "POST", .url = up.url("/orders"), .body = "{}"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::status);
  EXPECT_EQ(r.error().status, 503);
  EXPECT_EQ(r.error().reason, Reason::call_error);
  EXPECT_EQ(r.error().attempts, 1u);
  EXPECT_EQ(up.requests(), 1);
  EXPECT_EQ(up.keys(), (std::vector<std::string>{""}));
}

TEST(HttpClient, SlowUpstreamIsCutByTheDeadline) {
  Upstream up(Upstream::Holding{"late"});  // answers only when the test ends
  Config c = quick(50);
  c.attempt_timeout = 100ms;
  Client client(c);
  auto r = client.request({.url = up.url("/slow"), .timeout = 500ms});
  // The request returned while the server still held every attempt: the deadline cut it.
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::timeout);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_GE(r.error().attempts, 1u);
  EXPECT_LT(r.error().attempts, 50u) << "the deadline, not max_attempts, ended it";
  EXPECT_TRUE(up.wait_in_handler(1));
}

TEST(HttpClient, ConnectionRefusedIsATransportFailureAndRetried) {
  Client client(quick(2));
  auto r = client.get("http://127.0.0.1:" + std::to_string(bulwark::testing::closed_port()) + "/");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::transport);
  EXPECT_EQ(r.error().outcome(), Outcome::failure);
  EXPECT_EQ(r.error().reason, Reason::retries_exhausted);
  EXPECT_EQ(r.error().attempts, 2u);
  EXPECT_FALSE(r.error().message.empty());
}

// The server's Retry-After replaces the backoff: with an hour's backoff the retry
// would not fit the minute's deadline (the request would end at once); with the
// server's second it does. No clock is read: the verdict is the request count.
TEST(HttpClient, RetryAfterSecondsReplacesTheBackoff) {
  Upstream up([](int n, const httplib::Request&, httplib::Response& res) {
    if (n == 1) {
      res.status = 503;
      res.set_header("Retry-After", "1");
    } else {
      res.set_content("ok", "text/plain");
    }
  });
  Config c = quick();
  c.retry.backoff = Backoff::constant(1h);
  Client client(c);
  auto r = client.request({.url = up.url(), .timeout = 60s});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(up.requests(), 2);
  // And without the server's hint, the hour's backoff ends the request at once.
  Upstream plain([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  auto ended = client.request({.url = plain.url(), .timeout = 60s});
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(plain.requests(), 1);
}

TEST(HttpClient, RetryAfterPastTheDeadlineEndsAtOnceAndReachesTheCaller) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_header("Retry-After", "30");
  });
  Client client(quick());
  auto r = client.request({.url = up.url(), .timeout = 2s});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
  EXPECT_EQ(r.error().retry_after, 30s);
  EXPECT_EQ(r.error().attempts, 1u);
  EXPECT_EQ(up.requests(), 1);
}

TEST(HttpClient, RetryAfterHttpDate) {
  // The date is 100 s after the server answers; the client measures it when it reads
  // it. The bounds below follow from the clock readings around the request, so a
  // slow machine cannot break them.
  const auto before = std::chrono::system_clock::now();
  Upstream up([&](int, const httplib::Request&, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", format_http_date(std::chrono::system_clock::now() + 100s));
  });
  Client client(quick());
  auto r = client.request({.url = up.url(), .timeout = 10s});
  const auto after = std::chrono::system_clock::now();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 429);
  ASSERT_TRUE(r.error().retry_after_hint());
  const Nanos hint = *r.error().retry_after_hint();
  EXPECT_LE(hint, 100s);
  EXPECT_GE(hint, std::chrono::floor<std::chrono::seconds>(before + 100s) - after);
  if (hint > 10s) {  // longer than the whole request may take: no wait was started
    EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
    EXPECT_EQ(r.error().retry_after, hint);
    EXPECT_EQ(up.requests(), 1);
  }
}

TEST(HttpClient, HostileRetryAfterIsIgnoredAndCounted) {
  const std::vector<std::string> hostile = {"-5",  "99999999999999999999999999",    "soon", "3600",
                                            "1.5", "Sun, 06 Nov 1994 08:49:37 UTC", "5 s"};
  // Odd requests fail with the next hostile value, even ones succeed.
  Upstream up([&](int n, const httplib::Request&, httplib::Response& res) {
    if (n % 2 == 1) {
      res.status = 503;
      res.set_header("Retry-After", hostile[static_cast<std::size_t>(n / 2) % hostile.size()]);
    } else {
      res.set_content("ok", "text/plain");
    }
  });
  Client client(quick());
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    auto r = client.request({.url = up.url(), .timeout = 5s});
    ASSERT_TRUE(r) << "'" << hostile[i] << "': " << r.error().message;
    EXPECT_EQ(up.requests(), static_cast<int>(2 * (i + 1))) << "retried on the backoff";
    EXPECT_EQ(client.stats().hostile_retry_after, i + 1) << hostile[i];
  }
}

TEST(HttpClient, BreakerOpensAndFailsFastWithRetryAfter) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 500; });
  Config c = quick(1);
  c.breaker = {.name = "test", .consecutive_failures = 2, .open_duration = 1h};
  Client client(c);
  const auto before_open = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i) {
    auto r = client.get(up.url());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().status, 500);
  }
  auto r = client.get(up.url("/other-path-same-host"));
  const auto since_open = std::chrono::steady_clock::now() - before_open;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::rejected_by_breaker);
  EXPECT_EQ(r.error().attempts, 0u);
  // The open period's remainder: at most the hour, at least the hour less what passed.
  EXPECT_LE(r.error().retry_after, 1h);
  EXPECT_GE(r.error().retry_after, 1h - since_open);
  EXPECT_EQ(up.requests(), 2);
  EXPECT_EQ(client.breaker_for(up.url())->state(), State::open);
}

TEST(HttpClient, RouteKeysSeparateBreakers) {
  Upstream up([](int, const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/bad")
      res.status = 500;
    else
      res.set_content("ok", "text/plain");
  });
  Config c = quick(1);
  c.key_by = KeyBy::route;
  c.breaker = {.name = "test", .consecutive_failures = 1, .open_duration = 1h};
  Client client(c);
  EXPECT_FALSE(client.get(up.url("/bad")));
  EXPECT_EQ(client.get(up.url("/bad")).error().kind, ErrorKind::rejected_by_breaker);
  EXPECT_TRUE(client.get(up.url("/good")));
}

TEST(HttpClient, FourXxIsNotRetriedAndIgnoredByTheBreaker) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content("no such review", "text/plain");
  });
  Config c = quick();
  c.breaker = {.name = "test", .consecutive_failures = 2, .open_duration = 1h};
  Client client(c);
  for (int i = 0; i < 5; ++i) {
    auto r = client.get(up.url("/reviews/404"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ErrorKind::status);
    EXPECT_EQ(r.error().status, 404);
    EXPECT_EQ(r.error().outcome(), Outcome::ignored);
    EXPECT_EQ(r.error().reason, Reason::call_error);
    ASSERT_TRUE(r.error().response);
    EXPECT_EQ(r.error().response->body, "no such review");
  }
  EXPECT_EQ(up.requests(), 5) << "one request each: never retried";
  EXPECT_EQ(client.breaker_for(up.url())->state(), State::closed);
}

TEST(HttpClient, ClassificationIsConfigurable) {
  Upstream up(
      [](int n, const httplib::Request&, httplib::Response& res) { fail_first(1, n, res, 409); });
  Config c = quick();
  c.classify = [](long s) { return s == 409 ? Outcome::failure : Outcome::success; };
  Client client(c);
  auto r = client.get(up.url());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(up.requests(), 2);
}

TEST(HttpClient, BodyCap) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(5000, 'x'), "text/plain");
  });
  Config c = quick();
  c.max_body_bytes = 1000;
  Client client(c);
  auto r = client.get(up.url());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::body_too_large);
  EXPECT_NE(r.error().message.find("max_body_bytes"), std::string::npos);
  EXPECT_EQ(up.requests(), 1) << "not retried";
  c.max_body_bytes = 5000;
  Client roomy(c);
  EXPECT_TRUE(roomy.get(up.url()));
}

TEST(HttpClient, RedirectsAreOffByDefaultAndBoundedWhenOn) {
  Upstream up([](int, const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/final") {
      res.set_content("here", "text/plain");
    } else if (req.path == "/loop") {
      res.set_redirect("/loop");
    } else {
      res.set_redirect("/final");
    }
  });
  Client off(quick());
  auto r = off.get(up.url("/start"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::redirect);
  EXPECT_EQ(r.error().status, 302);
  EXPECT_NE(r.error().message.find("/final"), std::string::npos);

  Config c = quick();
  c.max_redirects = 3;
  Client on(c);
  auto followed = on.get(up.url("/start"));
  ASSERT_TRUE(followed) << followed.error().message;
  EXPECT_EQ(followed->body, "here");
  const int before = up.requests();
  auto looped = on.get(up.url("/loop"));
  ASSERT_FALSE(looped);
  EXPECT_EQ(looped.error().kind, ErrorKind::redirect);
  EXPECT_EQ(looped.error().outcome(), Outcome::ignored) << "the caller's limit";
  EXPECT_EQ(looped.error().attempts, 4u) << "the request and 3 redirects, none retried";
  EXPECT_EQ(up.requests() - before, 4);
}

TEST(HttpClient, BadInputIsRejectedBeforeSending) {
  Upstream up([](int, const httplib::Request&, httplib::Response& res) { res.status = 200; });
  Client client(quick());
  const std::vector<Request> bad = {
      {.url = "not a url"},
      {.url = "ftp://127.0.0.1/"},
      {.method = "GE T", .url = up.url()},
      {.url = up.url(), .headers = {{"X-Evil", "a\r\nInjected: yes"}}},
      {.url = up.url(), .headers = {{"Bad Name", "v"}}},
  };
  for (const Request& req : bad) {
    auto r = client.request(req);
    ASSERT_FALSE(r) << req.url;
    EXPECT_EQ(r.error().kind, ErrorKind::invalid_request) << req.url;
    EXPECT_FALSE(r.error().message.empty());
  }
  EXPECT_EQ(up.requests(), 0);
}

TEST(HttpClient, InvalidConfigNamesTheField) {
  Config c = quick();
  c.default_timeout = Nanos::zero();
  try {
    Client client(c);
    FAIL() << "accepted a zero default_timeout";
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "default_timeout");
  }
  c = quick();
  c.retry.max_attempts = 0;
  EXPECT_THROW(Client client(c), InvalidConfig);
  c = quick();
  c.idempotency_header = "Bad Header";
  EXPECT_THROW(Client client(c), InvalidConfig);
}

TEST(HttpClient, ReusesHandlesAndConnections) {
  std::mutex mu;
  std::set<int> client_ports;
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard lock(mu);
      client_ports.insert(req.remote_port);
    }
    res.set_content("ok", "text/plain");
  });
  Client client(quick());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client.get(up.url()));
  EXPECT_EQ(client.stats().handles_created, 1u);
  EXPECT_EQ(client_ports.size(), 1u) << "one kept-alive connection served all five";
}

TEST(HttpClient, CancellationAbortsTheTransfer) {
  Upstream up(Upstream::Holding{"late"});
  Client client(quick());
  std::stop_source stop;
  std::thread canceller([&] {
    up.wait_in_handler(1);
    stop.request_stop();
  });
  const Context ctx(SteadyClock{}, stop.get_token());
  auto r = client.request({.url = up.url(), .timeout = 20s}, ctx);
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::cancelled);
  EXPECT_EQ(r.error().reason, Reason::cancelled);
  EXPECT_EQ(client.breaker_for(up.url())->snapshot().failures, 0u) << "not the server's fault";
}

TEST(HttpClient, BulkheadFullRejectsAtOnce) {
  Upstream up(Upstream::Holding{"done"});
  Config c = quick();
  c.bulkhead = {.name = "test", .max_concurrent = 1};
  Client client(c);
  std::optional<Expected<Response, Error>> held;
  std::thread t([&] { held.emplace(client.get(up.url())); });
  ASSERT_TRUE(up.wait_in_handler(1));
  auto r = client.get(up.url());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::bulkhead_full);
  EXPECT_EQ(r.error().attempts, 0u);
  up.release();
  t.join();
  ASSERT_TRUE(held && *held);
  EXPECT_EQ(up.requests(), 1);
}

// Config::adaptive_limit: the host's adaptive limit gates requests in the bulkhead's
// place. With the limit at 2 (windows too long to move it here) two held requests take
// it, a third is refused at once, without an attempt, as a `rejection` event; the
// metrics show the limit, the two in flight and the refusal.
TEST(HttpClient, AdaptiveLimitPerHostRefusesAtTheLimitAndIsInTheMetrics) {
  Upstream up(Upstream::Holding{"done"});
  Config c = quick();
  c.bulkhead = {.name = "test", .max_concurrent = 1};  // not used: the limit replaces it
  c.adaptive_limit = steady_adaptive_limit("test-limit", 2);
  Client client(c);
  RejectionLog rejections(client);
  std::optional<Expected<Response, Error>> held1, held2;
  std::thread t1([&] { held1.emplace(client.get(up.url())); });
  std::thread t2([&] { held2.emplace(client.get(up.url())); });
  ASSERT_TRUE(up.wait_in_handler(2));
  auto r = client.get(up.url());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::bulkhead_full);
  EXPECT_EQ(r.error().attempts, 0u);

  std::ostringstream out;
  client.write_metrics(out);
  const std::string text = out.str();
  EXPECT_EQ(adaptive_series(text, "test-limit", up.url("")),
            (AdaptiveSeries{.limit = "2", .inflight = "2", .rejections = "1"}))
      << text;
  // The host's bulkhead does not gate requests: not reported.
  EXPECT_EQ(text.find("bulwark_bulkhead_max_allowed_concurrent_calls{"), std::string::npos) << text;

  up.release();
  t1.join();
  t2.join();
  ASSERT_TRUE(held1 && *held1);
  ASSERT_TRUE(held2 && *held2);
  EXPECT_EQ(up.requests(), 2);
  EXPECT_EQ(rejections.seen(), std::vector<std::string>{"test-limit " + up.url("")});
}

// A 503 or 429 is the upstream shedding load: the host's limit counts the request a
// drop; a 500 is the upstream's own error and teaches the limit nothing.
TEST(HttpClient, AdaptiveLimitPerHostCountsA503AsADropAndA500AsNothing) {
  Upstream up([](int, const httplib::Request& req, httplib::Response& res) {
    res.status = req.path == "/shed" ? 503 : req.path == "/busy" ? 429 : 500;
  });
  Config c = quick(1);
  c.adaptive_limit = steady_adaptive_limit("test-limit", 2);
  Client client(c);
  const std::string drops = "bulwark_adaptive_drops_total{name=\"test-limit " + up.url("") + "\"} ";
  auto metrics = [&] {
    std::ostringstream out;
    client.write_metrics(out);
    return out.str();
  };
  ASSERT_FALSE(client.get(up.url("/error")));
  EXPECT_TRUE(has_line(metrics(), drops + "0")) << metrics();
  ASSERT_FALSE(client.get(up.url("/shed")));
  EXPECT_TRUE(has_line(metrics(), drops + "1")) << metrics();
  ASSERT_FALSE(client.get(up.url("/busy")));
  EXPECT_TRUE(has_line(metrics(), drops + "2")) << metrics();
}

// Deadline propagation: each attempt carries the time it has left when it is sent, never
// more than the client had when the request started. (Not the server's receipt + value
// against the client's deadline: that runs late by the transit time, which the server's
// margin is for.)
TEST(HttpClient, DeadlineHeaderCarriesTheRemainingTimeToTheServer) {
  std::mutex mu;
  std::vector<std::string> values;
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    values.push_back(req.get_header_value("X-Request-Timeout"));
    res.set_content("ok", "text/plain");
  });
  Client client(quick());
  const Context ctx = Context(SteadyClock{}).with_timeout(2s);
  const Ticks start = now_ticks(SteadyClock{});
  ASSERT_TRUE(client.request({.url = up.url()}, ctx));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(values.size(), 1u);
    const auto seen = parse_timeout_header(values[0]);
    ASSERT_TRUE(seen) << values[0];
    EXPECT_LE(seen->count(), ctx.deadline().ticks() - start) << values[0];
    // What a server reading it at `start` would take as its deadline: not past ours.
    auto d = parse_deadline_header(values[0], Nanos::zero(), start);
    ASSERT_TRUE(d);
    EXPECT_LE(*d, ctx.deadline()) << values[0];
    EXPECT_EQ(values[0].back(), 'm') << values[0];  // milliseconds: 2 s left at most
  }

  // An attempt's own cap is what the server is told, in the format configured.
  Config c = quick();
  c.attempt_timeout = 300ms;
  c.deadline_header = "X-Deadline-Ms";
  c.deadline_header_format = DeadlineHeaderFormat::milliseconds;
  std::string ms;
  Upstream up2([&](int, const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    ms = req.get_header_value("X-Deadline-Ms");
    values.push_back(req.get_header_value("X-Request-Timeout"));
    res.set_content("ok", "text/plain");
  });
  Client capped(c);
  ASSERT_TRUE(capped.get(up2.url()));
  std::lock_guard lock(mu);
  auto t = parse_timeout_header(ms, DeadlineHeaderFormat::milliseconds);
  ASSERT_TRUE(t) << ms;
  EXPECT_LE(*t, 300ms);
  EXPECT_EQ(values.back(), "");  // only the configured header
}

TEST(HttpClient, DeadlineHeaderSetByTheRequestOrTurnedOff) {
  std::mutex mu;
  std::vector<std::string> values;
  Upstream up([&](int, const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    values.push_back(req.get_header_value("X-Request-Timeout") + "|" +
                     std::to_string(req.get_header_value_count("X-Request-Timeout")));
    res.set_content("ok", "text/plain");
  });
  Client client(quick());
  ASSERT_TRUE(client.request({.url = up.url(), .headers = {{"x-request-timeout", "5m"}}}));
  Config c = quick();
  c.deadline_header = "";
  Client off(c);
  ASSERT_TRUE(off.get(up.url()));
  std::lock_guard lock(mu);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0], "5m|1");  // the request's own value, sent once
  EXPECT_EQ(values[1], "|0");
  Config bad = quick();
  bad.deadline_header = "X Timeout";
  EXPECT_THROW(Client{bad}, InvalidConfig);
}

// Many threads share one client (its handle pool, its per-host breaker and bulkhead).
TEST(HttpClient, ConcurrentRequestsShareOneClient) {
  Upstream up([](int n, const httplib::Request&, httplib::Response& res) {
    if (n % 5 == 0) {
      res.status = 503;  // retried
    } else {
      res.set_content("ok", "text/plain");
    }
  });
  Config c = quick(3);
  constexpr int kThreads = 4, kPerThread = 25;
  c.max_idle_handles = kThreads;  // never more in use at once, so none is ever dropped
  Client client(c);
  std::atomic<int> ok{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          auto r = client.get(up.url("/r/" + std::to_string(t)));
          if (r && r->body == "ok") ++ok;
        }
      });
    }
  }
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  EXPECT_EQ(client.stats().requests, static_cast<std::uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(client.stats().attempts, static_cast<std::uint64_t>(up.requests()));
  EXPECT_LE(client.stats().handles_created, static_cast<std::uint64_t>(kThreads))
      << "handles are reused, not made per request";
}

// on_transition: a listener hears the failing origin's breaker open — with the origin
// as the key, on the thread whose request opened it — and nothing of a healthy origin.
// Once the subscription is reset it hears nothing more.
TEST(HttpClient, OnTransitionHearsTheOriginsBreakerOpen) {
  Upstream down([](int, const httplib::Request&, httplib::Response& res) { res.status = 503; });
  Upstream fine([](int, const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  Config c = quick(1);
  c.breaker.consecutive_failures = 2;
  Client client(c);
  struct Heard {
    std::string name, key;
    TransitionInfo info;
    std::thread::id thread;
  };
  std::vector<Heard> heard;  // written on this thread only (the requests run here)
  Subscription sub = client.on_transition([&](const Event& e) {
    heard.push_back({std::string(e.name), std::string(e.key), std::get<TransitionInfo>(e.info),
                     std::this_thread::get_id()});
  });
  EXPECT_TRUE(client.get(fine.url("/")));
  EXPECT_FALSE(client.get(down.url("/")));
  EXPECT_TRUE(heard.empty());
  EXPECT_FALSE(client.get(down.url("/")));  // the second failure opens the breaker
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].name, "test");
  EXPECT_EQ(heard[0].key, down.url(""));  // scheme://host:port
  EXPECT_EQ(heard[0].info.from, State::closed);
  EXPECT_EQ(heard[0].info.to, State::open);
  EXPECT_EQ(heard[0].info.reason, TransitionReason::consecutive_failures);
  EXPECT_EQ(heard[0].thread, std::this_thread::get_id());
  EXPECT_EQ(client.breaker_for(down.url("/"))->state(), State::open);

  sub.reset();
  client.breaker_for(down.url("/"))->reset();  // OPEN -> CLOSED
  EXPECT_EQ(heard.size(), 1u);
}

}  // namespace
}  // namespace bulwark::http
