// Many threads hammer one breaker with random outcomes while the clock moves and an
// operator occasionally intervenes. Invariants are checked during the run and after
// it. Run under TSan in CI (ctest label "stress").

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "support/patience.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kIterations = 40'000;
#else
constexpr int kIterations = 300'000;
#endif
constexpr int kThreads = 4;
constexpr std::uint32_t kProbes = 3;

struct Totals {
  std::uint64_t successes = 0, failures = 0, ignored = 0, cancelled = 0, rejected = 0;
};

struct Held {
  Breaker::Permit permit;
  bool probe;
  std::uint32_t generation;
};

struct Event {
  State from, to;
  std::uint32_t generation;
};

TEST(BreakerStress, InvariantsHoldUnderConcurrency) {
  ManualClock clock;
  BreakerPolicy<ManualClock> policy(
      {.name = "stress",
       .consecutive_failures = 3,
       .open_duration = 1ms,
       .open_growth = {.multiplier = 2.0, .max = 8ms},
       .half_open = {.probes = 2, .max_in_flight = kProbes, .max_wait = 5ms}},
      clock);
  std::mutex events_mu;
  std::vector<Event> events;
  policy.on_transition([&](const TransitionEvent& e) {
    std::lock_guard lock(events_mu);
    events.push_back({e.from, e.to, e.generation});
  });
  Breaker breaker(policy);

  // Probes the harness holds, per half-open round (generation). The harness stops
  // counting a probe *before* resolving it, so a count above K means the breaker
  // admitted a probe while K others were still held.
  auto probes = std::make_unique<std::array<std::atomic<int>, 1u << 19>>();
  std::atomic<int> over_admitted{0};
  std::atomic<bool> done{false};
  std::vector<Totals> totals(kThreads);
  // Calls the breaker admitted, as the harness saw them.
  std::atomic<std::uint64_t> admitted{0};
  // Each worker makes kIterations calls, and goes on until the breaker has cycled
  // (opened kOpens times), however the scheduler interleaved the outcomes.
  constexpr std::uint64_t kOpens = 10;
  test::Patience patience;
  std::atomic<std::uint64_t> iterations{0};

  auto worker = [&](int id) {
    std::mt19937_64 rng(1234 + id);
    std::uniform_real_distribution<double> u(0, 1);
    std::deque<Held> held;
    Totals& t = totals[id];
    auto resolve_oldest = [&] {
      Held h = std::move(held.front());
      held.pop_front();
      if (h.probe) (*probes)[h.generation].fetch_sub(1);
      const double r = u(rng);
      if (r < 0.55) {
        h.permit.record_success();
        ++t.successes;
      } else if (r < 0.85) {
        h.permit.record_failure();
        ++t.failures;
      } else if (r < 0.95) {
        h.permit.ignore();
        ++t.ignored;
      } else {
        ++t.cancelled;  // destroyed without an outcome below
      }
    };
    int i = 0;
    for (;; ++i) {
      if (i >= kIterations && (i - kIterations) % 1024 == 0 &&
          (breaker.snapshot().opens >= kOpens || patience.exhausted()))
        break;
      const double r = u(rng);
      if (r < 0.02) clock.advance(Nanos(static_cast<Ticks>(u(rng) * 3e6)));
      if (r > 0.9995) {
        static constexpr State kTargets[] = {State::closed,       State::open,
                                             State::half_open,    State::forced_open,
                                             State::metrics_only, State::disabled};
        const State target = kTargets[static_cast<std::size_t>(u(rng) * 6) % 6];
        if (target == State::closed) {
          breaker.reset();
        } else {
          (void)breaker.transition_to(target);  // may be refused: that is fine
        }
      }
      if (auto p = breaker.try_acquire()) {
        admitted.fetch_add(1, std::memory_order_relaxed);
        const bool probe = p->is_probe();
        const std::uint32_t gen = p->generation();
        if (probe && (*probes)[gen].fetch_add(1) + 1 > static_cast<int>(kProbes))
          over_admitted.fetch_add(1);
        held.push_back({std::move(*p), probe, gen});
      } else {
        ++t.rejected;
      }
      while (held.size() > 4 || (!held.empty() && u(rng) < 0.5)) resolve_oldest();
    }
    while (!held.empty()) resolve_oldest();
    iterations.fetch_add(static_cast<std::uint64_t>(i));
  };

  // Watches snapshots while the workers run: bounded probes, monotonic totals.
  std::atomic<int> bad_snapshots{0};
  std::thread watcher([&] {
    BreakerSnapshot prev = breaker.snapshot();
    while (!done.load()) {
      const BreakerSnapshot s = breaker.snapshot();
      if (s.half_open_in_flight > kProbes) bad_snapshots.fetch_add(1);
      if (s.successes < prev.successes || s.failures < prev.failures || s.ignored < prev.ignored ||
          s.cancelled < prev.cancelled || s.rejected < prev.rejected || s.opens < prev.opens ||
          s.permitted < prev.permitted) {
        bad_snapshots.fetch_add(1);
      }
      prev = s;
    }
  });

  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (auto& t : threads) t.join();
  done.store(true);
  watcher.join();

  EXPECT_EQ(over_admitted.load(), 0) << "more than K probes were in flight in one half-open round";
  EXPECT_EQ(bad_snapshots.load(), 0);

  // Totals add up exactly: nothing is in flight any more, so every admitted call
  // resolved exactly once.
  Totals sum;
  for (const Totals& t : totals) {
    sum.successes += t.successes, sum.failures += t.failures, sum.ignored += t.ignored;
    sum.cancelled += t.cancelled, sum.rejected += t.rejected;
  }
  const BreakerSnapshot s = breaker.snapshot();
  EXPECT_EQ(s.successes, sum.successes);
  EXPECT_EQ(s.failures, sum.failures);
  EXPECT_EQ(s.ignored, sum.ignored);
  EXPECT_EQ(s.cancelled, sum.cancelled);
  EXPECT_EQ(s.rejected, sum.rejected);
  EXPECT_EQ(s.permitted, admitted.load());
  EXPECT_EQ(s.permitted + s.rejected, iterations.load());
  EXPECT_EQ(s.half_open_in_flight, 0u);

  // One event per transition, forming a chain from CLOSED to the final state.
  std::lock_guard lock(events_mu);
  ASSERT_FALSE(events.empty());
  EXPECT_GE(s.opens, kOpens) << "in 120 s the breaker did not cycle " << kOpens << " times";
  EXPECT_EQ(events.front().from, State::closed);
  std::uint64_t opens = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_NE(events[i].from, events[i].to) << i;
    if (i > 0) {
      ASSERT_EQ(events[i].from, events[i - 1].to)
          << "event " << i << " does not continue the chain";
      ASSERT_GT(events[i].generation, events[i - 1].generation) << i;
    }
    const bool into_open = events[i].to == State::open || events[i].to == State::forced_open;
    const bool from_open = events[i].from == State::open || events[i].from == State::forced_open;
    if (into_open && !from_open) ++opens;
  }
  EXPECT_EQ(events.back().to, s.state);
  EXPECT_EQ(opens, s.opens);
}

// Emitting borrows the listener list without a lock while writers replace it: every
// event reaches the listener that is there throughout, exactly once, and no list is
// freed while an emitter still reads it (ASan, TSan).
TEST(BreakerStress, ListenersChangeWhileEventsAreEmitted) {
  detail::ListenerList<int> list;
  std::atomic<std::uint64_t> heard{0}, transient{0};
  list.add([&](const int& v) { heard.fetch_add(static_cast<std::uint64_t>(v)); });
  constexpr int kEmits = kIterations / 10;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!done.load()) {
      const ListenerId id = list.add([&](const int&) { transient.fetch_add(1); });
      EXPECT_TRUE(list.remove(id));
    }
  });
  std::vector<std::thread> emitters;
  for (int i = 0; i < kThreads; ++i) {
    emitters.emplace_back([&] {
      for (int k = 0; k < kEmits; ++k) list.emit(1);
    });
  }
  for (auto& t : emitters) t.join();
  done.store(true);
  writer.join();
  EXPECT_EQ(heard.load(), static_cast<std::uint64_t>(kThreads) * kEmits);
  EXPECT_LE(transient.load(), heard.load());
}

// The recovery race: when the open period ends, many requests arrive at once and exactly
// one of them becomes the probe.
TEST(BreakerStress, ExactlyOneProbeWinsTheRaceToHalfOpen) {
  constexpr int kRounds = 200;
  ManualClock clock;
  std::atomic<int> half_opens{0};
  BreakerPolicy<ManualClock> policy(
      {.consecutive_failures = 1, .open_duration = 1s, .half_open = {.max_in_flight = 1}}, clock);
  policy.on_transition([&](const TransitionEvent& e) {
    if (e.to == State::half_open) half_opens.fetch_add(1);
  });
  Breaker breaker(policy);
  for (int round = 0; round < kRounds; ++round) {
    breaker.reset();
    breaker.try_acquire()->record_failure();
    ASSERT_EQ(breaker.state(), State::open);
    clock.advance(1s);
    std::atomic<int> admitted{0}, go{0};
    std::vector<std::thread> threads;
    std::vector<std::optional<Breaker::Permit>> permits(kThreads);
    for (int id = 0; id < kThreads; ++id) {
      threads.emplace_back([&, id] {
        go.fetch_add(1);
        while (go.load() < kThreads) std::this_thread::yield();
        if (auto p = breaker.try_acquire()) {
          admitted.fetch_add(1);
          permits[id].emplace(std::move(*p));
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(admitted.load(), 1) << "round " << round;
    for (auto& p : permits) {
      if (p) p->record_success();
    }
    ASSERT_EQ(breaker.state(), State::closed);
  }
  EXPECT_EQ(half_opens.load(), kRounds);
}

}  // namespace
}  // namespace bulwark
