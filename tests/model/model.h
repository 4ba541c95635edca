// A reference model of bulwark's circuit breakers, for differential testing.
//
// Deliberately simple and single-threaded: plain structs, a vector of outcomes with
// their time buckets, no packing, no atomics, no generation wrap-around tricks. It
// encodes the behaviour documented in circuit_breaker.h, breaker_config.h and
// sliding_window.h, and is driven one operation at a time with an explicit time.
//
// Slow calls still in flight (count_in_flight_slow_calls) follow the documented epoch
// rule: calls are grouped by admission into epochs of E (the power of two nanoseconds at
// or above slow_call_duration), and an epoch's calls count as slow once the whole
// epoch is older than slow_call_duration; the first admission of each epoch
// re-evaluates the rates. Not modelled: concurrency (history_test.cc checks that).

#ifndef BULWARK_TESTS_MODEL_MODEL_H_
#define BULWARK_TESTS_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/outcome.h"

namespace bulwark::model {

enum class Window : std::uint8_t { none, count, time };

// Everything the model (and, through adapter.h, the real breaker) is configured with.
// Durations are nanoseconds; unset optionals turn a rule off as in BreakerConfig.
struct Config {
  Window window = Window::none;
  std::uint32_t consecutive_failures = 5;
  std::optional<double> failure_rate{};
  std::optional<double> slow_call_rate{};
  Ticks slow_call_duration = 0;
  std::uint32_t minimum_calls = 100;
  std::uint32_t window_size = 100;
  Ticks window_length = 60'000'000'000;
  std::uint32_t window_buckets = 10;
  bool count_in_flight_slow_calls = false;
  Ticks open_duration = 60'000'000'000;
  double open_duration_multiplier = 1.0;
  Ticks max_open_duration = 0;
  std::optional<std::uint32_t> half_open_max_calls{};
  std::uint32_t half_open_successes = 1;
  std::optional<double> half_open_fraction{};
  std::vector<double> half_open_ramp{};
  Ticks half_open_max_wait = 60'000'000'000;
  Ticks flapping_period = 60'000'000'000;
  std::function<double()> random{};  // fraction mode's draws
};

std::string describe(const Config& c);

// How a permit ended.
enum class Resolution : std::uint8_t { success, failure, ignored, cancelled };

struct Permit {
  std::uint32_t gen;  // generation it was admitted in
  State state;        // state it was admitted in
  std::uint32_t stage;
  Ticks start;             // when it was admitted (0 unless slowness is judged)
  std::uint64_t call = 0;  // counted in flight under this id (0: not counted)
};

struct Decision {
  bool admitted = false;
  Permit permit{};
  RejectReason reason{};
  Ticks retry_after = 0;
};

struct Event {
  State from, to;
  TransitionReason reason;
  Ticks at;
  std::uint32_t generation;
  bool flapping;
  Ticks open_duration;
  bool operator==(const Event&) const = default;
};

struct Counts {
  std::uint64_t calls = 0, failures = 0, slow_successes = 0, slow_failures = 0;
  std::uint64_t in_flight_slow = 0;
  bool operator==(const Counts&) const = default;
};

struct Snapshot {
  State state;
  Ticks time_in_state;
  std::uint32_t consecutive_failures;
  Ticks open_duration;
  std::uint32_t reopens;
  std::uint32_t half_open_in_flight;
  std::uint32_t half_open_successes;
  std::uint32_t generation;
  std::uint64_t permitted, rejected, successes, failures, ignored, cancelled, opens;
  std::optional<Counts> window;
  std::optional<double> failure_rate, slow_call_rate;
  bool flapping;
};

class Breaker {
 public:
  // The breaker is built at time `now`.
  Breaker(Config config, Ticks now);

  Decision acquire(Ticks now);
  // `duration` zero: the breaker measures the call itself (now - start).
  void resolve(const Permit& p, Resolution r, Ticks duration, Ticks now);
  void reset(Ticks now);
  // False for an impossible transition (nothing changes).
  bool transition_to(State target, Ticks now);
  Snapshot snapshot(Ticks now) const;

  std::vector<Event> events;  // every transition with from != to, in order

  // The r-th consecutive opening's length (r >= 1), multiplied and capped.
  Ticks open_period(std::uint32_t reopens) const;

 private:
  struct Sample {
    bool failure;
    bool slow;
    std::uint64_t bucket;  // time window: the bucket it landed in
  };

  bool windowed() const { return c_.window != Window::none; }
  bool by_rate() const { return c_.failure_rate || c_.slow_call_rate; }
  std::uint32_t max_probes() const;
  std::uint32_t last_stage() const { return static_cast<std::uint32_t>(c_.half_open_ramp.size()); }
  double stage_fraction(std::uint32_t s) const;
  std::uint64_t bucket_of(Ticks t) const;
  Counts window_counts(Ticks now) const;
  // The rates over the window at `now`; empty below the minimum volume.
  void rates(Ticks now, std::optional<double>& fr, std::optional<double>& sr) const;
  bool flapping_trip(Ticks now) const;
  std::uint32_t trip_reopens(Ticks now) const;
  void enter(State to, std::uint32_t reopens, TransitionReason reason, Ticks now,
             bool automatic_trip, bool carry_round = false);
  void closed_outcome(bool failure, bool slow, Ticks now);
  void probe_outcome(const Permit& p, Resolution r, bool slow, Ticks now);

  Config c_;
  State state_ = State::closed;
  std::uint32_t gen_ = 0;  // 19 bits, as documented
  std::uint32_t reopens_ = 0;
  std::uint32_t consecutive_ = 0;
  std::uint32_t probes_ = 0, probe_successes_ = 0, stage_ = 0;
  // The current half-open stage's probe outcomes (rate rules).
  std::uint32_t tally_completed_ = 0, tally_failures_ = 0, tally_slow_ = 0;
  Ticks since_ = 0;
  bool flapping_ = false;
  struct InFlightCall {
    std::uint64_t id;
    std::uint64_t epoch;
    bool ancient;  // its epoch's slot was recycled: slow
  };
  bool tracks_in_flight() const { return windowed() && c_.count_in_flight_slow_calls; }
  unsigned epoch_shift() const;
  std::uint64_t in_flight_slow(Ticks now) const;
  // Counts an admission in flight; returns the call's start.
  Ticks admit_in_flight(Ticks now, std::uint64_t& id);
  void evaluate(Ticks now);

  std::vector<Sample> window_;           // this recording phase's outcomes, oldest first
  std::vector<InFlightCall> in_flight_;  // this phase's calls in flight
  std::optional<std::uint64_t> slot_epoch_[2] = {0, 0};  // the epoch each slot holds
  std::uint64_t next_call_ = 1;
  std::uint64_t newest_bucket_ = 0;
  std::uint64_t rejected_ = 0, successes_ = 0, failures_ = 0, ignored_ = 0, cancelled_ = 0,
                opens_ = 0;
};

}  // namespace bulwark::model

#endif  // BULWARK_TESTS_MODEL_MODEL_H_
