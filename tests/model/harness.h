// Operation sequences, their generators, and the lockstep runner that plays one
// sequence against the reference model and a real breaker and reports the first
// difference.

#ifndef BULWARK_TESTS_MODEL_HARNESS_H_
#define BULWARK_TESTS_MODEL_HARNESS_H_

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "adapter.h"
#include "model.h"

namespace bulwark::model {

inline constexpr Ticks kMs = 1'000'000;

enum class OpKind : std::uint8_t {
  acquire,     // try_acquire(); an admitted permit is held
  resolve,     // resolve held permit [index % held] with `res` (and duration `amount`)
  advance,     // move the clock forward by `amount`
  step_back,   // move the clock back by `amount` (never below 0)
  reset,       // reset()
  reset_many,  // reset() `amount` times with no call in between
  transition,  // transition_to(target)
};

struct Op {
  OpKind kind = OpKind::acquire;
  std::uint32_t index = 0;
  Resolution res = Resolution::success;
  Ticks amount = 0;
  State target = State::closed;
};

inline const char* name(Resolution r) {
  switch (r) {
    case Resolution::success:
      return "success";
    case Resolution::failure:
      return "failure";
    case Resolution::ignored:
      return "ignored";
    case Resolution::cancelled:
      return "cancel";
  }
  return "?";
}

inline std::string to_text(const Op& op) {
  std::ostringstream o;
  switch (op.kind) {
    case OpKind::acquire:
      o << "acquire";
      break;
    case OpKind::resolve:
      o << "resolve #" << op.index << ' ' << name(op.res);
      if (op.amount) o << " took=" << op.amount << "ns";
      break;
    case OpKind::advance:
      o << "advance " << op.amount << "ns";
      break;
    case OpKind::step_back:
      o << "step_back " << op.amount << "ns";
      break;
    case OpKind::reset:
      o << "reset";
      break;
    case OpKind::reset_many:
      o << "reset x" << op.amount;
      break;
    case OpKind::transition:
      o << "transition_to " << to_string(op.target);
      break;
  }
  return o.str();
}

// rapidcheck prints counterexamples with showValue (found by ADL).
inline void showValue(const Op& op, std::ostream& os) { os << to_text(op); }
inline void showValue(const Config& c, std::ostream& os) { os << describe(c); }

// --- Generators -----------------------------------------------------------------------

inline rc::Gen<Config> gen_config(std::optional<Window> only = std::nullopt) {
  return rc::gen::exec([only] {
    Config c;
    c.window = only ? *only : *rc::gen::element(Window::none, Window::count, Window::time);
    const bool windowed = c.window != Window::none;
    // A breaker without a window needs its one rule on; a window breaker may turn it off.
    c.consecutive_failures = *rc::gen::inRange<std::uint32_t>(windowed ? 0 : 1, 6);
    if (windowed) {
      if (*rc::gen::arbitrary<bool>()) c.failure_rate = *rc::gen::element(0.25, 0.5, 0.6, 1.0);
      c.slow_call_duration = *rc::gen::element<Ticks>(0, 1 * kMs, 5 * kMs);
      if (c.slow_call_duration > 0 && *rc::gen::arbitrary<bool>())
        c.slow_call_rate = *rc::gen::element(0.3, 0.5, 1.0);
      if (c.slow_call_duration > 0) c.count_in_flight_slow_calls = *rc::gen::arbitrary<bool>();
      c.minimum_calls = *rc::gen::inRange<std::uint32_t>(1, 9);
      c.window_size = *rc::gen::inRange<std::uint32_t>(1, 9);
      c.window_buckets = *rc::gen::inRange<std::uint32_t>(1, 11);
      c.window_length = *rc::gen::element<Ticks>(1 * kMs, 3 * kMs, 10 * kMs) * c.window_buckets;
      // A window breaker with no trip rule at all is a configuration error.
      if (!c.failure_rate && !c.slow_call_rate && c.consecutive_failures == 0)
        c.consecutive_failures = *rc::gen::inRange<std::uint32_t>(1, 6);
    }
    c.open_duration = *rc::gen::element<Ticks>(1 * kMs, 5 * kMs, 20 * kMs, 100 * kMs);
    c.open_duration_multiplier = *rc::gen::element(1.0, 1.5, 2.0);
    c.max_open_duration = c.open_duration_multiplier > 1.0
                              ? c.open_duration * *rc::gen::element<Ticks>(1, 2, 4, 10)
                              : *rc::gen::element<Ticks>(0, c.open_duration * 3);
    if (*rc::gen::inRange(0, 3) == 0) {
      c.half_open_fraction = *rc::gen::element(0.25, 0.5, 1.0);
      const int stages = *rc::gen::inRange(0, 4);
      double f = *c.half_open_fraction;
      for (int i = 0; i < stages; ++i) {
        f = std::min(1.0, f + *rc::gen::element(0.0, 0.25, 0.5));
        c.half_open_ramp.push_back(f);
      }
    }
    // A probe limit is a count-mode setting: with a fraction it is an error.
    if (!c.half_open_fraction && *rc::gen::arbitrary<bool>())
      c.half_open_max_calls = *rc::gen::inRange<std::uint32_t>(1, 5);
    c.half_open_successes = *rc::gen::inRange<std::uint32_t>(1, 5);
    c.half_open_max_wait = *rc::gen::element<Ticks>(0, 10 * kMs, 50 * kMs);
    c.flapping_period = *rc::gen::element<Ticks>(0, 10 * kMs, 100 * kMs, 1000 * kMs);
    RC_PRE(valid(c));
    return c;
  });
}

inline rc::Gen<Op> gen_op() {
  using rc::gen::just;
  auto make = [](OpKind k) { return Op{.kind = k}; };
  auto resolve = rc::gen::exec([] {
    Op op{.kind = OpKind::resolve};
    op.index = *rc::gen::inRange<std::uint32_t>(0, 16);
    op.res = *rc::gen::weightedElement<Resolution>({{4, Resolution::success},
                                                    {4, Resolution::failure},
                                                    {1, Resolution::ignored},
                                                    {1, Resolution::cancelled}});
    op.amount = *rc::gen::weightedOneOf<Ticks>(
        {{3, just<Ticks>(0)}, {1, rc::gen::inRange<Ticks>(1, 12 * kMs)}});
    return op;
  });
  auto advance = rc::gen::exec([] {
    Op op{.kind = OpKind::advance};
    op.amount = *rc::gen::weightedOneOf<Ticks>(
        {{6, rc::gen::inRange<Ticks>(0, 3 * kMs)},
         {3, rc::gen::inRange<Ticks>(3 * kMs, 200 * kMs)},
         {1, rc::gen::element<Ticks>(3'600'000'000'000, Ticks{1} << 40)}});
    return op;
  });
  auto step_back = rc::gen::exec([] {
    Op op{.kind = OpKind::step_back};
    op.amount = *rc::gen::inRange<Ticks>(1, 50 * kMs);
    return op;
  });
  auto reset_many = rc::gen::exec([] {
    Op op{.kind = OpKind::reset_many};
    op.amount = *rc::gen::element<Ticks>(1000, 2048, 3000, 4096);
    return op;
  });
  auto transition = rc::gen::exec([] {
    Op op{.kind = OpKind::transition};
    op.target = *rc::gen::element(State::closed, State::open, State::half_open, State::forced_open,
                                  State::disabled, State::metrics_only);
    return op;
  });
  return rc::gen::weightedOneOf<Op>({{30, just(make(OpKind::acquire))},
                                     {30, resolve},
                                     {16, advance},
                                     {2, step_back},
                                     {3, just(make(OpKind::reset))},
                                     {1, reset_many},
                                     {5, transition}});
}

// --- Lockstep -------------------------------------------------------------------------

// A fixed cyclic sequence of draws in [0, 1); model and real each read their own copy.
struct Draws {
  std::vector<double> values;
  std::size_t next = 0;
  double operator()() {
    if (values.empty()) return 0.0;
    const double v = values[next % values.size()];
    ++next;
    return v;
  }
};

inline Snapshot from_real(const BreakerSnapshot& r) {
  Snapshot s{};
  s.state = r.state;
  s.time_in_state = r.time_in_state.count();
  s.consecutive_failures = r.consecutive_failures;
  s.open_duration = r.open_duration.count();
  s.reopens = r.reopens;
  s.half_open_in_flight = r.half_open_in_flight;
  s.half_open_successes = r.half_open_successes;
  s.generation = r.generation;
  s.permitted = r.permitted, s.rejected = r.rejected, s.successes = r.successes;
  s.failures = r.failures, s.ignored = r.ignored, s.cancelled = r.cancelled, s.opens = r.opens;
  if (r.window) {
    s.window = Counts{r.window->calls, r.window->failures, r.window->slow_successes,
                      r.window->slow_failures, r.window->in_flight_slow};
  }
  s.failure_rate = r.failure_rate;
  s.slow_call_rate = r.slow_call_rate;
  s.flapping = r.flapping;
  return s;
}

template <class T>
std::string opt(const std::optional<T>& v) {
  if (!v) return "none";
  std::ostringstream o;
  o << *v;
  return o.str();
}

inline std::string counts_text(const std::optional<Counts>& c) {
  if (!c) return "none";
  std::ostringstream o;
  o << "{calls=" << c->calls << " failures=" << c->failures << " slow_s=" << c->slow_successes
    << " slow_f=" << c->slow_failures << " in_flight_slow=" << c->in_flight_slow << '}';
  return o.str();
}

// Empty if equal, else each differing field as "field: model=X real=Y".
inline std::string diff(const Snapshot& m, const Snapshot& r) {
  std::ostringstream o;
  auto field = [&](const char* n, auto a, auto b) {
    if (!(a == b)) o << "  " << n << ": model=" << a << " real=" << b << '\n';
  };
  field("state", to_string(m.state), to_string(r.state));
  field("time_in_state", m.time_in_state, r.time_in_state);
  field("consecutive_failures", m.consecutive_failures, r.consecutive_failures);
  field("open_duration", m.open_duration, r.open_duration);
  field("reopens", m.reopens, r.reopens);
  field("half_open_in_flight", m.half_open_in_flight, r.half_open_in_flight);
  field("half_open_successes", m.half_open_successes, r.half_open_successes);
  field("generation", m.generation, r.generation);
  field("permitted", m.permitted, r.permitted);
  field("rejected", m.rejected, r.rejected);
  field("successes", m.successes, r.successes);
  field("failures", m.failures, r.failures);
  field("ignored", m.ignored, r.ignored);
  field("cancelled", m.cancelled, r.cancelled);
  field("opens", m.opens, r.opens);
  field("window", counts_text(m.window), counts_text(r.window));
  field("failure_rate", opt(m.failure_rate), opt(r.failure_rate));
  field("slow_call_rate", opt(m.slow_call_rate), opt(r.slow_call_rate));
  field("flapping", m.flapping, r.flapping);
  return o.str();
}

inline std::string event_text(const Event& e) {
  std::ostringstream o;
  o << to_string(e.from) << "->" << to_string(e.to) << " (" << to_string(e.reason)
    << ") at=" << e.at << " gen=" << e.generation << " flapping=" << e.flapping
    << " open_for=" << e.open_duration;
  return o.str();
}

// What one run observed: per step, the decision or result, plus every event. Used by
// the metamorphic tests to compare two runs of the real breaker.
struct Observation {
  std::vector<std::string> steps;  // each step and its decision, without times
  std::vector<Ticks> retry_after;  // each rejection's retry_after, in order
  std::vector<Event> events;
  std::optional<Snapshot> last;  // the snapshot after the last step
};

// Plays `ops` on a real breaker of type B with the clock starting at `start`, in
// lockstep with the model if `check_model`. Returns the first disagreement (with the
// steps leading to it), or an empty string. Fills `seen` if given; calls `before_step`
// (if any) with each step's index before the step.
template <class B>
std::string run_lockstep(const Config& c, const std::vector<Op>& ops, Ticks start,
                         const std::vector<double>& draws, bool check_model = true,
                         Observation* seen = nullptr,
                         const std::function<void(std::size_t)>& before_step = {}) {
  auto real_draws = std::make_shared<Draws>(Draws{draws});
  auto model_draws = std::make_shared<Draws>(Draws{draws});
  Config mc = c;
  mc.random = [model_draws] { return (*model_draws)(); };
  ManualClock clock{ManualClock::time_point(Nanos(start))};
  std::vector<Event> real_events;
  B breaker(to_breaker_config<B>(c, [real_draws] { return (*real_draws)(); }), clock);
  breaker.policy().on_transition([&](const TransitionEvent& e) {
    real_events.push_back(
        Event{e.from, e.to, e.reason, e.at, e.generation, e.flapping, e.open_duration.count()});
  });
  Breaker model(mc, start);
  struct Held {
    std::optional<typename B::Permit> real;
    Permit model;
  };
  std::vector<Held> held;
  std::ostringstream log;
  log << "config " << describe(c) << "\nclock starts at " << start << "ns\n";
  auto now = [&] { return now_ticks(clock); };

  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (before_step) before_step(i);
    std::ostringstream step;
    step << to_text(op);
    std::string mismatch;
    switch (op.kind) {
      case OpKind::acquire: {
        auto r = breaker.try_acquire();
        const Decision d = check_model ? model.acquire(now()) : Decision{};
        if (r) {
          step << " -> admitted";
          if (r->is_probe()) step << " (probe)";
          held.push_back(Held{std::move(*r), d.permit});
        } else {
          step << " -> rejected " << to_string(r.error().reason);
          if (seen) seen->retry_after.push_back(r.error().retry_after.count());
          if (!seen) step << " retry_after=" << r.error().retry_after.count();
        }
        if (check_model) {
          if (d.admitted != static_cast<bool>(r)) {
            mismatch = std::string("decision: model ") + (d.admitted ? "admitted" : "rejected");
          } else if (!r && (d.reason != r.error().reason ||
                            d.retry_after != r.error().retry_after.count())) {
            mismatch = std::string("rejection: model ") + std::string(to_string(d.reason)) +
                       " retry_after=" + std::to_string(d.retry_after);
          }
        }
        break;
      }
      case OpKind::resolve: {
        if (held.empty()) {
          step << " (nothing held)";
          break;
        }
        const std::size_t k = op.index % held.size();
        Held h = std::move(held[k]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
        switch (op.res) {
          case Resolution::success:
            h.real->record_success(Nanos(op.amount));
            break;
          case Resolution::failure:
            h.real->record_failure(Nanos(op.amount));
            break;
          case Resolution::ignored:
            h.real->ignore();
            break;
          case Resolution::cancelled:
            h.real.reset();
            break;
        }
        if (check_model) model.resolve(h.model, op.res, op.amount, now());
        break;
      }
      case OpKind::advance:
        clock.advance(Nanos(op.amount));
        break;
      case OpKind::step_back:
        clock.set(Nanos(std::max<Ticks>(0, now() - op.amount)));
        break;
      case OpKind::reset:
        breaker.reset();
        if (check_model) model.reset(now());
        break;
      case OpKind::reset_many:
        for (Ticks n = 0; n < op.amount; ++n) {
          breaker.reset();
          if (check_model) model.reset(now());
        }
        break;
      case OpKind::transition: {
        const bool ok = static_cast<bool>(breaker.transition_to(op.target));
        step << (ok ? " -> ok" : " -> refused");
        if (check_model && model.transition_to(op.target, now()) != ok)
          mismatch = std::string("transition_to: model ") + (ok ? "refused" : "accepted");
        break;
      }
    }
    log << "  " << i << ": " << step.str() << '\n';
    if (seen) {
      // Without the op's own times, so that time-transformed runs compare equal.
      const std::string text = step.str();
      const std::size_t arrow = text.find(" -> ");
      seen->steps.push_back(std::to_string(static_cast<int>(op.kind)) +
                            (arrow == std::string::npos ? "" : text.substr(arrow)));
    }
    if (!check_model) continue;
    if (mismatch.empty()) {
      const std::string d = diff(model.snapshot(now()), from_real(breaker.snapshot()));
      if (!d.empty()) mismatch = "snapshot differs\n" + d;
    }
    if (mismatch.empty() && model.events != real_events) {
      std::ostringstream o;
      o << "events differ\n  model:\n";
      for (const Event& e : model.events) o << "    " << event_text(e) << '\n';
      o << "  real:\n";
      for (const Event& e : real_events) o << "    " << event_text(e) << '\n';
      mismatch = o.str();
    }
    if (!mismatch.empty()) return log.str() + "after step " + std::to_string(i) + ": " + mismatch;
  }
  if (seen) {
    seen->events = real_events;
    seen->last = from_real(breaker.snapshot());
  }
  return {};
}

// Dispatches on the configuration's window.
inline std::string run_any(const Config& c, const std::vector<Op>& ops, Ticks start,
                           const std::vector<double>& draws, bool check_model = true,
                           Observation* seen = nullptr) {
  switch (c.window) {
    case Window::none:
      return run_lockstep<NoWindowBreaker>(c, ops, start, draws, check_model, seen);
    case Window::count:
      return run_lockstep<CountBreaker>(c, ops, start, draws, check_model, seen);
    case Window::time:
      return run_lockstep<TimeBreaker>(c, ops, start, draws, check_model, seen);
  }
  return "unknown window";
}

// The seeds CI runs every property under: the verdict never depends on a random seed.
// A property's cases are shared among them (300 cases: 100 per seed).
inline constexpr std::uint64_t kFixedSeeds[] = {1, 2, 3};

// The reproduce string of a failure: RC_PARAMS="reproduce=..." replays exactly that case.
inline std::string reproduce_params(const std::string& id, const rc::detail::FailureResult& f) {
  rc::detail::Configuration c;
  c.reproduce[id] = f.reproduce;
  std::string text = rc::detail::configToMinimalString(c);
  if (const auto at = text.find(" seed="); at != std::string::npos)  // unused by a replay
    text.erase(at, text.find(' ', at + 1) - at);
  return "RC_PARAMS=\"" + text + "\"";
}

// The campaign seed: BULWARK_MODEL_SEED, a number or "random" (one fresh seed for the
// whole binary); empty if unset.
inline std::optional<std::uint64_t> campaign_seed() {
  static const std::optional<std::uint64_t> seed = []() -> std::optional<std::uint64_t> {
    const char* v = std::getenv("BULWARK_MODEL_SEED");
    if (!v || !*v) return std::nullopt;
    if (std::string(v) != "random") return std::strtoull(v, nullptr, 10);
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) | rd();
  }();
  return seed;
}

// Whether the person running the test set RC_PARAMS. Read once, before rapidcheck loads
// its configuration, which otherwise picks and prints a random seed: it is given the
// campaign's seed or the first fixed one instead, so that the line it prints is true.
inline bool rc_params_given() {
  static const bool given = [] {
    const char* v = std::getenv("RC_PARAMS");
    if (v && *v) return true;
    const std::uint64_t seed = campaign_seed().value_or(kFixedSeeds[0]);
    setenv("RC_PARAMS", ("seed=" + std::to_string(seed)).c_str(), 1);
    return false;
  }();
  return given;
}

// Runs a rapidcheck property, in one of three modes:
//  - CI (the default): `iterations` cases (BULWARK_MODEL_ITERATIONS overrides), shared
//    among the fixed seeds kFixedSeeds;
//  - a campaign: BULWARK_MODEL_SEED=<n>, or =random for a fresh seed, runs every case
//    under that one seed;
//  - a replay: RC_PARAMS (seed=N, reproduce=...) is rapidcheck's own configuration.
// Each seed is printed with its count of cases. A failure is reported through gtest with
// rapidcheck's shrunk counterexample, the seed, and the RC_PARAMS string that replays
// the case.
template <class Testable>
void check_property(Testable&& testable, int iterations) {
  const bool user_params = rc_params_given();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  if (const char* env = std::getenv("BULWARK_MODEL_ITERATIONS")) iterations = std::atoi(env);

  std::vector<std::pair<std::uint64_t, int>> runs;  // {seed, cases}
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  std::string mode;
  if (user_params) {
    runs.push_back({params.seed, iterations});
    mode = "RC_PARAMS";
  } else if (const auto seed = campaign_seed()) {
    runs.push_back({*seed, iterations});
    mode = "campaign";
  } else {
    const int n = static_cast<int>(std::size(kFixedSeeds));
    for (int i = 0; i < n; ++i)
      runs.push_back({kFixedSeeds[i], iterations / n + (i < iterations % n ? 1 : 0)});
    mode = "fixed seeds";
  }
  for (const auto& [seed, cases] : runs) {
    if (cases <= 0) continue;
    std::printf("rapidcheck %s: %s, seed %llu, %d cases\n", metadata.id.c_str(), mode.c_str(),
                static_cast<unsigned long long>(seed), cases);
    std::fflush(stdout);
    params.seed = seed;
    params.maxSuccess = cases;
    const auto result = rc::detail::checkTestable(testable, metadata, params);
    if (result.template is<rc::detail::SuccessResult>()) continue;
    std::ostringstream out;
    rc::detail::printResultMessage(result, out);
    out << "\nseed " << seed << " (" << cases << " cases: RC_PARAMS=\"seed=" << seed
        << "\" BULWARK_MODEL_ITERATIONS=" << cases << " runs them again)";
    rc::detail::FailureResult failure;
    if (result.match(failure))
      out << "\nreplay this case: " << reproduce_params(metadata.id, failure);
    ADD_FAILURE() << out.str();
    return;
  }
}

}  // namespace bulwark::model

#endif  // BULWARK_TESTS_MODEL_HARNESS_H_
