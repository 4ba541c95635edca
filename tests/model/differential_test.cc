// Differential test: random valid configurations and random operation sequences, run
// in lockstep against the reference model (model.h) and the real breaker. After every
// step the decision, the state, the snapshot and the transition events must agree.
// rapidcheck shrinks a failing case to a minimal sequence and prints it step by step.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bulwark/detail/thread_slot.h"
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

// A striped time window decides as one stripe: the calling thread is moved to a random
// stripe before every step, so that the buckets' counts are spread over the stripes
// and every judgement, snapshot and clear folds or walks them all.
TEST(Differential, StripedTimeWindowBreakerAgreesWithTheModel) {
  using Striped = BasicCircuitBreaker<ManualClock, TimeWindow<10, 4>>;
  const std::uint32_t own = detail::tls_thread_slot;
  check_property(
      [] {
        const Config c = *gen_config(Window::time);
        const auto ops = *rc::gen::container<std::vector<Op>>(gen_op());
        const auto draws = *rc::gen::container<std::vector<double>>(
            16, rc::gen::map(rc::gen::inRange(0, 1000), [](int v) { return v / 1000.0; }));
        const Ticks start = *rc::gen::weightedOneOf<Ticks>(
            {{3, rc::gen::just<Ticks>(0)}, {1, rc::gen::inRange<Ticks>(0, Ticks{1} << 50)}});
        const auto stripes =
            *rc::gen::container<std::vector<std::uint32_t>>(16, rc::gen::inRange(0u, 4u));
        const std::string err = run_lockstep<Striped>(
            c, ops, start, draws, true, nullptr,
            [&](std::size_t i) { detail::tls_thread_slot = stripes[i % stripes.size()] + 1; });
        if (!err.empty()) RC_FAIL(err);
      },
      kIterations);
  detail::tls_thread_slot = own;
}

}  // namespace
}  // namespace bulwark::model
