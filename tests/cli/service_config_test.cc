// bulwark::config: one file of named policies for a service — parsing, the environment's
// overrides, deprecated keys, errors (file, line, key, suggestion) and reload().

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/config/config.h"
#include "bulwark/registry.h"
#include "config_test_support.h"

#ifdef BULWARK_TEST_HTTP
#include "bulwark/config/http.h"
#endif

namespace {

using namespace std::chrono_literals;
using bulwark::config::ConfigError;
using bulwark::config::Environment;

const std::string kFile = R"(# a service's policies
[breaker.reviews]
kind = "count"
window.size = 50
minimum_calls = 20
failure_rate = 0.3
half_open.probes = 4

[breaker.search]
kind = "time"
window = { length = "10s", buckets = 10 }
slow_call_rate = 0.5
slow_call_duration = "400ms"

[breaker.login]
consecutive_failures = 3

[retry.reviews]
max_attempts = 3
backoff = { kind = "exponential", initial = "50ms", multiplier = 2, max = "1s", jitter = "full" }

[retry_budget.reviews]
ratio = 0.2

[bulkhead.reviews]
max_concurrent = 20

[timeout]
reviews = "800ms"

[fallback.reviews]
on = ["breaker"]

[pipeline.reviews]
breaker = "reviews"
retry = "reviews"
retry_budget = "reviews"
bulkhead = "reviews"
timeout = "reviews"
fallback = "reviews"

[registry.hosts]
kind = "count"
policy = "reviews"
)";

bulwark::config::Policies parse(const std::string& text, const Environment& env = {}) {
  return bulwark::testing::parse_policies(text, env);
}
using bulwark::testing::expect_config_error;
constexpr auto& expect_error = expect_config_error;
constexpr auto& write = bulwark::testing::write_temp_file;

TEST(ServiceConfig, EveryKindOfPolicyByName) {
  const bulwark::config::Config cfg("svc.toml", parse(kFile), {});
  const auto reviews = cfg.breaker<bulwark::CountWindowBreaker>("reviews");
  EXPECT_EQ(reviews.name, "reviews");  // the table's name unless `name` says otherwise
  EXPECT_EQ(reviews.window.size, 50u);
  EXPECT_EQ(reviews.failure_rate, 0.3);
  EXPECT_EQ(reviews.half_open.probes, 4u);
  const auto search = cfg.breaker<bulwark::TimeWindowBreaker>("search");
  EXPECT_EQ(search.window.length, 10s);
  EXPECT_EQ(search.slow_call_duration, 400ms);
  EXPECT_EQ(cfg.breaker<bulwark::CircuitBreaker>("login").consecutive_failures, 3u);
  EXPECT_EQ(cfg.retry("reviews").max_attempts, 3u);
  EXPECT_FALSE(cfg.retry("reviews").random);  // the library's own thread-safe source
  EXPECT_EQ(cfg.retry_budget("reviews").ratio, 0.2);
  EXPECT_EQ(cfg.bulkhead("reviews").max_concurrent, 20u);
  EXPECT_EQ(cfg.timeout("reviews"), 800ms);
  EXPECT_TRUE(cfg.fallback("reviews").contains(bulwark::Reason::breaker_open));
  EXPECT_FALSE(cfg.fallback("reviews").contains(bulwark::Reason::timeout));
  const auto p = cfg.pipeline("reviews");
  ASSERT_TRUE(p.breaker && p.retry && p.retry_budget && p.bulkhead && p.timeout && p.fallback);
  EXPECT_EQ(p.breaker->as<bulwark::CountWindowConfig>().window.size, 50u);
  EXPECT_EQ(*p.timeout, 800ms);
  const auto hosts = cfg.registry("hosts");
  EXPECT_EQ(hosts.kind, bulwark::WindowKind::count);
  EXPECT_EQ(hosts.policy.name(), "reviews");
  EXPECT_TRUE(cfg.warnings().empty());
}

TEST(ServiceConfig, AskingForAMissingPolicyOrAnotherKindIsAClearError) {
  const bulwark::config::Config cfg("svc.toml", parse(kFile), {});
  try {
    (void)cfg.retry("search");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "retry.search");
    EXPECT_NE(e.message().find("there are \"reviews\""), std::string::npos) << e.what();
  }
  try {
    (void)cfg.breaker<bulwark::TimeWindowBreaker>("reviews");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "breaker.reviews.kind");
    EXPECT_NE(e.message().find("\"count\""), std::string::npos) << e.what();
  }
}

TEST(ServiceConfig, ErrorsNameFileLineKeyAndTheNearestKnownKey) {
  expect_error("[breaker.a]\nkind = \"count\"\nfailure_rate = 0.3\nhalf_open.probs = 3\n", {},
               "svc.toml:4:11", "breaker.a.half_open.probs", "did you mean \"probes\"?");
  expect_error("[breaker.a]\nkind = \"count\"\nfailure_rate = 1.3\n", {}, "svc.toml:3:16",
               "breaker.a.failure_rate", "must be in (0, 1]");
  expect_error("[retrys.a]\nmax_attempts = 2\n", {}, "svc.toml:1:2", "retrys",
               "did you mean \"retry\"?");
  expect_error("[breaker.a]\nconsecutive_failures = 2\n[pipeline.p]\nbreaker = \"b\"\n", {},
               "svc.toml:4:11", "pipeline.p.breaker",
               "no [breaker.b] in the file (there are \"a\")");
  expect_error(
      "[breaker.a]\nconsecutive_failures = 2\n[registry.r]\nkind = \"count\"\npolicy = \"a\"\n", {},
      "svc.toml:5:10", "registry.r.policy", "names a breaker of kind = \"consecutive\"");
}

// A bulkhead's `stripes` loads, and a value outside 1..64 is an error at that key.
TEST(ServiceConfig, ABulkheadsStripesLoadAndAreChecked) {
  const auto cfg = parse("[bulkhead.hot]\nmax_concurrent = 64\nstripes = 8\n[bulkhead.cold]\n");
  EXPECT_EQ(cfg.bulkheads.at("hot").stripes, 8u);
  EXPECT_EQ(cfg.bulkheads.at("cold").stripes, 1u);
  expect_error("[bulkhead.hot]\nstripes = 0\n", {}, "svc.toml:2:11", "bulkhead.hot.stripes",
               "must be between 1 and 64 (got 0)");
  expect_error("[bulkhead.hot]\nstripes = 65\n", {}, "svc.toml:2:11", "bulkhead.hot.stripes",
               "must be at most 64 (got 65)");
  expect_error("[bulkhead.hot]\nstripes = \"8\"\n", {}, "svc.toml:2:11", "bulkhead.hot.stripes",
               "expected a whole number");
}

TEST(ServiceConfig, DeprecatedKeysLoadWithWarnings) {
  const auto p = parse("[breaker.a]\nwindow = \"count\"\nwindow_size = 30\nfailure_rate = 0.5\n");
  EXPECT_EQ(p.breakers.at("a").as<bulwark::CountWindowConfig>().window.size, 30u);
  ASSERT_EQ(p.warnings.size(), 2u);
  EXPECT_EQ(p.warnings[1].field(), "breaker.a.window_size");
  EXPECT_NE(p.warnings[1].message().find("write \"window.size\""), std::string::npos);
}

TEST(ServiceConfig, EnvironmentVariablesOverrideSingleKeys) {
  const Environment env{{"BULWARK__BREAKER__REVIEWS__HALF_OPEN__PROBES", "7"},
                        {"BULWARK__BREAKER__REVIEWS__FAILURE_RATE", "0.25"},
                        {"BULWARK__BREAKER__SEARCH__WINDOW__LENGTH", "20s"},  // bare: a string
                        {"BULWARK__TIMEOUT__REVIEWS", "\"2s\""},
                        {"BULWARK__RETRY__REVIEWS__BACKOFF__MAX", "3s"},
                        {"OTHER__BREAKER__REVIEWS__FAILURE_RATE", "0.9"}};
  const auto p = parse(kFile, env);
  const auto& reviews = p.breakers.at("reviews").as<bulwark::CountWindowConfig>();
  EXPECT_EQ(reviews.half_open.probes, 7u);
  EXPECT_EQ(reviews.failure_rate, 0.25);
  EXPECT_EQ(p.breakers.at("search").as<bulwark::TimeWindowConfig>().window.length, 20s);
  EXPECT_EQ(p.timeouts.at("reviews"), 2s);
  EXPECT_EQ(p.retries.at("reviews").backoff.max(), 3s);
  // The pipeline sees the overridden parts.
  EXPECT_EQ(p.pipelines.at("reviews").breaker->as<bulwark::CountWindowConfig>().half_open.probes,
            7u);
}

TEST(ServiceConfig, ABadEnvironmentValueNamesTheVariable) {
  const std::string var = "environment variable BULWARK__BREAKER__REVIEWS__FAILURE_RATE";
  expect_error(kFile, {{"BULWARK__BREAKER__REVIEWS__FAILURE_RATE", "1.5"}}, var + ":1:5",
               "breaker.reviews.failure_rate", "must be in (0, 1]");
  expect_error(kFile, {{"BULWARK__BREAKER__REVIEWS__FAILURE_RATE", "high"}}, var + ":1:5",
               "breaker.reviews.failure_rate", "expected a number, got the string \"high\"");
  expect_error(kFile, {{"BULWARK__BREAKER__REVIEWS__HALF_OPEN__PROBS", "3"}},
               "environment variable BULWARK__BREAKER__REVIEWS__HALF_OPEN__PROBS:1:5",
               "breaker.reviews.half_open.probs", "did you mean \"probes\"?");
  expect_error(kFile, {{"BULWARK__BREAKER__NOPE__FAILURE_RATE", "0.3"}},
               "environment variable BULWARK__BREAKER__NOPE__FAILURE_RATE", "",
               "the file has no breaker named \"nope\"");
  expect_error(kFile, {{"BULWARK__BREAKERS__REVIEWS__FAILURE_RATE", "0.3"}},
               "environment variable BULWARK__BREAKERS__REVIEWS__FAILURE_RATE", "",
               "no section \"breakers\"");
}

TEST(ServiceConfig, ReloadTakesAValidFileAndKeepsTheOldOneOtherwise) {
  const std::string path = write("reload.toml", kFile);
  bulwark::config::Config cfg = bulwark::config::load_file(path, {});
  EXPECT_EQ(cfg.breaker<bulwark::CountWindowBreaker>("reviews").failure_rate, 0.3);

  std::string next = kFile;
  next.replace(next.find("failure_rate = 0.3"), 18, "failure_rate = 0.4");
  write("reload.toml", next);
  EXPECT_FALSE(cfg.reload().has_value());
  EXPECT_EQ(cfg.breaker<bulwark::CountWindowBreaker>("reviews").failure_rate, 0.4);

  // A file that does not check changes nothing, and says why.
  next.replace(next.find("failure_rate = 0.4"), 18, "failure_rate = 4.0");
  write("reload.toml", next);
  const auto error = cfg.reload();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->field(), "breaker.reviews.failure_rate");
  EXPECT_EQ(error->where().line, 6u);
  EXPECT_EQ(cfg.breaker<bulwark::CountWindowBreaker>("reviews").failure_rate, 0.4);
}

TEST(ServiceConfig, ARegistryIsBuiltFromItsNamedPolicy) {
  const bulwark::config::Config cfg("svc.toml", parse(kFile), {});
  const auto spec = cfg.registry("hosts");
  bulwark::RegistryOptions<std::string, bulwark::CountWindowBreaker> options;
  options.name = spec.name;
  options.breaker = spec.policy.as<bulwark::CountWindowConfig>();
  bulwark::BasicRegistry<std::string, bulwark::CountWindowBreaker> hosts(std::move(options));
  auto h = hosts.get("a.example");
  EXPECT_EQ(h->config().window.size, 50u);
}

// [http_client.NAME]: an HTTP client's own settings, checked at load; every key is
// carried by the bridge into http::Config (service_http_config_test).
const std::string kClients = kFile + R"(
[http_client.reviews]
key_by = "route"

[http_client.front]
name = "front-door"
pipeline = "reviews"

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
)";

TEST(ServiceConfig, AnHttpClientTableHoldsTheClientsSettings) {
  const bulwark::config::Config cfg("svc.toml", parse(kClients), {});
  const auto reviews = cfg.http_client("reviews");
  EXPECT_EQ(reviews.name, "reviews");
  EXPECT_EQ(reviews.pipeline, "reviews");  // a pipeline of the client's own name
  EXPECT_EQ(reviews.key_by, bulwark::config::HttpKeyBy::route);
  EXPECT_FALSE(reviews.default_timeout);  // unset: http::Config's default
  const auto front = cfg.http_client("front");
  EXPECT_EQ(front.name, "front-door");
  EXPECT_EQ(front.pipeline, "reviews");
  const auto c = cfg.http_client("catalog");
  EXPECT_EQ(c.pipeline, "");  // no [pipeline.catalog]: none
  EXPECT_EQ(c.key_by, bulwark::config::HttpKeyBy::host);
  EXPECT_EQ(c.default_timeout, 2s);
  EXPECT_EQ(c.attempt_timeout, 500ms);
  EXPECT_EQ(c.connect_timeout, 300ms);
  EXPECT_EQ(c.detailed_metrics, true);
  EXPECT_EQ(c.max_retry_after, 30s);
  EXPECT_EQ(c.max_body_bytes, 1048576u);
  EXPECT_EQ(c.max_header_bytes, 4096u);
  EXPECT_EQ(c.max_redirects, 3u);
  EXPECT_EQ(c.origin_headers, (std::vector<std::string>{"X-Api-Key", "X-Tenant"}));
  EXPECT_EQ(c.deadline_header, "Grpc-Timeout");
  EXPECT_EQ(c.deadline_header_format, bulwark::DeadlineHeaderFormat::milliseconds);
  EXPECT_EQ(c.idempotency_header, "X-Request-Id");
  EXPECT_EQ(c.make_idempotency_keys, true);
  EXPECT_EQ(c.max_idle_handles, 4u);
  EXPECT_EQ(c.user_agent, "catalog/2.1");
  try {
    (void)cfg.http_client("search");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "http_client.search");
    EXPECT_NE(e.message().find("there are \"catalog\", \"front\", \"reviews\""), std::string::npos)
        << e.what();
  }
}

TEST(ServiceConfig, AnHttpClientsBadValuesAreErrorsAtTheirKey) {
  const auto bad = [](const std::string& body, const std::string& where, const std::string& key,
                      const std::string& says) {
    expect_error("[http_client.a]\n" + body, {}, where, "http_client.a." + key, says);
  };
  bad("key_by = \"path\"\n", "svc.toml:2:10", "key_by",
      "must be one of \"host\", \"route\" (got \"path\")");
  bad("default_timeout = \"0s\"\n", "svc.toml:2:19", "default_timeout", "must be positive");
  bad("connect_timeout = 2\n", "svc.toml:2:19", "connect_timeout", "a bare number has no unit");
  bad("conect_timeout = \"1s\"\n", "svc.toml:2:1", "conect_timeout",
      "did you mean \"connect_timeout\"?");
  bad("max_header_bytes = 100\n", "svc.toml:2:20", "max_header_bytes", "must be at least 256");
  bad("max_body_bytes = 2147483648\n", "svc.toml:2:18", "max_body_bytes",
      "must be at most 1073741824");
  bad("max_body_bytes = 0\n", "svc.toml:2:18", "max_body_bytes", "must be positive");
  bad("max_redirects = 51\n", "svc.toml:2:17", "max_redirects", "must be at most 50");
  bad("max_idle_handles = -1\n", "svc.toml:2:20", "max_idle_handles", "must not be negative");
  bad("deadline_header = \"X Timeout\"\n", "svc.toml:2:19", "deadline_header",
      "must be a header name or empty");
  bad("deadline_header_format = \"grpc\"\n", "svc.toml:2:26", "deadline_header_format",
      "must be one of \"grpc_timeout\", \"milliseconds\"");
  bad("idempotency_header = \"\"\n", "svc.toml:2:22", "idempotency_header",
      "must be a header name");
  bad("origin_headers = [\"X-Api-Key\", 3]\n", "svc.toml:2:32", "origin_headers",
      "expected header names (strings), got the integer 3");
  bad("user_agent = \"a\\nb\"\n", "svc.toml:2:14", "user_agent",
      "must not contain control characters");
  bad("name = \"\"\n", "svc.toml:2:8", "name", "must not be empty");
  bad("pipeline = \"\"\n", "svc.toml:2:12", "pipeline", "must not be empty");
  // The pipeline must be in the file: the nearest name is suggested.
  expect_error("[pipeline.reviews]\n[http_client.a]\npipeline = \"review\"\n", {}, "svc.toml:3:12",
               "http_client.a.pipeline",
               "no [pipeline.review] in the file (did you mean \"reviews\"?)");
  expect_error("[pipeline.search]\n[http_client.a]\npipeline = \"reviews\"\n", {}, "svc.toml:3:12",
               "http_client.a.pipeline",
               "no [pipeline.reviews] in the file (there are \"search\")");
  // One field in one place: a pipeline's timeout is the client's attempt_timeout.
  expect_error(
      "[timeout]\nt = \"1s\"\n[pipeline.a]\ntimeout = \"t\"\n[http_client.a]\n"
      "attempt_timeout = \"500ms\"\n",
      {}, "svc.toml:6:19", "http_client.a.attempt_timeout", "is set by [pipeline.a] too");
}

TEST(ServiceConfig, AnHttpClientsKeysTakeEnvironmentOverrides) {
  const auto p = parse(kClients, {{"BULWARK__HTTP_CLIENT__REVIEWS__KEY_BY", "host"},
                                  {"BULWARK__HTTP_CLIENT__CATALOG__DEFAULT_TIMEOUT", "3s"},
                                  {"BULWARK__HTTP_CLIENT__CATALOG__ORIGIN_HEADERS", "[\"X-Key\"]"},
                                  {"BULWARK__HTTP_CLIENT__FRONT__USER_AGENT", "front/1"}});
  EXPECT_EQ(p.http_clients.at("reviews").key_by, bulwark::config::HttpKeyBy::host);
  EXPECT_EQ(p.http_clients.at("catalog").default_timeout, 3s);
  EXPECT_EQ(p.http_clients.at("catalog").origin_headers, std::vector<std::string>{"X-Key"});
  EXPECT_EQ(p.http_clients.at("front").user_agent, "front/1");
  const std::string var = "BULWARK__HTTP_CLIENT__CATALOG__CONNECT_TIMEOUT";
  expect_error(kClients, {{var, "0s"}}, "environment variable " + var + ":1:5",
               "http_client.catalog.connect_timeout", "must be positive");
  expect_error(kClients, {{"BULWARK__HTTP_CLIENT__FRONT__PIPELINE", "nosuch"}},
               "environment variable BULWARK__HTTP_CLIENT__FRONT__PIPELINE:1:5",
               "http_client.front.pipeline", "no [pipeline.nosuch] in the file");
}

TEST(ServiceConfig, ReloadRereadsAnHttpClientAndKeepsItOnABadValue) {
  const std::string path = write("http_client.toml", kClients);
  bulwark::config::Config cfg = bulwark::config::load_file(path, {});
  EXPECT_EQ(cfg.http_client("catalog").max_redirects, 3u);
  std::string next = kClients;
  next.replace(next.find("max_redirects = 3"), 17, "max_redirects = 5");
  write("http_client.toml", next);
  ASSERT_FALSE(cfg.reload().has_value());
  EXPECT_EQ(cfg.http_client("catalog").max_redirects, 5u);

  next.replace(next.find("max_redirects = 5"), 17, "max_redirects = 500");
  write("http_client.toml", next);
  const auto error = cfg.reload();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->field(), "http_client.catalog.max_redirects");
  EXPECT_EQ(cfg.http_client("catalog").max_redirects, 5u);
}

#ifdef BULWARK_TEST_HTTP
// An HTTP client's hosts get a pipeline's parts from the file, and a reload reaches
// their live breakers.
TEST(ServiceConfig, AnHttpClientTakesAPipelineAndItsReload) {
  const std::string path = write("http.toml", kFile);
  bulwark::config::Config cfg = bulwark::config::load_file(path, {});
  const bulwark::http::Config c = bulwark::config::http_client(cfg, "reviews");
  EXPECT_EQ(c.bulkhead.max_concurrent, 20u);
  EXPECT_EQ(c.retry.max_attempts, 3u);
  EXPECT_DOUBLE_EQ(c.budget.ratio, 0.2);
  EXPECT_EQ(c.attempt_timeout, 800ms);
  bulwark::http::Client client(c);
  const auto breaker = client.breaker_for("http://reviews.example/");
  ASSERT_NE(breaker.get_if<bulwark::CountWindowBreaker>(), nullptr);
  EXPECT_EQ(breaker.get_if<bulwark::CountWindowBreaker>()->config().failure_rate, 0.3);

  std::string next = kFile;
  next.replace(next.find("failure_rate = 0.3"), 18, "failure_rate = 0.4");
  write("http.toml", next);
  ASSERT_FALSE(cfg.reload().has_value());
  bulwark::config::reconfigure(client, cfg, "reviews");
  EXPECT_EQ(breaker.get_if<bulwark::CountWindowBreaker>()->config().failure_rate, 0.4);
  EXPECT_THROW((void)bulwark::config::http_client(cfg, "nosuch"), ConfigError);
}
#endif

}  // namespace
