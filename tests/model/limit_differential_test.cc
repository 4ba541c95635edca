// Differential test of the adaptive concurrency limit: random valid configurations and
// random traces (acquire; complete with the clock's round trip or a given one; drop;
// cancel; advance the clock, now and then a step back), played in lockstep on the
// reference model (limit_model.h) and a BasicAdaptiveLimit<ManualClock>. After every
// step the admission decision, the limit, in-flight, the counters and the limit-change
// events must agree. Seeds and campaigns as the breaker's model tests (harness.h):
// BULWARK_MODEL_ITERATIONS, BULWARK_MODEL_SEED=random, RC_PARAMS="reproduce=...".

#include <gtest/gtest.h>

#include <sstream>

#include "harness.h"
#include "limit_model.h"

namespace bulwark::model {
namespace {

constexpr int kIterations = 300;  // per algorithm in CI; BULWARK_MODEL_ITERATIONS overrides

enum class LimitOpKind { acquire, complete, complete_given, drop, cancel, advance, step_back };

struct LimitOp {
  LimitOpKind kind;
  std::uint32_t index = 0;  // which held call (modulo how many are held)
  Ticks amount = 0;         // a clock step, or the given round trip
};

std::ostream& operator<<(std::ostream& o, const LimitOp& op) {
  static const char* const kNames[] = {"acquire", "complete", "complete_given", "drop",
                                       "cancel",  "advance",  "step_back"};
  return o << kNames[static_cast<int>(op.kind)] << "(" << op.index << ", " << op.amount << ")";
}

rc::Gen<AdaptiveLimitConfig> gen_limit_config(AdaptiveAlgorithm a) {
  return rc::gen::exec([a] {
    AdaptiveLimitConfig c;
    c.name = "m";
    c.algorithm = a;
    c.min_limit = *rc::gen::inRange<std::uint32_t>(1, 6);
    c.max_limit = c.min_limit + *rc::gen::inRange<std::uint32_t>(0, 60);
    c.initial_limit = *rc::gen::inRange<std::uint32_t>(c.min_limit, c.max_limit + 1);
    c.window_samples = *rc::gen::inRange<std::uint32_t>(1, 9);
    c.min_window = Nanos(*rc::gen::element<Ticks>(0, 0, 1 * kMs, 20 * kMs));
    c.aimd.backoff_ratio = *rc::gen::element(0.5, 0.75, 0.9, 0.95);
    c.aimd.increase = *rc::gen::element(0.5, 1.0, 2.0, 3.0);
    c.aimd.timeout = Nanos(*rc::gen::element<Ticks>(5 * kMs, 20 * kMs, 100 * kMs));
    c.vegas.alpha = *rc::gen::element(1.0, 2.0, 3.0);
    c.vegas.beta = c.vegas.alpha + *rc::gen::element(0.0, 1.0, 3.0);
    c.vegas.probe_every = *rc::gen::inRange<std::uint32_t>(1, 20);
    c.vegas.smoothing = *rc::gen::element(1.0, 0.5, 0.2);
    c.gradient2.tolerance = *rc::gen::element(1.0, 1.5, 2.0);
    c.gradient2.long_window = *rc::gen::inRange<std::uint32_t>(1, 100);
    c.gradient2.warmup = *rc::gen::inRange<std::uint32_t>(1, 10);
    c.gradient2.queue_size = *rc::gen::element(0.0, 1.0, 4.0);
    c.gradient2.smoothing = *rc::gen::element(1.0, 0.5, 0.2);
    RC_PRE(validate(c).has_value());
    return c;
  });
}

rc::Gen<LimitOp> gen_limit_op() {
  auto on_held = [](LimitOpKind k) {
    return rc::gen::map(rc::gen::inRange<std::uint32_t>(0, 64), [k](std::uint32_t i) {
      return LimitOp{k, i, 0};
    });
  };
  auto given = rc::gen::exec([] {
    return LimitOp{LimitOpKind::complete_given, *rc::gen::inRange<std::uint32_t>(0, 64),
                   *rc::gen::inRange<Ticks>(0, 200 * kMs)};
  });
  auto advance = rc::gen::exec([] {
    return LimitOp{LimitOpKind::advance, 0,
                   *rc::gen::weightedOneOf<Ticks>({{6, rc::gen::inRange<Ticks>(0, 5 * kMs)},
                                                   {3, rc::gen::inRange<Ticks>(5 * kMs, 200 * kMs)},
                                                   {1, rc::gen::just<Ticks>(3'600'000'000'000)}})};
  });
  auto step_back = rc::gen::exec([] {
    return LimitOp{LimitOpKind::step_back, 0, *rc::gen::inRange<Ticks>(1, 50 * kMs)};
  });
  return rc::gen::weightedOneOf<LimitOp>({{30, rc::gen::just(LimitOp{LimitOpKind::acquire})},
                                          {20, on_held(LimitOpKind::complete)},
                                          {4, given},
                                          {6, on_held(LimitOpKind::drop)},
                                          {3, on_held(LimitOpKind::cancel)},
                                          {20, advance},
                                          {1, step_back}});
}

// Plays `ops` on both; returns the log up to the first difference, or "" if none.
std::string run(const AdaptiveLimitConfig& c, const std::vector<LimitOp>& ops, Ticks start) {
  ManualClock clock{ManualClock::time_point(Nanos(start))};
  BasicAdaptiveLimit<ManualClock> real(c, clock);
  LimitModel model(c, start);
  std::vector<BasicAdaptiveLimit<ManualClock>::Permit> held;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> events;
  real.add_listener([&](const AdaptiveLimitEvent& e) { events.emplace_back(e.from, e.to); });
  std::ostringstream log;
  log << "algorithm " << to_string(c.algorithm) << " limits [" << c.min_limit << ", " << c.max_limit
      << "] initial " << c.initial_limit << " window " << c.window_samples << " min_window "
      << c.min_window.count() << "ns; clock starts at " << start << "\n";
  for (std::size_t step = 0; step < ops.size(); ++step) {
    const LimitOp& op = ops[step];
    const Ticks now = now_ticks(clock);
    log << "  " << step << ": " << op;
    switch (op.kind) {
      case LimitOpKind::acquire: {
        auto p = real.try_acquire();
        const bool m = model.acquire(now);
        log << (m ? " admitted" : " rejected");
        if (bool(p) != m) return log.str() + "\n  real " + (p ? "admitted" : "rejected");
        if (p) held.push_back(std::move(*p));
        break;
      }
      case LimitOpKind::complete:
      case LimitOpKind::complete_given:
      case LimitOpKind::drop:
      case LimitOpKind::cancel: {
        if (held.empty()) break;
        const std::size_t i = op.index % held.size();
        auto p = std::move(held[i]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        using How = LimitModel::How;
        switch (op.kind) {
          case LimitOpKind::complete:
            p.complete();
            model.settle(i, How::complete, now);
            break;
          case LimitOpKind::complete_given:
            p.complete(Nanos(op.amount));
            model.settle(i, How::complete, now, op.amount);
            break;
          case LimitOpKind::drop:
            p.drop();
            model.settle(i, How::drop, now);
            break;
          default:
            p.cancel();
            model.settle(i, How::cancel, now);
            break;
        }
        break;
      }
      case LimitOpKind::advance:
        clock.advance(Nanos(op.amount));
        break;
      case LimitOpKind::step_back:
        clock.set(Nanos(saturating_sub(now, op.amount)));
        break;
    }
    const AdaptiveLimitSnapshot s = real.snapshot();
    log << " -> limit " << model.limit() << " (estimate " << model.estimate() << ") in_flight "
        << model.in_flight() << "\n";
    auto differs = [&](const char* what, auto r, auto m) {
      if (r == m) return false;
      log << "  differs: " << what << " real " << r << " model " << m << "\n";
      return true;
    };
    if (differs("limit", s.limit, model.limit()) ||
        differs("in_flight", s.in_flight, model.in_flight()) ||
        differs("rejected", s.rejected, model.rejected()) ||
        differs("dropped", s.dropped, model.dropped()) ||
        differs("windows", s.windows, model.windows()) ||
        differs("events", events.size(), model.events.size()))
      return log.str();
    if (events != model.events) return log.str() + "  differs: an event's from/to\n";
  }
  return "";
}

void differential(AdaptiveAlgorithm a) {
  check_property(
      [a] {
        const AdaptiveLimitConfig c = *gen_limit_config(a);
        // Long traces: a window needs several calls, and the algorithms several windows.
        const auto length = *rc::gen::inRange<std::size_t>(0, 600);
        const auto ops = *rc::gen::container<std::vector<LimitOp>>(length, gen_limit_op());
        const Ticks start = *rc::gen::weightedOneOf<Ticks>(
            {{3, rc::gen::just<Ticks>(0)}, {1, rc::gen::inRange<Ticks>(0, Ticks{1} << 50)}});
        const std::string err = run(c, ops, start);
        if (!err.empty()) RC_FAIL(err);
      },
      kIterations);
}

TEST(LimitDifferential, AimdAgreesWithTheModel) { differential(AdaptiveAlgorithm::aimd); }
TEST(LimitDifferential, VegasAgreesWithTheModel) { differential(AdaptiveAlgorithm::vegas); }
TEST(LimitDifferential, Gradient2AgreesWithTheModel) { differential(AdaptiveAlgorithm::gradient2); }

// The traces reach the interesting states: a limit that moved both ways.
TEST(LimitDifferential, TracesMoveTheLimitBothWays) {
  for (AdaptiveAlgorithm a :
       {AdaptiveAlgorithm::aimd, AdaptiveAlgorithm::vegas, AdaptiveAlgorithm::gradient2}) {
    AdaptiveLimitConfig c;
    c.algorithm = a;
    c.min_limit = 1;
    c.max_limit = 30;
    c.initial_limit = 10;
    c.window_samples = 3;
    c.vegas.probe_every = 50;
    LimitModel m(c, 0);
    Ticks now = 0;
    bool up = false, down = false;
    for (int round = 0; round < 200; ++round) {
      const Ticks rtt = round < 100 ? 10 * kMs : 60 * kMs;
      while (m.acquire(now)) {
      }
      now += rtt;
      while (!m.held.empty())
        m.settle(0, round % 17 == 16 ? LimitModel::How::drop : LimitModel::How::complete, now);
    }
    for (const auto& [from, to] : m.events) (to > from ? up : down) = true;
    EXPECT_TRUE(up && down) << to_string(a);
  }
}

}  // namespace
}  // namespace bulwark::model
