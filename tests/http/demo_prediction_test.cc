// `bulwark demo`'s comparison of its measured figures with `bulwark simulate`'s
// prediction, on fixed numbers (no server, no wall clock), and the demo's scenario as
// the lab runs it.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "demo.h"

namespace bulwark::cli {
namespace {

using namespace std::chrono_literals;

lab::ConfigurationResult predicted(std::uint64_t calls, std::uint64_t degraded,
                                   std::optional<Nanos> open) {
  lab::ConfigurationResult p;
  p.name = "after";
  p.calls_while_degraded = calls;
  p.served_degraded = degraded;
  p.has_breaker = true;
  p.time_to_open = open;
  return p;
}

const DemoComparison& row(const std::vector<DemoComparison>& rows, const std::string& figure) {
  for (const auto& r : rows) {
    if (r.figure == figure) return r;
  }
  ADD_FAILURE() << "no row " << figure;
  return rows.front();
}

constexpr DemoTolerance kTolerance{.relative = 0.10, .absolute = 3, .open_ms = 100};

TEST(DemoPrediction, CountsWithinTheRelativeOrTheAbsoluteBound) {
  const auto p = predicted(200, 400, 300ms);
  // 10 % of 200 is 20: 220 is within, 221 is not.
  EXPECT_TRUE(row(compare_with_prediction(
                      "after",
                      {.calls_while_degraded = 220, .served_degraded = 400, .time_to_open_ms = 300},
                      p, kTolerance),
                  "calls while degraded")
                  .within);
  EXPECT_FALSE(
      row(compare_with_prediction(
              "after",
              {.calls_while_degraded = 221, .served_degraded = 400, .time_to_open_ms = 300}, p,
              kTolerance),
          "calls while degraded")
          .within);
  EXPECT_FALSE(
      row(compare_with_prediction(
              "after",
              {.calls_while_degraded = 179, .served_degraded = 400, .time_to_open_ms = 300}, p,
              kTolerance),
          "calls while degraded")
          .within);
  // Small counts: the absolute bound (3) is the wider one.
  const auto small = predicted(17, 400, 300ms);
  const auto rows = compare_with_prediction(
      "after", {.calls_while_degraded = 20, .served_degraded = 395, .time_to_open_ms = 300}, small,
      kTolerance);
  EXPECT_TRUE(row(rows, "calls while degraded").within);
  EXPECT_EQ(*row(rows, "calls while degraded").measured, 20);
  EXPECT_EQ(*row(rows, "calls while degraded").predicted, 17);
  EXPECT_FALSE(
      row(compare_with_prediction(
              "after", {.calls_while_degraded = 21, .served_degraded = 400, .time_to_open_ms = 300},
              small, kTolerance),
          "calls while degraded")
          .within);
  EXPECT_TRUE(row(rows, "pages degraded").within) << "10 % of 400 is 40";
  EXPECT_FALSE(
      row(compare_with_prediction(
              "after", {.calls_while_degraded = 17, .served_degraded = 359, .time_to_open_ms = 300},
              small, kTolerance),
          "pages degraded")
          .within);
}

TEST(DemoPrediction, TimeToOpen) {
  const auto p = predicted(17, 400, 305ms);
  auto open_row = [&](std::optional<double> ms, const lab::ConfigurationResult& pr) {
    return row(
        compare_with_prediction(
            "after", {.calls_while_degraded = 17, .served_degraded = 400, .time_to_open_ms = ms},
            pr, kTolerance),
        "time to open");
  };
  EXPECT_TRUE(open_row(405, p).within);
  EXPECT_FALSE(open_row(406, p).within);
  EXPECT_TRUE(open_row(205, p).within);
  EXPECT_FALSE(open_row(204, p).within);
  EXPECT_FALSE(open_row(std::nullopt, p).within) << "predicted to open, never opened";
  const auto never = predicted(17, 400, std::nullopt);
  EXPECT_FALSE(open_row(300, never).within) << "opened, predicted never to";
  EXPECT_TRUE(open_row(std::nullopt, never).within);
  EXPECT_FALSE(open_row(std::nullopt, never).measured);
}

TEST(DemoPrediction, RowsFollowTheConfiguration) {
  lab::ConfigurationResult before;
  before.name = "before";
  before.calls_while_degraded = 232;
  const auto rows = compare_with_prediction(
      "before", {.calls_while_degraded = 231, .served_degraded = 0, .time_to_open_ms = {}}, before,
      kTolerance);
  ASSERT_EQ(rows.size(), 1u) << "no fallback and no breaker: only the calls are compared";
  EXPECT_EQ(rows[0].configuration, "before");
  EXPECT_TRUE(rows[0].within);
}

TEST(DemoPrediction, TheDemosScenarioInTheLab) {
  // Virtual time: deterministic, a fraction of a second.
  const DemoOptions o;
  const lab::SimulationResult sim = lab::simulate(demo_scenario(o));
  ASSERT_EQ(sim.configurations.size(), 2u);
  const auto& before = sim.configurations[0];
  const auto& after = sim.configurations[1];
  EXPECT_EQ(before.name, "before");
  EXPECT_EQ(after.name, "after");
  EXPECT_EQ(before.requests, 520u);  // 40/s for 13 s
  EXPECT_FALSE(before.time_to_open);
  // Before: the 32 workers each make a 1.4 s call at a time while it is slow.
  EXPECT_NEAR(static_cast<double>(before.calls_while_degraded), 32 * 10 / 1.4, 32);
  // After: the breaker opens within half a second and the fallback serves the rest.
  ASSERT_TRUE(after.time_to_open);
  EXPECT_LT(*after.time_to_open, 500ms);
  EXPECT_LT(after.calls_while_degraded, 40u);
  EXPECT_GE(after.served_degraded, 390u);
  EXPECT_EQ(after.lost, 0u);
}

}  // namespace
}  // namespace bulwark::cli
