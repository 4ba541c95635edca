// bulwark/config/http.h: a policies file's [http_client.NAME] makes an http::Config —
// every key arrives, the named pipeline's parts reach each key, a name without a client
// table still means the pipeline of that name, key_by = "route" gives each route its
// own breaker on real requests to a loopback server, and reconfigure() follows either.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "../http/upstream.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/config/config.h"
#include "bulwark/config/http.h"
#include "bulwark/http/client.h"

namespace {

using namespace std::chrono_literals;
using bulwark::config::ConfigError;

// What a request came to: "ok", or its error's kind.
std::string outcome(const bulwark::Expected<bulwark::http::Response, bulwark::http::Error>& r) {
  return r ? std::string("ok") : std::string(bulwark::http::to_string(r.error().kind));
}

const std::string kFile = R"(
[breaker.reviews]
kind = "count"
window.size = 50
failure_rate = 0.3

[breaker.once]
consecutive_failures = 1
open_duration = "1h"

[retry.reviews]
max_attempts = 3

[retry.once]
max_attempts = 1

[bulkhead.reviews]
max_concurrent = 20

[timeout]
reviews = "800ms"

[pipeline.reviews]
breaker = "reviews"
retry = "reviews"
bulkhead = "reviews"
timeout = "reviews"

[pipeline.strict]
breaker = "once"
retry = "once"

[http_client.front]
name = "front-door"
pipeline = "reviews"
key_by = "route"

[http_client.catalog]
key_by = "host"
default_timeout = "2s"
attempt_timeout = "500ms"
connect_timeout = "300ms"
detailed_metrics = true
max_retry_after = "30s"
max_body_bytes = 1048576
max_header_bytes = 4096
max_redirects = 3
origin_headers = ["X-Api-Key", "X-Tenant"]
deadline_header = "Grpc-Timeout"
deadline_header_format = "milliseconds"
idempotency_header = "X-Request-Id"
make_idempotency_keys = true
max_idle_handles = 4
user_agent = "catalog/2.1"

[http_client.by_route]
pipeline = "strict"
key_by = "route"

[http_client.by_host]
pipeline = "strict"
key_by = "host"
)";

bulwark::config::Config load(const std::string& text = kFile) {
  return bulwark::config::Config("svc.toml", bulwark::config::parse(text, "svc.toml"), {});
}

TEST(ServiceHttpConfig, EveryKeyOfAClientTableArrivesInHttpConfig) {
  const bulwark::http::Config d;  // the defaults, to see that each key changed its field
  const bulwark::http::Config c = bulwark::config::http_client(load(), "catalog");
  EXPECT_EQ(c.name, "catalog");
  EXPECT_EQ(c.key_by, bulwark::http::KeyBy::host);
  EXPECT_EQ(c.default_timeout, 2s);
  EXPECT_EQ(c.attempt_timeout, 500ms);
  EXPECT_EQ(c.connect_timeout, 300ms);
  EXPECT_TRUE(c.detailed_metrics);
  EXPECT_EQ(c.max_retry_after, 30s);
  EXPECT_EQ(c.max_body_bytes, 1048576u);
  EXPECT_EQ(c.max_header_bytes, 4096u);
  EXPECT_EQ(c.max_redirects, 3u);
  EXPECT_EQ(c.origin_headers, (std::vector<std::string>{"X-Api-Key", "X-Tenant"}));
  EXPECT_EQ(c.deadline_header, "Grpc-Timeout");
  EXPECT_EQ(c.deadline_header_format, bulwark::DeadlineHeaderFormat::milliseconds);
  EXPECT_EQ(c.idempotency_header, "X-Request-Id");
  EXPECT_TRUE(c.make_idempotency_keys);
  EXPECT_EQ(c.max_idle_handles, 4u);
  EXPECT_EQ(c.user_agent, "catalog/2.1");
  // Each differs from the default, so the checks above prove the key was carried.
  EXPECT_NE(c.default_timeout, d.default_timeout);
  EXPECT_NE(c.attempt_timeout, d.attempt_timeout);
  EXPECT_NE(c.connect_timeout, d.connect_timeout);
  EXPECT_NE(c.detailed_metrics, d.detailed_metrics);
  EXPECT_NE(c.max_retry_after, d.max_retry_after);
  EXPECT_NE(c.max_body_bytes, d.max_body_bytes);
  EXPECT_NE(c.max_header_bytes, d.max_header_bytes);
  EXPECT_NE(c.max_redirects, d.max_redirects);
  EXPECT_NE(c.deadline_header, d.deadline_header);
  EXPECT_NE(c.deadline_header_format, d.deadline_header_format);
  EXPECT_NE(c.idempotency_header, d.idempotency_header);
  EXPECT_NE(c.make_idempotency_keys, d.make_idempotency_keys);
  EXPECT_NE(c.max_idle_handles, d.max_idle_handles);
  EXPECT_NE(c.user_agent, d.user_agent);
  // No [pipeline.catalog]: the per-key parts are http::Config's.
  EXPECT_EQ(c.any_breaker.index(), 0u);
  EXPECT_EQ(c.retry.max_attempts, d.retry.max_attempts);
  EXPECT_NO_THROW(bulwark::http::Client{c});  // the client accepts what the file checked
}

TEST(ServiceHttpConfig, AClientGetsItsPipelinesPartsAndKeepsWhatTheFileDoesNotSet) {
  bulwark::http::Config base;
  base.user_agent = "from-code";
  base.classify = [](long) { return bulwark::Outcome::success; };
  const bulwark::http::Config c = bulwark::config::http_client(load(), "front", base);
  EXPECT_EQ(c.name, "front-door");
  EXPECT_EQ(c.key_by, bulwark::http::KeyBy::route);
  ASSERT_TRUE(std::holds_alternative<bulwark::CountWindowConfig>(c.any_breaker));
  EXPECT_EQ(std::get<bulwark::CountWindowConfig>(c.any_breaker).failure_rate, 0.3);
  EXPECT_EQ(c.retry.max_attempts, 3u);
  EXPECT_EQ(c.bulkhead.max_concurrent, 20u);
  EXPECT_EQ(c.attempt_timeout, 800ms);  // the pipeline's timeout
  EXPECT_EQ(c.user_agent, "from-code");
  EXPECT_TRUE(c.classify);
}

TEST(ServiceHttpConfig, ANameWithoutAClientTableIsStillAPipeline) {
  const bulwark::config::Config cfg = load();
  const bulwark::http::Config c = bulwark::config::http_client(cfg, "reviews");
  EXPECT_EQ(c.name, "http");  // no client settings: http::Config's
  ASSERT_TRUE(std::holds_alternative<bulwark::CountWindowConfig>(c.any_breaker));
  EXPECT_EQ(c.retry.max_attempts, 3u);
  EXPECT_EQ(c.attempt_timeout, 800ms);
  try {
    (void)bulwark::config::http_client(cfg, "nosuch");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "http_client.nosuch");
    EXPECT_NE(e.message().find("neither [http_client.nosuch] nor [pipeline.nosuch]"),
              std::string::npos)
        << e.what();
  }
}

// The same route twice fails its breaker open; another route of the same host is served.
// With key_by = "host" the one breaker refuses that route too: the key decided it.
TEST(ServiceHttpConfig, KeyByRouteGivesEachRouteItsOwnBreakerOnRealRequests) {
  bulwark::testing::Upstream up([](int, const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/bad")
      res.status = 500;
    else
      res.set_content("ok", "text/plain");
  });
  const bulwark::config::Config cfg = load();
  {
    bulwark::http::Client client(bulwark::config::http_client(cfg, "by_route"));
    EXPECT_EQ(outcome(client.get(up.url("/bad"))), "status");
    EXPECT_EQ(outcome(client.get(up.url("/bad"))), "rejected_by_breaker");
    EXPECT_EQ(outcome(client.get(up.url("/good"))), "ok");
  }
  {
    bulwark::http::Client client(bulwark::config::http_client(cfg, "by_host"));
    EXPECT_EQ(outcome(client.get(up.url("/bad"))), "status");
    EXPECT_EQ(outcome(client.get(up.url("/good"))), "rejected_by_breaker");
  }
  EXPECT_EQ(up.requests(), 3);  // one attempt each (retry.once); rejections never reach it
}

TEST(ServiceHttpConfig, ReconfigureFollowsTheClientsPipeline) {
  const std::string path = ::testing::TempDir() + "http_client_reload.toml";
  std::ofstream(path) << kFile;
  bulwark::config::Config cfg = bulwark::config::load_file(path, {});
  bulwark::http::Client client(bulwark::config::http_client(cfg, "front"));
  const auto breaker = client.breaker_for("http://reviews.example/");
  ASSERT_NE(breaker.get_if<bulwark::CountWindowBreaker>(), nullptr);

  std::string next = kFile;
  next.replace(next.find("failure_rate = 0.3"), 18, "failure_rate = 0.4");
  std::ofstream(path) << next;
  ASSERT_FALSE(cfg.reload().has_value());
  bulwark::config::reconfigure(client, cfg, "front");  // by the client's name: its pipeline
  EXPECT_EQ(breaker.get_if<bulwark::CountWindowBreaker>()->config().failure_rate, 0.4);
  // A client without a pipeline has no breaker of the file's to follow: nothing happens.
  bulwark::http::Client catalog(bulwark::config::http_client(cfg, "catalog"));
  EXPECT_NO_THROW(bulwark::config::reconfigure(catalog, cfg, "catalog"));
  EXPECT_THROW(bulwark::config::reconfigure(catalog, cfg, "nosuch"), ConfigError);
}

}  // namespace
