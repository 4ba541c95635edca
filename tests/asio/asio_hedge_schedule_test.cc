// The async pipeline's hedging and per-attempt timeouts under the deterministic
// executor (asio/support/deterministic_executor.h): one call through
// pipeline(breaker, retry, hedge, timeout) on a lane of its own, whose attempts are
// scripted calls that answer at once, yield, wait on a virtual timer (honouring a
// cancellation, or deaf to it for a while) and then succeed or fail; a driver on
// another lane moves the clock by amounts the chooser picks (nothing, the hedge delay,
// the timeout, ...) and may cancel the caller. The chooser also picks which ready
// handler runs next, so an attempt's end, the pipeline's wake-up, a timer's expiry and
// the caller's cancellation come in every order.
//
// When the call has ended and nothing is left to run, what happened is checked
// against what the scripted attempts saw:
//  - the call completed exactly once; every attempt answered exactly once and its
//    coroutine ended (no frame left);
//  - the pipeline cancels an attempt only for a cause: another attempt of its group
//    succeeded before, the caller cancelled before, or its own deadline had come;
//  - if an attempt succeeded (on its own, or after a cancellation it ignored), the call
//    succeeded with the value of the first attempt to succeed, in the order they ended,
//    and the attempts that ended after the pipeline reacted to it were cancelled;
//  - the caller's cancellation while an attempt runs ends the call as cancelled, unless
//    an attempt succeeded; a cancelled result only comes from the caller;
//  - the breaker saw one outcome (success iff the call succeeded; nothing but a dropped
//    permit for a cancelled call), and permitted == the outcomes counted;
//  - a timeout is reported only when the pipeline cancelled the attempt it judges; an
//    attempt that answered before any cancellation is judged by its own answer;
//  - the latency tracker got one sample for a success (the winner's own latency, from
//    its launch to its end), none otherwise; budget tokens withdrawn == hedges started
//    plus retries started.
//
// BULWARK_SCHEDULE_SEED=<n> starts the seeded runs at another seed and
// BULWARK_SCHEDULES=<count> runs that many per scenario (default 200);
// BULWARK_DFS_DEPTH=<d> enumerates more decisions depth-first. A long campaign is
// BULWARK_SCHEDULE_SEED=$RANDOM BULWARK_SCHEDULES=100000 asio_hedge_schedule_test.

#include <gtest/gtest.h>

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "asio/asio_support.h"
#include "asio/support/deterministic_executor.h"
#include "asio/virtual_call.h"
#include "bulwark/asio/hedge.h"
#include "bulwark/asio/pipeline.h"
#include "bulwark/asio/timer.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::HedgeDelay;
using bulwark::asio::LatencyTracker;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Reply = Expected<std::string, NetError>;
using Result = Expected<std::string, Failure<NetError>>;

template <class... T>
std::string cat(const T&... parts) {
  std::ostringstream o;
  (o << ... << parts);
  return o.str();
}

// What one attempt does, in the order the attempts' bodies start (the last spec
// stands for any later attempt).
struct AttemptSpec {
  int yields = 0;              // posts to its executor first (each one a schedule point)
  Nanos wait = Nanos::zero();  // then a virtual-time wait (zero: none)
  bool deaf = false;           // the wait ignores a cancellation
  bool ok = true;              // then it succeeds, or fails with its own error
};

struct Scenario {
  std::string name;
  std::uint32_t max_hedges = 1;
  Nanos hedge_delay = 30ms;
  Nanos timeout = 100ms;
  std::uint32_t max_attempts = 1;  // the retry stage's (1: no retry)
  Nanos backoff = 10ms;
  Nanos deadline = Nanos::zero();  // the request's (zero: none)
  double budget_tokens = 10;       // the budget's max_tokens (and first second's tokens)
  std::vector<AttemptSpec> attempts;
  std::vector<Nanos> advances;  // what the driver may move the clock by, at each step
  int driver_steps = 4;
  bool may_cancel = false;  // the driver may cancel the caller (once)
};

// What an attempt saw.
struct Seen {
  std::uint32_t group = 0;  // the retry attempt it belongs to (ctx.attempt())
  Ticks body_start = 0;
  Deadline own;            // its context's deadline
  bool answered = false;   // ended (an answer or an exception)
  bool ok = false;         // its own success
  bool threw = false;      // an aborted operation threw
  bool signalled = false;  // the pipeline emitted a cancellation to it
  std::uint64_t signal_seq = 0;
  Ticks signal_time = 0;
  bool signal_before_start = false;
  std::uint64_t end_seq = 0;
  Ticks ended = 0;
  std::string value;
};

constexpr std::uint64_t kLatencyPrefill = LatencyTracker::min_samples() - 1;

class Explore {
 public:
  Explore(const Scenario& s, Chooser& chooser) : s_(s), chooser_(chooser) {}

  std::string go();

 private:
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }
  ::asio::awaitable<Reply> call(const Ctx& c);
  void signalled(std::size_t k);
  // The first attempt to succeed, in end order.
  std::optional<std::size_t> first_success() const {
    std::optional<std::size_t> w;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      if (seen_[i].answered && seen_[i].ok && (!w || seen_[i].end_seq < seen_[*w].end_seq)) w = i;
    }
    return w;
  }
  bool cause_for_cancel(std::size_t k, std::uint64_t seq, Ticks now) const {
    const Seen& a = seen_[k];
    if (caller_cancel_seq_ != 0 && caller_cancel_seq_ < seq) return true;
    if (a.own.passed(now)) return true;
    for (const Seen& b : seen_) {
      if (&b != &a && b.group == a.group && b.answered && b.ok && b.end_seq < seq) return true;
    }
    return false;
  }
  void check_end();
  // The attempts as seen, for a failure's message.
  std::string state() const {
    std::ostringstream o;
    o << "at " << now_ticks(clock_) << " ns, " << completions_ << " completions, " << live_
      << " frames; caller " << (caller_started_ ? "started" : "not started") << ", cancel #"
      << caller_cancel_seq_ << "; breaker permitted " << breaker_->snapshot().permitted
      << " cancelled " << breaker_->snapshot().cancelled << ";";
    for (std::size_t k = 0; k < seen_.size(); ++k) {
      const Seen& a = seen_[k];
      o << " [" << k << " group " << a.group << " from " << a.body_start << " until "
        << a.own.ticks();
      if (a.answered)
        o << (a.ok ? " ok" : " failed") << (a.threw ? " threw" : "") << " #" << a.end_seq << " at "
          << a.ended;
      if (a.signalled) o << " cancelled #" << a.signal_seq << " at " << a.signal_time;
      o << "]";
    }
    return o.str();
  }

  const Scenario& s_;
  Chooser& chooser_;
  Clock clock_;
  std::optional<ManualTimerClock::Binding> bind_;
  std::vector<Seen> seen_;
  std::uint64_t seq_ = 0;  // events: attempts' ends, cancellations
  int live_ = 0;           // scripted calls' frames alive
  int completions_ = 0;
  bool caller_started_ = false;
  std::optional<Result> result_;
  std::uint64_t caller_cancel_seq_ = 0;
  bool cancel_while_running_ = false;  // an attempt's body had started and not ended
  std::optional<BasicCircuitBreaker<Clock>> breaker_;
  std::optional<BasicRetryBudget<Clock>> budget_;
  std::optional<BasicRetry<Clock, ManualSleeper>> retry_;
  std::uint64_t budget_before_ = 0;
  LatencyTracker latency_;
  std::string error_;
};

// An attempt's frame: counted while it lives.
struct Frame {
  explicit Frame(int& n) : live(n) { ++live; }
  ~Frame() { --live; }
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  int& live;
};

void Explore::signalled(std::size_t k) {
  Seen& a = seen_[k];
  if (a.signalled) return;  // terminal is emitted once; a second one would be harmless
  a.signalled = true;
  a.signal_seq = ++seq_;
  a.signal_time = now_ticks(clock_);
  if (a.answered) fail(cat("attempt ", k, " cancelled after it ended"));
  if (!cause_for_cancel(k, a.signal_seq, a.signal_time)) {
    fail(cat("attempt ", k, " cancelled at ", a.signal_time, " ns with no cause (its deadline ",
             a.own.ticks(), ")"));
  }
}

::asio::awaitable<Reply> Explore::call(const Ctx& c) {
  const std::size_t k = seen_.size();
  seen_.emplace_back();
  Frame frame(live_);
  const AttemptSpec spec = s_.attempts[std::min(k, s_.attempts.size() - 1)];
  {
    Seen& a = seen_[k];
    a.group = c.attempt();
    a.body_start = now_ticks(clock_);
    a.own = c.deadline();
  }
  auto ex = co_await ::asio::this_coro::executor;
  auto cs = co_await ::asio::this_coro::cancellation_state;
  if (cs.cancelled() != ::asio::cancellation_type::none) {
    // Cancelled between its launch and its first step: judged at the latest time.
    seen_[k].signal_before_start = true;
    signalled(k);
  }
  // Every cancellation the pipeline emits passes here first (and is recorded there and
  // then), then goes on to the operation waiting, unless the wait is deaf.
  // (Asio clears the coroutine's slot after every operation: hooked before each one.)
  ::asio::cancellation_signal forward;
  auto hook = [&] {
    cs.slot().assign([this, k, &forward](::asio::cancellation_type t) {
      signalled(k);
      forward.emit(t);
    });
  };
  auto end = [&](bool ok) {
    // A cancellation the hook did not see (none should be missed): recorded now.
    if (cs.cancelled() != ::asio::cancellation_type::none) signalled(k);
    Seen& a = seen_[k];
    if (a.answered) fail(cat("attempt ", k, " ended twice"));
    a.answered = true;
    a.ok = ok;
    a.end_seq = ++seq_;
    a.ended = now_ticks(clock_);
    a.value = cat("v", k);
    cs.slot().clear();
  };
  bool aborted_wait = false;
  try {
    for (int i = 0; i < spec.yields; ++i) {
      hook();
      co_await ::asio::post(ex,
                            ::asio::bind_cancellation_slot(forward.slot(), ::asio::use_awaitable));
    }
    if (spec.wait > Nanos::zero()) {
      bulwark::asio::Timer<Clock> t(ex);
      t.expires_after(spec.wait);
      hook();
      auto [ec] = co_await t.async_wait(
          ::asio::bind_cancellation_slot(spec.deaf ? ::asio::cancellation_slot() : forward.slot(),
                                         ::asio::experimental::as_tuple(::asio::use_awaitable)));
      aborted_wait = static_cast<bool>(ec);
    }
  } catch (...) {
    // An operation started after the cancellation throws, as Asio's do.
    seen_[k].threw = true;
    end(false);
    throw;
  }
  if (aborted_wait) {
    end(false);
    co_return aborted();
  }
  end(spec.ok);
  if (spec.ok) co_return seen_[k].value;
  co_return Unexpected(NetError{});
}

std::string Explore::go() {
  bind_.emplace(clock_);
  BreakerConfig bc;
  bc.name = "upstream";
  bc.consecutive_failures = 100;
  breaker_.emplace(bc, clock_);
  budget_.emplace(RetryBudgetConfig{.name = "upstream",
                                    .ratio = 0.1,
                                    .min_retries_per_second = s_.budget_tokens,
                                    .max_tokens = s_.budget_tokens},
                  clock_);
  retry_.emplace(RetryConfig{.name = "upstream",
                             .max_attempts = s_.max_attempts,
                             .backoff = Backoff::constant(s_.backoff)},
                 clock_, ManualSleeper(clock_), &*budget_);
  for (std::uint64_t i = 0; i < kLatencyPrefill; ++i) latency_.record(Nanos::zero());
  budget_before_ = budget_->snapshot().withdrawn;

  auto p = bulwark::asio::pipeline(bulwark::breaker(*breaker_), bulwark::retry(*retry_),
                                   bulwark::asio::hedge({.max_hedges = s_.max_hedges,
                                                         .delay = HedgeDelay::fixed(s_.hedge_delay),
                                                         .record_to = &latency_}),
                                   bulwark::timeout(s_.timeout));

  World world(clock_, chooser_);
  Lane& caller = world.add_lane();
  Lane& driver = world.add_lane();
  ::asio::cancellation_signal caller_signal;
  bool caller_done = false;
  bool driver_done = false;
  const Ctx ctx = s_.deadline > Nanos::zero()
                      ? Ctx(clock_, {}, Deadline::after(clock_, s_.deadline))
                      : Ctx(clock_);
  ::asio::co_spawn(
      caller.executor(),
      [&]() -> ::asio::awaitable<void> {
        std::optional<Result> got;
        caller_started_ = true;
        try {
          got.emplace(co_await p(ctx, [this](const Ctx& c) { return call(c); }));
        } catch (const std::exception& e) {
          fail(cat("the call threw: ", e.what()));
          caller_done = true;
          co_return;
        }
        Result r = std::move(*got);
        ++completions_;
        result_.emplace(std::move(r));
        caller_done = true;
      },
      ::asio::bind_cancellation_slot(caller_signal.slot(), ::asio::detached));
  ::asio::co_spawn(
      driver.executor(),
      [&]() -> ::asio::awaitable<void> {
        auto ex = co_await ::asio::this_coro::executor;
        bool cancelled = false;
        for (int i = 0; i < s_.driver_steps; ++i) {
          world.advance(s_.advances[chooser_.choose(s_.advances.size())]);
          if (s_.may_cancel && !cancelled && chooser_.choose(2) == 1) {
            cancelled = true;
            // Emitted on the caller's lane, as Asio requires, when that lane runs it.
            ::asio::post(caller.executor(), [&] {
              // A call in progress (Asio ends a coroutine cancelled before it first
              // ran without running it: not the pipeline's concern).
              if (caller_done || !caller_started_) return;
              caller_cancel_seq_ = ++seq_;
              for (const Seen& a : seen_) {
                if (!a.answered) cancel_while_running_ = true;
              }
              caller_signal.emit(::asio::cancellation_type::terminal);
            });
          }
          co_await ::asio::post(ex, ::asio::use_awaitable);
        }
        driver_done = true;
      },
      ::asio::detached);

  int idle = 0;
  while (error_.empty()) {
    if (world.step()) continue;
    if (caller_done && driver_done) break;
    // Nothing ready: time passes until every wait ends.
    if (++idle > 100) {
      fail("stuck: nothing ready and the call not finished");
      break;
    }
    world.advance(s_.timeout);
  }
  if (error_.empty()) {
    check_end();
    // Budget: every hedge and every retry started took one token. A hedge the pipeline
    // cut before its coroutine ran is started (paid for) but never calls: the calls
    // seen are a lower bound, max_hedges per group an upper one.
    std::uint64_t groups = 0;
    for (const Seen& a : seen_) groups = std::max<std::uint64_t>(groups, a.group);
    const std::uint64_t hedges = seen_.size() - groups;
    const auto b = budget_->snapshot();
    const std::uint64_t retries = retry_->snapshot().retries;
    if (!seen_.empty() && retries + 1 != groups) {
      fail(cat(retries, " retries noted for ", groups, " groups of attempts"));
    }
    const std::uint64_t withdrawn = b.withdrawn - budget_before_;
    if (withdrawn < hedges + retries || withdrawn > retries + (retries + 1) * s_.max_hedges) {
      fail(cat("budget: ", withdrawn, " tokens withdrawn for ", hedges, " hedges called and ",
               retries, " retries"));
    }
  }
  std::string error = error_.empty() ? "" : cat(error_, "\n  ", state());
  // Whatever is left (after a failure) dies with its lanes, before what it refers to.
  for (std::size_t i = 0; i < world.lanes(); ++i) world.destroy_lane(i);
  if (error.empty() && live_ != 0) error = cat(live_, " attempt frames left");
  return error;
}

void Explore::check_end() {
  if (completions_ != 1) return fail(cat("the call completed ", completions_, " times"));
  if (live_ != 0) return fail(cat(live_, " attempt frames alive at the end"));
  for (std::size_t k = 0; k < seen_.size(); ++k) {
    if (!seen_[k].answered) return fail(cat("attempt ", k, " never ended"));
  }
  const Result& r = *result_;
  const auto describe = [&] {
    return r ? cat("success ", *r)
             : cat(to_string(r.error().reason), r.error().timed_out ? " (timed out)" : "",
                   " after ", r.error().attempts, " attempts");
  };

  // Per group: at most max_hedges hedges.
  for (std::uint32_t g = 1; g <= s_.max_attempts; ++g) {
    const auto n =
        std::count_if(seen_.begin(), seen_.end(), [&](const Seen& a) { return a.group == g; });
    if (n > static_cast<long>(s_.max_hedges) + 1) fail(cat(n, " attempts in group ", g));
  }

  const auto winner = first_success();
  const auto snap = breaker_->snapshot();
  const std::uint64_t outcomes = snap.successes + snap.failures + snap.ignored + snap.cancelled;
  if (snap.permitted != 1 || outcomes != 1) {
    fail(cat("breaker: permitted ", snap.permitted, ", ", snap.successes, " successes, ",
             snap.failures, " failures, ", snap.cancelled, " cancelled; the call: ", describe()));
  }
  if (winner) {
    const Seen& w = seen_[*winner];
    if (!r) return fail(cat("attempt ", *winner, " succeeded, the call: ", describe()));
    if (*r != w.value)
      return fail(cat("the call answered ", *r, ", the first success was ", w.value));
    if (snap.successes != 1) fail("breaker: the success not recorded");
    // Attempts of its group that ended after the pipeline first reacted (its first
    // cancellation after the winner's end) were cancelled.
    std::uint64_t reacted = 0;
    for (const Seen& a : seen_) {
      if (a.group == w.group && a.signalled && a.signal_seq > w.end_seq &&
          (reacted == 0 || a.signal_seq < reacted)) {
        reacted = a.signal_seq;
      }
    }
    for (std::size_t k = 0; k < seen_.size(); ++k) {
      const Seen& a = seen_[k];
      if (k == *winner || a.group != w.group || a.end_seq < w.end_seq) continue;
      if (reacted != 0 && a.end_seq > reacted && !a.signalled) {
        fail(cat("attempt ", k, " ran on after the winner ", *winner, " and was not cancelled"));
      }
    }
    // The winner's own latency: from its launch (its deadline less the timeout, when
    // the timeout set it) to its end.
    if (latency_.count() != kLatencyPrefill + 1) {
      fail(cat("latency: ", latency_.count() - kLatencyPrefill, " samples for one success"));
    } else if (s_.deadline == Nanos::zero()) {
      const Ticks launched = w.own.ticks() - s_.timeout.count();
      const Nanos expected(w.ended - launched);
      if (latency_.percentile(1.0) != expected) {
        fail(cat("latency: recorded ", latency_.percentile(1.0).count(), " ns, the winner took ",
                 expected.count(), " ns"));
      }
    }
    return;
  }

  // No attempt succeeded.
  if (latency_.count() != kLatencyPrefill) fail("latency recorded for a call that failed");
  if (r) return fail(cat("the call succeeded (", *r, ") with no attempt that did"));
  const Failure<NetError>& f = r.error();
  if (snap.successes != 0) fail("breaker: a success for a failed call");
  if (f.reason == Reason::cancelled) {
    if (caller_cancel_seq_ == 0) fail("cancelled, and the caller did not cancel");
    if (snap.cancelled != 1) fail("breaker: a cancelled call recorded an outcome");
    return;
  }
  if (cancel_while_running_) {
    return fail(cat("the caller cancelled while an attempt ran, and the call ended ", describe()));
  }
  if (f.attempts == 0) {
    // Ended before its first attempt (the deadline had passed when the call ran): not
    // the dependency's doing, nothing recorded.
    if (snap.cancelled != 1 || !seen_.empty()) fail(cat("no attempt, yet ", describe()));
    return;
  }
  if (snap.failures != 1) fail(cat("breaker: ", snap.failures, " failures for a failed call"));
  // The attempt the pipeline judged: the last to end in the last group.
  const Seen* judged = nullptr;
  std::uint32_t last_group = 0;
  for (const Seen& a : seen_) last_group = std::max(last_group, a.group);
  for (const Seen& a : seen_) {
    if (a.group == last_group && (judged == nullptr || a.end_seq > judged->end_seq)) judged = &a;
  }
  if (judged == nullptr) return;  // no attempt ran (the deadline passed first)
  // A hedge cut before its coroutine ran (paid for, never called) may be the last to
  // end, and the one judged: the rules below hold for attempts seen.
  if (budget_->snapshot().withdrawn - budget_before_ >
      seen_.size() - last_group + retry_->snapshot().retries) {
    return;
  }
  const bool reported_timeout = f.timed_out || f.reason == Reason::timeout;
  if (reported_timeout && !judged->signalled) {
    fail(cat("a timeout reported for an attempt the pipeline never cancelled: ", describe()));
  }
  if (!judged->signalled && f.reason != Reason::deadline_exceeded && f.attempts == last_group) {
    // Its own answer: its own error.
    if (!f.error || f.error->code) fail(cat("the attempt's own error not reported: ", describe()));
  }
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  out.push_back({.name = "a slow primary, a hedge that answers at once, a caller that may cancel",
                 .max_hedges = 1,
                 .attempts = {{.wait = 50ms}, {}},
                 .advances = {0ms, 30ms, 100ms},
                 .driver_steps = 3,
                 .may_cancel = true});
  out.push_back({.name = "two hedges that fail, a primary that times out, one retry",
                 .max_hedges = 2,
                 .max_attempts = 2,
                 .attempts = {{.wait = 150ms},
                              {.yields = 1, .ok = false},
                              {.wait = 20ms, .ok = false},
                              {.yields = 1, .wait = 10ms}},
                 .advances = {0ms, 10ms, 30ms, 100ms},
                 .driver_steps = 4,
                 .may_cancel = true});
  out.push_back({.name = "attempts deaf to their cancellation outlive the timeout",
                 .max_hedges = 2,
                 .attempts = {{.wait = 150ms, .deaf = true},
                              {.wait = 120ms, .deaf = true, .ok = false},
                              {.yields = 1, .wait = 10ms}},
                 .advances = {0ms, 30ms, 100ms},
                 .driver_steps = 4,
                 .may_cancel = true});
  out.push_back({.name = "a request deadline before the timeout, two hedges",
                 .max_hedges = 2,
                 .deadline = 60ms,
                 .attempts = {{.wait = 200ms}, {.wait = 20ms, .ok = false}, {.yields = 2}},
                 .advances = {0ms, 30ms, 60ms},
                 .driver_steps = 3,
                 .may_cancel = true});
  out.push_back({.name = "a budget of one token for two hedges, retries",
                 .max_hedges = 2,
                 .max_attempts = 3,
                 .budget_tokens = 1,
                 .attempts = {{.wait = 100ms, .ok = false},
                              {.yields = 1, .wait = 40ms, .ok = false},
                              {.wait = 10ms}},
                 .advances = {0ms, 10ms, 30ms, 100ms},
                 .driver_steps = 4,
                 .may_cancel = false});
  return out;
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

// Picks the handler that became ready last.
class LastChooser final : public Chooser {
 public:
  std::size_t choose(std::size_t n) override { return n - 1; }
};

TEST(AsyncHedgeSchedule, AnAttemptCancelledBeforeItsCoroutineRanStillEndsTheGroup) {
  // On an executor whose dispatch does not run the handler inline, a launched attempt's
  // coroutine first runs later. When the pipeline cancelled it before then (here the
  // caller cancels first), Asio threw at the coroutine's first step: the attempt never
  // told its group it had ended, and the call waited for it for ever, holding its
  // breaker permit.
  Clock clock;
  ManualTimerClock::Binding bind(clock);
  LastChooser last;
  World world(clock, last);
  Lane& lane = world.add_lane();
  BreakerConfig bc;
  bc.name = "upstream";
  BasicCircuitBreaker<Clock> breaker(bc, clock);
  BasicRetryBudget<Clock> budget({.name = "upstream"}, clock);
  auto p = bulwark::asio::pipeline(
      bulwark::breaker(breaker),
      bulwark::asio::hedge({.max_hedges = 1, .delay = HedgeDelay::fixed(30ms)}, budget),
      bulwark::timeout(100ms));
  int bodies = 0;
  auto call = [&](const Ctx&) -> ::asio::awaitable<Reply> {
    ++bodies;
    co_return std::string("answer");
  };
  ::asio::cancellation_signal cancel;
  std::optional<Result> r;
  ::asio::co_spawn(
      lane.executor(),
      [&]() -> ::asio::awaitable<void> { r.emplace(co_await p(Ctx(clock), call)); },
      ::asio::bind_cancellation_slot(cancel.slot(), ::asio::detached));
  world.step();                        // the caller starts, launches the first attempt and waits
  ASSERT_EQ(lane.ready().size(), 1u);  // the attempt's first step, not yet run
  cancel.emit(::asio::cancellation_type::terminal);
  while (world.step()) {
  }
  ASSERT_TRUE(r.has_value()) << "the call still waits for an attempt that never ran";
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
  EXPECT_EQ(bodies, 0);  // cancelled before it ran: never called
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.permitted, 1u);
  EXPECT_EQ(s.cancelled, 1u);
  for (std::size_t i = 0; i < world.lanes(); ++i) world.destroy_lane(i);
}

TEST(AsyncHedgeSchedule, ACallerCancellationBesideADueHedgeTimerEndsTheCall) {
  // The group's wake-up timer expired (the hedge was due) and the caller cancelled
  // before the group ran: the group saw a wake-up without an error and did not look at
  // the caller's cancellation. It started the hedge (a token and a request spent for a
  // cancelled call) and went on until an attempt answered or timed out, reporting that.
  Clock clock;
  ManualTimerClock::Binding bind(clock);
  FifoChooser fifo;
  World world(clock, fifo);
  Lane& lane = world.add_lane();
  BreakerConfig bc;
  bc.name = "upstream";
  BasicCircuitBreaker<Clock> breaker(bc, clock);
  BasicRetryBudget<Clock> budget({.name = "upstream"}, clock);
  auto p = bulwark::asio::pipeline(
      bulwark::breaker(breaker),
      bulwark::asio::hedge({.max_hedges = 1, .delay = HedgeDelay::fixed(30ms)}, budget),
      bulwark::timeout(100ms));
  int calls = 0;
  int cancelled = 0;
  auto call = [&](const Ctx&) -> ::asio::awaitable<Reply> {
    ++calls;
    if (!co_await sleep_for(50ms)) {
      ++cancelled;
      co_return aborted();
    }
    co_return std::string("answer");
  };
  ::asio::cancellation_signal cancel;
  std::optional<Result> r;
  ::asio::co_spawn(
      lane.executor(),
      [&]() -> ::asio::awaitable<void> { r.emplace(co_await p(Ctx(clock), call)); },
      ::asio::bind_cancellation_slot(cancel.slot(), ::asio::detached));
  while (world.step()) {
  }
  ASSERT_EQ(calls, 1);
  world.advance(30ms);
  ASSERT_EQ(world.ready(), 1u);  // the group's wake-up, due, not yet run
  cancel.emit(::asio::cancellation_type::terminal);
  for (int i = 0; i < 1000 && !r; ++i) {
    if (!world.step()) world.advance(10ms);
  }
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(*r) << "answered " << **r;
  EXPECT_EQ(r->error().reason, Reason::cancelled) << to_string(r->error().reason);
  EXPECT_EQ(calls, 1);  // no hedge for a cancelled call
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(now_ticks(clock), to_ticks(30ms));  // at once
  EXPECT_EQ(budget.snapshot().withdrawn, 0u);
  EXPECT_EQ(breaker.snapshot().cancelled, 1u);
  EXPECT_EQ(breaker.snapshot().failures, 0u);
  for (std::size_t i = 0; i < world.lanes(); ++i) world.destroy_lane(i);
}

TEST(AsyncHedgeSchedule, SmallScenariosEveryOrder) {
  const auto all = scenarios();
  const std::size_t depth = env_or("BULWARK_DFS_DEPTH", 7);
  for (const Scenario& s : all) {
    DfsChooser dfs(depth);
    long schedules = 0;
    do {
      ++schedules;
      Explore run(s, dfs);
      const std::string error = run.go();
      ASSERT_EQ(error, "") << s.name << ", schedule " << schedules << " (path " << dfs.path()
                           << ")";
    } while (dfs.next() && schedules < 200'000);
    std::printf("%s: %ld schedules\n", s.name.c_str(), schedules);
    EXPECT_FALSE(dfs.nondeterministic()) << s.name;
  }
}

TEST(AsyncHedgeSchedule, EveryScenarioUnderSeededSchedules) {
  const std::uint64_t first = env_or("BULWARK_SCHEDULE_SEED", 1);
  const std::uint64_t count = env_or("BULWARK_SCHEDULES", 200);
  for (const Scenario& s : scenarios()) {
    for (std::uint64_t seed = first; seed < first + count; ++seed) {
      SeededChooser chooser(seed);
      Explore run(s, chooser);
      const std::string error = run.go();
      ASSERT_EQ(error, "") << s.name << ", BULWARK_SCHEDULE_SEED=" << seed
                           << " BULWARK_SCHEDULES=1";
    }
  }
}

}  // namespace
}  // namespace bulwark::testing
