// Differential test: random valid configurations and random operation sequences, run
// in lockstep against the reference model (model.h) and the real breaker. After every
// step the decision, the state, the snapshot and the transition events must agree.
// rapidcheck shrinks a failing case to a minimal sequence and prints it step by step.

#include <gtest/gtest.h>

#include "harness.h"

namespace bulwark::model {
namespace {

// Cases per window kind in CI; BULWARK_MODEL_ITERATIONS overrides.
constexpr int kIterations = 300;

void differential(Window w) {
  check_property(
      [w] {
        const Config c = *gen_config(w);
        const auto ops = *rc::gen::container<std::vector<Op>>(gen_op());
        const auto draws = *rc::gen::container<std::vector<double>>(
            16, rc::gen::map(rc::gen::inRange(0, 1000), [](int v) { return v / 1000.0; }));
        const Ticks start = *rc::gen::weightedOneOf<Ticks>(
            {{3, rc::gen::just<Ticks>(0)}, {1, rc::gen::inRange<Ticks>(0, Ticks{1} << 50)}});
        const std::string err = run_any(c, ops, start, draws);
        if (!err.empty()) RC_FAIL(err);
      },
      kIterations);
}

TEST(Differential, NoWindowBreakerAgreesWithTheModel) { differential(Window::none); }
TEST(Differential, CountWindowBreakerAgreesWithTheModel) { differential(Window::count); }
TEST(Differential, TimeWindowBreakerAgreesWithTheModel) { differential(Window::time); }

}  // namespace
}  // namespace bulwark::model
