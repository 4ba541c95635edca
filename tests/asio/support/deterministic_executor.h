// A deterministic executor for the asio tests: every handler posted to it waits in a
// ready list until the test picks it, and the test picks in an order a Chooser decides
// (a seeded PRNG, or every order in turn, depth-first), so an interleaving of
// coroutines is explored, not hoped for.
//
// A Lane is one execution context: an asio::io_context (its timers, its services: the
// bulkhead's waiter registry among them) plus a ReadyQueue service holding the handlers
// posted to the lane's executor. The io_context never runs a user handler: polling it
// only moves expired timers' completions onto the ready list (a timer's handler is
// dispatched to its associated executor, this one). Timers read a ManualClock through
// ManualTimerClock, so time moves only when the test moves it. Destroying a Lane is
// destroying an io_context: pending handlers are destroyed unrun.
//
// A World holds the lanes; step() runs one ready handler of any lane (any of them, not
// only the oldest: as on a multi-threaded io_context), chosen by its Chooser, and
// returns false when nothing is ready. Single-threaded: nothing here is thread-safe.
//
//   bulwark::testing::SeededChooser choose(seed);
//   bulwark::testing::World world(clock, choose);
//   auto& a = world.add_lane();
//   asio::co_spawn(a.executor(), body(), asio::detached);
//   while (world.step()) check_invariants();
//
// Choosers: SeededChooser (splitmix64, the same seed the same schedule), DfsChooser
// (every sequence of choices, depth-first, the first `depth` choices enumerated and
// later ones taken as 0; next() moves to the following schedule), FifoChooser (always
// the first option). A chooser also answers choose(n) asked by the test itself (say, at
// a schedule point: release now or not).

#ifndef BULWARK_TESTS_ASIO_SUPPORT_DETERMINISTIC_EXECUTOR_H_
#define BULWARK_TESTS_ASIO_SUPPORT_DETERMINISTIC_EXECUTOR_H_

#include <asio/execution.hpp>
#include <asio/execution_context.hpp>
#include <asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "asio/support/notice_time.h"
#include "bulwark/clock.h"

namespace bulwark::testing {

// Picks one of n options (n >= 1).
class Chooser {
 public:
  virtual ~Chooser() = default;
  virtual std::size_t choose(std::size_t n) = 0;
};

class FifoChooser final : public Chooser {
 public:
  std::size_t choose(std::size_t) override { return 0; }
};

class SeededChooser final : public Chooser {
 public:
  explicit SeededChooser(std::uint64_t seed) : state_(seed) {}
  std::size_t choose(std::size_t n) override {
    return n <= 1 ? 0 : static_cast<std::size_t>(next() % n);
  }

 private:
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

// Every sequence of choices, depth-first: run the scenario, call next(), run it again,
// until next() returns false. The first `depth` decisions with more than one option are
// enumerated; later ones take option 0 (a bound, as a preemption bound is).
class DfsChooser final : public Chooser {
 public:
  explicit DfsChooser(std::size_t depth) : depth_limit_(depth) {}

  std::size_t choose(std::size_t n) override {
    if (n <= 1) return 0;
    if (at_ >= depth_limit_) return 0;
    if (at_ == path_.size()) {
      path_.push_back({0, n});
    } else if (path_[at_].second != n) {
      nondeterministic_ = true;  // the same prefix offered different options
      path_[at_].second = n;
      path_[at_].first = std::min(path_[at_].first, n - 1);
    }
    return path_[at_++].first;
  }

  // The next schedule; false once every one has run.
  bool next() {
    path_.resize(at_);
    while (!path_.empty() && path_.back().first + 1 >= path_.back().second) path_.pop_back();
    if (path_.empty()) return false;
    ++path_.back().first;
    at_ = 0;
    return true;
  }

  // The choices of the schedule that ran last, to name it in a failure.
  std::string path() const {
    std::string s;
    for (std::size_t i = 0; i < at_ && i < path_.size(); ++i) {
      if (i > 0) s += ',';
      s += std::to_string(path_[i].first);
    }
    return s;
  }
  bool nondeterministic() const { return nondeterministic_; }

 private:
  std::size_t depth_limit_;
  std::size_t at_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> path_;  // {choice, options}
  bool nondeterministic_ = false;
};

// A handler waiting to run.
class Task {
 public:
  virtual ~Task() = default;
  virtual void run() = 0;
};

// The handlers posted to a lane's executor: a service of the lane's io_context, so
// that the io_context's destruction destroys them unrun (after its other services
// shut down: it is the oldest but the scheduler).
class ReadyQueue final : public ::asio::execution_context::service {
 public:
  static inline ::asio::execution_context::id id;
  explicit ReadyQueue(::asio::execution_context& ctx) : service(ctx) {}

  template <class F>
  void push(F&& f) {
    struct TaskFor final : Task {
      explicit TaskFor(F&& g) : fn(std::forward<F>(g)) {}
      void run() override { std::move(fn)(); }
      std::decay_t<F> fn;
    };
    auto task = std::make_unique<TaskFor>(std::forward<F>(f));
    if (shut_) return;  // destroyed here, unrun, as for a context that has shut down
    tasks_.push_back(std::move(task));
  }
  std::size_t size() const { return tasks_.size(); }
  std::unique_ptr<Task> take(std::size_t i) {
    auto t = std::move(tasks_[i]);
    tasks_.erase(tasks_.begin() + static_cast<std::ptrdiff_t>(i));
    return t;
  }

 private:
  void shutdown() override {
    shut_ = true;
    // Destroying a handler may post another (a permit handed to the next waiter).
    while (!tasks_.empty()) take(0).reset();
  }
  std::deque<std::unique_ptr<Task>> tasks_;
  bool shut_ = false;
};

class Lane;

// The executor of a Lane: posts (and dispatches: it never runs a handler inline) to its
// ready list. Satisfies Asio's executor concept and converts to any_io_executor.
class DeterministicExecutor {
 public:
  explicit DeterministicExecutor(Lane& lane) noexcept : lane_(&lane) {}

  ::asio::execution_context& query(::asio::execution::context_t) const noexcept;
  static constexpr ::asio::execution::blocking_t query(::asio::execution::blocking_t) noexcept {
    return ::asio::execution::blocking.never;
  }
  DeterministicExecutor require(::asio::execution::blocking_t::never_t) const noexcept {
    return *this;
  }
  template <class F>
  void execute(F&& f) const;

  Lane& lane() const noexcept { return *lane_; }
  friend bool operator==(const DeterministicExecutor& a, const DeterministicExecutor& b) noexcept {
    return a.lane_ == b.lane_;
  }
  friend bool operator!=(const DeterministicExecutor& a, const DeterministicExecutor& b) noexcept {
    return a.lane_ != b.lane_;
  }

 private:
  Lane* lane_;
};

class Lane {
 public:
  explicit Lane(int index) : index_(index), ready_(::asio::make_service<ReadyQueue>(io_)) {}
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  DeterministicExecutor executor() noexcept { return DeterministicExecutor(*this); }
  ::asio::io_context& io() noexcept { return io_; }
  ReadyQueue& ready() noexcept { return ready_; }
  int index() const noexcept { return index_; }

  // Moves the completions of expired timers onto the ready list; runs no user handler.
  void harvest() {
    // The reactor looks at its timers now, not when its timerfd next fires (up to 1 ms
    // of real time later: ManualTimerClock's cap), so what expired is seen at once.
    notice_time(io_);
    // Twice empty in a row: a timer that expired is seen on the reactor's next pass.
    for (int empty = 0; empty < 2;) {
      io_.restart();
      empty = io_.poll() == 0 ? empty + 1 : 0;
    }
  }

 private:
  int index_;
  ::asio::io_context io_{1};
  ReadyQueue& ready_;
};

inline ::asio::execution_context& DeterministicExecutor::query(
    ::asio::execution::context_t) const noexcept {
  return lane_->io();
}
template <class F>
void DeterministicExecutor::execute(F&& f) const {
  lane_->ready().push(std::forward<F>(f));
}

// The lanes of a test, and the choice of which ready handler runs next.
class World {
 public:
  World(ManualClock& clock, Chooser& chooser) : clock_(clock), chooser_(chooser) {}

  Lane& add_lane() {
    lanes_.push_back(std::make_unique<Lane>(static_cast<int>(lanes_.size())));
    return *lanes_.back();
  }
  Lane& lane(std::size_t i) { return *lanes_.at(i); }
  std::size_t lanes() const { return lanes_.size(); }
  // Destroys lane i's io_context (its pending handlers, unrun); the slot stays empty.
  void destroy_lane(std::size_t i) { lanes_.at(i).reset(); }
  bool alive(std::size_t i) const { return lanes_.at(i) != nullptr; }

  Chooser& chooser() { return chooser_; }
  ManualClock& clock() { return clock_; }

  // Ready handlers on every lane, after moving expired timers' completions there.
  std::size_t ready() {
    std::size_t n = 0;
    for (auto& l : lanes_) {
      if (l) {
        l->harvest();
        n += l->ready().size();
      }
    }
    return n;
  }

  // Runs one ready handler, picked by the chooser; false if none is ready. `ran_on` is
  // the lane it ran on.
  bool step() {
    const std::size_t n = ready();
    if (n == 0) return false;
    std::size_t pick = chooser_.choose(n);
    for (auto& l : lanes_) {
      if (!l) continue;
      if (pick < l->ready().size()) {
        running_ = l->index();
        auto task = l->ready().take(pick);
        task->run();
        task.reset();
        running_ = -1;
        return true;
      }
      pick -= l->ready().size();
    }
    return false;
  }

  // Runs the oldest ready handler of lane i only; false if it has none.
  bool step_lane(std::size_t i) {
    Lane& l = *lanes_.at(i);
    l.harvest();
    if (l.ready().size() == 0) return false;
    running_ = l.index();
    l.ready().take(0)->run();
    running_ = -1;
    return true;
  }

  // The lane whose handler is running, or -1 between steps.
  int running() const { return running_; }

  // Moves the virtual clock (timers that expire show up on the next step()).
  void advance(Nanos d) { clock_.advance(d); }

 private:
  ManualClock& clock_;
  Chooser& chooser_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  int running_ = -1;
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_ASIO_SUPPORT_DETERMINISTIC_EXECUTOR_H_
