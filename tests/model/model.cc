#include "model.h"

#include <algorithm>
#include <bit>
#include <sstream>

namespace bulwark::model {
namespace {

constexpr std::uint32_t kGenMask = (1u << 19) - 1;  // generations wrap at 2^19
constexpr std::uint32_t kReopenMax = 31;            // reopens saturate
constexpr std::uint32_t kCountMax = 65535;          // consecutive failures saturate
constexpr std::uint32_t kSuccessMax = 8191;         // probe successes saturate

bool recording(State s) { return s == State::closed || s == State::metrics_only; }
bool opened_state(State s) { return s == State::open || s == State::forced_open; }

std::string ns(Ticks t) {
  if (t != 0 && t % 1'000'000 == 0) return std::to_string(t / 1'000'000) + "ms";
  return std::to_string(t) + "ns";
}

}  // namespace

std::string describe(const Config& c) {
  std::ostringstream o;
  o << "{window="
    << (c.window == Window::none    ? "none"
        : c.window == Window::count ? "count"
                                    : "time")
    << " consecutive_failures=" << c.consecutive_failures;
  if (c.failure_rate) o << " failure_rate=" << *c.failure_rate;
  if (c.slow_call_rate) o << " slow_call_rate=" << *c.slow_call_rate;
  if (c.slow_call_duration) o << " slow_call_duration=" << ns(c.slow_call_duration);
  if (c.count_in_flight_slow_calls) o << " count_in_flight_slow_calls";
  if (c.window != Window::none) o << " minimum_calls=" << c.minimum_calls;
  if (c.window == Window::count) o << " window_size=" << c.window_size;
  if (c.window == Window::time)
    o << " window_length=" << ns(c.window_length) << " window_buckets=" << c.window_buckets;
  o << " open_duration=" << ns(c.open_duration);
  if (c.open_duration_multiplier != 1.0)
    o << " multiplier=" << c.open_duration_multiplier << " max_open=" << ns(c.max_open_duration);
  if (c.half_open_max_calls) o << " half_open_max_calls=" << *c.half_open_max_calls;
  o << " half_open_successes=" << c.half_open_successes;
  if (c.half_open_fraction) o << " half_open_fraction=" << *c.half_open_fraction;
  if (!c.half_open_ramp.empty()) {
    o << " ramp=[";
    for (double f : c.half_open_ramp) o << f << ' ';
    o << ']';
  }
  o << " half_open_max_wait=" << ns(c.half_open_max_wait)
    << " flapping_period=" << ns(c.flapping_period) << '}';
  return o.str();
}

Breaker::Breaker(Config config, Ticks now) : c_(std::move(config)), since_(now) {
  newest_bucket_ = bucket_of(now);
}

Ticks Breaker::open_period(std::uint32_t reopens) const {
  // base * multiplier^(r-1), capped at max_open_duration (open_duration if unset).
  const long double base = static_cast<long double>(c_.open_duration);
  const long double cap =
      static_cast<long double>(c_.max_open_duration == 0 ? c_.open_duration : c_.max_open_duration);
  long double period = base;
  for (std::uint32_t r = 1; r < std::max(reopens, 1u); ++r)
    period = std::min(period * static_cast<long double>(c_.open_duration_multiplier), cap);
  return static_cast<Ticks>(std::min(period, cap));
}

std::uint32_t Breaker::max_probes() const {
  return c_.half_open_max_calls.value_or(c_.half_open_fraction ? 65535u : c_.half_open_successes);
}

double Breaker::stage_fraction(std::uint32_t s) const {
  return s == 0 ? *c_.half_open_fraction : c_.half_open_ramp[s - 1];
}

std::uint64_t Breaker::bucket_of(Ticks t) const {
  if (c_.window != Window::time) return 0;
  const Ticks width = c_.window_length / c_.window_buckets;
  return static_cast<std::uint64_t>(std::max<Ticks>(0, t)) / static_cast<std::uint64_t>(width);
}

Counts Breaker::window_counts(Ticks now) const {
  Counts k;
  // Time window: the buckets (at - buckets, newest], at = now's bucket (or the newest, if
  // the clock stepped back). Count window: every sample kept (the last window_size).
  const std::uint64_t at = std::max(bucket_of(now), newest_bucket_);
  for (const Sample& s : window_) {
    if (c_.window == Window::time && s.bucket + c_.window_buckets <= at) continue;
    ++k.calls;
    if (s.failure) ++k.failures;
    if (s.slow) ++(s.failure ? k.slow_failures : k.slow_successes);
  }
  return k;
}

unsigned Breaker::epoch_shift() const {
  return static_cast<unsigned>(
      std::bit_width(static_cast<std::uint64_t>(std::max<Ticks>(2, c_.slow_call_duration)) - 1));
}

std::uint64_t Breaker::in_flight_slow(Ticks now) const {
  if (!tracks_in_flight()) return 0;
  const unsigned shift = epoch_shift();
  const std::uint64_t epoch_now = static_cast<std::uint64_t>(std::max<Ticks>(0, now)) >> shift;
  std::uint64_t n = 0;
  for (const InFlightCall& call : in_flight_) {
    if (call.ancient) {
      ++n;
    } else if (call.epoch <= epoch_now &&
               static_cast<Ticks>((call.epoch + 1) << shift) <= now - c_.slow_call_duration) {
      ++n;  // the whole epoch is older than slow_call_duration (an epoch ahead: not slow)
    }
  }
  return n;
}

Ticks Breaker::admit_in_flight(Ticks now, std::uint64_t& id) {
  const unsigned shift = epoch_shift();
  std::uint64_t e = static_cast<std::uint64_t>(std::max<Ticks>(0, now)) >> shift;
  // Calls of `epoch` counted in slot `index` (a slot holds the calls of its parity).
  auto calls_in = [&](std::uint64_t index, std::uint64_t epoch) {
    return std::any_of(in_flight_.begin(), in_flight_.end(), [&](const InFlightCall& c) {
      return !c.ancient && c.epoch == epoch && (c.epoch & 1) == index;
    });
  };

  // The epoch's own slot takes it if it holds that epoch; else a newer epoch (at most
  // 1024 ahead) that still holds calls takes it: a clock that stepped back is no time
  // passing.
  const std::uint64_t epoch_now = e;
  for (bool moved = true; moved && slot_epoch_[e & 1] != e;) {
    moved = false;
    for (std::uint64_t parity : {1u, 0u}) {
      const std::uint64_t index = (e + parity) & 1;
      const auto& other = slot_epoch_[index];
      if (other && *other > e && *other - e <= 1024 &&
          (calls_in(index, *other) || epoch_now >= *other)) {
        e = *other;
        moved = true;
        break;
      }
    }
  }
  bool new_epoch = false;
  auto& slot = slot_epoch_[e & 1];
  if (!slot || *slot != e) {
    // The first admission of this epoch in its slot: the slot's older calls are
    // ancient (slow) from now on, and the rates are evaluated.
    for (InFlightCall& c : in_flight_)
      if (slot && !c.ancient && c.epoch == *slot && (c.epoch & 1) == (e & 1)) c.ancient = true;
    slot = e;
    new_epoch = true;
  }
  id = next_call_++;
  in_flight_.push_back(InFlightCall{id, e, false});
  const Ticks start = std::max(now, static_cast<Ticks>(e << shift));
  if (new_epoch) evaluate(start);
  return start;
}

void Breaker::evaluate(Ticks now) {
  if (!windowed() || state_ != State::closed) return;
  std::optional<double> fr, sr;
  rates(now, fr, sr);
  if (fr && c_.failure_rate && *fr >= *c_.failure_rate) {
    enter(State::open, trip_reopens(now), TransitionReason::failure_rate, now, true);
  } else if (sr && c_.slow_call_rate && *sr >= *c_.slow_call_rate) {
    enter(State::open, trip_reopens(now), TransitionReason::slow_call_rate, now, true);
  }
}

void Breaker::rates(Ticks now, std::optional<double>& fr, std::optional<double>& sr) const {
  Counts k = window_counts(now);
  k.in_flight_slow = in_flight_slow(now);
  k.calls += k.in_flight_slow;  // the volume and the rates count them as calls
  const std::uint64_t minimum =
      c_.window == Window::count ? std::min(c_.minimum_calls, c_.window_size) : c_.minimum_calls;
  if (k.calls == 0 || k.calls < minimum) return;
  fr = static_cast<double>(k.failures) / static_cast<double>(k.calls);
  sr = static_cast<double>(k.slow_successes + k.slow_failures + k.in_flight_slow) /
       static_cast<double>(k.calls);
}

bool Breaker::flapping_trip(Ticks now) const {
  return c_.flapping_period > 0 && reopens_ > 0 && now - since_ < c_.flapping_period;
}

std::uint32_t Breaker::trip_reopens(Ticks now) const {
  return flapping_trip(now) ? std::min(reopens_ + 1, kReopenMax) : 1;
}

void Breaker::enter(State to, std::uint32_t reopens, TransitionReason reason, Ticks now,
                    bool automatic_trip, bool carry_round) {
  const State from = state_;
  const bool opened = opened_state(to) && !opened_state(from);
  // Flapping: set by an automatic trip that came within flapping_period of a recovery;
  // over once the breaker stayed closed that long, or after a reset.
  if (from == State::closed && c_.flapping_period > 0 && now - since_ >= c_.flapping_period)
    flapping_ = false;
  if (automatic_trip) flapping_ = reopens > 1;
  if (to == State::closed && reason == TransitionReason::manual) flapping_ = false;
  state_ = to;
  gen_ = (gen_ + 1) & kGenMask;
  reopens_ = std::min(reopens, kReopenMax);
  consecutive_ = 0;
  since_ = now;
  if (!carry_round) {
    probes_ = probe_successes_ = stage_ = 0;
    tally_completed_ = tally_failures_ = tally_slow_ = 0;
  }
  in_flight_.clear();
  slot_epoch_[0] = slot_epoch_[1] = 0;  // each slot starts a phase parked at epoch 0
  if (recording(to)) {
    window_.clear();
    newest_bucket_ = bucket_of(now);
  }
  if (opened) ++opens_;
  if (from != to) {
    events.push_back(Event{from, to, reason, now, gen_,
                           opened && flapping_ && reason != TransitionReason::manual,
                           to == State::open ? open_period(reopens_) : 0});
  }
}

Decision Breaker::acquire(Ticks now) {
  Decision d;
  auto admit = [&](Ticks start) {
    d.admitted = true;
    d.permit = Permit{gen_, state_, stage_, start, 0};
    return d;
  };
  auto reject = [&](RejectReason r, Ticks retry_after) {
    ++rejected_;
    d.reason = r;
    d.retry_after = retry_after;
    return d;
  };
  const bool timed = windowed() && c_.slow_call_duration > 0;
  const Ticks elapsed = std::max<Ticks>(0, now - since_);  // a clock stepping back: no time
  switch (state_) {
    case State::closed:
    case State::metrics_only: {
      if (!timed) return admit(0);
      if (!tracks_in_flight()) return admit(now);
      const Permit admitted_in{gen_, state_, stage_, 0, 0};
      std::uint64_t id = 0;
      const Ticks start = admit_in_flight(now, id);  // may trip: the call is still admitted
      d.admitted = true;
      d.permit = admitted_in;
      d.permit.start = start;
      d.permit.call = id;
      return d;
    }
    case State::disabled:
      return admit(0);
    case State::forced_open:
      return reject(RejectReason::forced_open, kTicksMax);
    case State::open: {
      const Ticks period = open_period(reopens_);
      const Ticks until = saturating_add(since_, period);
      if (elapsed < period || until == kTicksMax)
        return reject(RejectReason::open, period - std::min(elapsed, period));
      enter(State::half_open, reopens_, TransitionReason::open_period_elapsed, now, false);
      probes_ = 1;
      return admit(timed ? now : 0);
    }
    case State::half_open: {
      const Ticks wait = c_.half_open_max_wait;
      const Ticks retry = wait <= 0 ? open_period(reopens_) : std::max<Ticks>(0, wait - elapsed);
      if (c_.half_open_fraction) {
        const double draw = c_.random();
        if (draw >= stage_fraction(stage_)) return reject(RejectReason::half_open_throttled, retry);
      }
      if (probes_ < max_probes()) {
        ++probes_;
        return admit(timed ? now : 0);
      }
      if (wait <= 0 || elapsed < wait) return reject(RejectReason::half_open_full, retry);
      // A fresh round: the successes, stage and tally earned so far carry over.
      enter(State::half_open, reopens_, TransitionReason::open_period_elapsed, now, false, true);
      probes_ = 1;
      return admit(timed ? now : 0);
    }
  }
  return d;
}

void Breaker::closed_outcome(bool failure, bool slow, Ticks now) {
  if (windowed()) {
    const std::uint64_t b = std::max(bucket_of(now), newest_bucket_);
    newest_bucket_ = b;
    window_.push_back(Sample{failure, slow, b});
    if (c_.window == Window::count && window_.size() > c_.window_size)
      window_.erase(window_.begin());
  }
  if (!failure) {
    consecutive_ = 0;
  } else {
    consecutive_ = std::min(consecutive_ + 1, kCountMax);
    if (state_ == State::closed && c_.consecutive_failures != 0 &&
        consecutive_ >= c_.consecutive_failures) {
      enter(State::open, trip_reopens(now), TransitionReason::consecutive_failures, now, true);
      return;
    }
  }
  if (!windowed() || state_ != State::closed) return;
  evaluate(now);
}

void Breaker::probe_outcome(const Permit& p, Resolution r, bool slow, Ticks now) {
  if (p.gen != gen_) return;  // that round is over: frees nothing, counts nowhere
  probes_ = probes_ > 0 ? probes_ - 1 : 0;
  const bool counted = r == Resolution::success || r == Resolution::failure;
  const bool this_stage = p.stage == stage_;
  enum { undecided, pass, reopen } j = undecided;
  if (counted && by_rate()) {
    if (this_stage) {
      ++tally_completed_;
      if (r == Resolution::failure) ++tally_failures_;
      if (slow) ++tally_slow_;
      const std::uint32_t n = c_.half_open_successes;
      const std::uint32_t rest = tally_completed_ < n ? n - tally_completed_ : 0;
      auto reaches = [n](const std::optional<double>& rate, std::uint32_t count) {
        return rate && static_cast<double>(count) / static_cast<double>(n) >= *rate;
      };
      if (reaches(c_.failure_rate, tally_failures_) || reaches(c_.slow_call_rate, tally_slow_)) {
        j = reopen;
      } else if (!reaches(c_.failure_rate, tally_failures_ + rest) &&
                 !reaches(c_.slow_call_rate, tally_slow_ + rest)) {
        j = pass;
      }
    }
  } else if (r == Resolution::failure) {
    j = reopen;  // without a rate rule any probe failure of the round reopens
  }
  if (j == reopen) {
    enter(State::open, std::min(reopens_ + 1, kReopenMax), TransitionReason::probe_failed, now,
          false);
    return;
  }
  if (!this_stage) return;
  bool passed = by_rate() && j == pass;
  if (r == Resolution::success) {
    probe_successes_ = std::min(probe_successes_ + 1, kSuccessMax);
    if (!by_rate()) passed = probe_successes_ >= c_.half_open_successes;
  }
  if (!passed) return;
  if (c_.half_open_fraction && stage_ < last_stage()) {
    ++stage_;
    probe_successes_ = 0;
    tally_completed_ = tally_failures_ = tally_slow_ = 0;
  } else {
    enter(State::closed, reopens_, TransitionReason::probes_succeeded, now, false);
  }
}

void Breaker::resolve(const Permit& p, Resolution r, Ticks duration, Ticks now) {
  switch (r) {
    case Resolution::success:
      ++successes_;
      break;
    case Resolution::failure:
      ++failures_;
      break;
    case Resolution::ignored:
      ++ignored_;
      break;
    case Resolution::cancelled:
      ++cancelled_;
      break;
  }
  if (p.state == State::disabled) return;  // records nothing
  const bool counted = r == Resolution::success || r == Resolution::failure;
  const bool timed = windowed() && c_.slow_call_duration > 0;
  const Ticks took = duration > 0 ? duration : (timed ? std::max<Ticks>(0, now - p.start) : 0);
  const bool slow = timed && counted && took > c_.slow_call_duration;
  if (recording(p.state)) {
    if (p.call != 0 && p.gen == gen_)
      std::erase_if(in_flight_, [&](const InFlightCall& c) { return c.id == p.call; });
    if (counted && p.gen == gen_) closed_outcome(r == Resolution::failure, slow, now);
  } else if (p.state == State::half_open) {
    probe_outcome(p, r, slow, now);
  }
}

void Breaker::reset(Ticks now) { enter(State::closed, 0, TransitionReason::manual, now, false); }

bool Breaker::transition_to(State target, Ticks now) {
  const State from = state_;
  if (target == State::half_open && from != State::open && from != State::forced_open &&
      from != State::half_open)
    return false;
  if (target == State::closed) {
    reset(now);
    return true;
  }
  if (from == target) return true;
  std::uint32_t r = 0;
  switch (target) {
    case State::open:
      r = (from == State::half_open || from == State::forced_open) ? std::max(reopens_, 1u) : 1;
      break;
    case State::half_open:
      r = std::max(reopens_, 1u);
      break;
    case State::forced_open:
      r = (from == State::open || from == State::half_open) ? reopens_ : 0;
      break;
    default:
      r = 0;
      break;
  }
  enter(target, r, TransitionReason::manual, now, false);
  return true;
}

Snapshot Breaker::snapshot(Ticks now) const {
  Snapshot s{};
  s.state = state_;
  s.time_in_state = std::max<Ticks>(0, now - since_);
  s.consecutive_failures = recording(state_) ? consecutive_ : 0;
  switch (state_) {
    case State::open:
      s.open_duration = open_period(reopens_);
      break;
    case State::half_open:
      s.open_duration = open_period(std::min(reopens_ + 1, kReopenMax));
      break;
    case State::closed:
      s.open_duration = open_period(flapping_trip(now) ? std::min(reopens_ + 1, kReopenMax) : 1);
      break;
    case State::forced_open:
      // The next opening is a transition_to(open), which keeps the growth reached.
      s.open_duration = open_period(std::max(reopens_, 1u));
      break;
    default:
      s.open_duration = open_period(1);
      break;
  }
  s.reopens = (state_ == State::open || state_ == State::half_open) ? reopens_ : 0;
  s.half_open_in_flight = state_ == State::half_open ? probes_ : 0;
  s.half_open_successes = state_ == State::half_open ? probe_successes_ : 0;
  s.generation = gen_;
  s.successes = successes_, s.failures = failures_, s.ignored = ignored_;
  s.cancelled = cancelled_, s.rejected = rejected_, s.opens = opens_;
  s.permitted = successes_ + failures_ + ignored_ + cancelled_;
  s.flapping = flapping_ && !(state_ == State::closed && c_.flapping_period > 0 &&
                              s.time_in_state >= c_.flapping_period);
  if (windowed() && recording(state_)) {
    s.window = window_counts(now);
    s.window->in_flight_slow = in_flight_slow(now);
    rates(now, s.failure_rate, s.slow_call_rate);
  }
  return s;
}

}  // namespace bulwark::model
