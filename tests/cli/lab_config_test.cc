// The lab's configuration loading: durations, every library option by its own name,
// and errors that name the file, line and key — including the library's own
// validation errors mapped back to the TOML key.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/config/config.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"

namespace bulwark::lab {
namespace {

using namespace std::chrono_literals;

// --- durations -----------------------------------------------------------------

TEST(Duration, ParsesEveryUnitFractionsAndCompounds) {
  EXPECT_EQ(*parse_duration("800ms"), 800ms);
  EXPECT_EQ(*parse_duration("30s"), 30s);
  EXPECT_EQ(*parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(*parse_duration("2min"), 120s);
  EXPECT_EQ(*parse_duration("1h"), 3600s);
  EXPECT_EQ(*parse_duration("1h30min"), 5400s);
  EXPECT_EQ(*parse_duration("250us"), 250us);
  EXPECT_EQ(*parse_duration("7ns"), 7ns);
  EXPECT_EQ(*parse_duration("0s"), 0s);
  EXPECT_EQ(*parse_duration("0.1s"), 100ms) << "exact decimal arithmetic, no float drift";
  EXPECT_EQ(*parse_duration(".5s"), 500ms);
  EXPECT_EQ(*parse_duration("1.0000000005s"), 1000000001ns) << "rounded to the nearest ns";
}

TEST(Duration, RejectsAnythingElseWithAReason) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "empty"}, Case{"30", "no unit"}, Case{"3m", "ambiguous unit \"m\""},
        Case{"30 s", "a space between a number and its unit"}, Case{" 30s", "starts with a space"},
        Case{"30s ", "ends with a space"}, Case{"2min\t30s", "expected a number at \"\\t30s\""},
        Case{"2min 30", "no unit"}, Case{"-1s", "must not be negative"},
        Case{"1.s", "'.' without digits"}, Case{"10sec", "unknown unit \"sec\""},
        Case{"s", "expected a number"}, Case{"1e3ms", "unknown unit \"e\""},
        Case{"3000000h", "too large"}, Case{"99999999999999999999s", "too large"}}) {
    const auto d = parse_duration(c.text);
    ASSERT_FALSE(d) << c.text << " parsed as " << d->count() << "ns";
    EXPECT_NE(d.error().find(c.says), std::string::npos) << c.text << ": " << d.error();
  }
}

// Reports print a long duration in parts ("6min 9s"), the docs and an error's example
// show one ("2min 30s"): the parser reads them, with or without the spaces.
TEST(Duration, PartsMayBeSeparatedBySpacesAsTheReportsPrintThem) {
  EXPECT_EQ(*parse_duration("2min 30s"), 150s);
  EXPECT_EQ(*parse_duration("2min30s"), 150s);
  EXPECT_EQ(*parse_duration("1h 30min 15.5s"), 5415500ms);
  EXPECT_EQ(*parse_duration("6min  9s"), 369s) << "more than one space between parts";
  for (Nanos d : {Nanos(809'600us), Nanos(6'040ms), Nanos(119'960ms), Nanos(369s), Nanos(5415s),
                  Nanos(26h)}) {
    const auto back = parse_duration(format_readable(d));
    ASSERT_TRUE(back) << format_readable(d) << ": " << back.error();
    EXPECT_NEAR(static_cast<double>(back->count()), static_cast<double>(d.count()),
                0.01 * static_cast<double>(d.count()))
        << "the report's rounding only: " << format_readable(d);
  }
  EXPECT_NE(parse_duration("30 s").error().find("write \"30s\""), std::string::npos)
      << parse_duration("30 s").error();
}

// Every example an error gives is one the parser accepts.
TEST(Duration, TheExamplesErrorsGiveParse) {
  std::vector<std::string> errors = {parse_duration("").error(), parse_duration("s").error(),
                                     parse_duration("1x").error()};
  try {
    (void)parse_scenario(
        "duration = \"5min\"\n[arrivals]\nrate = 1\n[caller]\nworkers = 1\n[dependency]\n"
        "[[dependency.phases]]\nstart = \"0s\"\nlatency = \"1s\"\n[config.a.breaker]\n"
        "[fleet]\ninstances = 2\noutages = [\"2min\"]\n",
        "s.toml");
    ADD_FAILURE() << "an outage that is not a table is an error";
  } catch (const InputError& e) {
    errors.push_back(e.message());
  }
  int examples = 0;
  for (const std::string& error : errors) {
    // Every quoted text that starts with a digit.
    for (std::size_t open = error.find('"'); open != std::string::npos;
         open = error.find('"', open + 1)) {
      const std::size_t close = error.find('"', open + 1);
      if (close == std::string::npos) break;
      const std::string example = error.substr(open + 1, close - open - 1);
      open = close;
      if (example.empty() || example[0] < '0' || example[0] > '9') continue;
      if (example == "1x") continue;  // the input echoed back
      const auto d = parse_duration(example);
      EXPECT_TRUE(d) << "\"" << example << "\" from: " << error;
      ++examples;
    }
  }
  EXPECT_GE(examples, 7) << "the errors show examples";
}

TEST(Duration, FormatsInTheLargestExactUnit) {
  EXPECT_EQ(format_duration(800ms), "800ms");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(120s), "2min");
  EXPECT_EQ(format_duration(90s), "1.5min");
  EXPECT_EQ(format_duration(3600s), "1h");
  EXPECT_EQ(format_duration(1234567ns), "1234.567us");
  EXPECT_EQ(format_duration(0s), "0s");
  EXPECT_EQ(format_duration(-2s), "-2s");
  for (Nanos d : {Nanos(1), Nanos(999), Nanos(1001), Nanos(123456789), Nanos(61s), Nanos(7h)}) {
    EXPECT_EQ(*parse_duration(format_duration(d)), d) << format_duration(d);
  }
}

// --- the breaker ----------------------------------------------------------------

TEST(BreakerToml, EveryFieldIsSetByItsLibraryName) {
  const BreakerSpec s = parse_breaker(R"(
[breaker]
name = "reviews"
kind = "time"
consecutive_failures = 7
failure_rate = 0.3
slow_call_rate = 0.25
slow_call_duration = "400ms"
minimum_calls = 20
window.length = "12s"
window.buckets = 24
count_in_flight_slow_calls = false
open_duration = "30s"
open_growth.multiplier = 2.0
open_growth.max = "5min"
half_open.probes = 3
half_open.fraction = 0.1
half_open.ramp = [0.25, 0.5, 1.0]
half_open.max_wait = "45s"
flapping_period = "2min"
random_seed = 12345
)",
                                      "b.toml");
  ASSERT_EQ(s.window(), WindowKind::time);
  const TimeWindowConfig& c = s.as<TimeWindowConfig>();
  EXPECT_EQ(c.name, "reviews");
  EXPECT_EQ(c.consecutive_failures, 7u);
  EXPECT_EQ(c.failure_rate, 0.3);
  EXPECT_EQ(c.slow_call_rate, 0.25);
  EXPECT_EQ(c.slow_call_duration, 400ms);
  EXPECT_EQ(c.minimum_calls, 20u);
  EXPECT_EQ(c.window.length, 12s);
  EXPECT_EQ(c.window.buckets, 24u);
  EXPECT_FALSE(c.count_in_flight_slow_calls);
  EXPECT_EQ(c.open_duration, 30s);
  EXPECT_EQ(c.open_growth.multiplier, 2.0);
  EXPECT_EQ(c.open_growth.max, 5min);
  EXPECT_EQ(c.half_open.max_in_flight, std::nullopt);
  EXPECT_EQ(c.half_open.probes, 3u);
  EXPECT_EQ(c.half_open.fraction, 0.1);
  EXPECT_EQ(c.half_open.ramp, (std::vector<double>{0.25, 0.5, 1.0}));
  EXPECT_EQ(c.half_open.max_wait, 45s);
  EXPECT_EQ(c.flapping_period, 2min);
  EXPECT_EQ(c.half_open.random_seed, 12345u);
  // half_open.max_in_flight is the count-mode limit: set without a fraction, it is kept.
  const BreakerSpec counted =
      parse_breaker("[breaker]\nhalf_open.max_in_flight = 9\nhalf_open.probes = 3\n", "b.toml");
  EXPECT_EQ(counted.as<BreakerConfig>().half_open.max_in_flight, 9u);
}

TEST(BreakerToml, UnsetFieldsKeepTheLibraryDefaults) {
  const BreakerSpec s = parse_breaker("[breaker]\n", "b.toml");
  const BreakerConfig defaults;
  ASSERT_EQ(s.window(), WindowKind::none);
  EXPECT_EQ(s.as<BreakerConfig>().consecutive_failures, defaults.consecutive_failures);
  EXPECT_EQ(s.as<BreakerConfig>().open_duration, defaults.open_duration);
  // A windowed breaker has no consecutive-failure rule unless the file sets one.
  const BreakerSpec rated =
      parse_breaker("[breaker]\nkind = \"time\"\nfailure_rate = 0.5\n", "b.toml");
  EXPECT_EQ(rated.as<TimeWindowConfig>().consecutive_failures, 0u);
  EXPECT_EQ(rated.as<TimeWindowConfig>().window.length, TimeWindowConfig{}.window.length);
}

TEST(BreakerToml, CountWindowTakesWindowSize) {
  const BreakerSpec s =
      parse_breaker("[breaker]\nkind = \"count\"\nwindow.size = 50\nfailure_rate = 0.5\n", "b");
  ASSERT_EQ(s.window(), WindowKind::count);
  EXPECT_EQ(s.as<CountWindowConfig>().window.size, 50u);
}

// The error names file, line, column and the key, and says what is wrong.
void expect_error(const std::string& toml, const std::string& where, const std::string& key,
                  const std::string& says, bool scenario = false) {
  try {
    if (scenario) {
      (void)parse_scenario(toml, "s.toml");
    } else {
      (void)parse_breaker(toml, "b.toml");
    }
    ADD_FAILURE() << "no error for:\n" << toml;
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().to_string(), where) << e.what();
    EXPECT_EQ(e.field(), key) << e.what();
    EXPECT_NE(e.message().find(says), std::string::npos) << e.what();
  }
}

TEST(BreakerToml, UnknownKeysAreErrorsWithASuggestion) {
  expect_error("[breaker]\nfailur_rate = 0.3\n", "b.toml:2:1", "breaker.failur_rate",
               "unknown key \"failur_rate\" in [breaker] (did you mean \"failure_rate\"?)");
  expect_error("[breaker]\n\nbanana = 1\n", "b.toml:3:1", "breaker.banana",
               "unknown key \"banana\"");
  expect_error("[breaker]\n[braker]\n", "b.toml:2:2", "braker", "unknown key \"braker\"");
}

TEST(BreakerToml, BadTypesAndUnitsNameTheKey) {
  expect_error("[breaker]\nopen_duration = 30\n", "b.toml:2:17", "breaker.open_duration",
               "a bare number has no unit: write e.g. \"30s\"");
  expect_error("[breaker]\nopen_duration = \"30sec\"\n", "b.toml:2:17", "breaker.open_duration",
               "unknown unit \"sec\"");
  expect_error("[breaker]\nconsecutive_failures = -1\n", "b.toml:2:24",
               "breaker.consecutive_failures", "must not be negative");
  expect_error("[breaker]\nconsecutive_failures = 2.5\n", "b.toml:2:24",
               "breaker.consecutive_failures", "expected a whole number");
  expect_error("[breaker]\nconsecutive_failures = 5000000000\n", "b.toml:2:24",
               "breaker.consecutive_failures", "must be at most 65535 (got 5000000000)");
  expect_error("[breaker]\ncount_in_flight_slow_calls = \"yes\"\nkind = \"time\"\n", "b.toml:2:30",
               "breaker.count_in_flight_slow_calls", "expected true or false");
  expect_error("[breaker]\nwindow = \"sliding\"\n", "b.toml:2:10", "breaker.window",
               "must be one of \"none\", \"count\", \"time\"");
  expect_error("[breaker]\nkind = \"time\"\nfailure_rate = \"high\"\n", "b.toml:3:16",
               "breaker.failure_rate", "expected a number");
  expect_error("[breaker]\nkind = \"time\"\nfailure_rate = nan\n", "b.toml:3:16",
               "breaker.failure_rate", "finite");
  expect_error("[breaker]\nhalf_open.fraction = 0.1\nhalf_open.ramp = [0.5, true]\n", "b.toml:3:24",
               "breaker.half_open.ramp", "stage 2: expected a number");
}

TEST(BreakerToml, TheLibrarysOwnValidationIsMappedToTheKeyAndLine) {
  expect_error("[breaker]\nkind = \"count\"\n\nfailure_rate = 1.5\n", "b.toml:4:16",
               "breaker.failure_rate", "must be in (0, 1] (got 1.5)");
  expect_error("[breaker]\nopen_duration = \"0s\"\n", "b.toml:2:17", "breaker.open_duration",
               "must be positive");
  expect_error("[breaker]\nkind = \"time\"\nwindow.buckets = 500\n", "b.toml:3:18",
               "breaker.window.buckets", "must be at most 120 (got 500)");
  expect_error("[breaker]\nkind = \"time\"\nwindow.buckets = 0\n", "b.toml:3:18",
               "breaker.window.buckets", "between 1 and 120");
  // A field the file does not set: the table's own line.
  expect_error("\n[breaker]\nopen_growth.multiplier = 2\n", "b.toml:2:1", "breaker.open_growth.max",
               "must be set when open_growth.multiplier");
  expect_error("[breaker]\nkind = \"time\"\nslow_call_rate = 0.5\n", "b.toml:1:1",
               "breaker.slow_call_duration", "must be set when slow_call_rate is set");
  expect_error("[breaker]\nhalf_open.fraction = 0.5\nhalf_open.ramp = [0.25]\n", "b.toml:3:18",
               "breaker.half_open.ramp", "stage 1 must be in (0, 1] and at least 0.5");
  // The library's dotted fields come back as the flat keys, in the message too.
  expect_error("[breaker]\nhalf_open.max_in_flight = 2\nhalf_open.fraction = 0.5\n", "b.toml:2:27",
               "breaker.half_open.max_in_flight",
               "must not be set together with half_open.fraction");
  expect_error("[breaker]\nkind = \"time\"\nwindow.length = \"5ms\"\nfailure_rate = 0.5\n",
               "b.toml:1:1", "breaker.window.buckets", "window.length 5ms / 10 buckets");
  // A window and no trip rule: a breaker that could never open.
  expect_error("[breaker]\nkind = \"count\"\n", "b.toml:1:1", "breaker.failure_rate",
               "`bulwark calibrate`");
  expect_error("[breaker]\nconsecutive_failures = 0\n", "b.toml:2:24",
               "breaker.consecutive_failures", "must be between 1 and 65535 (got 0)");
}

TEST(BreakerToml, KeysThisWindowWouldIgnoreAreErrors) {
  expect_error("[breaker]\nfailure_rate = 0.3\n", "b.toml:2:16", "breaker.failure_rate",
               "needs a sliding window: set kind = \"count\"");
  expect_error("[breaker]\nkind = \"time\"\nwindow.size = 10\n", "b.toml:3:15",
               "breaker.window.size", "only applies to kind = \"count\"");
  expect_error("[breaker]\nkind = \"count\"\nwindow.length = \"10s\"\n", "b.toml:3:17",
               "breaker.window.length", "only applies to kind = \"time\"");
  expect_error("[breaker]\nminimum_calls = 10\n", "b.toml:2:17", "breaker.minimum_calls",
               "only applies to kind = \"count\" or \"time\"");
}

// Nested fields are written as dotted keys or as tables of their own: the same breaker.
TEST(BreakerToml, NestedFieldsAsDottedKeysOrTables) {
  const BreakerSpec dotted = parse_breaker(
      "[breaker]\nkind = \"count\"\nwindow.size = 40\nfailure_rate = 0.5\n"
      "half_open.probes = 4\nhalf_open.max_in_flight = 2\nopen_growth.multiplier = 2\n"
      "open_growth.max = \"5min\"\n",
      "b.toml");
  const BreakerSpec tables = parse_breaker(
      "[breaker]\nkind = \"count\"\nfailure_rate = 0.5\n[breaker.window]\nsize = 40\n"
      "[breaker.half_open]\nprobes = 4\nmax_in_flight = 2\n"
      "[breaker.open_growth]\nmultiplier = 2\nmax = \"5min\"\n",
      "b.toml");
  for (const BreakerSpec* spec : {&dotted, &tables}) {
    const auto& c = spec->as<CountWindowConfig>();
    EXPECT_EQ(c.window.size, 40u);
    EXPECT_EQ(c.half_open.probes, 4u);
    EXPECT_EQ(c.half_open.max_in_flight, 2u);
    EXPECT_EQ(c.open_growth.multiplier, 2.0);
    EXPECT_EQ(c.open_growth.max, 5min);
  }
}

// The flat names of earlier releases still load, each with a warning naming its new key.
TEST(BreakerToml, DeprecatedFlatKeysLoadWithAWarningNamingTheNewKey) {
  std::vector<InputError> warnings;
  const BreakerSpec spec = parse_breaker(
      "[breaker]\nwindow = \"time\"\nwindow_length = \"12s\"\nfailure_rate = 0.5\n"
      "half_open_successes = 3\n",
      "b.toml", &warnings);
  const auto& c = spec.as<TimeWindowConfig>();
  EXPECT_EQ(c.window.length, 12s);
  EXPECT_EQ(c.half_open.probes, 3u);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0].where().to_string(), "b.toml:2:10");
  EXPECT_NE(warnings[0].message().find("write kind = \"time\""), std::string::npos);
  EXPECT_EQ(warnings[1].field(), "breaker.window_length");
  EXPECT_NE(warnings[1].message().find("\"window.length\""), std::string::npos);
  EXPECT_EQ(warnings[2].where().to_string(), "b.toml:5:23");
  EXPECT_NE(warnings[2].message().find("\"half_open.probes\""), std::string::npos);
  // A new file warns about nothing.
  warnings.clear();
  (void)parse_breaker("[breaker]\nkind = \"time\"\nwindow.length = \"12s\"\nfailure_rate = 0.5\n",
                      "b.toml", &warnings);
  EXPECT_TRUE(warnings.empty());
  // The library's check of a field given under its old name points at that key.
  expect_error("[breaker]\nhalf_open.fraction = 0.5\nhalf_open_max_calls = 2\n", "b.toml:3:23",
               "breaker.half_open_max_calls", "must not be set together with half_open.fraction");
}

TEST(BreakerToml, AFieldUnderBothNamesOrAMisspeltNestedKeyIsAnError) {
  expect_error("[breaker]\nhalf_open.probes = 3\nhalf_open_successes = 3\n", "b.toml:3:23",
               "breaker.half_open_successes", "sets half_open.probes a second time");
  expect_error("[breaker]\nkind = \"count\"\nwindow = \"count\"\n", "b.toml:3:10", "breaker.window",
               "gives the breaker type a second time");
  expect_error("[breaker]\nhalf_open.probs = 3\n", "b.toml:2:11", "breaker.half_open.probs",
               "did you mean \"probes\"?");
  // A misspelt old name is pointed at the new one.
  expect_error("[breaker]\nhalf_open_sucesses = 3\n", "b.toml:2:1", "breaker.half_open_sucesses",
               "did you mean \"half_open.probes\"?");
  expect_error("[breaker]\nkind = \"sliding\"\n", "b.toml:2:8", "breaker.kind",
               "must be one of \"consecutive\", \"count\", \"time\"");
}

TEST(BreakerToml, SyntaxErrorsAndMissingTable) {
  expect_error("[breaker\n", "b.toml:1:9", "", "not valid TOML");
  expect_error("[breaker]\na = 1\na = 2\n", "b.toml:3:5", "", "not valid TOML");
  expect_error("# nothing\n", "b.toml:1:1", "", "missing the [breaker] table");
  try {
    (void)load_breaker_file("/nonexistent/breaker.toml");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().file, "/nonexistent/breaker.toml");
    EXPECT_NE(e.message().find("cannot open"), std::string::npos);
  }
}

// --- scenarios --------------------------------------------------------------------

constexpr const char* kPreamble = R"(
duration = "1min"
[arrivals]
rate = 10
[caller]
workers = 10
[dependency]
[[dependency.phases]]
start = "0s"
latency = "100ms"
)";

TEST(ScenarioToml, RetryBudgetBulkheadFallbackAndPipelineOptions) {
  const Scenario s = parse_scenario(std::string(kPreamble) + R"(
[config.full]
timeout = "800ms"
breaker_scope = "attempt"
alert_when_open_for = "5min"
[config.full.breaker]
consecutive_failures = 3
[config.full.bulkhead]
name = "pool"
max_concurrent = 80
max_wait = "25ms"
[config.full.retry]
name = "r"
max_attempts = 4
honor_retry_after = false
random_seed = 9
[config.full.retry.backoff]
kind = "exponential"
initial = "50ms"
multiplier = 3
max = "2s"
jitter = "equal"
[config.full.retry_budget]
ratio = 0.1
min_retries_per_second = 5
max_tokens = 20
[config.full.fallback]
on = ["breaker", "bulkhead_full", "timeout", "throttled"]

[config.constant]
[config.constant.retry.backoff]
kind = "constant"
delay = "200ms"
)",
                                    "s.toml");
  ASSERT_EQ(s.configurations.size(), 2u);
  const ResilienceConfig& c = s.configurations[0];
  EXPECT_EQ(c.name, "full");
  EXPECT_EQ(c.timeout, 800ms);
  EXPECT_EQ(c.breaker_scope, BreakerScope::attempt);
  EXPECT_EQ(c.alert_when_open_for, 5min);
  ASSERT_TRUE(c.breaker && c.bulkhead && c.retry && c.retry_budget && c.fallback);
  EXPECT_EQ(c.breaker->as<BreakerConfig>().consecutive_failures, 3u);
  EXPECT_EQ(c.bulkhead->name, "pool");
  EXPECT_EQ(c.bulkhead->max_concurrent, 80u);
  EXPECT_EQ(c.bulkhead->max_wait, 25ms);
  EXPECT_EQ(c.retry->config.name, "r");
  EXPECT_EQ(c.retry->config.max_attempts, 4u);
  EXPECT_FALSE(c.retry->config.honor_retry_after);
  EXPECT_EQ(c.retry->random_seed, 9u);
  const Backoff& b = c.retry->config.backoff;
  EXPECT_EQ(b.kind(), Backoff::Kind::exponential);
  EXPECT_EQ(b.initial(), 50ms);
  EXPECT_EQ(b.multiplier(), 3.0);
  EXPECT_EQ(b.max(), 2s);
  EXPECT_EQ(b.jitter(), Jitter::equal);
  EXPECT_EQ(c.retry_budget->ratio, 0.1);
  EXPECT_EQ(c.retry_budget->min_retries_per_second, 5.0);
  EXPECT_EQ(c.retry_budget->max_tokens, 20.0);
  EXPECT_TRUE(c.fallback->contains(Reason::breaker_open));
  EXPECT_TRUE(c.fallback->contains(Reason::breaker_half_open_full));
  EXPECT_TRUE(c.fallback->contains(Reason::bulkhead_full));
  EXPECT_TRUE(c.fallback->contains(Reason::timeout));
  EXPECT_FALSE(c.fallback->contains(Reason::call_error));
  EXPECT_TRUE(c.fallback->contains(Reason::throttled));  // the newer stages' reasons too
  EXPECT_FALSE(c.fallback->contains(Reason::rate_limited));

  const ResilienceConfig& k = s.configurations[1];
  EXPECT_EQ(k.name, "constant") << "file order, not alphabetical";
  ASSERT_TRUE(k.retry);
  EXPECT_EQ(k.retry->config.backoff.kind(), Backoff::Kind::constant);
  EXPECT_EQ(k.retry->config.backoff.base_delay(3), 200ms);
  EXPECT_EQ(k.retry->config.backoff.jitter(), Jitter::full) << "RetryConfig's default jitter";
  EXPECT_EQ(k.retry->config.max_attempts, RetryConfig{}.max_attempts);
}

TEST(ScenarioToml, TrafficCallerAndPhases) {
  const Scenario s = parse_scenario(R"(
name = "n"
description = "d"
duration = "10min"
seed = 7
[arrivals]
process = "constant"
rate = 400
[caller]
workers = 1000
work = "30ms"
[dependency]
name = "reviews"
[[dependency.phases]]
start = "0s"
latency = { distribution = "lognormal", median = "120ms", p99 = "350ms" }
error_rate = 0.005
[[dependency.phases]]
name = "slow"
start = "1min"
latency = { distribution = "uniform", min = "13.5s", max = "14.5s" }
degraded = true
[[dependency.phases]]
start = "7min"
latency = { distribution = "exponential", mean = "100ms" }
[config.x]
)",
                                    "s.toml");
  EXPECT_EQ(s.duration, 10min);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.arrivals.process, ArrivalProcess::constant);
  EXPECT_EQ(s.arrivals.rate, 400.0);
  EXPECT_EQ(s.caller.workers, 1000u);
  EXPECT_EQ(s.caller.work, 30ms);
  ASSERT_EQ(s.dependency.phases.size(), 3u);
  EXPECT_EQ(s.dependency.phases[0].name, "phase 1");
  EXPECT_NEAR(s.dependency.phases[0].latency.sigma, std::log(350.0 / 120.0) / 2.3263478740408408,
              1e-12);
  EXPECT_EQ(s.dependency.phases[1].latency.min, 13500ms);
  EXPECT_TRUE(s.dependency.phases[1].degraded);
  EXPECT_EQ(s.degraded_from(), 1min);
  EXPECT_EQ(s.degraded_until(), 7min);
}

TEST(ScenarioToml, ErrorsNameTheKeyAndLine) {
  const std::string p = kPreamble;  // 10 lines, the first empty
  expect_error(p + "[config.a]\ntimeout = \"0s\"\n", "s.toml:12:11", "config.a.timeout",
               "must be positive", true);
  expect_error(p + "[config.a.retry]\nmax_attempts = 0\n", "s.toml:12:16",
               "config.a.retry.max_attempts", "must be at least 1", true);
  expect_error(p + "[config.a.retry.backoff]\nkind = \"exponential\"\ninitial = \"0s\"\n",
               "s.toml:13:11", "config.a.retry.backoff.initial", "must be positive", true);
  expect_error(p + "[config.a.retry.backoff]\nkind = \"constant\"\ninitial = \"1s\"\n",
               "s.toml:13:1", "config.a.retry.backoff.initial",
               "kind = \"constant\" takes delay and jitter", true);
  expect_error(p + "[config.a.retry.backoff]\ndelay = \"1s\"\n", "s.toml:11:1",
               "config.a.retry.backoff", "missing required key \"kind\"", true);
  expect_error(p + "[config.a.retry_budget]\nratio = 0.1\n", "s.toml:11:1", "config.a.retry_budget",
               "needs a [config.a.retry] table", true);
  expect_error(p + "[config.a.retry]\n[config.a.retry_budget]\nmax_tokens = 0.5\n", "s.toml:13:14",
               "config.a.retry_budget.max_tokens", "between 1 and 1e12", true);
  expect_error(p + "[config.a.bulkhead]\nmax_concurrent = 0\n", "s.toml:12:18",
               "config.a.bulkhead.max_concurrent", "must be at least 1", true);
  expect_error(p + "[config.a.fallback]\non = [\"brekaer_open\"]\n", "s.toml:12:7",
               "config.a.fallback.on", "unknown reason \"brekaer_open\"", true);
  // `on` is a set: an empty one answers nothing, and an entry twice (or one a group
  // given with it covers) is a mistake; both name the key.
  expect_error(p + "[config.a.fallback]\non = []\n", "s.toml:12:6", "config.a.fallback.on",
               "names no reason", true);
  expect_error(p + "[config.a.fallback]\non = [\"timeout\", \"timeout\"]\n", "s.toml:12:18",
               "config.a.fallback.on", "names \"timeout\" twice", true);
  expect_error(p + "[config.a.fallback]\non = [\"all\", \"timeout\"]\n", "s.toml:12:14",
               "config.a.fallback.on", "\"all\" (given before it) already covers", true);
  expect_error(p + "[config.a.fallback]\non = [\"breaker_open\", \"breaker\"]\n", "s.toml:12:23",
               "config.a.fallback.on", "covers \"breaker_open\" (given before it)", true);
  expect_error(p + "[config.a.fallback]\non = [\"breaker\", \"breaker\"]\n", "s.toml:12:18",
               "config.a.fallback.on", "names \"breaker\" twice", true);
  expect_error(p + "[config.a]\nbreaker_scope = \"attempt\"\n", "s.toml:12:17",
               "config.a.breaker_scope", "needs a [config.a.breaker] table", true);
  expect_error(p, "s.toml:1:1", "", "missing required table [config.NAME]", true);
  expect_error("duration = \"1min\"\n[caller]\nworkers = 1\n[config.a]\n", "s.toml:1:1", "",
               "missing required table [arrivals]", true);
  expect_error(std::string(kPreamble).replace(p.find("rate = 10"), 9, "rate = -1") + "[config.a]\n",
               "s.toml:4:8", "arrivals.rate", "must be in (0, 1000000]", true);
  expect_error(p + "[[dependency.phases]]\nstart = \"0s\"\nlatency = \"1s\"\n[config.a]\n",
               "s.toml:12:9", "dependency.phases[1].start", "must be after the previous phase",
               true);
  expect_error(p + "[[dependency.phases]]\nstart = \"1min\"\nlatency = \"1s\"\n[config.a]\n",
               "s.toml:12:9", "dependency.phases[1].start", "the phase would never run", true);
  expect_error(
      p + "[[dependency.phases]]\nstart = \"2s\"\nlatency = { distribution = \"lognormal\", "
          "median = \"1s\" }\n[config.a]\n",
      "s.toml:13:11", "dependency.phases[1].latency", "needs sigma or p99", true);
  expect_error(p + "[[dependency.phases]]\nstart = \"2s\"\nlatency = { distribution = \"uniform\", "
                   "min = \"1s\", max = \"1s\", mean = \"1s\" }\n[config.a]\n",
               "s.toml:13:63", "dependency.phases[1].latency.mean",
               "distribution = \"uniform\" takes min and max", true);
  expect_error(p + "[[dependency.phases]]\nstart = \"2s\"\nlatency = \"1s\"\nerror_rate = 2\n"
                   "[config.a]\n",
               "s.toml:14:14", "dependency.phases[1].error_rate", "must be in [0, 1]", true);
}

TEST(ScenarioToml, TheBuiltInIncidentIsTheExampleFileAndItsFixes) {
  std::ifstream in(std::string(BULWARK_SOURCE_DIR) + "/tools/examples/incident.toml");
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(std::string(builtin_scenario_toml()), file.str())
      << "the compiled-in scenario is tools/examples/incident.toml";

  const Scenario s = builtin_scenario();
  EXPECT_EQ(s.arrivals.rate, 400.0);
  ASSERT_EQ(s.configurations.size(), 2u);
  EXPECT_EQ(s.configurations[0].name, "before");
  EXPECT_EQ(s.configurations[0].timeout, 15s);
  EXPECT_FALSE(s.configurations[0].breaker);
  const ResilienceConfig& after = s.configurations[1];
  EXPECT_EQ(after.name, "after");
  EXPECT_EQ(after.timeout, 800ms);
  ASSERT_TRUE(after.breaker && after.bulkhead && after.fallback);
  // The incident's fixes, one by one.
  const TimeWindowConfig& breaker = after.breaker->as<TimeWindowConfig>();
  EXPECT_EQ(breaker.failure_rate, 0.30);
  EXPECT_EQ(breaker.minimum_calls, 20u);
  EXPECT_EQ(breaker.open_duration, 30s);
  EXPECT_EQ(breaker.half_open.fraction, 0.10);
  EXPECT_EQ(breaker.slow_call_duration, 400ms);
  EXPECT_EQ(after.bulkhead->max_concurrent, 80u);
  EXPECT_EQ(after.alert_when_open_for, 5min);
}

// Every ```toml block of docs/configuration.md loads: whole files as they are, and
// fragments inside a minimal scenario (or as a breaker file when they are one).
TEST(Docs, EveryTomlExampleInConfigurationMdLoads) {
  std::ifstream in(std::string(BULWARK_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md";
  std::string line, block;
  bool inside = false;
  int blocks = 0, start_line = 0, n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!inside && line.rfind("```toml", 0) == 0) {
      inside = true, block.clear(), start_line = n;
      continue;
    }
    if (inside && line.rfind("```", 0) == 0) {
      inside = false;
      ++blocks;
      const std::string name = "configuration.md:" + std::to_string(start_line);
      try {
        const bool whole_scenario =
            block.find("\nduration =") != std::string::npos || block.rfind("duration =", 0) == 0;
        const bool breaker_file = block.find("[breaker]") != std::string::npos &&
                                  block.find("[config.") == std::string::npos;
        const bool policies_file = block.find("[breaker.") != std::string::npos ||
                                   block.find("[pipeline.") != std::string::npos ||
                                   block.find("[fleet.") != std::string::npos ||
                                   block.find("[http_client.") != std::string::npos;
        if (policies_file) {
          (void)bulwark::config::parse(block, name);
        } else if (breaker_file) {
          (void)parse_breaker(block, name);
        } else if (whole_scenario) {
          (void)parse_scenario(block, name);
        } else {
          (void)parse_scenario(std::string(kPreamble) + block, name);
        }
      } catch (const InputError& e) {
        ADD_FAILURE() << "the example at " << name << " does not load: " << e.what() << "\n"
                      << block;
      }
      continue;
    }
    if (inside) block += line + "\n";
  }
  EXPECT_GE(blocks, 5) << "docs/configuration.md should show its options in examples";
}

}  // namespace
}  // namespace bulwark::lab
