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
#include <string>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "process.h"

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
    std::snprintf(line, sizeof line, "%.3f,%s,%.3f,%s\n", next[k] * 1000, tr.key.c_str(), d,
                  failed ? "failure" : "success");
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
}

TEST(Calibrate, LittleTrafficGetsConsecutiveFailuresAndSaysSo) {
  Traffic t;
  t.rate = 0.05;  // one call every 20 s, for two hours: 360 calls
  t.seconds = 7200;
  const Calibration c = calibrate_text(make_trace({t}, 3), {});
  const KeyCalibration& k = c.keys[0];
  EXPECT_FALSE(k.rate_policy);
  EXPECT_NE(k.note.find("little traffic"), std::string::npos) << k.note;
  const Proposed* window = find(k, "window");
  ASSERT_NE(window, nullptr);
  EXPECT_EQ(window->value, "\"none\"");
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

TEST(Calibrate, TheJsonHoldsWhatTheTextSays) {
  Traffic t;
  t.seconds = 120;
  const Calibration c = calibrate_text(make_trace({t}, 6), {});
  const nlohmann::json j = nlohmann::json::parse(to_json(c));
  ASSERT_EQ(j["keys"].size(), 1u);
  const auto& k = j["keys"][0];
  EXPECT_EQ(k["key"], "svc");
  EXPECT_EQ(k["bulkhead"], c.keys[0].bulkhead);
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

}  // namespace
}  // namespace bulwark::lab
