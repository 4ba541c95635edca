#include "bulwark/lab/calibrate.h"

#include <stdio.h>  // fmemopen, fseeko, ftello (POSIX)
#include <sys/types.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "replay_run.h"
#include "trace_reader.h"
#include "xml_text.h"

namespace bulwark::lab {
namespace {

using detail::Row;
using detail::TraceReader;

constexpr Ticks kMs = 1'000'000;
constexpr Ticks kSecond = 1'000'000'000;
constexpr double kDaySeconds = 86'400;

// ---- latency histogram ----------------------------------------------------------

// Log-linear buckets over whole nanoseconds: exact below 64 ns, then 64 buckets per
// power of two (each at most 1/64 = 1.6 % wide). Grows to the largest value seen.
class Histogram {
 public:
  void add(Ticks v) {
    const std::size_t i = index(static_cast<std::uint64_t>(v));
    if (i >= counts_.size()) counts_.resize(i + 1, 0);
    ++counts_[i];
    ++total_;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }
  std::uint64_t total() const { return total_; }
  Ticks max() const { return total_ ? max_ : 0; }

  // The q-quantile (0 < q <= 1): the midpoint of the bucket holding the ceil(q·n)-th
  // smallest value, clamped to the exact extremes.
  Ticks quantile(double q) const {
    if (total_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(
        std::max(1.0, std::ceil(q * static_cast<double>(total_) - 1e-9)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const Ticks mid = static_cast<Ticks>((lower(i) + upper(i)) / 2);
        return std::clamp(mid, min_, max_);
      }
    }
    return max_;
  }
  // Values that may exceed `v`: every bucket whose upper end is above it (so an
  // overestimate by at most the bucket holding v).
  std::uint64_t count_above(Ticks v) const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      if (static_cast<Ticks>(upper(i)) > v) n += counts_[i];
    }
    return n;
  }
  // Coarse bins for a chart: (lower bound, count) for every non-empty bucket.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i] != 0)
        f(static_cast<Ticks>(lower(i)), static_cast<Ticks>(upper(i)), counts_[i]);
    }
  }

 private:
  static std::size_t index(std::uint64_t v) {
    if (v < 64) return static_cast<std::size_t>(v);
    const int b = static_cast<int>(std::bit_width(v)) - 1;  // >= 6
    const int shift = b - 6;
    return 64 + static_cast<std::size_t>(shift) * 64 + static_cast<std::size_t>((v >> shift) - 64);
  }
  static std::uint64_t lower(std::size_t i) {
    if (i < 64) return i;
    const std::size_t j = i - 64;
    const std::size_t shift = j / 64;
    return (64 + j % 64) << shift;
  }
  static std::uint64_t upper(std::size_t i) {
    if (i < 64) return i;
    const std::size_t shift = (i - 64) / 64;
    return lower(i) + (std::uint64_t{1} << shift) - 1;
  }

  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0;
  Ticks min_ = kTicksMax;
  Ticks max_ = 0;
};

// ---- statistics --------------------------------------------------------------------

// Probabilities of Binomial(n, p), in log space: log P(X = k).
double log_pmf(std::uint64_t n, double p, std::uint64_t k) {
  const double dn = static_cast<double>(n), dk = static_cast<double>(k);
  return std::lgamma(dn + 1) - std::lgamma(dk + 1) - std::lgamma(dn - dk + 1) + dk * std::log(p) +
         (dn - dk) * std::log1p(-p);
}

// The smallest k with P(X >= k) <= q for X ~ Binomial(n, p); n + 1 if none.
std::uint64_t threshold_count(std::uint64_t n, double p, double q) {
  if (p <= 0) return 1;
  if (p >= 1) return n + 1;
  // Sum the tail from the top down until it passes q: P(X >= k) for k = n, n-1, ...
  // Start where the terms stop being negligible (far above the mean they underflow).
  double tail = 0;
  for (std::uint64_t k = n + 1; k-- > 0;) {
    const double term = std::exp(log_pmf(n, p, k));
    if (tail + term > q) return k + 1;
    tail += term;
  }
  return 0;
}

// A one-sided ~99 % upper bound on a proportion seen x times in n (normal
// approximation with a continuity term): the rate the margins are sized for, so that a
// short trace does not make a thin margin look safe.
double upper_bound(std::uint64_t x, std::uint64_t n) {
  if (n == 0) return 1;
  const double p = static_cast<double>(x) / static_cast<double>(n);
  return std::min(1.0, p + 2.33 * std::sqrt(p * (1 - p) / static_cast<double>(n)) +
                           1.0 / static_cast<double>(n));
}

// The smallest c with P(X > c) <= q for X ~ Poisson(m), summed exactly up to m = 1000;
// above, m + 5 sqrt(m), which is at least the exact 1e-6 quantile from m = 300 on (the
// sum would cost m terms per key: a trace of keys each with about 1e5 calls in flight
// took seconds a thousand keys).
std::uint64_t poisson_quantile(double m, double q) {
  if (m <= 0) return 0;
  if (m > 1000) return static_cast<std::uint64_t>(std::ceil(m + 5 * std::sqrt(m)));
  double cdf = 0;
  for (std::uint64_t c = 0;; ++c) {
    const double dc = static_cast<double>(c);
    cdf += std::exp(dc * std::log(m) - m - std::lgamma(dc + 1));
    if (1 - cdf <= q || dc > m + 50 * std::sqrt(m) + 50) return c;
  }
}

// ---- rounding and text ---------------------------------------------------------------

// Up (or to the nearest) at two significant digits: 826ms -> 830ms.
Ticks round_duration(Ticks v, bool up) {
  if (v <= 0) return 0;
  Ticks unit = 1;
  while (v / unit >= 100) unit *= 10;
  const Ticks q = up ? (v + unit - 1) / unit : (v + unit / 2) / unit;
  return q * unit;
}
Ticks nice_up(Ticks v) { return round_duration(v, true); }
Ticks nice(Ticks v) { return round_duration(v, false); }

std::string dur(Ticks v) { return format_duration(Nanos(v)); }
// For reading, not for a file: three significant digits (120.06195ms -> 120ms).
Ticks round3(Ticks v) {
  if (v <= 0) return 0;
  Ticks unit = 1;
  while (v / unit >= 1000) unit *= 10;
  return (v + unit / 2) / unit * unit;
}
std::string show(Ticks v) { return v <= 0 ? "0s" : format_duration(Nanos(round3(v))); }
std::string quoted_dur(Ticks v) { return "\"" + dur(v) + "\""; }

// Up at three decimals: a threshold never below the one computed.
double rate_up(double r) { return std::min(1.0, std::ceil(r * 1000 - 1e-9) / 1000); }
// Two significant digits, for fractions.
double fraction(double f) {
  if (f <= 0) return 0;
  const double scale = std::pow(10.0, 1 - std::floor(std::log10(f)));
  return std::round(f * scale) / scale;
}

std::string num(double v, int decimals = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}
std::string percent(double v) {
  const double pct = v * 100;
  return num(pct, pct < 0.1 && pct > 0 ? 4 : 2) + "%";
}
// A rate per second: one decimal, more below 10/s (0.022/s, not 0/s).
std::string rate_text(double r) { return num(r, r >= 10 ? 1 : r >= 0.1 ? 2 : 4); }

std::string count_text(std::uint64_t n) {
  std::string s = std::to_string(n), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// A TOML basic string: quotes, backslashes and control bytes escaped; the text is
// valid UTF-8 (the trace reader checked it).
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The breaker's name for a key: the key, cut to the loader's bound at a character
// boundary; "default" for the empty key.
std::string breaker_name(std::string_view key) {
  if (key.empty()) return "default";
  std::size_t n = std::min(key.size(), kMaxNameBytes);
  while (n > 0 && n < key.size() && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return std::string(key.substr(0, n));
}

// ---- pass 1: the baseline --------------------------------------------------------------

struct KeyStats {
  std::string name;
  std::uint64_t rows = 0, failures = 0, ignored = 0;
  Ticks first_t = 0, last_t = 0;
  long double duration_sum = 0;  // every row
  Histogram latency;             // judged rows (success, failure)
  std::priority_queue<Ticks, std::vector<Ticks>, std::greater<>> in_flight;
  std::uint64_t peak_in_flight = 0;

  void add(const Row& r) {
    if (rows == 0) first_t = r.t;
    last_t = r.t;
    ++rows;
    duration_sum += static_cast<long double>(r.duration);
    if (r.outcome == Outcome::ignored) {
      ++ignored;
    } else {
      if (r.outcome == Outcome::failure) ++failures;
      latency.add(r.duration);
    }
    // A call is in flight over [t, t + duration): completions at t come first.
    while (!in_flight.empty() && in_flight.top() <= r.t) in_flight.pop();
    if (r.duration > 0) in_flight.push(r.t + r.duration);
    peak_in_flight = std::max<std::uint64_t>(peak_in_flight, in_flight.size());
  }
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using KeyIndex = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

// ---- the proposal ----------------------------------------------------------------------

// Minimum-calls candidates, smallest first.
constexpr std::uint64_t kLadder[] = {20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000};
constexpr Ticks kMinWindow = 5 * kSecond;
constexpr Ticks kLongWindow = 60 * kSecond;   // past this the key has little traffic
constexpr Ticks kMaxWindow = 600 * kSecond;   // past this no rate rule is proposed
constexpr double kMinRateThreshold = 0.05;    // rates below this open on noise
constexpr double kRateRuleLimit = 0.5;        // normal rates above this: no rate rule
constexpr double kProbeFailureBudget = 0.01;  // a healthy probe round fails at most this
constexpr double kBulkheadTail = 1e-6;        // a healthy call refused at most this often
// Not normal traffic (nothing is proposed): fewer successful calls than this (their
// slowest is then about the p99, the least a timeout can be drawn from), ...
constexpr std::uint64_t kMinSuccesses = 100;
// ... or at least as many failures as successes (no healthy baseline), or no time span.
// Fraction-mode probing when the probes come in 2 s on at most this share of the
// traffic; past it a "fraction" is most of the traffic, and count mode bounds the
// probes in flight instead.
constexpr double kMaxProbeFraction = 0.1;
constexpr Ticks kProbeRound = 2 * kSecond;

// The degradation a rate rule must catch: the normal rate x10, or 20 points more.
double degraded_rate(double p) { return std::min(1.0, std::max(10 * p, p + 0.2)); }

struct Rule {
  bool on = false;
  double p = 0;     // the normal rate, measured
  double p_up = 0;  // its upper bound, what the margin is sized for
  std::uint64_t k = 0;
  double threshold = 0;
};

Rule rate_rule(double p, double p_up, std::uint64_t n, double q) {
  Rule r;
  r.p = p;
  r.p_up = p_up;
  if (p_up >= kRateRuleLimit) return r;
  r.k = threshold_count(n, std::max(p_up, 1e-4), q);
  if (r.k > n) return r;
  r.on = true;
  r.threshold =
      std::max(kMinRateThreshold, rate_up(static_cast<double>(r.k) / static_cast<double>(n)));
  return r;
}

// Why the key's trace is not normal traffic, or empty if it is: thresholds are set
// above a key's normal behaviour, so a trace without a normal baseline gets none.
std::string not_normal_traffic(const KeyStats& s) {
  const std::uint64_t judged = s.rows - s.ignored;
  const std::uint64_t successes = judged - s.failures;
  if (judged > 0 && s.failures >= successes) {
    return "no healthy baseline: " +
           percent(static_cast<double>(s.failures) / static_cast<double>(judged)) + " of its " +
           count_text(judged) +
           " judged calls failed (as many failures as successes or more); thresholds sit "
           "above normal behaviour, and this is an outage or outcomes recorded wrongly";
  }
  if (successes < kMinSuccesses) {
    return "too few successful calls to measure its latency: " + count_text(successes) + " of " +
           count_text(s.rows) + " calls (" + count_text(s.ignored) +
           " ignored, which count nowhere); a timeout and a slow-call threshold need the "
           "latency of at least " +
           std::to_string(kMinSuccesses);
  }
  if (s.last_t == s.first_t) {
    return "no rate: every call starts at the same instant, so no window, bulkhead or "
           "probe rate can be sized";
  }
  return "";
}

void propose(KeyCalibration& c, const KeyStats& s, double false_opens_per_day) {
  const std::uint64_t judged = s.rows - s.ignored;
  const double span_s = static_cast<double>(s.last_t - s.first_t) / 1e9;
  c.key = s.name;
  c.calls = s.rows;
  c.failures = s.failures;
  c.ignored = s.ignored;
  c.first_t = s.first_t;
  c.last_t = s.last_t;
  c.rate_per_s = span_s > 0 ? static_cast<double>(s.rows) / span_s : 0;
  const double judged_rate = span_s > 0 ? static_cast<double>(judged) / span_s : 0;
  c.error_rate = judged ? static_cast<double>(s.failures) / static_cast<double>(judged) : 0;
  c.mean = s.rows ? static_cast<Ticks>(s.duration_sum / static_cast<long double>(s.rows)) : 0;
  c.p50 = s.latency.quantile(0.5);
  c.p90 = s.latency.quantile(0.9);
  c.p99 = s.latency.quantile(0.99);
  c.p999 = s.latency.quantile(0.999);
  c.max = s.latency.max();
  c.peak_in_flight = s.peak_in_flight;

  c.not_normal = not_normal_traffic(s);
  if (!c.not_normal.empty()) {
    c.breaker_toml = "# `bulwark calibrate` proposes nothing for key " + printable(s.name) +
                     ": the trace is not normal traffic for it.\n# " + c.not_normal +
                     ".\n# Calibrate on a stretch of the key's normal traffic.\n";
    return;
  }

  auto& br = c.breaker;
  auto& call = c.call;

  // Timeout and slow calls, from the latency tail.
  // At most the lab's longest call, so that the scenario written for it loads too.
  c.timeout = std::clamp(nice_up(c.p999 + c.p999 / 2), kMs, Ticks{kMaxCallDuration.count()});
  const std::uint64_t over_timeout = s.latency.count_above(c.timeout);
  call.push_back(
      {"timeout", quoted_dur(c.timeout),
       "the normal p99.9 (" + show(c.p999) + ") plus half: " +
           percent(judged ? static_cast<double>(over_timeout) / static_cast<double>(judged) : 0) +
           " of the trace's calls took longer" +
           (judged < 1000 ? " (under 1,000 calls: p99.9 is about the slowest)" : "")});
  // The bulkhead: calls in flight are Poisson with mean rate x mean latency (M/G/inf).
  const double mean_in_flight =
      c.rate_per_s * static_cast<double>(std::min(c.mean, c.timeout)) / 1e9;
  const std::uint64_t by_tail = poisson_quantile(mean_in_flight, kBulkheadTail);
  c.bulkhead = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(
      std::max<std::uint64_t>(by_tail, s.peak_in_flight), 1, kMaxConcurrent));
  call.push_back({"bulkhead.max_concurrent", std::to_string(c.bulkhead),
                  "Little's law: " + rate_text(c.rate_per_s) + "/s x " + show(c.mean) +
                      " mean = " + num(mean_in_flight, 1) +
                      " in flight; its 1e-6 Poisson tail is " + std::to_string(by_tail) +
                      ", the trace's peak " + std::to_string(s.peak_in_flight)});
  // An adaptive limit instead: it starts where the bulkhead would sit, may grow to twice
  // that, and never cuts below the concurrency normal traffic needs on average.
  c.adaptive_initial = c.bulkhead;
  c.adaptive_max =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(2ull * c.bulkhead, kMaxConcurrent));
  c.adaptive_min = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(
      static_cast<std::uint64_t>(std::ceil(mean_in_flight)), 1, c.adaptive_initial));
  call.push_back({"adaptive_limit.min_limit", std::to_string(c.adaptive_min),
                  "the mean in flight, " + num(mean_in_flight, 1) +
                      ": a slowdown is cut back to normal concurrency, not below"});
  call.push_back({"adaptive_limit.initial_limit", std::to_string(c.adaptive_initial),
                  "the bulkhead's size: normal traffic is not refused while the limit learns"});
  call.push_back({"adaptive_limit.max_limit", std::to_string(c.adaptive_max),
                  "twice that: room to grow when the dependency scales"});

  Ticks slow = nice(
      static_cast<Ticks>(std::sqrt(static_cast<double>(c.p99) * static_cast<double>(c.timeout))));
  slow = std::clamp(slow, std::max(kMs, c.p99 + 1), std::max(kMs, c.timeout - 1));
  const std::uint64_t over_slow = s.latency.count_above(slow);

  // The rates the rules judge, as they would be with the timeout enforced: a call past
  // the timeout fails there.
  const std::uint64_t fail_count = std::min(judged, s.failures + over_timeout);
  const double p_f = judged ? static_cast<double>(fail_count) / static_cast<double>(judged) : 0;
  const double p_s = judged ? static_cast<double>(over_slow) / static_cast<double>(judged) : 0;
  const double pf_up = upper_bound(fail_count, judged), ps_up = upper_bound(over_slow, judged);
  const double calls_per_day = judged_rate * kDaySeconds;

  // Rate rules: the smallest minimum_calls whose thresholds sit below the midpoint to the
  // degradation they must catch, with a window that holds that many calls twice over.
  const int rate_rules = (pf_up < kRateRuleLimit) + (ps_up < kRateRuleLimit);
  const double budget = false_opens_per_day / (rate_rules + 1);  // + consecutive failures
  std::uint64_t n = 0;
  Ticks window = 0;
  Rule fr, sr;
  if (rate_rules > 0 && judged_rate > 0) {
    for (std::uint64_t cand : kLadder) {
      const Ticks w = std::max(
          kMinWindow, nice_up(static_cast<Ticks>(2e9 * static_cast<double>(cand) / judged_rate)));
      if (w > kMaxWindow || judged < 10 * cand) break;
      const double windows_per_day = kDaySeconds * 1e9 / static_cast<double>(w);
      const double q = budget / windows_per_day;
      Rule f = rate_rule(p_f, pf_up, cand, q), sl = rate_rule(p_s, ps_up, cand, q);
      const bool f_ok = !f.on || f.threshold <= (p_f + degraded_rate(p_f)) / 2;
      const bool s_ok = !sl.on || sl.threshold <= (p_s + degraded_rate(p_s)) / 2;
      if ((f.on || sl.on) && f_ok && s_ok) {
        n = cand, window = w, fr = f, sr = sl;
        break;
      }
    }
  }
  c.rate_policy = n != 0;

  // Consecutive failures: runs of k failures (at the upper-bound rate) rarer than the
  // budget over a day's calls.
  const double p_c = std::max(pf_up, 1e-3);
  const double run_budget = c.rate_policy ? budget : false_opens_per_day;
  std::uint64_t k_c = 3;
  while (k_c < 65535 && calls_per_day * std::pow(p_c, static_cast<double>(k_c)) > run_budget) ++k_c;
  // The breaker counts runs up to 65535: a rate so near 1 that even that run is expected
  // more often than the budget says so, rather than claim what does not hold.
  const double runs_a_day = calls_per_day * std::pow(p_c, static_cast<double>(k_c));
  const std::string run_reason =
      runs_a_day > run_budget
          ? "the longest run the breaker counts; at " + percent(p_c) + " it is still expected " +
                num(runs_a_day, 3) + " times a day, over the budget of " + num(run_budget, 3)
          : "a run this long at " + percent(p_c) + " is expected under " + num(run_budget, 3) +
                " times a day";

  br.push_back({"name", toml_string(breaker_name(s.name)), "the key"});
  if (c.rate_policy) {
    const std::string per_window =
        "a healthy window of " + std::to_string(n) + " calls reaches it with probability under " +
        num(budget * static_cast<double>(window) / (kDaySeconds * 1e9) * 100, 6) + "% (" +
        num(budget, 3) + " false opens/day at one window per " + dur(window) + ")";
    br.push_back({"kind", "\"time\"", "enough traffic for rate rules"});
    br.push_back({"window.length", quoted_dur(window),
                  "holds about " +
                      count_text(static_cast<std::uint64_t>(judged_rate *
                                                            static_cast<double>(window) / 1e9)) +
                      " calls at " + rate_text(judged_rate) + "/s, twice minimum_calls" +
                      (window > kLongWindow ? " (little traffic: a longer window)" : "")});
    br.push_back({"minimum_calls", std::to_string(n),
                  "the fewest calls whose thresholds sit below half-way to a degradation "
                  "(rate x10, or +20 points)"});
    if (fr.on) {
      br.push_back({"failure_rate", num(fr.threshold),
                    "normal " + percent(p_f) + " (timeouts included); " + per_window});
    } else {
      c.note = "normal failure rate " + percent(p_f) + " is too high for a failure-rate rule";
    }
    br.push_back(
        {"slow_call_duration", quoted_dur(slow),
         "between the normal p99 (" + show(c.p99) + ") and the timeout (their geometric mean)"});
    if (sr.on) {
      br.push_back({"slow_call_rate", num(sr.threshold),
                    "normal " + percent(p_s) + " slower than " + dur(slow) + "; " + per_window});
      br.push_back({"count_in_flight_slow_calls", "true",
                    "a call stuck past slow_call_duration counts before it ends"});
    }
    br.push_back({"consecutive_failures", std::to_string(k_c),
                  run_reason + ": trips on an outage before the window fills"});
  } else {
    c.note = judged_rate <= 0 || judged == 0
                 ? "no judged call over a time span: no rate can be measured"
                 : "little traffic (" + rate_text(judged_rate) + " judged calls/s, " +
                       count_text(judged) +
                       " in the trace): no rate threshold can be trusted below a window of "
                       "10 min; consecutive failures instead";
    br.push_back({"kind", "\"consecutive\"", "consecutive failures only: " + c.note});
    br.push_back({"consecutive_failures", std::to_string(k_c),
                  run_reason + " at " + num(calls_per_day, 1) + " calls a day"});
  }

  // Open and half-open.
  const Ticks open = c.rate_policy
                         ? std::min(kMaxWindow, nice_up(std::max(30 * kSecond, 3 * window)))
                         : 60 * kSecond;
  br.push_back({"open_duration", quoted_dur(open),
                c.rate_policy
                    ? "at least 30s, and three windows: the dependency gets time to recover"
                    : "one probe a minute at most: little traffic, little to gain"});
  if (c.rate_policy) {
    std::uint64_t probes = 0;
    for (std::uint64_t cand : {5u, 10u, 20u, 30u, 50u, 100u, 200u, 500u, 1000u, 2000u, 5000u}) {
      double fail = 0;
      if (fr.on) {
        fail += binomial_tail(
            cand, pf_up,
            static_cast<std::uint64_t>(std::ceil(fr.threshold * static_cast<double>(cand) - 1e-9)));
      }
      if (sr.on) {
        fail += binomial_tail(
            cand, ps_up,
            static_cast<std::uint64_t>(std::ceil(sr.threshold * static_cast<double>(cand) - 1e-9)));
      }
      probes = cand;
      if (fail <= kProbeFailureBudget) break;
    }
    // The share of the traffic that brings the probes in kProbeRound.
    const double share =
        static_cast<double>(probes) / (judged_rate * static_cast<double>(kProbeRound) / 1e9);
    if (share <= kMaxProbeFraction) {
      const double f = std::clamp(fraction(share), 0.01, 1.0);
      br.push_back({"half_open.fraction", num(f, 4),
                    "about " + std::to_string(probes) + " probes in " + dur(kProbeRound) +
                        " at this traffic"});
    } else {
      // Too little traffic for a fraction: count mode, the probes in flight at once
      // bounded by the calls normally in flight (the bulkhead's size).
      const std::uint64_t at_once = std::min<std::uint64_t>(probes, c.bulkhead);
      const std::string taken =
          share < 1 ? percent(share) + " of the traffic"
                    : "more than all of it (" +
                          num(judged_rate * static_cast<double>(kProbeRound) / 1e9, 1) +
                          " calls in " + dur(kProbeRound) + ")";
      br.push_back({"half_open.max_in_flight", std::to_string(at_once),
                    "count mode: at " + rate_text(judged_rate) + "/s, " + std::to_string(probes) +
                        " probes in " + dur(kProbeRound) + " would take " + taken +
                        ", and a sample is at most " + percent(kMaxProbeFraction) + "; at most " +
                        std::to_string(at_once) +
                        " at once (the bulkhead: as many as are normally in flight), a round "
                        "of about " +
                        show(static_cast<Ticks>(static_cast<double>(probes) / judged_rate * 1e9)) +
                        " of traffic"});
    }
    br.push_back({"half_open.probes", std::to_string(probes),
                  "the fewest probes a healthy dependency passes with 99% probability"});
  } else {
    br.push_back({"half_open.max_in_flight", "1", "one probe at a time"});
    br.push_back({"half_open.probes", "1", "one success closes"});
  }
  br.push_back({"half_open.max_wait", quoted_dur(nice_up(2 * c.timeout)),
                "twice the timeout: a probe that never reports frees its slot"});

  // The file.
  std::string t = "# Proposed by `bulwark calibrate` for key " + printable(s.name) + " (at most " +
                  num(false_opens_per_day, 3) + " false opens a day).\n";
  t += "# The other stages of the call, for a scenario's [config.NAME]:\n";
  t += "#   timeout = " + quoted_dur(c.timeout) + "\n";
  t += "#   [config.NAME.bulkhead]\n#   max_concurrent = " + std::to_string(c.bulkhead) + "\n";
  t += "#   or an adaptive limit (AdaptiveLimitConfig) in the bulkhead's place:\n#   min_limit = " +
       std::to_string(c.adaptive_min) + ", initial_limit = " + std::to_string(c.adaptive_initial) +
       ", max_limit = " + std::to_string(c.adaptive_max) + "\n";
  t += "[breaker]\n";
  for (const Proposed& p : br) t += p.key + " = " + p.value + "\n";
  c.breaker_toml = std::move(t);
}

// A latency as a scenario phase's inline table: lognormal through the median and p99
// when they differ, else constant.
std::string latency_toml(Ticks p50, Ticks p99, Ticks scale) {
  const Ticks cap = kMaxCallDuration.count();
  const Ticks median = std::clamp<Ticks>(round3(p50 > cap / scale ? cap : p50 * scale), 1, cap);
  const Ticks tail = std::min(round3(p99 > cap / scale ? cap : p99 * scale), cap);
  // The loader holds the p99 above the median, and sigma at most 5.
  if (tail <= median || static_cast<double>(tail) / static_cast<double>(median) > 1e5) {
    return quoted_dur(median);
  }
  return "{ distribution = \"lognormal\", median = " + quoted_dur(median) +
         ", p99 = " + quoted_dur(tail) + " }";
}

// A scenario for `bulwark simulate`: the key's traffic for 10 minutes, its latency x10
// from minute 1 to 7, through no protection and through the proposal.
std::string scenario_toml(const KeyCalibration& c) {
  if (!c.not_normal.empty()) {
    return "# `bulwark calibrate` writes no scenario for key " + printable(c.key) +
           ": the trace is not normal traffic for it.\n# " + c.not_normal + ".\n";
  }
  const double rate = std::clamp(c.rate_per_s, 0.01, kMaxRate);
  const std::uint64_t workers = std::clamp<std::uint64_t>(10ull * c.bulkhead, 100, kMaxWorkers);
  // Ten minutes (the degradation from 1 to 7), or less for a key so busy that ten
  // minutes of it would pass the lab's run bound (check_work): the same shape, shorter.
  Scenario shape;
  shape.duration = std::chrono::minutes(10);
  shape.arrivals.rate = rate;
  shape.caller.workers = static_cast<std::uint32_t>(workers);
  shape.configurations.resize(2);
  const double fits = 0.9 * kMaxRunSeconds / estimate_work(shape, false).seconds;
  const Ticks minute =
      fits >= 1 ? 60 * kSecond : std::max<Ticks>(kMs, static_cast<Ticks>(fits * 60.0 * 1e3) * kMs);
  std::string t = "# Written by `bulwark calibrate` for key " + printable(c.key) +
                  ": its traffic, then its latency x10.\n";
  t += "name = " + toml_string(breaker_name("calibrated " + c.key)) + "\n";
  t += "duration = " + quoted_dur(10 * minute) +
       "\n\n[arrivals]\nprocess = \"poisson\"\nrate = " + num(rate, 4) + "\n\n";
  t += "[caller]\nworkers = " + std::to_string(workers) + "\n\n";
  t += "[dependency]\nname = " + toml_string(breaker_name(c.key)) + "\n\n";
  const double e = std::clamp(c.error_rate, 0.0, 1.0);
  t += "[[dependency.phases]]\nname = \"normal\"\nstart = \"0s\"\nlatency = " +
       latency_toml(c.p50, c.p99, 1) + "\nerror_rate = " + num(e, 6) + "\n\n";
  t += "[[dependency.phases]]\nname = \"latency x10\"\nstart = " + quoted_dur(minute) +
       "\nlatency = " + latency_toml(c.p50, c.p99, 10) + "\nerror_rate = " + num(e, 6) +
       "\ndegraded = true\n\n";
  t += "[[dependency.phases]]\nname = \"recovered\"\nstart = " + quoted_dur(7 * minute) +
       "\nlatency = " + latency_toml(c.p50, c.p99, 1) + "\nerror_rate = " + num(e, 6) + "\n\n";
  t += "[config.unprotected]\n\n";
  t += "[config.proposed]\ntimeout = " + quoted_dur(c.timeout) + "\n\n[config.proposed.breaker]\n";
  for (const Proposed& p : c.breaker) t += p.key + " = " + p.value + "\n";
  t += "\n[config.proposed.bulkhead]\nmax_concurrent = " + std::to_string(c.bulkhead) + "\n";
  t += "\n[config.proposed.fallback]\non = [\"all\"]\n";
  return t;
}

// ---- pass 2: the check -----------------------------------------------------------------

// A deterministic uniform draw in [0, 1) for row i of key k (SplitMix64).
double draw(std::uint64_t i, std::uint64_t k) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ULL + k * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

struct KeyCheck {
  KeyCalibration* c = nullptr;
  double flip = 0;  // P(success -> failure) in the error run
  Ticks from = 0;   // where the degraded runs start replaying (warm-up)
  std::uint64_t row = 0;
  struct Run {
    std::unique_ptr<detail::ReplayRun> replay;
    CheckResult result;
  };
  Run runs[3];
};

void check_key(KeyCheck& k, const Row& in) {
  KeyCalibration& c = *k.c;
  const std::uint64_t i = k.row++;
  const auto enforce = [&](Row& r) {
    if (r.duration > c.timeout) {
      r.duration = c.timeout;
      r.outcome = Outcome::failure;
    }
  };
  Row r = in;
  enforce(r);
  k.runs[0].replay->call(r);
  if (in.t < k.from) return;
  const bool degraded = in.t >= k.runs[1].result.injected_at;
  Row e = in;
  if (degraded && e.outcome == Outcome::success && draw(i, 1) < k.flip)
    e.outcome = Outcome::failure;
  enforce(e);
  k.runs[1].replay->call(e);
  Row l = in;
  if (degraded) l.duration = l.duration > kTicksMax / 10 ? kTicksMax / 10 : l.duration * 10;
  enforce(l);
  k.runs[2].replay->call(l);
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

bool rewindable(std::FILE* f) {
  const off_t pos = ftello(f);
  return pos != -1 && fseeko(f, pos, SEEK_SET) == 0;
}

constexpr std::uint64_t kProgressEvery = 1 << 20;

}  // namespace

double binomial_tail(std::uint64_t n, double p, std::uint64_t k) {
  if (k == 0) return 1;
  if (k > n) return 0;
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  // Sum from k upwards; past the mode the terms fall geometrically, so stop once they no
  // longer change the sum.
  double sum = 0;
  for (std::uint64_t j = k; j <= n; ++j) {
    const double term = std::exp(log_pmf(n, p, j));
    sum += term;
    if (static_cast<double>(j) > static_cast<double>(n) * p && term < sum * 1e-17) break;
  }
  return std::min(1.0, sum);
}

Calibration calibrate(std::FILE* in, const std::string& name, const CalibrateOptions& options) {
  if (!(options.false_opens_per_day > 0) || !std::isfinite(options.false_opens_per_day) ||
      options.false_opens_per_day > 1e6) {
    throw InputError({}, "--false-opens-per-day",
                     "must be a number above 0 and at most 1000000 (got " +
                         num(options.false_opens_per_day, 6) + ")");
  }
  const off_t start = ftello(in);
  FilePtr spool;
  if (options.check && !rewindable(in)) {
    spool.reset(std::tmpfile());
    if (!spool)
      throw std::runtime_error("cannot create a temporary file to read " + name + " twice");
  }
  Calibration out;
  out.source = name;
  out.false_opens_per_day = options.false_opens_per_day;

  // Pass 1: every row checked; the selected keys' statistics.
  std::vector<std::unique_ptr<KeyStats>> stats;
  KeyIndex index;
  KeyIndex wanted;
  for (const std::string& k : options.keys) wanted.emplace(k, 0);
  std::uint64_t lines = 0;
  {
    TraceReader reader(in, name, spool.get());
    Row row;
    while (reader.next(row)) {
      ++out.rows;
      if (options.progress && out.rows % kProgressEvery == 0) {
        options.progress(out.rows, 0, options.progress_context);
      }
      if (!wanted.empty() && wanted.find(row.key) == wanted.end()) continue;
      auto it = index.find(row.key);
      if (it == index.end()) {
        if (stats.size() == kMaxCalibratedKeys) {
          throw InputError({name, static_cast<std::uint32_t>(row.line), row.key_column}, "key",
                           "is distinct key " + std::to_string(stats.size() + 1) +
                               ": calibrate takes at most " + std::to_string(kMaxCalibratedKeys) +
                               " keys at once; pick some with --key");
        }
        it = index.emplace(std::string(row.key), static_cast<std::uint32_t>(stats.size())).first;
        stats.push_back(std::make_unique<KeyStats>());
        stats.back()->name = std::string(row.key);
      }
      stats[it->second]->add(row);
    }
    lines = reader.lines_read();
  }
  for (const std::string& k : options.keys) {
    if (index.find(k) == index.end()) {
      throw InputError({name}, "--key", "no row of the trace has the key " + quote_for_error(k));
    }
  }
  if (stats.empty()) throw InputError({name}, "", "has no rows: nothing to calibrate");

  out.keys.resize(stats.size());
  for (std::size_t i = 0; i < stats.size(); ++i) {
    propose(out.keys[i], *stats[i], options.false_opens_per_day);
    out.keys[i].scenario_toml = scenario_toml(out.keys[i]);
  }
  stats.clear();
  if (!options.check) return out;

  // The proposal, loaded back through the lab's loader (which proves the file valid),
  // then replayed: the trace as recorded, and two degradations from its middle on.
  std::vector<KeyCheck> checks(out.keys.size());
  for (std::size_t i = 0; i < out.keys.size(); ++i) {
    KeyCalibration& c = out.keys[i];
    if (!c.not_normal.empty()) continue;  // nothing proposed, nothing to check
    KeyCheck& k = checks[i];
    k.c = &c;
    const BreakerSpec spec = parse_breaker(c.breaker_toml, "proposal for " + printable(c.key));
    (void)parse_scenario(c.scenario_toml, "scenario for " + printable(c.key));
    const Ticks inject = c.first_t + (c.last_t - c.first_t) / 2;
    const double p = c.error_rate;
    const double target = degraded_rate(p);
    k.flip = p < 1 ? (target - p) / (1 - p) : 0;
    const Ticks window_length =
        spec.window() == WindowKind::time ? spec.as<TimeWindowConfig>().window.length.count() : 0;
    const Ticks warmup = 2 * window_length + 10 * kSecond;
    k.from = inject - std::min(inject - c.first_t, warmup);
    const std::string names[3] = {
        "trace as recorded", "error rate " + percent(p) + " -> " + percent(target), "latency x10"};
    for (int r = 0; r < 3; ++r) {
      CheckResult& res = k.runs[r].result;
      res.name = names[r];
      res.injected_at = r == 0 ? c.first_t : inject;
      res.window = c.last_t - res.injected_at;
      k.runs[r].replay = std::make_unique<detail::ReplayRun>(spec, [&res](Ticks at, std::uint32_t) {
        ++res.opens;
        if (!res.time_to_open && at >= res.injected_at) res.time_to_open = at - res.injected_at;
      });
    }
    // The recorded trace counts every opening as false.
    k.runs[0].result.time_to_open.reset();
  }

  std::FILE* source = spool ? spool.get() : in;
  if ((spool && std::fflush(source) != 0) ||
      fseeko(source, spool ? 0 : std::max<off_t>(start, 0), SEEK_SET) != 0) {
    throw std::runtime_error("cannot read " + name + " a second time");
  }
  {
    TraceReader reader(source, name, nullptr, lines);
    Row row;
    std::uint64_t rows = 0;
    while (reader.next(row)) {
      ++rows;
      if (options.progress && rows % kProgressEvery == 0) {
        options.progress(rows, out.rows, options.progress_context);
      }
      const auto it = index.find(row.key);
      if (it == index.end() || checks[it->second].c == nullptr) continue;
      check_key(checks[it->second], row);
    }
  }
  for (KeyCheck& k : checks) {
    if (k.c == nullptr) continue;
    for (auto& run : k.runs) {
      run.replay->finish();
      run.replay.reset();
    }
    // The run on the recorded trace: only its opening count means anything.
    k.runs[0].result.time_to_open.reset();
    for (auto& run : k.runs) k.c->checks.push_back(run.result);
  }
  return out;
}

Calibration calibrate_file(const std::string& path, const CalibrateOptions& options) {
  if (path == "-") return calibrate(stdin, "<stdin>", options);
  FilePtr in(std::fopen(path.c_str(), "rb"));
  if (!in) throw InputError({path, 0, 0}, "", std::string("cannot open: ") + std::strerror(errno));
  return calibrate(in.get(), path, options);
}

Calibration calibrate_text(std::string_view csv, const CalibrateOptions& options,
                           const std::string& name) {
  std::string input(csv);
  FilePtr in(input.empty() ? std::tmpfile() : fmemopen(input.data(), input.size(), "r"));
  if (!in) throw std::runtime_error("fmemopen failed");
  return calibrate(in.get(), name, options);
}

// ---- reports ---------------------------------------------------------------------------

std::string to_text(const Calibration& c) {
  std::ostringstream o;
  o << "Calibration of " << printable(c.source) << ": " << count_text(c.rows) << " rows, "
    << c.keys.size() << (c.keys.size() == 1 ? " key" : " keys") << ", for at most "
    << num(c.false_opens_per_day, 3) << " false opens a day per key\n";
  for (const KeyCalibration& k : c.keys) {
    o << "\nkey " << quote_for_error(k.key) << "\n";
    o << "  baseline  " << count_text(k.calls) << " calls over " << show(k.last_t - k.first_t)
      << " (" << rate_text(k.rate_per_s) << "/s), errors " << percent(k.error_rate) << ", "
      << count_text(k.ignored) << " ignored\n";
    if (k.calls == k.ignored) {
      o << "            latency: no judged call (every call ignored)\n";
    } else {
      o << "            latency p50 " << show(k.p50) << "  p90 " << show(k.p90) << "  p99 "
        << show(k.p99) << "  p99.9 " << show(k.p999) << "  max " << show(k.max) << "  mean "
        << show(k.mean) << "\n";
    }
    o << "            calls in flight: peak " << k.peak_in_flight << "\n";
    if (!k.not_normal.empty()) {
      o << "  not normal traffic: " << k.not_normal << "\n";
      o << "  proposed  nothing (calibrate on a stretch of the key's normal traffic)\n";
      continue;
    }
    if (!k.note.empty()) o << "  note      " << k.note << "\n";
    o << "  proposed (" << (k.rate_policy ? "rate rules" : "consecutive failures") << ")\n";
    const auto line = [&](const Proposed& p) {
      std::string lhs = p.key + " = " + printable(p.value);
      o << "    " << lhs << std::string(lhs.size() < 36 ? 36 - lhs.size() : 1, ' ') << p.reason
        << "\n";
    };
    for (const Proposed& p : k.call) line(p);
    for (const Proposed& p : k.breaker) line(p);
    if (!k.checks.empty()) {
      o << "  check (the proposal replayed, the timeout enforced)\n";
      for (std::size_t i = 0; i < k.checks.size(); ++i) {
        const CheckResult& r = k.checks[i];
        const std::string& lhs = r.name;
        o << "    " << lhs << std::string(lhs.size() < 36 ? 36 - lhs.size() : 1, ' ');
        if (i == 0) {
          o << (r.opens == 0 ? "no false open" : count_text(r.opens) + " false opens") << " in "
            << show(r.window) << "\n";
        } else if (r.time_to_open) {
          o << "from " << show(r.injected_at - k.first_t) << ": opened after "
            << show(*r.time_to_open) << "\n";
        } else {
          o << "from " << show(r.injected_at - k.first_t) << ": did not open in " << show(r.window)
            << "\n";
        }
      }
    }
  }
  return o.str();
}

std::string to_json(const Calibration& c) {
  using Json = nlohmann::ordered_json;
  const auto ms = [](Ticks t) { return static_cast<double>(t) / 1e6; };
  Json doc;
  doc["source"] = c.source;
  doc["rows"] = c.rows;
  doc["false_opens_per_day"] = c.false_opens_per_day;
  Json keys = Json::array();
  for (const KeyCalibration& k : c.keys) {
    Json j;
    j["key"] = k.key;
    j["baseline"] = {{"calls", k.calls},
                     {"failures", k.failures},
                     {"ignored", k.ignored},
                     {"span_ms", ms(k.last_t - k.first_t)},
                     {"rate_per_s", k.rate_per_s},
                     {"error_rate", k.error_rate},
                     {"latency_ms",
                      {{"mean", ms(k.mean)},
                       {"p50", ms(k.p50)},
                       {"p90", ms(k.p90)},
                       {"p99", ms(k.p99)},
                       {"p99.9", ms(k.p999)},
                       {"max", ms(k.max)}}},
                     {"peak_in_flight", k.peak_in_flight}};
    const bool normal = k.not_normal.empty();
    j["policy"] = !normal ? "none" : k.rate_policy ? "rates" : "consecutive_failures";
    j["not_normal_traffic"] = normal ? Json(nullptr) : Json(k.not_normal);
    j["note"] = k.note.empty() ? Json(nullptr) : Json(k.note);
    Json proposed = Json::array();
    for (const auto* list : {&k.call, &k.breaker}) {
      for (const Proposed& p : *list) {
        proposed.push_back({{"key", p.key}, {"value", p.value}, {"reason", p.reason}});
      }
    }
    j["proposed"] = proposed;
    j["timeout_ms"] = normal ? Json(ms(k.timeout)) : Json(nullptr);
    j["bulkhead"] = normal ? Json(k.bulkhead) : Json(nullptr);
    j["adaptive_limit"] = normal ? Json{{"min_limit", k.adaptive_min},
                                        {"initial_limit", k.adaptive_initial},
                                        {"max_limit", k.adaptive_max}}
                                 : Json(nullptr);
    j["breaker_toml"] = k.breaker_toml;
    Json checks = Json::array();
    for (const CheckResult& r : k.checks) {
      checks.push_back(
          {{"name", r.name},
           {"from_ms", ms(r.injected_at)},
           {"window_ms", ms(r.window)},
           {"opens", r.opens},
           {"time_to_open_ms", r.time_to_open ? Json(ms(*r.time_to_open)) : Json(nullptr)}});
    }
    j["checks"] = checks;
    keys.push_back(j);
  }
  doc["keys"] = keys;
  return doc.dump(1, ' ', false, nlohmann::detail::error_handler_t::replace) + "\n";
}

namespace {}  // namespace

std::string to_svg(const Calibration& c) {
  // Per key: the latency distribution on a log axis (the trace's calls per bin), and the
  // percentiles and proposed thresholds as vertical lines.
  constexpr double kW = 900, kLeft = 60, kRight = 20, kPanel = 170, kTop = 40;
  const double plot_w = kW - kLeft - kRight;
  std::ostringstream o;
  const double height = kTop + kPanel * static_cast<double>(c.keys.size()) + 10;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"14\">Latency of "
    << detail::xml_text(c.source) << ", with the proposed slow-call threshold and timeout</text>\n";
  double y0 = kTop;
  for (const KeyCalibration& k : c.keys) {
    const double lo =
        std::log10(std::max<double>(1e3, static_cast<double>(std::max<Ticks>(1, k.p50)) / 20));
    const double hi = std::log10(static_cast<double>(std::max(k.max, k.timeout)) * 1.5 + 1);
    const auto x = [&](double v) {
      const double lv = std::log10(std::max(v, 1.0));
      return kLeft + std::clamp((lv - lo) / std::max(hi - lo, 1e-9), 0.0, 1.0) * plot_w;
    };
    const double base = y0 + kPanel - 30, top = y0 + 20;
    o << "<text x=\"" << kLeft << "\" y=\"" << y0 + 12 << "\">key "
      << detail::xml_text(quote_for_error(k.key)) << ": " << rate_text(k.rate_per_s)
      << "/s, errors " << percent(k.error_rate) << "</text>\n";
    o << "<line x1=\"" << kLeft << "\" y1=\"" << base << "\" x2=\"" << kLeft + plot_w << "\" y2=\""
      << base << "\" stroke=\"#888\"/>\n";
    // The distribution as its percentiles: the fraction of calls at or below each.
    const Ticks marks[] = {k.p50, k.p90, k.p99, k.p999, k.max};
    const char* labels[] = {"p50", "p90", "p99", "p99.9", "max"};
    const double fractions[] = {0.5, 0.9, 0.99, 0.999, 1.0};
    std::string path = "M" + num(kLeft, 1) + "," + num(base, 1);
    double prev_x = kLeft;
    for (int i = 0; i < 5; ++i) {
      const double px = x(static_cast<double>(marks[i]));
      const double py = base - fractions[i] * (base - top);
      path += " L" + num(std::max(px, prev_x), 1) + "," + num(py, 1);
      prev_x = std::max(px, prev_x);
      o << "<text x=\"" << num(px, 1) << "\" y=\"" << num(py - 4, 1) << "\" fill=\"#1e63c4\">"
        << labels[i] << " " << detail::xml_text(show(marks[i])) << "</text>\n";
    }
    o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"#1e63c4\" stroke-width=\"2\"/>\n";
    Ticks slow = 0;
    for (const Proposed& p : k.breaker) {
      if (p.key == "slow_call_duration") {
        auto d = parse_duration(std::string_view(p.value).substr(1, p.value.size() - 2));
        if (d) slow = d->count();
      }
    }
    const auto vline = [&](Ticks v, const char* color, const std::string& label) {
      const double px = x(static_cast<double>(v));
      o << "<line x1=\"" << num(px, 1) << "\" y1=\"" << top << "\" x2=\"" << num(px, 1)
        << "\" y2=\"" << base << "\" stroke=\"" << color << "\" stroke-dasharray=\"4 3\"/>\n";
      o << "<text x=\"" << num(px + 3, 1) << "\" y=\"" << base + 14 << "\" fill=\"" << color
        << "\">" << detail::xml_text(label) << "</text>\n";
    };
    if (slow > 0) vline(slow, "#f0b400", "slow " + dur(slow));
    if (k.timeout > 0) vline(k.timeout, "#c62828", "timeout " + dur(k.timeout));
    if (!k.not_normal.empty()) {
      o << "<text x=\"" << kLeft << "\" y=\"" << num(top + 14, 1)
        << "\" fill=\"#c62828\">not normal traffic: nothing proposed</text>\n";
    }
    y0 += kPanel;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace bulwark::lab
