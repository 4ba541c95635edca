// The simulator's mechanics on scenarios small enough to count by hand: caller
// saturation, timeouts and the fallback, the real breaker opening, the bulkhead and its
// wait queue, retries within their budget, breaker scopes, determinism.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"
#include "bulwark/lab/simulate.h"

namespace bulwark::lab {
namespace {

using namespace std::chrono_literals;

// `rate` requests/s at constant spacing for `duration`, `workers` workers, and a
// dependency answering in `latency` with `error_rate`.
Scenario scenario(double rate, Nanos duration, std::uint32_t workers, Nanos latency,
                  double error_rate = 0) {
  Scenario s;
  s.name = "test";
  s.source = "test";
  s.duration = duration;
  s.arrivals = {ArrivalProcess::constant, rate};
  s.caller.workers = workers;
  Phase p;
  p.name = "only";
  p.latency.value = latency;
  p.error_rate = error_rate;
  s.dependency.phases.push_back(p);
  return s;
}

ResilienceConfig config(std::string name = "c") {
  ResilienceConfig c;
  c.name = std::move(name);
  return c;
}

std::uint64_t reason(const ConfigurationResult& r, Reason why) {
  return r.reasons[static_cast<std::size_t>(why)];
}

TEST(Simulate, ARequestThatFindsNoFreeWorkerIsLost) {
  // 10 req/s, each holds its worker for 1 s, 2 workers: 2 served and 8 lost per second.
  const Scenario s = scenario(10, 10s, 2, 1s);
  const ConfigurationResult r = simulate_configuration(s, config());
  EXPECT_EQ(r.requests, 100u);
  EXPECT_EQ(r.served_full, 20u);
  EXPECT_EQ(r.lost, 80u);
  EXPECT_EQ(r.served_degraded + r.failed, 0u);
  EXPECT_EQ(r.peak_busy, 2u);
  EXPECT_EQ(r.peak_in_flight, 2u);
  EXPECT_EQ(r.calls, 20u);
  EXPECT_EQ(r.p50, 1s);
  EXPECT_EQ(r.p99, 1s);
  ASSERT_EQ(r.timeline.size(), 10u);
  for (const TimelineStep& step : r.timeline) {
    EXPECT_EQ(step.arrivals, 10u);
    EXPECT_EQ(step.lost, 8u);
    EXPECT_EQ(step.peak_busy, 2u);
    EXPECT_FALSE(step.state) << "no breaker, no state";
  }
  // Pages done at 1 s, 2 s, ... 10 s: the last two finish after the end (drained).
  EXPECT_EQ(r.timeline[0].full, 0u);
  EXPECT_EQ(r.timeline[1].full, 2u);
}

TEST(Simulate, TheCallersOwnWorkHoldsTheWorkerToo) {
  Scenario s = scenario(10, 10s, 1000, 100ms);
  s.caller.work = 50ms;
  const ConfigurationResult r = simulate_configuration(s, config());
  EXPECT_EQ(r.p50, 150ms);
  EXPECT_EQ(r.peak_busy, 2u) << "arrivals every 100 ms, each busy for 150 ms";
  EXPECT_EQ(r.peak_in_flight, 1u);
}

TEST(Simulate, ACallLongerThanTheTimeoutFailsAtTheTimeoutAndTheFallbackAnswers) {
  const Scenario s = scenario(10, 10s, 1000, 2s);
  ResilienceConfig c = config();
  c.timeout = 500ms;
  c.fallback = Reasons::all();
  const ConfigurationResult r = simulate_configuration(s, c);
  EXPECT_EQ(r.served_degraded, 100u);
  EXPECT_EQ(reason(r, Reason::timeout), 100u);
  EXPECT_EQ(r.p99, 500ms);
  EXPECT_EQ(r.peak_in_flight, 5u);

  c.fallback = Reasons::breaker();  // does not cover timeouts: the pages fail
  const ConfigurationResult f = simulate_configuration(s, c);
  EXPECT_EQ(f.failed, 100u);
  EXPECT_EQ(f.served_degraded, 0u);
}

TEST(Simulate, TheRealBreakerOpensAndTheTimeToOpenIsMeasuredFromTheDegradation) {
  // 100 req/s; from 5 s on every call fails after 10 ms. Five consecutive failures:
  // calls at 5.00..5.04 fail at 5.01..5.05 s.
  Scenario s = scenario(100, 20s, 1000, 10ms);
  Phase failing = s.dependency.phases[0];
  failing.name = "failing";
  failing.start = 5s;
  failing.error_rate = 1.0;
  failing.degraded = true;
  s.dependency.phases.push_back(failing);
  ResilienceConfig c = config();
  c.breaker = BreakerConfig{.consecutive_failures = 5, .open_duration = 2s};
  c.fallback = Reasons::all();
  const ConfigurationResult r = simulate_configuration(s, c);
  ASSERT_TRUE(r.has_breaker);
  ASSERT_FALSE(r.transitions.empty());
  EXPECT_EQ(r.transitions[0].at, 5050ms);
  EXPECT_EQ(r.transitions[0].from, State::closed);
  EXPECT_EQ(r.transitions[0].to, State::open);
  EXPECT_EQ(r.transitions[0].reason, TransitionReason::consecutive_failures);
  EXPECT_EQ(r.time_to_open, 50ms);
  // Open 2 s, a probe fails, open again...: every 2.01 s one probe, from 5.05 s to 20 s.
  EXPECT_EQ(r.opens, 1u + 7u);
  EXPECT_EQ(r.calls_while_degraded, 5u + 7u) << "the breaker let the probes through only";
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(reason(r, Reason::call_error), 12u);
  EXPECT_EQ(reason(r, Reason::breaker_open) + reason(r, Reason::breaker_half_open_full),
            r.served_degraded - 12u);
  EXPECT_EQ(r.timeline[4].state, State::closed);
  EXPECT_EQ(r.timeline[6].state, State::open);
  EXPECT_EQ(r.longest_open, 15s - 50ms) << "never closed again";
}

TEST(Simulate, TheBulkheadCapsCallsInFlightAndItsWaitersAreServedInOrder) {
  const Scenario s = scenario(10, 10s, 1000, 1s);
  ResilienceConfig c = config();
  c.bulkhead = BulkheadConfig{.name = "pool", .max_concurrent = 3};
  c.fallback = Reasons::all();
  const ConfigurationResult rejecting = simulate_configuration(s, c);
  EXPECT_EQ(rejecting.peak_in_flight, 3u);
  EXPECT_EQ(rejecting.served_full, 30u) << "3 slots x 1 s each, for 10 s";
  EXPECT_EQ(reason(rejecting, Reason::bulkhead_full), 70u);

  // Waiting up to 250 ms: a request arriving 200 ms before a slot frees gets it.
  c.bulkhead->max_wait = 250ms;
  const ConfigurationResult waiting = simulate_configuration(s, c);
  EXPECT_EQ(waiting.peak_in_flight, 3u);
  EXPECT_GT(waiting.max, 1s) << "some pages waited for their slot";
  EXPECT_LE(waiting.max, 1250ms);
  EXPECT_EQ(waiting.served_full + waiting.served_degraded, 100u);
  EXPECT_EQ(reason(waiting, Reason::bulkhead_full), waiting.served_degraded);
}

TEST(Simulate, RetriesFollowThePolicyAndTheBudgetCapsThem) {
  const Scenario s = scenario(10, 10s, 1000, 10ms, /*error_rate=*/1.0);
  ResilienceConfig c = config();
  c.retry =
      RetrySpec{.config = {.name = "r", .max_attempts = 3, .backoff = Backoff::constant(100ms)}};
  c.fallback = Reasons::all();
  const ConfigurationResult r = simulate_configuration(s, c);
  EXPECT_EQ(r.calls, 300u);
  EXPECT_EQ(r.retries, 200u);
  EXPECT_EQ(reason(r, Reason::retries_exhausted), 100u);
  EXPECT_EQ(r.p50, 10ms + 100ms + 10ms + 100ms + 10ms);

  // A budget of 0.1 retries per request and no floor: about one retry per ten requests.
  c.retry_budget =
      RetryBudgetConfig{.name = "b", .ratio = 0.1, .min_retries_per_second = 0, .max_tokens = 1};
  const ConfigurationResult b = simulate_configuration(s, c);
  EXPECT_LE(b.retries, 10u);
  EXPECT_GE(b.retries, 8u);
  EXPECT_EQ(b.calls, 100u + b.retries);
  EXPECT_GT(reason(b, Reason::budget_exhausted), 80u);
}

TEST(Simulate, AnAttemptScopedBreakerStopsTheRetriesWhenItOpens) {
  const Scenario s = scenario(1, 3s, 1000, 10ms, /*error_rate=*/1.0);
  ResilienceConfig c = config();
  c.breaker = BreakerConfig{.consecutive_failures = 3, .open_duration = 1min};
  c.retry =
      RetrySpec{.config = {.name = "r", .max_attempts = 5, .backoff = Backoff::constant(100ms)}};
  c.fallback = Reasons::all();

  c.breaker_scope = BreakerScope::attempt;
  const ConfigurationResult per_attempt = simulate_configuration(s, c);
  EXPECT_EQ(per_attempt.calls, 3u) << "the third failed attempt opened it; the 4th is rejected";
  EXPECT_EQ(reason(per_attempt, Reason::breaker_open), 3u);

  c.breaker_scope = BreakerScope::call;  // one failure per call: 3 calls x 5 attempts
  const ConfigurationResult per_call = simulate_configuration(s, c);
  EXPECT_EQ(per_call.calls, 15u);
  EXPECT_EQ(reason(per_call, Reason::retries_exhausted), 3u);
  EXPECT_EQ(per_call.opens, 1u);
}

// The incident in miniature: 100 req/s, reviews slow from 5 s to 15 s.
Scenario small_incident() {
  Scenario s = builtin_scenario();
  s.duration = 25s;
  s.arrivals.rate = 100;
  s.caller.workers = 250;
  s.dependency.phases[1].start = 5s;
  s.dependency.phases[2].start = 15s;
  s.configurations[1].breaker->as<TimeWindowConfig>().open_duration = 4s;
  return s;
}

TEST(Simulate, TheSameScenarioGivesTheSameResultsAndConfigurationsShareTheirDraws) {
  Scenario s = small_incident();
  s.configurations.push_back(s.configurations[1]);
  s.configurations.back().name = "after again";
  const std::string first = to_json(simulate(s));
  EXPECT_EQ(to_json(simulate(s)), first);
  const SimulationResult r = simulate(s);
  ASSERT_FALSE(r.configurations[1].transitions.empty());
  EXPECT_EQ(r.configurations[1].served_full, r.configurations[2].served_full);
  EXPECT_EQ(r.configurations[1].transitions.size(), r.configurations[2].transitions.size());
  s.seed += 1;
  EXPECT_NE(to_json(simulate(s)), first);
}

// The full incident is asserted end to end in cli_test (from --json); this is its
// shape at a smaller scale, fast enough for every sanitizer.
TEST(Simulate, TheIncidentInMiniatureTellsTheSeedsStory) {
  const SimulationResult r = simulate(small_incident());
  ASSERT_EQ(r.configurations.size(), 2u);
  const ConfigurationResult& before = r.configurations[0];
  const ConfigurationResult& after = r.configurations[1];
  EXPECT_EQ(before.peak_busy, 250u);
  EXPECT_GT(before.lost, before.requests / 4);
  ASSERT_TRUE(after.time_to_open);
  EXPECT_LE(*after.time_to_open, 10s);
  EXPECT_EQ(after.lost, 0u);
  EXPECT_EQ(after.failed, 0u);
  EXPECT_LE(after.peak_in_flight, 80u);
  ASSERT_FALSE(after.transitions.empty());
  EXPECT_EQ(after.transitions.back().to, State::closed);
  EXPECT_GE(after.transitions.back().at, 15s);
  for (const auto& c : r.configurations) {
    EXPECT_EQ(c.lost + c.served_full + c.served_degraded + c.failed, c.requests) << c.name;
  }
}

TEST(Simulate, ProgressHearsEachConfigurationsVirtualTimeAdvance) {
  // The incident: half a million events or more per configuration, a report or more each.
  const Scenario s = builtin_scenario();
  struct Heard {
    std::vector<std::pair<std::string, Nanos>> calls;
    Nanos duration{};
  } heard;
  SimulateOptions options;
  options.progress = [](std::string_view name, Nanos at, Nanos duration, void* h) {
    static_cast<Heard*>(h)->calls.emplace_back(std::string(name), at);
    static_cast<Heard*>(h)->duration = duration;
  };
  options.progress_context = &heard;
  const SimulationResult with = simulate(s, options);
  EXPECT_EQ(heard.duration, s.duration);
  for (const ResilienceConfig& c : s.configurations) {
    Nanos last = Nanos::zero();
    int reports = 0;
    for (const auto& [name, at] : heard.calls) {
      if (name != c.name) continue;
      ++reports;
      EXPECT_GE(at, last);
      EXPECT_LE(at, s.duration);
      last = at;
    }
    EXPECT_GE(reports, 1) << c.name;
  }
  EXPECT_EQ(to_json(with), to_json(simulate(s))) << "reporting changes nothing";
}

TEST(Simulate, SideBySideGivesWhatOneAfterAnotherGives) {
  Scenario s = small_incident();
  s.configurations.push_back(s.configurations[1]);
  s.configurations.back().name = "after again";
  const std::string one = to_json(simulate(s));
  EXPECT_EQ(to_json(simulate(s, {.threads = 2})), one);
  EXPECT_EQ(to_json(simulate(s, {.threads = 8})), one) << "more threads than configurations";
  // Progress calls are serialized: a plain counter (TSan would see a race otherwise).
  std::uint64_t calls = 0;
  SimulateOptions options{.threads = 3};
  options.progress = [](std::string_view, Nanos, Nanos, void* c) {
    ++*static_cast<std::uint64_t*>(c);
  };
  options.progress_context = &calls;
  const Scenario big = builtin_scenario();
  const std::string alone = to_json(simulate(big));
  EXPECT_EQ(to_json(simulate(big, options)), alone);
  EXPECT_GE(calls, big.configurations.size());
}

TEST(Simulate, SideBySideReportsTheFirstConfigurationsError) {
  Scenario s = scenario(10, 10s, 10, 10ms);
  s.configurations.push_back(config("good"));
  for (const char* name : {"bad1", "bad2"}) {
    s.configurations.push_back(config(name));
    s.configurations.back().breaker = CountWindowConfig{};  // no trip rule
  }
  for (unsigned threads : {1u, 2u, 3u}) {
    try {
      simulate(s, {.threads = threads});
      ADD_FAILURE() << threads;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "config.bad1.failure_rate") << threads;
    }
  }
  try {
    simulate(s, {.threads = 0});
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "threads");
  }
}

TEST(Simulate, BadOptionsAreInputErrors) {
  const Scenario s = scenario(10, 10s, 10, 10ms);
  try {
    simulate_configuration(s, config(), {.timeline_step = 0s});
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "timeline_step") << "the option's name, as SimulateOptions spells it";
  }
  EXPECT_THROW(simulate_configuration(s, config(), {.timeline_step = 1us}), InputError);
  ResilienceConfig bad = config("bad");
  bad.breaker = CountWindowConfig{};  // a window and no trip rule: the library refuses
  try {
    simulate_configuration(s, bad);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "config.bad.failure_rate");
  }
}

TEST(Report, TextJsonAndSvgCarryTheResults) {
  Scenario s = small_incident();
  s.duration = 2min;
  const SimulationResult r = simulate(s, {.timeline_step = 10s});
  std::ostringstream text;
  write_text(text, r);
  const std::string t = text.str();
  EXPECT_NE(t.find("lost to caller saturation"), std::string::npos);
  EXPECT_NE(t.find("time from degradation to breaker open"), std::string::npos);
  EXPECT_NE(t.find("    1:50 |"), std::string::npos) << "a row per 10 s step";
  EXPECT_EQ(t.find("    2:00 |"), std::string::npos) << "no step starts at the end";
  const std::string svg = to_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<polygon"), std::string::npos);
  EXPECT_NE(to_json(r).find("\"timeline_step_ms\": 10000"), std::string::npos);
}

// The chart's headline and the summary table show the same, rounded, time to open.
TEST(Report, TheChartAndTheSummaryRoundTimeToOpenAlike) {
  Scenario s = small_incident();
  s.duration = 1min;
  SimulationResult r = simulate(s, {.timeline_step = 10s});
  ASSERT_EQ(r.configurations.size(), 2u);
  r.configurations[1].time_to_open = 809'600us;
  std::ostringstream text;
  write_text(text, r, {.timeline = false});
  const std::string t = text.str();
  const std::size_t row = t.find("time from degradation to breaker open");
  ASSERT_NE(row, std::string::npos) << t;
  const std::string line = t.substr(row, t.find('\n', row) - row);
  EXPECT_EQ(line.substr(line.size() - 5), "810ms") << line;
  const std::string svg = to_svg(r);
  EXPECT_NE(svg.find("breaker open 810ms after the degradation"), std::string::npos);
  EXPECT_EQ(svg.find("809ms"), std::string::npos);
}

TEST(Report, ReadableDurationsRoundBeforePickingTheUnit) {
  EXPECT_EQ(format_readable(809'600us), "810ms");
  EXPECT_EQ(format_readable(999'600us), "1.00s");
  EXPECT_EQ(format_readable(6'040ms), "6.04s");
  EXPECT_EQ(format_readable(9'996ms), "10.0s");
  EXPECT_EQ(format_readable(14'100ms), "14.1s");
  EXPECT_EQ(format_readable(119'960ms), "2min 0s");
  EXPECT_EQ(format_readable(369s), "6min 9s");
}

}  // namespace
}  // namespace bulwark::lab
