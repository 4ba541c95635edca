// `bulwark calibrate`: traces generated with known statistics (a deterministic
// generator below) must give back those statistics within stated bounds, and a proposal
// that opens on no healthy window of the trace and soon on each injected degradation.
// The reviews service's normal traffic must give a proposal close to the incident
// review's (timeout near 800 ms, a slow threshold between p99 and the timeout, a
// bulkhead of 48 to 100). Bad input gets the lab's clear errors.

#include "bulwark/lab/calibrate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/config/config.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "bulwark/registry.h"
#include "process.h"

#ifdef BULWARK_TEST_HTTP
#include "bulwark/http/client.h"
#endif

namespace bulwark::lab {
namespace {

using bulwark::testing::run;
using bulwark::testing::temp_path;

// SplitMix64: the same numbers on every platform (std's distributions are not).
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }
  double normal() {  // Box-Muller
    const double u = 1 - uniform(), v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(2 * 3.14159265358979323846 * v);
  }

 private:
  std::uint64_t state_;
};

struct Traffic {
  std::string key = "svc";
  double rate = 200;      // calls per second, Poisson
  double median_ms = 50;  // lognormal latency
  double sigma = 0.5;     // of the log
  double error_rate = 0.01;
  double seconds = 1200;
  double ignored_rate = 0;  // of the calls that did not fail
};

// One key's calls, or several keys' interleaved by time.
std::string make_trace(const std::vector<Traffic>& keys, std::uint64_t seed) {
  struct Next {
    double t;
    std::size_t key;
  };
  Random rng(seed);
  std::vector<double> next(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) next[i] = rng.exponential(keys[i].rate);
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  char line[256];
  for (;;) {
    std::size_t k = 0;
    for (std::size_t i = 1; i < keys.size(); ++i) {
      if (next[i] < next[k]) k = i;
    }
    const Traffic& tr = keys[k];
    if (next[k] >= tr.seconds) break;
    const double d = tr.median_ms * std::exp(tr.sigma * rng.normal());
    const bool failed = rng.uniform() < tr.error_rate;
    const bool ignored = !failed && tr.ignored_rate > 0 && rng.uniform() < tr.ignored_rate;
    std::snprintf(line, sizeof line, "%.3f,%s,%.3f,%s\n", next[k] * 1000, tr.key.c_str(), d,
                  failed    ? "failure"
                  : ignored ? "ignored"
                            : "success");
    csv += line;
    next[k] += rng.exponential(tr.rate);
  }
  return csv;
}

// The lognormal's q-quantile.
double quantile_ms(const Traffic& t, double z) { return t.median_ms * std::exp(t.sigma * z); }
constexpr double kZ99 = 2.3263478740408408;

double ms(Ticks t) { return static_cast<double>(t) / 1e6; }

const Proposed* find(const KeyCalibration& k, const std::string& key) {
  for (const auto* list : {&k.breaker, &k.call}) {
    for (const Proposed& p : *list) {
      if (p.key == key) return &p;
    }
  }
  return nullptr;
}

double value_of(const KeyCalibration& k, const std::string& key) {
  const Proposed* p = find(k, key);
  EXPECT_NE(p, nullptr) << key;
  return p ? std::stod(p->value) : 0;
}

TEST(BinomialTail, MatchesExactSums) {
  EXPECT_DOUBLE_EQ(binomial_tail(5, 0.5, 0), 1.0);
  EXPECT_NEAR(binomial_tail(5, 0.5, 3), 0.5, 1e-12);  // (10 + 5 + 1) / 32
  EXPECT_NEAR(
      binomial_tail(10, 0.1, 2),
      1 - 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 - 10 * 0.1 * std::pow(0.9, 9),
      1e-12);
  EXPECT_NEAR(binomial_tail(20, 0.02, 20), std::pow(0.02, 20), 1e-45);
  EXPECT_EQ(binomial_tail(20, 0.02, 21), 0.0);
  EXPECT_EQ(binomial_tail(20, 0.0, 1), 0.0);
}

TEST(Calibrate, RecoversTheStatisticsOfAGeneratedTrace) {
  const Traffic t;  // 200/s, median 50 ms, sigma 0.5, 1 % errors, 20 min: 240,000 calls
  const Calibration c = calibrate_text(make_trace({t}, 7), {});
  ASSERT_EQ(c.keys.size(), 1u);
  const KeyCalibration& k = c.keys[0];
  EXPECT_EQ(k.key, "svc");
  // Bounds: a few standard errors of 240,000 draws, plus the histogram's 0.8 %.
  EXPECT_NEAR(k.rate_per_s, t.rate, 0.02 * t.rate);
  EXPECT_NEAR(k.error_rate, t.error_rate, 0.001);
  EXPECT_NEAR(ms(k.p50), t.median_ms, 0.02 * t.median_ms);
  EXPECT_NEAR(ms(k.p99), quantile_ms(t, kZ99), 0.04 * quantile_ms(t, kZ99));
  EXPECT_NEAR(ms(k.p999), quantile_ms(t, 3.0902323061678132), 0.08 * quantile_ms(t, 3.09));
  EXPECT_NEAR(ms(k.mean), t.median_ms * std::exp(t.sigma * t.sigma / 2), 0.02 * t.median_ms);
  ASSERT_TRUE(k.rate_policy) << k.note;
  // The proposal's thresholds sit above the normal rates and below the degradations.
  const double fr = value_of(k, "failure_rate");
  EXPECT_GT(fr, t.error_rate);
  EXPECT_LT(fr, 10 * t.error_rate + 0.2);
  EXPECT_GT(ms(k.timeout), ms(k.p999));
  // The check: no false open on the healthy trace, and opening within 10 s of each
  // degradation (error rate x10, latency x10).
  ASSERT_EQ(k.checks.size(), 3u);
  EXPECT_EQ(k.checks[0].opens, 0u);
  for (int i = 1; i < 3; ++i) {
    ASSERT_TRUE(k.checks[i].time_to_open) << k.checks[i].name;
    EXPECT_LT(*k.checks[i].time_to_open, Ticks{10'000'000'000}) << k.checks[i].name;
  }
}

TEST(Calibrate, HigherErrorRatesGetHigherThresholdsAndStillNoFalseOpen) {
  for (double error_rate : {0.0, 0.05, 0.2}) {
    Traffic t;
    t.error_rate = error_rate;
    t.seconds = 600;
    const Calibration c = calibrate_text(make_trace({t}, 11), {});
    const KeyCalibration& k = c.keys[0];
    EXPECT_NEAR(k.error_rate, error_rate, 0.005);
    ASSERT_TRUE(k.rate_policy) << k.note;
    const double fr = value_of(k, "failure_rate");
    EXPECT_GT(fr, error_rate) << error_rate;
    EXPECT_GE(fr, 0.05) << "never opens on noise";
    EXPECT_EQ(k.checks[0].opens, 0u) << error_rate;
    ASSERT_TRUE(k.checks[1].time_to_open) << error_rate;
    EXPECT_LT(*k.checks[1].time_to_open, Ticks{10'000'000'000}) << error_rate;
  }
}

TEST(Calibrate, TheReviewsTrafficGetsTheIncidentReviewsValues) {
  // The reviews service's normal traffic: 400/s, 120 ms median, 350 ms p99, 2 % errors
  // (what tools/examples/make_reviews_trace.py writes).
  Traffic t;
  t.key = "reviews";
  t.rate = 400;
  t.median_ms = 120;
  t.sigma = std::log(350.0 / 120.0) / kZ99;
  t.error_rate = 0.02;
  t.seconds = 600;
  const Calibration c = calibrate_text(make_trace({t}, 2), {});
  const KeyCalibration& k = c.keys[0];
  EXPECT_GE(ms(k.timeout), 500);  // the review's 800 ms
  EXPECT_LE(ms(k.timeout), 1200);
  const Proposed* slow = find(k, "slow_call_duration");
  ASSERT_NE(slow, nullptr);
  const auto d = parse_duration(slow->value.substr(1, slow->value.size() - 2));
  ASSERT_TRUE(d);
  EXPECT_GT(d->count(), k.p99);
  EXPECT_LT(d->count(), k.timeout);
  EXPECT_GE(k.bulkhead, 48u);  // 400/s x 120 ms
  EXPECT_LE(k.bulkhead, 100u);
  EXPECT_EQ(k.checks[0].opens, 0u);
  // An adaptive limit's bounds: from the mean in flight (Little's law, about 400/s x the
  // lognormal's mean of ~200 ms) through the bulkhead to twice it; a valid config.
  EXPECT_GE(k.adaptive_min, 48u);
  EXPECT_LE(k.adaptive_min, k.adaptive_initial);
  EXPECT_EQ(k.adaptive_initial, k.bulkhead);
  EXPECT_EQ(k.adaptive_max, 2 * k.bulkhead);
  AdaptiveLimitConfig a;
  a.min_limit = k.adaptive_min;
  a.initial_limit = k.adaptive_initial;
  a.max_limit = k.adaptive_max;
  EXPECT_TRUE(validate(a));
  const Proposed* initial = find(k, "adaptive_limit.initial_limit");
  ASSERT_NE(initial, nullptr);
  EXPECT_EQ(initial->value, std::to_string(k.bulkhead));
}

TEST(Calibrate, LittleTrafficGetsConsecutiveFailuresAndSaysSo) {
  Traffic t;
  t.rate = 0.05;  // one call every 20 s, for two hours: 360 calls
  t.seconds = 7200;
  const Calibration c = calibrate_text(make_trace({t}, 3), {});
  const KeyCalibration& k = c.keys[0];
  EXPECT_FALSE(k.rate_policy);
  EXPECT_NE(k.note.find("little traffic"), std::string::npos) << k.note;
  const Proposed* window = find(k, "kind");
  ASSERT_NE(window, nullptr);
  EXPECT_EQ(window->value, "\"consecutive\"");
  EXPECT_GE(value_of(k, "consecutive_failures"), 3);
  EXPECT_EQ(find(k, "failure_rate"), nullptr);
  // Its file loads and replays.
  const BreakerSpec spec = parse_breaker(k.breaker_toml, "p.toml");
  EXPECT_EQ(spec.window(), WindowKind::none);
}

TEST(Calibrate, KeysAreCalibratedApartAndCanBePicked) {
  Traffic a, b;
  a.key = "fast";
  a.median_ms = 10;
  a.seconds = b.seconds = 300;
  b.key = "slow";
  b.median_ms = 400;
  b.rate = 50;
  const std::string csv = make_trace({a, b}, 5);
  const Calibration both = calibrate_text(csv, {});
  ASSERT_EQ(both.keys.size(), 2u);
  EXPECT_EQ(both.keys[0].key, "fast");
  EXPECT_NEAR(ms(both.keys[0].p50), 10, 0.3);
  EXPECT_NEAR(ms(both.keys[1].p50), 400, 12);
  EXPECT_NEAR(both.keys[1].rate_per_s, 50, 3);
  CalibrateOptions only;
  only.keys = {"slow"};
  const Calibration one = calibrate_text(csv, only);
  ASSERT_EQ(one.keys.size(), 1u);
  EXPECT_EQ(one.keys[0].key, "slow");
  EXPECT_EQ(one.keys[0].p50, both.keys[1].p50);
  only.keys = {"nope"};
  try {
    (void)calibrate_text(csv, only);
    ADD_FAILURE() << "an unknown --key is an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no row of the trace has the key \"nope\""),
              std::string::npos)
        << e.what();
  }
}

TEST(Calibrate, TheProposalIsABreakerFileThatLoads) {
  Traffic t;
  t.seconds = 300;
  const Calibration c = calibrate_text(make_trace({t}, 9), {});
  const BreakerSpec spec = parse_breaker(c.keys[0].breaker_toml, "p.toml");
  ASSERT_EQ(spec.window(), WindowKind::time);
  const TimeWindowConfig& tw = spec.as<TimeWindowConfig>();
  EXPECT_EQ(tw.name, "svc");
  ASSERT_TRUE(tw.failure_rate);
  EXPECT_DOUBLE_EQ(*tw.failure_rate, value_of(c.keys[0], "failure_rate"));
}

// What calibrate proposes for a key is a file a service's configuration loads as it is
// (its one [breaker] table is the policy named by its `name`), with no deprecated key,
// and a registry of that kind of breaker builds from it.
TEST(Calibrate, TheProposalLoadsThroughTheServiceLibraryAsItIsAndBuildsARegistry) {
  Traffic t;
  t.seconds = 300;
  const Calibration c = calibrate_text(make_trace({t}, 9), {});
  const bulwark::config::Config cfg("svc.toml",
                                    bulwark::config::parse(c.keys[0].breaker_toml, "svc.toml"), {});
  EXPECT_TRUE(cfg.warnings().empty());
  const auto proposed = cfg.breaker<bulwark::TimeWindowBreaker>("svc");
  EXPECT_EQ(proposed.failure_rate,
            parse_breaker(c.keys[0].breaker_toml, "p.toml").as<TimeWindowConfig>().failure_rate);
  bulwark::RegistryOptions<std::string, bulwark::TimeWindowBreaker> options;
  options.name = "hosts";
  options.breaker = proposed;
  bulwark::BasicRegistry<std::string, bulwark::TimeWindowBreaker> hosts(std::move(options));
  EXPECT_EQ(hosts.get("a.example")->config().window.length, proposed.window.length);
}

#ifdef BULWARK_TEST_HTTP
// And the HTTP client takes it as it is: a host's breaker is of the proposed kind, with
// the proposed thresholds.
TEST(Calibrate, TheProposalConfiguresTheHttpClientAsItIs) {
  Traffic t;
  t.seconds = 300;
  const Calibration c = calibrate_text(make_trace({t}, 9), {});
  const bulwark::config::Config cfg("svc.toml",
                                    bulwark::config::parse(c.keys[0].breaker_toml, "svc.toml"), {});
  const auto proposed = cfg.breaker<bulwark::TimeWindowBreaker>("svc");
  bulwark::http::Config config;  // (a designated-initializer temporary trips GCC 12's
  config.name = "svc";           // -Wmaybe-uninitialized at -O3)
  config.any_breaker = proposed;
  bulwark::http::Client client(config);
  const auto breaker = client.breaker_for("http://svc.example/reviews");
  const auto* typed = breaker.get_if<bulwark::TimeWindowBreaker>();
  ASSERT_NE(typed, nullptr);
  EXPECT_EQ(typed->config().failure_rate, proposed.failure_rate);
  EXPECT_EQ(typed->config().window.length, proposed.window.length);
  EXPECT_EQ(typed->config().minimum_calls, proposed.minimum_calls);
}
#endif

// Beside other policies, the proposal goes under [breaker.NAME], and a registry names it.
TEST(Calibrate, TheProposalAsANamedPolicyBuildsARegistry) {
  Traffic t;
  t.seconds = 300;
  const Calibration c = calibrate_text(make_trace({t}, 9), {});
  std::string table = c.keys[0].breaker_toml;
  const std::size_t header = table.find("[breaker]\n");
  ASSERT_NE(header, std::string::npos);
  table.replace(header, 10, "[breaker.svc]\n");
  const bulwark::config::Config cfg(
      "svc.toml",
      bulwark::config::parse(table + "[registry.hosts]\nkind = \"time\"\npolicy = \"svc\"\n",
                             "svc.toml"),
      {});
  EXPECT_TRUE(cfg.warnings().empty());
  EXPECT_EQ(cfg.registry("hosts").policy.as<TimeWindowConfig>().window.length,
            cfg.breaker<bulwark::TimeWindowBreaker>("svc").window.length);
}

TEST(Calibrate, TheJsonHoldsWhatTheTextSays) {
  Traffic t;
  t.seconds = 120;
  const Calibration c = calibrate_text(make_trace({t}, 6), {});
  const nlohmann::json j = nlohmann::json::parse(to_json(c));
  ASSERT_EQ(j["keys"].size(), 1u);
  const auto& k = j["keys"][0];
  EXPECT_EQ(k["key"], "svc");
  EXPECT_EQ(k["bulkhead"], c.keys[0].bulkhead);
  EXPECT_EQ(k["adaptive_limit"]["min_limit"], c.keys[0].adaptive_min);
  EXPECT_EQ(k["adaptive_limit"]["initial_limit"], c.keys[0].adaptive_initial);
  EXPECT_EQ(k["adaptive_limit"]["max_limit"], c.keys[0].adaptive_max);
  EXPECT_DOUBLE_EQ(k["baseline"]["latency_ms"]["p99"].get<double>(), ms(c.keys[0].p99));
  EXPECT_EQ(k["checks"].size(), 3u);
  EXPECT_EQ(k["checks"][0]["time_to_open_ms"], nullptr) << "the recorded trace has no degradation";
  const std::string svg = to_svg(c);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("timeout " + format_duration(Nanos(c.keys[0].timeout))), std::string::npos);
}

TEST(Calibrate, BadInputIsTheLabsClearError) {
  const auto error_of = [](const std::string& csv, CalibrateOptions o = {}) -> std::string {
    try {
      (void)calibrate_text(csv, o);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("t_ms,key,duration_ms,outcome\n0,a,1,sucess\n")
                .find("trace.csv:2:7: outcome: unknown outcome \"sucess\""),
            std::string::npos);
  EXPECT_NE(error_of("0,a,1,success\n").find("missing header"), std::string::npos);
  EXPECT_NE(error_of("t_ms,key,duration_ms,outcome\n").find("has no rows"), std::string::npos);
  EXPECT_NE(error_of("t_ms,key,duration_ms,outcome\n5,a,1,success\n4,a,1,success\n")
                .find("goes back in time"),
            std::string::npos);
  CalibrateOptions zero;
  zero.false_opens_per_day = 0;
  EXPECT_NE(
      error_of("t_ms,key,duration_ms,outcome\n0,a,1,success\n", zero).find("--false-opens-per-day"),
      std::string::npos);
}

// ---- the command ------------------------------------------------------------------------

std::string write_temp(const char* what, const std::string& content) {
  const std::string path = temp_path(what);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(CalibrateCli, WritesATomlThatReplayAccepts) {
  Traffic t;
  t.seconds = 120;
  const std::string trace = write_temp("trace", make_trace({t}, 4));
  const std::string toml = temp_path("toml"), json = temp_path("json");
  const auto r = run({"calibrate", trace, "--toml", toml, "--json", json});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("key \"svc\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Breaker configuration written to"), std::string::npos);
  EXPECT_EQ(r.err, "") << "no progress line when stderr is not a terminal";
  const auto rep = run({"replay", "--config", toml, trace});
  ASSERT_EQ(rep.status, 0) << rep.err;
  EXPECT_NE(rep.out.find("\"opened\":0"), std::string::npos) << rep.out;
  EXPECT_NE(bulwark::testing::read_all(json).find("\"breaker_toml\""), std::string::npos);
  // Standard input works too.
  const auto piped = run({"calibrate", "-", "--toml", "-"}, make_trace({t}, 4));
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, bulwark::testing::read_all(toml));
  // The scenario runs in `bulwark simulate`: the proposal keeps the latency x10 away.
  const std::string scenario = temp_path("scenario");
  ASSERT_EQ(run({"calibrate", trace, "--scenario", scenario}).status, 0);
  const auto sim = run({"simulate", scenario, "--no-timeline"});
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_NE(sim.out.find("proposed"), std::string::npos) << sim.out;
  EXPECT_NE(sim.out.find("time from degradation to breaker open"), std::string::npos);
  for (const std::string& p : {trace, toml, json, scenario}) std::remove(p.c_str());
}

TEST(Calibrate, TheScenarioLoadsAndTheProposalOpensInIt) {
  Traffic t;
  t.seconds = 300;
  const Calibration c = calibrate_text(make_trace({t}, 9), {});
  const Scenario s = parse_scenario(c.keys[0].scenario_toml, "s.toml");
  ASSERT_EQ(s.configurations.size(), 2u);
  ASSERT_TRUE(s.configurations[1].breaker);
  ASSERT_TRUE(s.configurations[1].timeout);
  EXPECT_EQ(s.configurations[1].timeout->count(), c.keys[0].timeout);
  EXPECT_NEAR(s.arrivals.rate, t.rate, 0.03 * t.rate);
}

TEST(CalibrateCli, BadArgumentsExitTwo) {
  Traffic a, b;
  a.seconds = b.seconds = 30;
  b.key = "other";
  const std::string trace = write_temp("trace", make_trace({a, b}, 4));
  const auto expect_2 = [](const bulwark::testing::CliRun& r, const std::string& says) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  expect_2(run({"calibrate", trace, "--false-opens-per-day", "0"}), "--false-opens-per-day");
  expect_2(run({"calibrate", trace, "--false-opens-per-day", "x"}), "--false-opens-per-day");
  expect_2(run({"calibrate", trace, "--toml", temp_path("t")}), "pick one with --key");
  expect_2(run({"calibrate", trace, "--key", "a", "--key", "a"}), "twice");
  expect_2(run({"calibrate", trace, "--json", "-", "--toml", "-"}), "standard output");
  expect_2(run({"calibrate", ""}), "empty string");
  expect_2(run({"calibrate", "/nonexistent/trace.csv"}), "cannot open");
  std::remove(trace.c_str());
}

// ---- traffic that is not normal --------------------------------------------------------

// A key with nothing normal to sit above gets a statement and no thresholds: no
// timeout, breaker or bulkhead, no check, files that only say why.
void expect_not_normal(const KeyCalibration& k, const std::string& says) {
  EXPECT_NE(k.not_normal.find(says), std::string::npos) << k.not_normal;
  EXPECT_TRUE(k.breaker.empty()) << k.breaker_toml;
  EXPECT_TRUE(k.call.empty());
  EXPECT_EQ(k.timeout, 0);
  EXPECT_EQ(k.bulkhead, 0u);
  EXPECT_EQ(k.adaptive_max, 0u);
  EXPECT_TRUE(k.checks.empty()) << "nothing proposed, nothing replayed";
  for (const std::string* file : {&k.breaker_toml, &k.scenario_toml}) {
    std::istringstream lines(*file);
    std::string line;
    while (std::getline(lines, line)) EXPECT_EQ(line.rfind("# ", 0), 0u) << *file;
    EXPECT_NE(file->find(k.not_normal), std::string::npos) << *file;
  }
  try {
    (void)parse_breaker(k.breaker_toml, "p.toml");
    ADD_FAILURE() << "a file without a [breaker] table does not load as one";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing the [breaker] table"), std::string::npos);
  }
}

TEST(NotNormalTraffic, EveryCallIgnoredHasNoLatencyToDrawATimeoutFrom) {
  Traffic t;
  t.rate = 100;
  t.seconds = 600;
  t.error_rate = 0;
  t.ignored_rate = 1;  // every call a 4xx, say
  const Calibration c = calibrate_text(make_trace({t}, 21), {});
  const KeyCalibration& k = c.keys[0];
  expect_not_normal(k, "too few successful calls to measure its latency: 0 of");
  EXPECT_NE(to_text(c).find("not normal traffic: too few successful calls"), std::string::npos)
      << to_text(c);
  EXPECT_EQ(to_text(c).find("timeout ="), std::string::npos) << "not timeout = \"1ms\"";
  const nlohmann::json j = nlohmann::json::parse(to_json(c))["keys"][0];
  EXPECT_EQ(j["policy"], "none");
  EXPECT_EQ(j["not_normal_traffic"], k.not_normal);
  EXPECT_TRUE(j["proposed"].empty());
  EXPECT_TRUE(j["timeout_ms"].is_null());
  EXPECT_TRUE(j["bulkhead"].is_null());
  EXPECT_TRUE(j["adaptive_limit"].is_null());
  EXPECT_TRUE(j["checks"].empty());
}

TEST(NotNormalTraffic, AsManyFailuresAsSuccessesIsNoHealthyBaseline) {
  for (double error_rate : {1.0, 0.7, 0.5}) {
    Traffic t;
    t.rate = 100;
    t.seconds = 600;
    t.error_rate = error_rate;
    const Calibration c = calibrate_text(make_trace({t}, 22), {});
    const KeyCalibration& k = c.keys[0];
    if (error_rate == 0.5 && k.failures < k.calls - k.failures) {
      // The draw left fewer failures than successes: a normal (if poor) baseline.
      EXPECT_TRUE(k.not_normal.empty()) << k.not_normal;
      continue;
    }
    expect_not_normal(k, "no healthy baseline");
    EXPECT_EQ(to_text(c).find("65535"), std::string::npos) << to_text(c);
  }
}

TEST(NotNormalTraffic, FewSuccessesOrNoTimeSpan) {
  // 99 successes (and a failure): too few to measure a latency tail.
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 99; ++i)
    csv += std::to_string(i * 1000) + ",a," + std::to_string(10 + i % 7) + ",success\n";
  csv += "99000,a,10,failure\n";
  expect_not_normal(calibrate_text(csv, {}).keys[0], "too few successful calls");
  // One more success: the latency can be measured, and the key is calibrated.
  csv += "100000,a,11,success\n";
  EXPECT_TRUE(calibrate_text(csv, {}).keys[0].not_normal.empty());
  // Every call at the same instant: no rate.
  std::string instant = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 200; ++i) instant += "5,a," + std::to_string(10 + i % 7) + ",success\n";
  expect_not_normal(calibrate_text(instant, {}).keys[0], "no rate");
}

TEST(NotNormalTraffic, OneKeyNotNormalLeavesTheOthersCalibrated) {
  Traffic good, down;
  good.seconds = down.seconds = 300;
  down.key = "down";
  down.error_rate = 1;
  const Calibration c = calibrate_text(make_trace({good, down}, 23), {});
  ASSERT_EQ(c.keys.size(), 2u);
  const bool down_first = c.keys[0].key == "down";
  const KeyCalibration& g = c.keys[down_first ? 1 : 0];
  EXPECT_EQ(g.key, "svc");
  EXPECT_TRUE(g.not_normal.empty()) << g.not_normal;
  ASSERT_EQ(g.checks.size(), 3u);
  EXPECT_EQ(g.checks[0].opens, 0u);
  expect_not_normal(c.keys[down_first ? 0 : 1], "no healthy baseline");
}

TEST(NotNormalTraffic, TheCommandSaysSoAndItsFilesSayWhy) {
  Traffic t;
  t.seconds = 60;
  t.error_rate = 1;
  const std::string trace = write_temp("trace", make_trace({t}, 24));
  const std::string toml = temp_path("toml"), scenario = temp_path("scenario");
  const auto r = run({"calibrate", trace, "--toml", toml, "--scenario", scenario});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("not normal traffic: no healthy baseline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No breaker configuration proposed (not normal traffic)"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Breaker configuration written"), std::string::npos) << r.out;
  EXPECT_EQ(bulwark::testing::read_all(toml).rfind("# ", 0), 0u);
  const auto rep = run({"replay", "--config", toml, trace});
  EXPECT_EQ(rep.status, 2) << "the file holds no breaker to replay";
  EXPECT_NE(rep.err.find("missing the [breaker] table"), std::string::npos) << rep.err;
  for (const std::string& p : {trace, toml, scenario}) std::remove(p.c_str());
}

// ---- probing -------------------------------------------------------------------------

// At 30 calls a second a probe fraction would be half the traffic: count mode, with at
// most the calls normally in flight at once. At 400 a second, a fraction of at most 10 %.
TEST(HalfOpen, LittleTrafficProbesInCountModeAndMuchTrafficByAFraction) {
  Traffic slow;
  slow.rate = 30;
  slow.seconds = 1200;
  const Calibration c = calibrate_text(make_trace({slow}, 25), {});
  const KeyCalibration& k = c.keys[0];
  ASSERT_TRUE(k.rate_policy) << k.note;
  EXPECT_EQ(find(k, "half_open.fraction"), nullptr);
  const Proposed* at_once = find(k, "half_open.max_in_flight");
  ASSERT_NE(at_once, nullptr) << k.breaker_toml;
  EXPECT_NE(at_once->reason.find("count mode"), std::string::npos) << at_once->reason;
  const double probes = value_of(k, "half_open.probes");
  EXPECT_LE(std::stod(at_once->value), probes);
  EXPECT_LE(std::stod(at_once->value), k.bulkhead);
  // At most as many at once as are normally in flight, and at least their mean: the
  // round runs at the traffic's pace (rate x mean latency is about 1.7 here).
  EXPECT_GE(std::stod(at_once->value), k.rate_per_s * ms(k.mean) / 1000);
  const BreakerSpec spec = parse_breaker(k.breaker_toml, "p.toml");
  const HalfOpen& h = spec.as<TimeWindowConfig>().half_open;
  EXPECT_FALSE(h.fraction);
  ASSERT_TRUE(h.max_in_flight);
  EXPECT_EQ(*h.max_in_flight, static_cast<std::uint32_t>(std::stod(at_once->value)));
  EXPECT_EQ(k.checks[0].opens, 0u);
  ASSERT_TRUE(k.checks[2].time_to_open);

  Traffic busy;
  busy.rate = 400;
  busy.seconds = 600;
  const KeyCalibration b = calibrate_text(make_trace({busy}, 26), {}).keys[0];
  EXPECT_EQ(find(b, "half_open.max_in_flight"), nullptr);
  EXPECT_LE(value_of(b, "half_open.fraction"), 0.1);
}

// No rule's reason claims what the numbers do not give: a consecutive-failure run's
// expected count a day is what the reason says, for error rates up to just under half.
TEST(Calibrate, TheConsecutiveFailureRunIsAsRareAsItsReasonSays) {
  for (double error_rate : {0.0, 0.1, 0.3, 0.45}) {
    Traffic t;
    t.rate = 100;
    t.seconds = 600;
    t.error_rate = error_rate;
    const KeyCalibration k = calibrate_text(make_trace({t}, 27), {}).keys[0];
    ASSERT_TRUE(k.not_normal.empty()) << k.not_normal;
    const Proposed* run = find(k, "consecutive_failures");
    ASSERT_NE(run, nullptr);
    EXPECT_LT(std::stoi(run->value), 100) << error_rate << ": " << run->reason;
    EXPECT_NE(run->reason.find("is expected under"), std::string::npos) << run->reason;
  }
}

// The bulkhead's Poisson tail above 1,000 calls in flight is m + 5 sqrt(m): at least the
// exact 1e-6 quantile.
TEST(Calibrate, TheBulkheadCoversTheInFlightTailAtHighConcurrency) {
  // 1,000 calls a second lasting about 2 s: about 2,000 in flight.
  Traffic t;
  t.rate = 1000;
  t.median_ms = 2000;
  t.sigma = 0.01;
  t.seconds = 120;
  t.error_rate = 0;
  const KeyCalibration k = calibrate_text(make_trace({t}, 28), {}).keys[0];
  const double m = k.rate_per_s * ms(std::min(k.mean, k.timeout)) / 1000;
  ASSERT_GT(m, 1000);
  // The exact quantile, summed here in log space.
  double cdf = 0;
  std::uint64_t exact = 0;
  for (;; ++exact) {
    const double c = static_cast<double>(exact);
    cdf += std::exp(c * std::log(m) - m - std::lgamma(c + 1));
    if (1 - cdf <= 1e-6) break;
  }
  EXPECT_GE(k.bulkhead, exact) << "m = " << m;
  EXPECT_LE(k.bulkhead, exact + 50) << "m = " << m;
}

// The scenario written for a key too busy for ten minutes of it within the lab's run
// bound is shorter, the same shape: it loads and runs.
TEST(Calibrate, TheScenarioOfAVeryBusyKeyIsWithinTheRunBound) {
  Traffic t;
  t.rate = 1e6;
  t.seconds = 0.3;
  t.median_ms = 0.05;
  const KeyCalibration k = calibrate_text(make_trace({t}, 29), {}).keys[0];
  ASSERT_TRUE(k.not_normal.empty()) << k.not_normal;
  const Scenario s = parse_scenario(k.scenario_toml, "s.toml");
  EXPECT_LE(estimate_work(s, false).seconds, kMaxRunSeconds);
  EXPECT_LT(s.duration, std::chrono::minutes(10));
  ASSERT_EQ(s.dependency.phases.size(), 3u);
  EXPECT_EQ(s.dependency.phases[1].start * 10, s.duration) << "degraded from a tenth";
  EXPECT_EQ(s.dependency.phases[2].start * 10, s.duration * 7) << "to seven tenths";
}

}  // namespace
}  // namespace bulwark::lab
