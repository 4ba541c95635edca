// The text exposition, line by line: escaping, number formatting, family layout,
// several sources in one exposition, registry totals. The same output is checked by
// promtool and by the Python client's parser in tests/prometheus/.

#include "bulwark/prometheus.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using bulwark::ManualClock;
using bulwark::Outcome;
using bulwark::State;
namespace prom = bulwark::prometheus;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Reg = bulwark::BasicRegistry<std::string, Breaker>;

std::string escaped(std::string_view v) {
  std::string out;
  prom::append_label_value(out, v);
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// sample line without its value -> value
std::map<std::string, std::string> samples_of(const std::string& text) {
  std::map<std::string, std::string> m;
  for (const std::string& line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    m[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return m;
}

TEST(LabelValues, EscapeBackslashQuoteAndNewlineOnly) {
  EXPECT_EQ(escaped("host-1:443"), "host-1:443");
  EXPECT_EQ(escaped(R"(a"b)"), R"(a\"b)");
  EXPECT_EQ(escaped(R"(a\b)"), R"(a\\b)");
  EXPECT_EQ(escaped("a\nb"), R"(a\nb)");
  EXPECT_EQ(escaped("tab\there"), "tab\there");  // allowed as is
  EXPECT_EQ(escaped(""), "");
}

TEST(LabelValues, ValidUtf8PassesInvalidBytesBecomeEscapedHexText) {
  EXPECT_EQ(escaped("ünïcødé ☃ 🚀"), "ünïcødé ☃ 🚀");
  // Each invalid byte becomes the text \xHH, its backslash escaped for the format.
  EXPECT_EQ(escaped("a\xff"
                    "b"),
            R"(a\\xffb)");
  EXPECT_EQ(escaped("\xC3"), R"(\\xc3)");                             // truncated sequence
  EXPECT_EQ(escaped("\xC0\xAF"), R"(\\xc0\\xaf)");                    // overlong '/'
  EXPECT_EQ(escaped("\xED\xA0\x80"), R"(\\xed\\xa0\\x80)");           // a surrogate
  EXPECT_EQ(escaped("\xF4\x90\x80\x80"), R"(\\xf4\\x90\\x80\\x80)");  // above U+10FFFF
  EXPECT_EQ(escaped("\xC3\xA9\xFF\xC3\xA9"),
            "\xC3\xA9"
            R"(\\xff)"
            "\xC3\xA9");  // é, bad, é
  // Keys that differ only in invalid bytes stay distinct (U+FFFD made them one series).
  EXPECT_NE(escaped("a\xff"), escaped("a\xfe"));
  EXPECT_NE(escaped("a\xff"), escaped("a\xff\xff"));
}

TEST(Values, IntegersExactFloatsShortestSpecialsSpelled) {
  auto v = [](auto x) {
    std::string s;
    prom::append_value(s, x);
    return s;
  };
  EXPECT_EQ(v(std::uint64_t{0}), "0");
  EXPECT_EQ(v(std::numeric_limits<std::uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(v(0.3), "0.3");
  EXPECT_EQ(v(300.0), "300");
  EXPECT_EQ(v(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(v(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(v(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(Writer, FamilyHeaderAndSamples) {
  std::ostringstream out;
  {
    prom::Writer w(out);
    w.family("x_total", "counter", "Help with a \\ backslash\nand a newline.");
    w.sample("x_total", "", R"(name="a")", R"(kind="b")", std::uint64_t{3});
    w.sample("x_total", "", "", "", std::uint64_t{4});
    w.sample("y", "_sum", R"(name="a")", "", 0.5);
  }
  EXPECT_EQ(out.str(),
            "# HELP x_total Help with a \\\\ backslash\\nand a newline.\n"
            "# TYPE x_total counter\n"
            "x_total{name=\"a\",kind=\"b\"} 3\n"
            "x_total 4\n"
            "y_sum{name=\"a\"} 0.5\n");
}

TEST(Options, PrefixMustBeAMetricName) {
  EXPECT_TRUE(prom::validate({}));
  for (const char* bad : {"", "9lives", "has-dash", "sp ace"}) {
    auto ok = prom::validate({.prefix = bad});
    ASSERT_FALSE(ok) << bad;
    EXPECT_EQ(ok.error().field, "prefix");
  }
  EXPECT_TRUE(prom::validate({.prefix = "resilience4j"}));
  EXPECT_THROW(prom::Exposition({.prefix = "bad-prefix"}), bulwark::InvalidConfig);
}

class RegistryExposition : public ::testing::Test {
 protected:
  RegistryExposition() : reg(options(), clock) {}
  static Reg::Options options() {
    Reg::Options o;
    o.name = "hosts";
    o.breaker = {.name = "upstream", .consecutive_failures = 2, .open_duration = 30s};
    o.detailed_metrics = true;
    o.idle_ttl = 1h;
    return o;
  }
  ManualClock clock;
  Reg reg;
};

TEST_F(RegistryExposition, EveryFamilyHasHelpAndTypeOnceAndItsSamplesTogether) {
  reg.try_acquire("a")->record(Outcome::success, 3ms);
  reg.try_acquire("b")->record(Outcome::failure, 700ms);
  const std::string text = [&] {
    std::ostringstream out;
    prom::write(out, reg);
    return out.str();
  }();
  std::map<std::string, int> help, type;
  std::string current;
  std::map<std::string, bool> closed;
  for (const std::string& line : lines_of(text)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++help[name];
      if (!current.empty()) closed[current] = true;
      current = name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++type[name];
      EXPECT_EQ(name, current);
      continue;
    }
    const std::string metric = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(metric.rfind(current, 0), 0u) << metric << " outside its family " << current;
    EXPECT_FALSE(closed[current]);
  }
  for (const auto& [name, n] : help) {
    EXPECT_EQ(n, 1) << name;
    EXPECT_EQ(type[name], 1) << name;
    if (name.ends_with("_total")) {
      EXPECT_NE(text.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    }
  }
  EXPECT_TRUE(help.count("bulwark_circuitbreaker_state"));
  EXPECT_TRUE(help.count("bulwark_registry_keys"));
}

TEST_F(RegistryExposition, ValuesOfOneBreaker) {
  reg.try_acquire("a")->record(Outcome::success, 3ms);
  reg.try_acquire("a")->record(Outcome::failure, 700ms);
  reg.try_acquire("a")->record(Outcome::failure, 60s);  // opens
  EXPECT_FALSE(reg.try_acquire("a"));
  clock.advance(42s);
  auto s = samples_of([&] {
    std::ostringstream out;
    prom::write(out, reg);
    return out.str();
  }());
  const std::string l = R"(name="upstream",key="a")";
  EXPECT_EQ(s["bulwark_circuitbreaker_state{" + l + R"(,state="open"})"], "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_state{" + l + R"(,state="closed"})"], "0");
  EXPECT_EQ(s["bulwark_circuitbreaker_time_in_state_seconds{" + l + "}"], "42");
  EXPECT_EQ(s["bulwark_circuitbreaker_open_seconds{" + l + "}"], "42");
  EXPECT_EQ(s["bulwark_circuitbreaker_calls_total{" + l + R"(,kind="successful"})"], "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_calls_total{" + l + R"(,kind="failed"})"], "2");
  EXPECT_EQ(
      s["bulwark_circuitbreaker_not_permitted_calls_total{" + l + R"(,kind="not_permitted"})"],
      "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_opens_total{" + l + "}"], "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_transitions_total{" + l + R"(,from="closed",to="open"})"],
            "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_transitions_total{" + l + R"(,from="open",to="half_open"})"],
            "0");
  EXPECT_EQ(
      s.count("bulwark_circuitbreaker_transitions_total{" + l + R"(,from="closed",to="disabled"})"),
      0u);
  // Histogram: cumulative, +Inf equals _count.
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_bucket{" + l + R"(,le="0.0025"})"],
            "0");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_bucket{" + l + R"(,le="0.005"})"], "1");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_bucket{" + l + R"(,le="1"})"], "2");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_bucket{" + l + R"(,le="50"})"], "2");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_bucket{" + l + R"(,le="+Inf"})"], "3");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_count{" + l + "}"], "3");
  EXPECT_EQ(s["bulwark_circuitbreaker_call_duration_seconds_sum{" + l + "}"], "60.703");
  // Registry totals.
  EXPECT_EQ(s[R"(bulwark_registry_keys{registry="hosts"})"], "1");
  EXPECT_EQ(s[R"(bulwark_registry_breakers{registry="hosts",state="open"})"], "1");
  EXPECT_EQ(s[R"(bulwark_registry_max_open_seconds{registry="hosts"})"], "42");
  EXPECT_EQ(s[R"(bulwark_registry_calls_total{registry="hosts",kind="failed"})"], "2");
  EXPECT_EQ(s[R"(bulwark_registry_call_duration_seconds_count{registry="hosts"})"], "3");
  // The breaker does not classify slow calls yet: no family that would say 0.
  EXPECT_EQ(s.count("bulwark_circuitbreaker_slow_calls_total{" + l + R"(,kind="successful"})"), 0u);
}

TEST_F(RegistryExposition, TrickyKeysAreEscapedInLabels) {
  (void)reg.get("say \"hi\"\\\nbye ünï");
  const auto s = samples_of([&] {
    std::ostringstream out;
    prom::write(out, reg);
    return out.str();
  }());
  EXPECT_EQ(
      s.at(R"(bulwark_circuitbreaker_opens_total{name="upstream",key="say \"hi\"\\\nbye ünï"})"),
      "0");
}

TEST_F(RegistryExposition, KeysDifferingOnlyInInvalidUtf8AreDistinctSeries) {
  reg.try_acquire("a\xff")->record(Outcome::success);
  reg.try_acquire("a\xfe")->record(Outcome::failure);
  const auto s = samples_of([&] {
    std::ostringstream out;
    prom::write(out, reg);
    return out.str();
  }());
  EXPECT_EQ(
      s.at(R"(bulwark_circuitbreaker_calls_total{name="upstream",key="a\\xff",kind="successful"})"),
      "1");
  EXPECT_EQ(
      s.at(R"(bulwark_circuitbreaker_calls_total{name="upstream",key="a\\xfe",kind="failed"})"),
      "1");
}

TEST_F(RegistryExposition, PerBreakerSeriesCanBeTurnedOffForHugeRegistries) {
  for (int i = 0; i < 10; ++i) (void)reg.get(std::to_string(i));
  std::ostringstream out;
  prom::write(out, reg, {.per_breaker = false});
  EXPECT_EQ(out.str().find("bulwark_circuitbreaker_"), std::string::npos);
  EXPECT_NE(out.str().find("bulwark_registry_keys{registry=\"hosts\"} 10\n"), std::string::npos);
}

TEST_F(RegistryExposition, ResilienceFourJPrefixGivesTheirNames) {
  (void)reg.get("a");
  std::ostringstream out;
  prom::write(out, reg, {.prefix = "resilience4j"});
  EXPECT_NE(out.str().find("# TYPE resilience4j_circuitbreaker_state gauge\n"), std::string::npos);
  EXPECT_NE(
      out.str().find("# TYPE resilience4j_circuitbreaker_not_permitted_calls_total counter\n"),
      std::string::npos);
  // Resilience4j's Micrometer binder labels rejections kind="not_permitted".
  EXPECT_NE(
      out.str().find("resilience4j_circuitbreaker_not_permitted_calls_total{name=\"upstream\","
                     "key=\"a\",kind=\"not_permitted\"} 0\n"),
      std::string::npos)
      << out.str();
}

TEST_F(RegistryExposition, ComponentFamiliesAppearWhenComponentsReport) {
  auto h = reg.get("a");
  h.metrics()->components.record_fallback(bulwark::FallbackKind::rejected);
  h.metrics()->components.record_retry_call(bulwark::RetryCallKind::failed_with_retry);
  h.metrics()->components.bulkhead_rejected();
  (void)reg.get("quiet");
  const auto s = samples_of([&] {
    std::ostringstream out;
    prom::write(out, reg);
    return out.str();
  }());
  const std::string l = R"(name="upstream",key="a")";
  EXPECT_EQ(s.at("bulwark_fallback_calls_total{" + l + R"(,kind="rejected"})"), "1");
  EXPECT_EQ(s.at("bulwark_retry_calls_total{" + l + R"(,kind="failed_with_retry"})"), "1");
  EXPECT_EQ(s.at("bulwark_bulkhead_rejected_calls_total{" + l + "}"), "1");
  EXPECT_EQ(s.count(R"(bulwark_fallback_calls_total{name="upstream",key="quiet",kind="rejected"})"),
            0u);
  EXPECT_EQ(s.at(R"(bulwark_registry_fallback_calls_total{registry="hosts",kind="rejected"})"),
            "1");
}

TEST(Exposition, SeveralSourcesShareEachFamilyHeader) {
  ManualClock clock;
  Reg a({.name = "a", .breaker = {.name = "alpha"}}, clock);
  Reg b({.name = "b", .breaker = {.name = "beta"}}, clock);
  Breaker standalone({.name = "solo", .consecutive_failures = 1}, clock);
  bulwark::BreakerMetrics solo_metrics;
  auto policy = standalone.policy();
  const auto id = solo_metrics.track(policy, &standalone);
  (void)a.get("k");
  (void)b.get("k");
  standalone.try_acquire()->record(Outcome::failure);
  clock.advance(5min);
  prom::Exposition e;
  e.add(a);
  e.add(b);
  e.add(standalone, &solo_metrics, clock);
  const std::string text = e.str();
  std::size_t headers = 0;
  for (std::size_t p = text.find("# TYPE bulwark_circuitbreaker_state "); p != std::string::npos;
       p = text.find("# TYPE bulwark_circuitbreaker_state ", p + 1)) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u);
  const auto s = samples_of(text);
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_state{name="alpha",key="k",state="closed"})"), "1");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_state{name="beta",key="k",state="closed"})"), "1");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_state{name="solo",state="open"})"), "1");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_open_seconds{name="solo"})"), "300");
  EXPECT_EQ(
      s.at(R"(bulwark_circuitbreaker_transitions_total{name="solo",from="closed",to="open"})"),
      "1");
  EXPECT_EQ(s.at(R"(bulwark_registry_keys{registry="b"})"), "1");
  EXPECT_EQ(e.rows(), 3u);
  policy.remove_listener(id);
}

TEST(Exposition, StandaloneBreakerWithoutMetricsUsesTimeInState) {
  ManualClock clock;
  Breaker b({.name = "solo", .consecutive_failures = 1}, clock);
  b.try_acquire()->record(Outcome::failure);
  clock.advance(30s);
  prom::Exposition e;
  e.add(b, nullptr, clock);
  const auto s = samples_of(e.str());
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_open_seconds{name="solo"})"), "30");
  EXPECT_EQ(s.count(R"(bulwark_circuitbreaker_call_duration_seconds_count{name="solo"})"), 0u);
}

}  // namespace

namespace {

TEST(Exposition, WindowedBreakersShowRatesAndTheirWindow) {
  ManualClock clock;
  using Windowed = bulwark::BasicCircuitBreaker<ManualClock, bulwark::CountWindow>;
  bulwark::BasicRegistry<std::string, Windowed> reg({.name = "w",
                                                     .breaker = {.name = "win",
                                                                 .window = {.size = 4},
                                                                 .minimum_calls = 4,
                                                                 .failure_rate = 0.9,
                                                                 .slow_call_duration = 100ms,
                                                                 .consecutive_failures = 0}},
                                                    clock);
  reg.try_acquire("few")->record(Outcome::failure, 200ms);
  for (int i = 0; i < 3; ++i) reg.try_acquire("many")->record(Outcome::success, 10ms);
  reg.try_acquire("many")->record(Outcome::failure, 150ms);
  std::ostringstream out;
  prom::write(out, reg);
  const auto s = samples_of(out.str());
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_failure_ratio{name="win",key="few"})"), "NaN");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_failure_ratio{name="win",key="many"})"), "0.25");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_slow_call_ratio{name="win",key="many"})"), "0.25");
  EXPECT_EQ(
      s.at(R"(bulwark_circuitbreaker_buffered_calls{name="win",key="many",kind="successful"})"),
      "3");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_buffered_calls{name="win",key="many",kind="failed"})"),
            "1");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_slow_calls{name="win",key="few",kind="failed"})"), "1");
  EXPECT_EQ(s.at(R"(bulwark_circuitbreaker_flapping{name="win",key="many"})"), "0");
  EXPECT_NE(out.str().find("# TYPE bulwark_circuitbreaker_buffered_calls gauge\n"),
            std::string::npos);
}

TEST(Exposition, BreakersWithoutAWindowHaveNoRateSeries) {
  ManualClock clock;
  Reg reg({.name = "plain"}, clock);
  (void)reg.get("k");
  std::ostringstream out;
  prom::write(out, reg);
  EXPECT_EQ(out.str().find("failure_ratio"), std::string::npos);
  EXPECT_EQ(out.str().find("buffered_calls"), std::string::npos);
  EXPECT_NE(out.str().find("bulwark_circuitbreaker_flapping{name=\"default\",key=\"k\"} 0\n"),
            std::string::npos);
}

}  // namespace

#include "bulwark/bulkhead.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"
#include "support/host_guards.h"

namespace {

static_assert(bulwark::BulkheadLike<bulwark::Bulkhead>);
static_assert(bulwark::RetryBudgetLike<bulwark::RetryBudget>);
static_assert(bulwark::RetryLike<bulwark::Retry>);

using bulwark_test::HostGuards;

TEST(Exposition, PerKeyBulkheadAndRetryBudgetAreExposed) {
  ManualClock clock;
  bulwark::RegistryOptions<std::string, Breaker, HostGuards> o;
  o.name = "guarded";
  o.breaker.name = "api";
  o.extra_for = [&clock](const std::string& host) {
    return HostGuards{
        bulwark::BasicBulkhead<ManualClock>({.name = host, .max_concurrent = 2}, clock),
        bulwark::BasicRetryBudget<ManualClock>(
            {.name = host, .ratio = 0.5, .min_retries_per_second = 0, .max_tokens = 10}, clock)};
  };
  bulwark::BasicRegistry<std::string, Breaker, HostGuards> reg(std::move(o), clock);
  auto h = reg.get("db:5432");
  auto a = h.extra().bulkhead.try_acquire();
  auto b = h.extra().bulkhead.try_acquire();
  EXPECT_FALSE(h.extra().bulkhead.try_acquire());  // full: rejected
  for (int i = 0; i < 4; ++i) h.extra().budget.deposit();
  std::ostringstream out;
  prom::write(out, reg);
  const auto s = samples_of(out.str());
  const std::string l = R"(name="api",key="db:5432")";
  EXPECT_EQ(s.at("bulwark_bulkhead_concurrent_calls{" + l + "}"), "2");
  EXPECT_EQ(s.at("bulwark_bulkhead_available_concurrent_calls{" + l + "}"), "0");
  EXPECT_EQ(s.at("bulwark_bulkhead_max_allowed_concurrent_calls{" + l + "}"), "2");
  EXPECT_EQ(s.at("bulwark_bulkhead_rejected_calls_total{" + l + "}"), "1");
  EXPECT_EQ(std::stod(s.at("bulwark_retry_budget_tokens{" + l + "}")),
            h.extra().budget.snapshot().tokens);
  EXPECT_EQ(s.at(R"(bulwark_registry_bulkhead_concurrent_calls{registry="guarded"})"), "2");
}

}  // namespace
