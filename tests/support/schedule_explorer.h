// A deterministic schedule explorer for the library's lock-free code.
//
// The library marks the places between its loads and CASes with BULWARK_SCHEDULE_POINT
// (bulwark/detail/schedule_point.h); a test that defines BULWARK_TEST_SCHEDULE_POINTS
// before including any bulwark header turns each into a call to schedule_point(), which
// this header defines. Threads::run() then executes a few real threads one at a time
// (the same workers from schedule to schedule; run() is the one-off form): only the
// thread holding the baton runs, and at every point it reaches a Strategy picks which
// thread takes the baton next. The code between two points runs alone, so a schedule is
// a sequence of choices, and the same choices replay the same execution exactly (where
// compare_exchange_weak fails only on a different value, as on x86-64; elsewhere a
// spurious failure adds a point, which Dfs reports as nondeterminism).
//
// Strategies:
//  - Dfs: every schedule, depth-first, with at most `max_preemptions` switches away
//    from a thread that could have gone on (a preemption bound: most concurrency bugs
//    need one to three); next() moves to the following schedule.
//  - Seeded: at every point, a thread picked by a seeded PRNG; the same seed gives the
//    same schedule.
//  - Script: a schedule written by hand, or printed by Trace::script() from a failing
//    run: "thread 0 runs until its 2nd 'time.add: between the words', then thread 1 to
//    its end, ...". A regression test replays the interleaving that broke something,
//    and Script::matched() tells it that the schedule still happens as written.
//
// The threads must not wait for each other (only the baton holder runs): this is for
// lock-free code. Include this header in one translation unit of a test binary (it
// defines bulwark::detail::schedule_point), and do not link code of the library built
// without the macro that uses the same inline functions.

#ifndef BULWARK_TESTS_SUPPORT_SCHEDULE_EXPLORER_H_
#define BULWARK_TESTS_SUPPORT_SCHEDULE_EXPLORER_H_

#ifndef BULWARK_TEST_SCHEDULE_POINTS
#error "define BULWARK_TEST_SCHEDULE_POINTS before including any bulwark header"
#endif

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bulwark/detail/schedule_point.h"

namespace bulwark::test {

// One step of a schedule: `thread` runs until it reaches `point` for the `nth` time
// (counted from the start of this step), or to its end if `point` is empty.
struct ScriptStep {
  int thread = 0;
  std::string point;
  int nth = 1;
};

// What one run did: every point reached, in order, by which thread ("" = its end).
struct Trace {
  std::vector<std::pair<int, std::string>> steps;

  // The schedule as the steps a Script replays: one per stretch of one thread.
  std::vector<ScriptStep> script() const {
    std::vector<ScriptStep> out;
    for (std::size_t i = 0; i < steps.size();) {
      std::size_t j = i;
      while (j + 1 < steps.size() && steps[j + 1].first == steps[i].first) ++j;
      const std::string& last = steps[j].second;
      const auto nth = std::count_if(steps.begin() + static_cast<std::ptrdiff_t>(i),
                                     steps.begin() + static_cast<std::ptrdiff_t>(j) + 1,
                                     [&](const auto& s) { return s.second == last; });
      out.push_back({steps[i].first, last, static_cast<int>(nth)});
      i = j + 1;
    }
    return out;
  }

  // The script as C++ source, to paste into a regression test.
  std::string text() const {
    std::ostringstream o;
    o << "{";
    const auto s = script();
    for (std::size_t i = 0; i < s.size(); ++i) {
      o << (i ? ",\n " : "") << "{" << s[i].thread << ", \"" << s[i].point << "\", " << s[i].nth
        << "}";
    }
    o << "}";
    return o.str();
  }
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Called at every point with the thread that reached it (`point` non-null), when a
  // thread ended (`current` is that thread, `point` null), and at the start (`current`
  // -1). `live`: the threads that have not ended, in increasing order, never empty.
  // Returns one of them.
  virtual int pick(int current, const char* point, const std::vector<int>& live) = 0;
  // Called when `thread` ends, before pick().
  virtual void finished(int /*thread*/) {}
};

// Every schedule with at most `max_preemptions` preemptions, depth-first.
class Dfs final : public Strategy {
 public:
  explicit Dfs(int max_preemptions) : max_(max_preemptions) {}

  int pick(int current, const char*, const std::vector<int>& live) override {
    const bool running = std::find(live.begin(), live.end(), current) != live.end();
    std::vector<int> options;
    if (running) options.push_back(current);  // going on first: fewest preemptions first
    if (!running || preemptions_ < max_) {
      for (int t : live)
        if (t != current) options.push_back(t);
    }
    if (options.size() == 1) return options[0];
    if (depth_ == path_.size()) {
      path_.push_back({0, options.size()});
    } else if (path_[depth_].second != options.size()) {
      nondeterministic_ = true;  // the same choices led somewhere else
    }
    const int chosen = options[std::min(path_[depth_].first, options.size() - 1)];
    ++depth_;
    if (running && chosen != current) ++preemptions_;
    return chosen;
  }

  // Moves to the next schedule; false once every one has run.
  bool next() {
    path_.resize(depth_);
    while (!path_.empty() && path_.back().first + 1 >= path_.back().second) path_.pop_back();
    if (path_.empty()) return false;
    ++path_.back().first;
    depth_ = 0, preemptions_ = 0;
    return true;
  }

  // True if a replayed prefix ever offered different choices (the code under test is
  // not deterministic between points: the exploration would be incomplete).
  bool nondeterministic() const { return nondeterministic_; }

 private:
  int max_;
  int preemptions_ = 0;
  std::size_t depth_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> path_;  // {choice, options} per decision
  bool nondeterministic_ = false;
};

// At every point, a live thread picked by a PRNG seeded with `seed`.
class Seeded final : public Strategy {
 public:
  explicit Seeded(std::uint64_t seed) : state_(seed) {}
  int pick(int, const char*, const std::vector<int>& live) override {
    return live[static_cast<std::size_t>(next() % live.size())];
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

// The schedule `steps`; once they are done, the live thread with the lowest id runs.
class Script final : public Strategy {
 public:
  explicit Script(std::vector<ScriptStep> steps) : steps_(std::move(steps)) {}

  int pick(int current, const char* point, const std::vector<int>& live) override {
    if (point && step_ < steps_.size() && steps_[step_].thread == current) {
      const ScriptStep& s = steps_[step_];
      if (s.point != point || ++seen_ < s.nth) return current;
      ++step_, seen_ = 0;  // this step is done
    }
    if (step_ < steps_.size()) {
      if (std::find(live.begin(), live.end(), steps_[step_].thread) != live.end())
        return steps_[step_].thread;
      mismatch_ = true;  // the step's thread already ended
      step_ = steps_.size();
    }
    return live.front();
  }

  void finished(int thread) override {
    if (step_ < steps_.size() && steps_[step_].thread == thread) {
      if (!steps_[step_].point.empty()) mismatch_ = true;  // it ended before the step's point
      ++step_, seen_ = 0;
    }
  }

  // True if every step happened as written.
  bool matched() const { return !mismatch_ && step_ == steps_.size(); }

 private:
  std::vector<ScriptStep> steps_;
  std::size_t step_ = 0;
  int seen_ = 0;
  bool mismatch_ = false;
};

class Threads;
namespace detail {
struct Current {
  Threads* threads = nullptr;
  int id = -1;
};
inline thread_local Current on_this_thread;
}  // namespace detail

// `n` worker threads that run one schedule at a time, handing the baton at every point.
// Reused from schedule to schedule (starting threads is what a schedule would cost).
class Threads {
 public:
  explicit Threads(std::size_t n) : wake_(new std::condition_variable[n + 1]), n_(n) {
    for (std::size_t i = 0; i < n; ++i)
      workers_.emplace_back([this, id = static_cast<int>(i)] { work(id); });
  }
  ~Threads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    for (std::size_t i = 0; i < n_; ++i) wake_[i].notify_one();
    for (auto& w : workers_) w.join();
  }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

  // Runs `bodies` (exactly n, thread i runs bodies[i]) under `strategy`, one thread at a
  // time. Returns what ran.
  Trace run(std::vector<std::function<void()>> bodies, Strategy& strategy) {
    std::unique_lock lock(mutex_);
    bodies_ = std::move(bodies);
    bodies_.resize(n_);
    strategy_ = &strategy;
    done_.assign(n_, false);
    trace_ = {};
    hand_over(-1, nullptr);
    wake_[n_].wait(lock, [&] { return active_ == -1; });
    strategy_ = nullptr;
    return std::move(trace_);
  }

  // Called by the library's points (through bulwark::detail::schedule_point).
  void point(int id, const char* name) {
    std::unique_lock lock(mutex_);
    trace_.steps.push_back({id, name});
    hand_over(id, name);
    wake_[static_cast<std::size_t>(id)].wait(lock, [&] { return active_ == id; });
  }

 private:
  void work(int id) {
    const auto me = static_cast<std::size_t>(id);
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_[me].wait(lock, [&] { return stopping_ || active_ == id; });
      if (stopping_) return;
      lock.unlock();
      detail::on_this_thread = {this, id};
      if (bodies_[me]) bodies_[me]();
      detail::on_this_thread = {};
      lock.lock();
      done_[me] = true;
      trace_.steps.push_back({id, ""});
      strategy_->finished(id);
      hand_over(id, nullptr);
    }
  }

  void hand_over(int id, const char* name) {  // with mutex_ held
    std::vector<int> live;
    for (std::size_t i = 0; i < n_; ++i)
      if (!done_[i]) live.push_back(static_cast<int>(i));
    active_ = live.empty() ? -1 : strategy_->pick(id, name, live);
    wake_[active_ < 0 ? n_ : static_cast<std::size_t>(active_)].notify_one();
  }

  std::mutex mutex_;
  std::unique_ptr<std::condition_variable[]> wake_;  // one per worker, then the caller's
  std::size_t n_;
  std::vector<std::thread> workers_;
  std::vector<std::function<void()>> bodies_;
  Strategy* strategy_ = nullptr;
  std::vector<bool> done_;
  int active_ = -1;
  bool stopping_ = false;
  Trace trace_;
};

// Runs `bodies` (one thread each) under `strategy`, one at a time. Returns what ran.
inline Trace run(std::vector<std::function<void()>> bodies, Strategy& strategy) {
  Threads threads(bodies.size());
  return threads.run(std::move(bodies), strategy);
}

}  // namespace bulwark::test

// The hook the library's points call (see bulwark/detail/schedule_point.h). Outside a
// run (a test's own setup and checks) it does nothing.
void bulwark::detail::schedule_point(const char* name) noexcept {
  const auto& c = bulwark::test::detail::on_this_thread;
  if (c.threads) c.threads->point(c.id, name);
}

#endif  // BULWARK_TESTS_SUPPORT_SCHEDULE_EXPLORER_H_
