// bulwark::prometheus_cpp::Collector and its reading of the text exposition.

#include "bulwark/prometheus_cpp/collector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bulwark/registry.h"

namespace {

using bulwark::prometheus_cpp::Collector;
using bulwark::prometheus_cpp::parse_exposition;
using prometheus::MetricFamily;
using prometheus::MetricType;

const MetricFamily* find(const std::vector<MetricFamily>& families, const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(ParseExposition, ReadsTypesHelpLabelsAndSpecialValues) {
  std::vector<MetricFamily> families;
  const std::string text =
      "# HELP a_total Calls, with a \\\\ and a \\n.\n"
      "# TYPE a_total counter\n"
      "a_total{key=\"q\\\"uote\",other=\"back\\\\slash\\nnew\"} 7\n"
      "# TYPE ratio gauge\n"
      "ratio NaN\n"
      "ratio{k=\"x\"} +Inf\n"
      "loose 3 1700000000000\n";
  ASSERT_EQ(parse_exposition(text, families), "");
  ASSERT_EQ(families.size(), 3u);
  const MetricFamily& a = families[0];
  EXPECT_EQ(a.name, "a_total");
  EXPECT_EQ(a.help, "Calls, with a \\ and a \n.");
  EXPECT_EQ(a.type, MetricType::Counter);
  ASSERT_EQ(a.metric.size(), 1u);
  EXPECT_EQ(a.metric[0].counter.value, 7);
  ASSERT_EQ(a.metric[0].label.size(), 2u);
  EXPECT_EQ(a.metric[0].label[0].value, "q\"uote");
  EXPECT_EQ(a.metric[0].label[1].value, "back\\slash\nnew");
  EXPECT_TRUE(std::isnan(families[1].metric[0].gauge.value));
  EXPECT_TRUE(std::isinf(families[1].metric[1].gauge.value));
  EXPECT_EQ(families[2].type, MetricType::Untyped);
  EXPECT_EQ(families[2].metric[0].untyped.value, 3);
}

TEST(ParseExposition, GroupsAHistogramsLinesBySeries) {
  std::vector<MetricFamily> families;
  const std::string text =
      "# TYPE d_seconds histogram\n"
      "d_seconds_bucket{key=\"a\",le=\"0.1\"} 1\n"
      "d_seconds_bucket{key=\"a\",le=\"+Inf\"} 3\n"
      "d_seconds_sum{key=\"a\"} 2.5\n"
      "d_seconds_count{key=\"a\"} 3\n"
      "d_seconds_bucket{key=\"b\",le=\"0.1\"} 0\n"
      "d_seconds_bucket{key=\"b\",le=\"+Inf\"} 0\n"
      "d_seconds_sum{key=\"b\"} 0\n"
      "d_seconds_count{key=\"b\"} 0\n";
  ASSERT_EQ(parse_exposition(text, families), "");
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].metric.size(), 2u);
  const auto& h = families[0].metric[0].histogram;
  EXPECT_EQ(h.sample_count, 3u);
  EXPECT_EQ(h.sample_sum, 2.5);
  ASSERT_EQ(h.bucket.size(), 2u);
  EXPECT_EQ(h.bucket[0].upper_bound, 0.1);
  EXPECT_EQ(h.bucket[0].cumulative_count, 1u);
  EXPECT_TRUE(std::isinf(h.bucket[1].upper_bound));
  EXPECT_EQ(families[0].metric[0].label.size(), 1u);  // `le` is not a series label
}

TEST(ParseExposition, NamesTheLineAndTheProblem) {
  std::vector<MetricFamily> families;
  EXPECT_EQ(parse_exposition("ok 1\nbad{key=\"x} 1\n", families),
            "line 2: a label value without its closing quote");
  EXPECT_EQ(parse_exposition("x one\n", families), "line 1: the value 'one' is not a number");
  EXPECT_EQ(parse_exposition("# TYPE x countr\n", families),
            "line 1: unknown metric type 'countr'");
  EXPECT_EQ(parse_exposition("# TYPE h histogram\nh_bucket 1\n", families),
            "line 2: a bucket without its le label");
}

TEST(Collector, MergesAFamilyWrittenBySeveralSourcesIntoOne) {
  bulwark::Registry<std::string> hosts({.name = "hosts", .breaker = {.name = "up"}});
  bulwark::Registry<std::string> other({.name = "other", .breaker = {.name = "down"}});
  (void)hosts.get("a");
  (void)other.get("b");
  Collector collector;
  collector.add(hosts);
  const auto second = collector.add(other);
  auto families = collector.Collect();
  const MetricFamily* state = find(families, "bulwark_circuitbreaker_state");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->type, MetricType::Gauge);
  int closed = 0;
  for (const auto& m : state->metric) {
    for (const auto& l : m.label) {
      if (l.name == "state" && l.value == "closed") closed += static_cast<int>(m.gauge.value);
    }
  }
  EXPECT_EQ(closed, 2);  // one closed breaker from each registry, in one family
  const std::size_t both = state->metric.size();

  EXPECT_TRUE(collector.remove(second));
  EXPECT_FALSE(collector.remove(second));
  families = collector.Collect();
  EXPECT_EQ(find(families, "bulwark_circuitbreaker_state")->metric.size(), both / 2);
  EXPECT_EQ(collector.last_error(), "");
  EXPECT_EQ(find(families, "bulwark_prometheus_cpp_parse_errors_total")->metric[0].counter.value,
            0);
}

TEST(Collector, CountsASourceItCannotRead) {
  Collector collector;
  collector.add([](std::ostream& out) { out << "good 1\nbad{ 2\n"; });
  const auto families = collector.Collect();
  EXPECT_NE(find(families, "good"), nullptr);  // what came before the problem is served
  EXPECT_EQ(find(families, "bulwark_prometheus_cpp_parse_errors_total")->metric[0].counter.value,
            1);
  EXPECT_EQ(collector.last_error(), "source 0, line 2: expected a label name");
}

}  // namespace
