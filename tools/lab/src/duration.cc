#include "bulwark/lab/duration.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "bulwark/lab/input_error.h"

namespace bulwark::lab {
namespace {

__extension__ using i128 = __int128;

struct Unit {
  std::string_view name;
  std::int64_t ns;
};
constexpr Unit kUnits[] = {{"h", 3'600'000'000'000}, {"min", 60'000'000'000}, {"s", 1'000'000'000},
                           {"ms", 1'000'000},        {"us", 1'000},           {"ns", 1}};

constexpr std::string_view kExamples =
    "write a duration such as \"800ms\", \"30s\", \"1.5s\", \"2min\" or \"2min 30s\"";

// The user's text, quoted, escaped and cut: a duration's error never echoes a raw
// control byte or a megabyte of digits.
std::string quoted(std::string_view s) { return quote_for_error(s); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

Expected<Nanos, std::string> parse_duration(std::string_view text) {
  auto fail = [&](std::string why) -> Expected<Nanos, std::string> {
    return Unexpected(std::move(why));
  };
  if (text.empty()) return fail("is empty; " + std::string(kExamples));
  if (text.front() == '-') return fail("must not be negative (got " + quoted(text) + ")");
  if (text.front() == ' ' || text.back() == ' ') {
    return fail(std::string(text.front() == ' ' ? "starts" : "ends") + " with a space (got " +
                quoted(text) + "); " + std::string(kExamples));
  }
  const i128 kMax = static_cast<i128>(INT64_MAX);
  i128 total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    // <digits>[.<digits>]
    const std::size_t start = i;
    i128 whole = 0;
    while (i < text.size() && is_digit(text[i])) {
      whole = whole * 10 + (text[i] - '0');
      if (whole > kMax) return fail("is too large (got " + quoted(text) + ")");
      ++i;
    }
    const bool has_whole = i > start;
    i128 frac = 0, scale = 1;
    bool has_frac = false;
    if (i < text.size() && text[i] == '.') {
      ++i;
      while (i < text.size() && is_digit(text[i])) {
        if (scale < static_cast<i128>(1'000'000'000'000'000'000)) {  // 18 digits is below 1 ns
          frac = frac * 10 + (text[i] - '0');
          scale *= 10;
        }
        has_frac = true;
        ++i;
      }
      if (!has_frac) return fail("has a '.' without digits after it (got " + quoted(text) + ")");
    }
    if (!has_whole && !has_frac) {
      return fail("expected a number at " + quoted(text.substr(start)) + " (got " + quoted(text) +
                  "); " + std::string(kExamples));
    }
    // <unit>
    const std::size_t unit_start = i;
    while (i < text.size() && is_letter(text[i])) ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty()) {
      if (unit_start < text.size() && text[unit_start] == ' ') {
        std::size_t word = unit_start;
        while (word < text.size() && text[word] == ' ') ++word;
        std::size_t end = word;
        while (end < text.size() && is_letter(text[end])) ++end;
        if (end > word) {
          return fail("has a space between a number and its unit (got " + quoted(text) +
                      "); write " +
                      quoted(std::string(text.substr(start, unit_start - start)) +
                             std::string(text.substr(word, end - word))));
        }
      }
      if (unit_start == text.size()) {
        return fail("has no unit (got " + quoted(text) + "); write e.g. " +
                    quoted(std::string(text.substr(0, kMaxEchoed)) + "s") + " or " +
                    quoted(std::string(text.substr(0, kMaxEchoed)) + "ms"));
      }
      return fail("unexpected " + quoted(text.substr(unit_start, 1)) + " in " + quoted(text) +
                  "; " + std::string(kExamples));
    }
    std::int64_t unit_ns = 0;
    for (const Unit& u : kUnits) {
      if (u.name == unit) unit_ns = u.ns;
    }
    if (unit_ns == 0) {
      if (unit == "m") {
        return fail("has the ambiguous unit \"m\" (got " + quoted(text) +
                    "): write \"min\" for minutes or \"ms\" for milliseconds");
      }
      return fail("has an unknown unit " + quoted(unit) + " (got " + quoted(text) +
                  "); units are ns, us, ms, s, min, h");
    }
    const i128 part = whole * unit_ns + (frac * unit_ns + scale / 2) / scale;
    total += part;
    if (total > kMax) return fail("is too large (got " + quoted(text) + ")");
    // Parts may be separated by spaces, as the lab's reports print them ("6min 9s").
    while (i < text.size() && text[i] == ' ') ++i;
  }
  return Nanos(static_cast<std::int64_t>(total));
}

std::string format_duration(Nanos d) {
  const std::int64_t n = d.count();
  if (n == 0) return "0s";
  if (n < 0) {
    if (n == INT64_MIN) return "-292y";
    std::string s(1, '-');
    s += format_duration(Nanos(-n));
    return s;
  }
  for (const Unit& u : kUnits) {
    if (n < u.ns && u.ns != 1) continue;
    // At most three decimals, exactly.
    const std::int64_t milli = u.ns >= 1000 ? u.ns / 1000 : 1;
    if (n % milli != 0) continue;
    const std::int64_t whole = n / u.ns;
    std::int64_t frac = (n % u.ns) / milli;  // thousandths of the unit
    std::string s = std::to_string(whole);
    if (frac != 0) {
      std::string digits = std::to_string(frac);
      digits.insert(0, 3 - digits.size(), '0');
      while (!digits.empty() && digits.back() == '0') digits.pop_back();
      s += "." + digits;
    }
    return s + std::string(u.name);
  }
  return std::to_string(n) + "ns";
}

}  // namespace bulwark::lab
