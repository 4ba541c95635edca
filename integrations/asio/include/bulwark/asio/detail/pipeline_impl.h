// Internal: the definition of Pipeline::run_group (one attempt and its hedges, their
// timers and cancellation). Not part of the public API; bulwark/asio/pipeline.h includes
// it at its end (templates need their definitions visible).

#ifndef BULWARK_ASIO_DETAIL_PIPELINE_IMPL_H_
#define BULWARK_ASIO_DETAIL_PIPELINE_IMPL_H_

#include "bulwark/asio/pipeline.h"

namespace bulwark::asio {

template <class... S>
template <class Ex, class R, class C, class F>
::asio::awaitable<detail::AttemptEnd<R>, Ex> Pipeline<S...>::run_group(const BasicContext<C>& ctx,
                                                                       F& call,
                                                                       const AttemptInfo& info,
                                                                       BasicRetryBudget<C>* budget,
                                                                       bool per_attempt) const {
  using Ctx = BasicContext<C>;
  using detail::Cut;
  struct Child {
    std::optional<Ctx> ctx;
    ::asio::cancellation_signal signal;
    std::optional<R> result;
    std::exception_ptr error;
    Ticks started = 0;
    Ticks ended = 0;
    Deadline own;
    std::uint32_t order = 0;  // 1 for the group's first attempt to end, 2 for the next
    bool running = false;
    bool began = false;  // its coroutine has run (run_child started)
    bool seen = false;
    bool timed = false;   // its end time is read (its elapsed time is recorded)
    Cut cut = Cut::none;  // why the pipeline cancelled it, if it did
  };
  const Ex ex = co_await ::asio::this_coro::executor;
  const auto cs = co_await ::asio::this_coro::cancellation_state;
  // After a caller's cancellation the group still awaits its attempts' ends: Asio
  // would throw at each such co_await. The caller's setting is restored below.
  const bool throws = co_await ::asio::this_coro::throw_if_cancelled();
  co_await ::asio::this_coro::throw_if_cancelled(false);
  std::array<Child, kChildren> kids;
  // Made only when the group has to wait: an attempt that ends at once costs no timer.
  std::optional<Timer<C>> wake;
  // The attempt's elapsed time is recorded only by a per-attempt breaker or a hedge's
  // latency tracker; otherwise its end reads no clock.
  const bool timed = per_attempt || kHasHedge;
  std::size_t launched = 0;
  std::size_t running = 0;
  std::uint32_t ends = 0;

  auto start = [&](std::size_t i) {
    Child& c = kids[i];
    c.timed = timed;
    c.started = kHasTimeout || timed ? ctx.now() : 0;
    c.own = ctx.deadline();
    if constexpr (kHasTimeout) {
      const Nanos t = std::get<kTimeout>(stages_).timeout;
      c.own = earliest(c.own, Deadline::at(saturating_add(c.started, t.count())));
    }
    c.ctx.emplace(ctx.with_deadline(c.own).with_attempt(&info));
    c.running = true;
    ++running;
    ++launched;
    // co_spawn dispatches: an attempt whose call does not suspend has ended when this
    // returns. The completion handler itself refers to nothing here.
    ::asio::co_spawn(ex, run_child<Ex, R>(c, running, ends, wake, ctx, call),
                     ::asio::bind_cancellation_slot(c.signal.slot(), ::asio::detached));
  };
  auto cancel = [&](Child& c, Cut why) {
    if (!c.running || c.cut != Cut::none) return;
    c.cut = why;
    // An attempt whose coroutine has not run yet (an executor whose dispatch defers
    // it) is not signalled: Asio would throw at its first step, before run_child
    // could tell the group it ended. It sees its cut when it runs, and ends there.
    if (c.began) c.signal.emit(::asio::cancellation_type::terminal);
  };
  auto unseen_end = [&] {
    for (std::size_t i = 0; i < launched; ++i) {
      if (!kids[i].running && !kids[i].seen) return true;
    }
    return false;
  };

  start(0);
  [[maybe_unused]] std::size_t max_children = 1;
  [[maybe_unused]] Ticks next_hedge = kTicksMax;
  if constexpr (kHasHedge) {
    const auto& h = std::get<kHedge>(stages_);
    max_children = 1 + h.config.max_hedges;
    next_hedge = saturating_add(kids[0].started, h.config.delay.now().count());
  }
  std::optional<std::size_t> winner;
  std::optional<std::size_t> last_failed;
  bool thrown = false;  // an attempt threw on its own: the group ends, the exception goes on
  bool caller_cancelled = false;
  for (;;) {
    // The attempts that ended, in the order they ended. The first success wins; an
    // exception an attempt threw on its own ends the group; after either, what the
    // others answer does not matter. Otherwise the last failure is the group's.
    for (;;) {
      Child* next = nullptr;
      std::size_t at = 0;
      for (std::size_t i = 0; i < launched; ++i) {
        Child& c = kids[i];
        if (c.running || c.seen || (next != nullptr && next->order < c.order)) continue;
        next = &c;
        at = i;
      }
      if (next == nullptr) break;
      next->seen = true;
      if (winner || thrown) continue;
      if (next->result && *next->result) {
        winner = at;
      } else {
        last_failed = at;
        if (next->error && next->cut == Cut::none) thrown = true;
      }
    }
    for (std::size_t i = 0; i < launched; ++i) {
      if (winner || thrown) cancel(kids[i], Cut::lost);
      if (caller_cancelled) cancel(kids[i], Cut::caller);
    }
    if (running == 0) break;  // every attempt started so far has ended
    const Ticks now = ctx.now();
    Ticks wake_at = kTicksMax;
    for (std::size_t i = 0; i < launched; ++i) {
      Child& c = kids[i];
      if (!c.running || c.cut != Cut::none) continue;
      if (c.own.passed(now)) {
        // Timed out: the pipeline cancels it, and only that makes it a timeout.
        cancel(c, c.own < ctx.deadline() ? Cut::timeout : Cut::deadline);
      } else if (!c.own.is_never()) {
        wake_at = std::min(wake_at, c.own.ticks());
      }
    }
    if constexpr (kHasHedge) {
      if (!winner && !thrown && !caller_cancelled && launched < max_children) {
        if (now >= next_hedge && !ctx.deadline().passed(now)) {
          bool paid = true;
          if (budget != nullptr) {
            auto granted = budget->try_withdraw();
            if (granted) {
              granted->commit();
            } else {
              paid = false;
            }
          }
          if (paid) {
            start(launched);
            next_hedge = saturating_add(now, std::get<kHedge>(stages_).config.delay.now().count());
          } else {
            max_children = launched;  // the budget said no: no more hedges in this group
          }
        }
        if (launched < max_children) wake_at = std::min(wake_at, next_hedge);
      }
    }
    // An attempt that ended since the look above (a hedge whose call answered at
    // once, a call that ended as it was cancelled) is looked at before any wait.
    if (unseen_end()) continue;
    if (!wake) wake.emplace(ex);
    expire_at<C>(*wake, Deadline::at(wake_at));
    (void)co_await wake->async_wait(::asio::experimental::as_tuple(::asio::use_awaitable_t<Ex>()));
    // The caller's cancellation, whatever woke the group (not only an aborted wait): it
    // may have come while the timer's own expiry was already on its way.
    if (detail::cancelled(cs)) caller_cancelled = true;
  }

  co_await ::asio::this_coro::throw_if_cancelled(throws);
  detail::AttemptEnd<R> end;
  if (caller_cancelled && !winner) {
    end.caller_cancelled = true;
    co_return end;
  }
  const std::size_t pick = winner ? *winner : *last_failed;
  Child& c = kids[pick];
  end.elapsed = Nanos(std::max<Ticks>(0, c.ended - c.started));  // the winner's own
  if (winner) {
    end.result = std::move(c.result);
    co_return end;
  }
  if (thrown) {
    end.error = c.error;
    co_return end;
  }
  end.result = std::move(c.result);  // an error, or nothing if the aborted call threw
  // Its own answer unless the pipeline cancelled it: an answer that arrived after the
  // attempt's deadline but before the cancellation was emitted is judged as it is.
  end.timed_out = c.cut == Cut::timeout;
  end.deadline_cut = c.cut == Cut::deadline;
  co_return end;
}

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_DETAIL_PIPELINE_IMPL_H_
