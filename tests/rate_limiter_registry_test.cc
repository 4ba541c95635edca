#include "bulwark/rate_limiter_registry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>

#include "bulwark/prometheus_limits.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

RateLimiterConfig per_second(std::uint64_t n) {
  RateLimiterConfig c;
  c.name = "tenant";
  c.mode = RateLimitMode::bursty;
  c.permits = n;
  c.period = 1s;
  return c;
}

TEST(RateLimiterRegistry, EachKeyHasItsOwnBucket) {
  ManualClock clock;
  BasicRateLimiterRegistry<std::string, ManualClock> tenants(
      per_second(2), clock, [](const std::string& k) { return per_second(k == "gold" ? 5 : 2); });
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(tenants.try_acquire("a"));
  auto r = tenants.try_acquire("a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().retry_after, 500ms);
  EXPECT_TRUE(tenants.try_acquire("b")) << "another key is not affected";
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(tenants.try_acquire("gold"));
  EXPECT_FALSE(tenants.try_acquire("gold"));
  EXPECT_EQ(tenants.size(), 3u);
  EXPECT_EQ(&tenants.get("a"), &tenants.get("a"));

  std::ostringstream out;
  {
    prometheus::Writer w(out);
    prometheus::write_rate_limiters(w, tenants.snapshots());
  }
  const std::string text = out.str();
  EXPECT_NE(text.find("# TYPE bulwark_rate_limiter_refused_total counter"), std::string::npos);
  EXPECT_NE(text.find("bulwark_rate_limiter_refused_total{name=\"tenant\",key=\"a\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("bulwark_rate_limiter_burst{name=\"tenant\",key=\"gold\"} 5\n"),
            std::string::npos)
      << text;
}

TEST(RateLimiterRegistry, InvalidConfigNamesTheField) {
#if defined(__cpp_exceptions)
  ManualClock clock;
  auto c = per_second(0);
  EXPECT_THROW((BasicRateLimiterRegistry<int, ManualClock>(c, clock)), InvalidConfig);
  BasicRateLimiterRegistry<int, ManualClock> bad_key(per_second(1), clock,
                                                     [](int) { return per_second(0); });
  try {
    bad_key.get(7);
    FAIL() << "no InvalidConfig";
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "permits");
  }
  EXPECT_EQ(bad_key.size(), 0u);
#endif
}

TEST(PrometheusLimits, ThrottleFamilies) {
  ManualClock clock;
  ThrottleConfig tc;
  tc.name = "search";
  tc.seed = 3;
  BasicThrottle<ManualClock> t(tc, clock);
  for (int i = 0; i < 9; ++i) t.record(i < 3);
  std::ostringstream out;
  {
    prometheus::Writer w(out);
    prometheus::write_throttles(w, {t.snapshot()});
  }
  const std::string text = out.str();
  EXPECT_NE(text.find("bulwark_throttle_requests{name=\"search\"} 9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_throttle_accepts{name=\"search\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_throttle_reject_probability{name=\"search\"} 0.3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE bulwark_throttle_rejected_total counter"), std::string::npos);
}

}  // namespace
}  // namespace bulwark
