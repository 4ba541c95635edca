#include "bulwark/http/retry_after.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace bulwark::http {
namespace {

constexpr std::array<std::string_view, 7> kDays = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// Exactly `n` digits at `s[pos]`.
bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) noexcept {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (!is_digit(c)) return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

int index_of(std::string_view token, const auto& names) noexcept {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == token) return static_cast<int>(i);
  }
  return -1;
}

// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" — exactly 29 characters.
bool parse_imf_fixdate(std::string_view s, std::chrono::sys_seconds& out) noexcept {
  if (s.size() != 29) return false;
  if (s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[19] != ':' ||
      s[22] != ':' || s[25] != ' ' || s.substr(26) != "GMT")
    return false;
  const int wday = index_of(s.substr(0, 3), kDays);
  const int mon = index_of(s.substr(8, 3), kMonths);
  int day = 0, year = 0, hh = 0, mm = 0, ss = 0;
  if (wday < 0 || mon < 0 || !digits(s, 5, 2, day) || !digits(s, 12, 4, year) ||
      !digits(s, 17, 2, hh) || !digits(s, 20, 2, mm) || !digits(s, 23, 2, ss))
    return false;
  // RFC 9110 allows a leap second (60).
  if (hh > 23 || mm > 59 || ss > 60) return false;
  using namespace std::chrono;
  const year_month_day ymd{std::chrono::year(year), month(static_cast<unsigned>(mon + 1)),
                           std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) return false;
  const sys_days days(ymd);
  if (weekday(days).c_encoding() != static_cast<unsigned>(wday)) return false;
  out = sys_seconds(days) + hours(hh) + minutes(mm) + seconds(ss);
  return true;
}

}  // namespace

RetryAfter parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now,
                             Nanos max_delay) {
  const auto ows = [](char c) { return c == ' ' || c == '\t'; };
  while (!value.empty() && ows(value.front())) value.remove_prefix(1);
  while (!value.empty() && ows(value.back())) value.remove_suffix(1);
  if (value.empty()) return {};

  const auto too_large = [] { return RetryAfter{RetryAfter::Status::too_large, Nanos::zero()}; };
  if (is_digit(value.front())) {
    // delay-seconds: 1*DIGIT. Leading zeros are allowed; any other character is not.
    const std::int64_t max_seconds =
        std::chrono::duration_cast<std::chrono::seconds>(max_delay).count();
    std::int64_t seconds = 0;
    bool over = false;
    for (const char c : value) {
      if (!is_digit(c)) return {};
      if (!over) {
        seconds = seconds * 10 + (c - '0');
        if (seconds > max_seconds) over = true;  // keep scanning: garbage is still invalid
      }
    }
    if (over) return too_large();
    const Nanos d = std::chrono::seconds(seconds);
    if (d > max_delay) return too_large();
    return {RetryAfter::Status::ok, d};
  }

  std::chrono::sys_seconds at;
  if (!parse_imf_fixdate(value, at)) return {};
  // In seconds first: a date centuries away would overflow nanoseconds.
  const std::chrono::seconds delta = at - std::chrono::floor<std::chrono::seconds>(now);
  if (delta <= std::chrono::seconds::zero()) return {RetryAfter::Status::ok, Nanos::zero()};
  if (delta > std::chrono::floor<std::chrono::seconds>(max_delay)) return too_large();
  const auto precise = std::chrono::duration_cast<Nanos>(at - now);
  return {RetryAfter::Status::ok, std::clamp(precise, Nanos::zero(), max_delay)};
}

std::string format_http_date(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto secs = floor<seconds>(t);
  const sys_days days = floor<std::chrono::days>(secs);
  const year_month_day ymd(days);
  const hh_mm_ss<seconds> hms(secs - days);
  char buf[40];
  const unsigned wd = weekday(days).c_encoding();
  const int n = std::snprintf(buf, sizeof buf, "%s, %02u %s %04d %02d:%02d:%02d GMT",
                              std::string(kDays[wd]).c_str(), static_cast<unsigned>(ymd.day()),
                              std::string(kMonths[static_cast<unsigned>(ymd.month()) - 1]).c_str(),
                              static_cast<int>(ymd.year()), static_cast<int>(hms.hours().count()),
                              static_cast<int>(hms.minutes().count()),
                              static_cast<int>(hms.seconds().count()));
  return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

}  // namespace bulwark::http
