// The strict Retry-After parser: both forms, hostile values, and a deterministic
// random sweep (no crash, no out-of-range delay, whatever the bytes).

#include "bulwark/http/retry_after.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

namespace bulwark::http {
namespace {

using namespace std::chrono_literals;
using Status = RetryAfter::Status;

// Sun, 06 Nov 1994 08:49:37 GMT
const auto kNow = std::chrono::sys_days(std::chrono::year(1994) / 11 / 6) + 8h + 49min + 37s;

RetryAfter parse(std::string_view v, Nanos max = 10min) { return parse_retry_after(v, kNow, max); }

TEST(RetryAfter, DelaySeconds) {
  EXPECT_EQ(parse("0").status, Status::ok);
  EXPECT_EQ(parse("0").delay, 0s);
  EXPECT_EQ(parse("120").delay, 120s);
  EXPECT_EQ(parse("007").delay, 7s);
  EXPECT_EQ(parse("  5\t").delay, 5s) << "surrounding whitespace is trimmed";
  EXPECT_EQ(parse("600").status, Status::ok) << "the maximum itself is allowed";
}

TEST(RetryAfter, HttpDate) {
  auto r = parse("Sun, 06 Nov 1994 08:51:37 GMT");
  EXPECT_EQ(r.status, Status::ok);
  EXPECT_EQ(r.delay, 120s);
  r = parse("Sun, 06 Nov 1994 08:00:00 GMT");
  EXPECT_EQ(r.status, Status::ok);
  EXPECT_EQ(r.delay, 0s) << "a date in the past: retry now";
  EXPECT_EQ(parse("Mon, 07 Nov 1994 08:49:37 GMT").status, Status::too_large);
  EXPECT_EQ(parse("Mon, 07 Nov 1994 08:49:37 GMT", 48h).delay, 24h);
}

TEST(RetryAfter, FormatRoundTrips) {
  EXPECT_EQ(format_http_date(kNow), "Sun, 06 Nov 1994 08:49:37 GMT");
  const auto later = kNow + 90s;
  EXPECT_EQ(parse(format_http_date(later)).delay, 90s);
}

TEST(RetryAfter, HostileValues) {
  for (const char* v : {"", "   ", "-1", "+5", "1.5", "5s", "1e3", "0x10", "soon", "12 34",
                        "Sunday, 06-Nov-94 08:49:37 GMT",  // RFC 850: obsolete, rejected
                        "Sun Nov  6 08:49:37 1994",        // asctime: obsolete, rejected
                        "Mon, 06 Nov 1994 08:49:37 GMT",   // wrong weekday
                        "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 31 Feb 1994 08:49:37 GMT",
                        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                        "Sun,  6 Nov 1994 08:49:37 GMT", "sun, 06 nov 1994 08:49:37 gmt"}) {
    const RetryAfter r = parse(v);
    EXPECT_EQ(r.status, Status::invalid) << "'" << v << "'";
    EXPECT_EQ(r.delay, 0s);
  }
  EXPECT_EQ(parse("601").status, Status::too_large);
  EXPECT_EQ(parse("99999999999999999999999999999999").status, Status::too_large) << "no overflow";
  EXPECT_EQ(parse("99999999999999999999999999999999x").status, Status::invalid);
  EXPECT_EQ(parse("Sun, 06 Nov 9999 08:49:37 GMT").status, Status::invalid) << "wrong weekday";
  EXPECT_EQ(parse("Fri, 31 Dec 9999 23:59:59 GMT").status, Status::too_large);
}

TEST(RetryAfter, RandomBytesNeverEscapeTheBounds) {
  std::mt19937_64 gen(12345);
  const std::string alphabet = "0123456789 ,:-+.GMTSunNovFri\t\r\nxZ\x7f\x80";
  for (int i = 0; i < 20000; ++i) {
    std::string v;
    const std::size_t len = gen() % 40;
    for (std::size_t j = 0; j < len; ++j) {
      v.push_back(i % 2 == 0 ? alphabet[gen() % alphabet.size()] : static_cast<char>(gen()));
    }
    const RetryAfter r = parse(v, 30s);
    if (r.status == Status::ok) {
      EXPECT_GE(r.delay, 0s) << v;
      EXPECT_LE(r.delay, 30s) << v;
    } else {
      EXPECT_EQ(r.delay, 0s) << v;
    }
  }
}

}  // namespace
}  // namespace bulwark::http
