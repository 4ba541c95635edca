// bulwark/lab/calibrate.h — a breaker configuration proposed from a recorded trace.
//
// Reads a call trace (the format `bulwark replay` reads: t_ms,key,duration_ms,outcome)
// and, per key, measures its normal behaviour — request rate, error rate, latency
// percentiles, calls in flight — and proposes the values to enforce, each with a
// one-line reason:
//
//   timeout             the latency's p99.9 plus half
//   slow_call_duration  between the normal p99 and the timeout (their geometric mean)
//   failure_rate,       the normal rate plus a margin: a healthy window of minimum_calls
//   slow_call_rate      calls reaches it with probability below the false-open budget
//                       (exact binomial tail), so false opens stay under
//                       `false_opens_per_day` at this key's traffic
//   minimum_calls,      enough calls for that margin to sit well below a degradation
//   window_length       (error rate x10), and a window that holds them twice over
//   consecutive_failures  runs of failures that long are rarer than the budget
//   open_duration, half-open probing, and a bulkhead size (Little's law: calls in flight
//   are Poisson with mean rate x mean latency; its 1e-6 tail, or the peak seen).
//
// Keys with too little traffic for any rate threshold to be trusted are told so and get
// the consecutive-failures policy instead; keys whose traffic is too thin for a probe
// fraction (the probes of a round would take more than 10 % of 2 s of traffic) probe in
// count mode, at most the bulkhead's size at once.
//
// A key whose trace is not normal traffic gets a statement and no thresholds
// (KeyCalibration::not_normal): fewer than 100 successful calls (too few to measure the
// latency a timeout is drawn from: a trace of ignored calls has none), at least as many
// failures as successes (no healthy baseline to sit above), or every call at one instant
// (no rate).
//
// The proposal is emitted as breaker-file TOML (docs/configuration.md), loaded back
// through the lab's own loader, and checked with the replay machinery: false opens on
// the trace itself, and how soon it opens when the key's traffic is degraded from the
// middle of the trace on (error rate x10, latency x10), with the proposed timeout
// enforced in every run (a call longer than it fails at the timeout).
//
//   bulwark::lab::Calibration c = bulwark::lab::calibrate_file("trace.csv", {});
//   std::cout << bulwark::lab::to_text(c);
//
// Cost: two passes over the trace (the second replays the checks); memory per key is a
// latency histogram (~1.6 % resolution, a few KB) and the calls in flight. Errors are
// InputErrors naming file, line and column, thrown before anything is returned.

#ifndef BULWARK_LAB_CALIBRATE_H_
#define BULWARK_LAB_CALIBRATE_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/clock.h"

namespace bulwark::lab {

struct CalibrateOptions {
  double false_opens_per_day = 1;  // > 0: the budget the rate margins are sized for
  std::vector<std::string> keys;   // only these keys (each must appear); empty: every key
  bool check = true;               // replay the proposal (the second pass)
  // Called now and then during long runs (for a progress line), with the rows read so
  // far in this pass and, in the second pass, the trace's rows (0 in the first); may
  // be empty.
  void (*progress)(std::uint64_t rows, std::uint64_t of, void* context) = nullptr;
  void* progress_context = nullptr;
};

// At most this many keys are calibrated at once (each holds a histogram).
inline constexpr std::size_t kMaxCalibratedKeys = 10'000;

// One proposed value: its TOML key, its value as TOML text, and why.
struct Proposed {
  std::string key;
  std::string value;
  std::string reason;
};

// How the proposal did on the trace and on one injected degradation.
struct CheckResult {
  std::string name;                   // "trace as recorded", "error rate x10", "latency x10"
  Ticks injected_at = 0;              // trace time the degradation starts (0 for the trace itself)
  Ticks window = 0;                   // how long it lasts, to the end of the key's trace
  std::uint64_t opens = 0;            // openings in that run
  std::optional<Ticks> time_to_open;  // from injected_at to the first opening after it
};

struct KeyCalibration {
  std::string key;
  // Baseline.
  std::uint64_t calls = 0;  // rows
  std::uint64_t failures = 0;
  std::uint64_t ignored = 0;
  Ticks first_t = 0, last_t = 0;
  double rate_per_s = 0;  // calls per second over [first_t, last_t]
  double error_rate = 0;  // failures / (successes + failures)
  Ticks mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;  // latency, judged calls
  std::uint64_t peak_in_flight = 0;
  // Not normal traffic: why (one sentence), and then nothing is proposed — no breaker,
  // timeout or bulkhead (0), no checks; breaker_toml and scenario_toml are comments
  // saying so. Empty for a normal trace.
  std::string not_normal;
  // Policy.
  bool rate_policy = false;       // false: consecutive failures only (too little traffic)
  std::string note;               // why, for a key with little traffic; else empty
  std::vector<Proposed> breaker;  // the [breaker] table, in order
  std::vector<Proposed> call;     // timeout and bulkhead: the pipeline's other stages
  Ticks timeout = 0;
  std::uint32_t bulkhead = 0;
  // Bounds for an adaptive limit in the bulkhead's place (adaptive_limit.h), from the
  // concurrency observed: min = the mean in flight (a slowdown is cut back to normal
  // concurrency, never below), initial = the bulkhead (normal traffic is never refused
  // while it learns), max = twice it (room for the dependency to scale). 0: none.
  std::uint32_t adaptive_min = 0;
  std::uint32_t adaptive_initial = 0;
  std::uint32_t adaptive_max = 0;
  std::string breaker_toml;  // the [breaker] file, with the call settings as comments
  // A scenario for `bulwark simulate`: this key's traffic for 10 minutes, its latency
  // x10 from 1min to 7min, through no protection and through the whole proposal
  // (timeout, breaker, bulkhead, a fallback).
  std::string scenario_toml;
  std::vector<CheckResult> checks;
};

struct Calibration {
  std::string source;
  double false_opens_per_day = 1;
  std::uint64_t rows = 0;
  std::vector<KeyCalibration> keys;  // in order of first appearance
};

// Calibrates the trace at `path` ("-": standard input). Throws InputError.
Calibration calibrate_file(const std::string& path, const CalibrateOptions& options);
// The trace read from `in` (read twice; a pipe is copied to a temporary file first).
Calibration calibrate(std::FILE* in, const std::string& name, const CalibrateOptions& options);
// A trace held in memory (for tests).
Calibration calibrate_text(std::string_view csv, const CalibrateOptions& options,
                           const std::string& name = "trace.csv");

std::string to_text(const Calibration& c);
std::string to_json(const Calibration& c);
std::string to_svg(const Calibration& c);

// P(X >= k) for X ~ Binomial(n, p), exactly (summed in log space; 0 when k > n).
double binomial_tail(std::uint64_t n, double p, std::uint64_t k);

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_CALIBRATE_H_
