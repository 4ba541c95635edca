// The async bulkhead under a deterministic executor (asio/support/deterministic_executor.h):
// coroutines on lanes of their own (each an io_context) acquire, hold and release
// slots, are cancelled and time out, while a chooser decides which ready handler runs
// next — and, at the bulkhead's schedule point between a failed take() and the
// waiter's link into the queue, whether a slot held by another thread is given back
// right there. Small scenarios are explored exhaustively (every order of the first
// decisions, depth-first), all of them with fixed seeds.
//
// After every step the bulkhead is compared with a model that sees the same events
// (an acquire started, a slot given back, a rejection reported on the waiter's lane):
//  - no waiter waits while a slot is free: queued() > 0 implies in_use() == max;
//  - slots are conserved: in_use() is the model's (permits held plus grants posted);
//  - queued() and the rejection count are the model's;
//  - every waiter completes exactly once, with what the model decided: grants go to the
//    waiters in the order they queued (a cancelled or timed-out one leaves its place),
//    a timeout never comes before its time.
// At the end every coroutine has finished and every slot is back.
//
// BULWARK_SCHEDULE_SEED=<n> starts the seeded runs at another seed and
// BULWARK_SCHEDULES=<count> runs that many per scenario (default 200): a long campaign
// is BULWARK_SCHEDULE_SEED=$RANDOM BULWARK_SCHEDULES=100000 asio_bulkhead_schedule_test.
// A failure names its seed (or its depth-first path) and the first broken rule.

#define BULWARK_TEST_SCHEDULE_POINTS
#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "asio/support/deterministic_executor.h"
#include "bulwark/asio/bulkhead.h"

namespace {
// The test's hook at the bulkhead's schedule points (null: nothing happens there).
std::function<void(const char*)>* g_point = nullptr;
}  // namespace

void bulwark::detail::schedule_point(const char* name) noexcept {
  if (g_point != nullptr) (*g_point)(name);
}

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::BasicAsyncBulkhead;
using bulwark::asio::ManualTimerClock;
using Clock = ManualClock;
using Ctx = BasicContext<Clock>;
using Pool = BasicAsyncBulkhead<Clock>;
using Result = Pool::Result;

// Text from parts (std::ostringstream: GCC 12 warns falsely on some std::string sums).
template <class... T>
std::string cat(const T&... parts) {
  std::ostringstream o;
  (o << ... << parts);
  return o.str();
}

constexpr const char* kBeforeLink = "async_bulkhead.start: no slot, not queued yet";

std::string reason_name(std::optional<BulkheadRejectReason> r) {
  if (!r) return "granted";
  switch (*r) {
    case BulkheadRejectReason::full:
      return "full";
    case BulkheadRejectReason::deadline_exceeded:
      return "deadline_exceeded";
    case BulkheadRejectReason::cancelled:
      return "cancelled";
  }
  return "?";
}

struct ActorSpec {
  int rounds = 1;
  Nanos deadline = Nanos::zero();   // zero: none
  int hold_yields = 1;              // steps the slot is held
  Nanos hold_time = Nanos::zero();  // then virtual time it is held (zero: none)
};

struct DriverOp {
  enum Kind { advance, cancel, release_foreign } kind;
  Nanos by = Nanos::zero();
  int actor = 0;
};
DriverOp advance(Nanos d) { return {DriverOp::advance, d, 0}; }
DriverOp cancel(int k) { return {DriverOp::cancel, Nanos::zero(), k}; }
DriverOp release_foreign() { return {DriverOp::release_foreign}; }

struct Scenario {
  std::string name;
  std::uint32_t max_concurrent = 1;
  std::uint32_t max_queue = 4;
  Nanos max_wait = 100ms;
  int foreign = 0;  // slots held from the start by a thread outside the lanes
  std::vector<ActorSpec> actors;
  std::vector<DriverOp> driver;
};

// What the bulkhead should do, from the events it sees.
class Model {
 public:
  Model(const Scenario& s, Clock& clock) : s_(s), clock_(clock) {}

  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }
  const std::string& error() const { return error_; }

  void took_foreign() { ++in_use_; }

  // Actor k calls acquire() with `deadline`.
  void start(int k, Deadline deadline) {
    starting_ = k;
    const Ticks now = now_ticks(clock_);
    const Deadline limit = Deadline::at(saturating_add(now, to_ticks(s_.max_wait)));
    const Deadline until = earliest(deadline, limit);
    if (queue_.empty() && in_use_ < s_.max_concurrent) {
      decide(k, std::nullopt);
      ++in_use_;
    } else if (queue_.size() >= s_.max_queue) {
      reject(k, BulkheadRejectReason::full);
    } else if (until.passed(now)) {
      reject(k, BulkheadRejectReason::deadline_exceeded);
    } else {
      queue_.push_back(k);
      waiting_[k] = {until.ticks(), deadline < limit ? BulkheadRejectReason::deadline_exceeded
                                                     : BulkheadRejectReason::full};
    }
  }
  void step_done() { starting_ = -1; }

  // A slot was given back: the head of the queue gets it.
  void released() {
    if (in_use_ == 0) return fail("a slot given back that the model did not count");
    --in_use_;
    while (!queue_.empty() && in_use_ < s_.max_concurrent) {
      const int k = queue_.front();
      queue_.pop_front();
      waiting_.erase(k);
      decide(k, std::nullopt);
      ++in_use_;
    }
  }

  // The observer's report of a rejection of the waiter on the lane running now.
  void rejected_on(int k, BulkheadRejectReason reason) {
    if (starting_ >= 0) return;  // start()'s own rejection: start() predicted it
    auto it = std::find(queue_.begin(), queue_.end(), k);
    if (it == queue_.end()) {
      return fail(
          cat("a rejection (", reason_name(reason), ") of actor ", k, ", which was not queued"));
    }
    queue_.erase(it);
    const auto w = waiting_[k];
    waiting_.erase(k);
    if (reason == BulkheadRejectReason::cancelled) {
      if (emitting_ != k) fail(cat("actor ", k, " cancelled with no cancellation"));
    } else {
      if (now_ticks(clock_) < w.until) {
        fail(cat("actor ", k, " timed out before its time"));
      }
      if (reason != w.on_timeout) {
        fail(cat("actor ", k, " timed out as ", reason_name(reason), ", expected ",
                 reason_name(w.on_timeout)));
      }
    }
    reject(k, reason);
  }
  void emitting(int k) { emitting_ = k; }

  // Actor k's acquire() completed with `r`.
  void completed(int k, const Result& r) {
    auto it = decided_.find(k);
    if (it == decided_.end()) {
      return fail(cat("actor ", k, " completed with nothing decided (twice?)"));
    }
    const std::optional<BulkheadRejectReason> got =
        r ? std::nullopt : std::optional(r.error().reason);
    if (got != it->second) {
      fail(cat("actor ", k, " got ", reason_name(got), ", the model says ",
               reason_name(it->second)));
    }
    decided_.erase(it);
    ++completions_[k];
  }

  // The bulkhead against the model, between two steps.
  void check(const Pool& pool, const std::string& when) {
    const auto snap = pool.snapshot();
    if (pool.queued() > 0 && pool.in_use() < s_.max_concurrent) {
      fail(cat(when, ": ", pool.queued(), " waiting while only ", pool.in_use(),
               " slots are in use"));
    }
    if (pool.in_use() != in_use_) {
      fail(cat(when, ": in_use ", pool.in_use(), ", the model ", in_use_));
    }
    if (pool.queued() != queue_.size()) {
      fail(cat(when, ": queued ", pool.queued(), ", the model ", queue_.size()));
    }
    if (snap.rejected != rejected_) {
      fail(cat(when, ": rejected ", snap.rejected, ", the model ", rejected_));
    }
  }

  int completions(int k) const {
    auto it = completions_.find(k);
    return it == completions_.end() ? 0 : it->second;
  }
  bool undelivered() const { return !decided_.empty(); }

 private:
  struct Waiting {
    Ticks until;
    BulkheadRejectReason on_timeout;
  };
  void decide(int k, std::optional<BulkheadRejectReason> r) {
    if (decided_.count(k) != 0) fail(cat("actor ", k, " decided twice"));
    decided_[k] = r;
  }
  void reject(int k, BulkheadRejectReason r) {
    decide(k, r);
    ++rejected_;
  }

  const Scenario& s_;
  Clock& clock_;
  std::uint32_t in_use_ = 0;
  std::deque<int> queue_;
  std::map<int, Waiting> waiting_;
  std::map<int, std::optional<BulkheadRejectReason>> decided_;  // nullopt: granted
  std::map<int, int> completions_;
  std::uint64_t rejected_ = 0;
  int starting_ = -1;
  int emitting_ = -1;
  std::string error_;
};

// Runs `s` once, every choice made by `chooser`. Returns the first broken rule, or "".
std::string run(const Scenario& s, Chooser& chooser) {
  Clock clock;
  ManualTimerClock::Binding bind(clock);
  Model model(s, clock);
  Pool pool({.name = "p",
             .max_concurrent = s.max_concurrent,
             .max_queue = s.max_queue,
             .max_wait = s.max_wait},
            clock);
  struct Observer {
    Model* model;
    World* world;
    int actors;
    void on_bulkhead_rejection(const BulkheadRejectionEvent& e) {
      const int lane = world->running();
      if (lane < 0 || lane >= actors) {
        return model->fail(cat("a rejection (", reason_name(e.reason), ") off the actors' lanes"));
      }
      model->rejected_on(lane, e.reason);
    }
  };
  World world(clock, chooser);
  Observer observer{&model, &world, static_cast<int>(s.actors.size())};
  pool.observe_rejections(BulkheadObserver(observer));

  std::vector<Pool::Permit> foreign;
  for (int i = 0; i < s.foreign; ++i) {
    auto p = pool.try_acquire();
    if (!p) return "the foreign slots could not be taken";
    foreign.push_back(std::move(*p));
    model.took_foreign();
  }
  auto give_foreign = [&] {
    if (foreign.empty()) return;
    foreign.pop_back();  // the slot goes back, as from another thread
    model.released();
  };
  // Between the failed take() and the link: another thread may give its slot back.
  std::function<void(const char*)> point = [&](const char* name) {
    if (std::string(name) == kBeforeLink && !foreign.empty() && chooser.choose(2) == 1) {
      give_foreign();
    }
  };
  g_point = &point;
  struct Unhook {
    ~Unhook() { g_point = nullptr; }
  } unhook;

  const int n = static_cast<int>(s.actors.size());
  for (int k = 0; k < n; ++k) world.add_lane();
  Lane& driver_lane = world.add_lane();
  std::vector<::asio::cancellation_signal> signals(static_cast<std::size_t>(n));
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  bool driver_done = false;

  for (int k = 0; k < n; ++k) {
    const ActorSpec a = s.actors[static_cast<std::size_t>(k)];
    auto body = [&, k, a]() -> ::asio::awaitable<void> {
      auto ex = co_await ::asio::this_coro::executor;
      for (int round = 0; round < a.rounds; ++round) {
        const Deadline deadline =
            a.deadline > Nanos::zero() ? Deadline::after(clock, a.deadline) : Deadline::never();
        model.start(k, deadline);
        Result r = co_await pool.acquire(
            Ctx(clock, {}, deadline),
            ::asio::bind_cancellation_slot(signals[static_cast<std::size_t>(k)].slot(),
                                           ::asio::use_awaitable));
        model.completed(k, r);
        if (!r) continue;
        for (int i = 0; i < a.hold_yields; ++i) co_await ::asio::post(ex, ::asio::use_awaitable);
        if (a.hold_time > Nanos::zero()) {
          bulwark::asio::Timer<Clock> t(ex);
          t.expires_after(a.hold_time);
          co_await t.async_wait(::asio::use_awaitable);
        }
        r->release();
        model.released();
      }
      done[static_cast<std::size_t>(k)] = true;
    };
    ::asio::co_spawn(world.lane(static_cast<std::size_t>(k)).executor(), body, ::asio::detached);
  }
  auto drive = [&]() -> ::asio::awaitable<void> {
    auto ex = co_await ::asio::this_coro::executor;
    for (const DriverOp& op : s.driver) {
      switch (op.kind) {
        case DriverOp::advance:
          world.advance(op.by);
          break;
        case DriverOp::cancel:
          // Emitted on the waiter's own lane, as Asio requires, when that lane runs it.
          ::asio::post(
              world.lane(static_cast<std::size_t>(op.actor)).executor(), [&, k = op.actor] {
                model.emitting(k);
                signals[static_cast<std::size_t>(k)].emit(::asio::cancellation_type::terminal);
                model.emitting(-1);
              });
          break;
        case DriverOp::release_foreign:
          give_foreign();
          break;
      }
      co_await ::asio::post(ex, ::asio::use_awaitable);
    }
    driver_done = true;
  };
  ::asio::co_spawn(driver_lane.executor(), drive, ::asio::detached);

  auto all_done = [&] {
    for (bool d : done)
      if (!d) return false;
    return driver_done;
  };
  int steps = 0;
  int idle = 0;
  for (;;) {
    model.check(pool, cat("before step ", steps));
    if (!model.error().empty()) break;
    if (world.step()) {
      model.step_done();
      ++steps;
      continue;
    }
    if (all_done()) break;
    // Nothing ready: the driver is done and some wait. The other thread gives its slots
    // back, then time passes until every wait ends.
    if (!foreign.empty() && driver_done) {
      give_foreign();
      continue;
    }
    if (++idle > 100) {
      model.fail("stuck: nothing ready and coroutines not finished");
      break;
    }
    world.advance(s.max_wait);
  }
  model.check(pool, "at the end");
  if (model.error().empty()) {
    for (int k = 0; k < n; ++k) {
      const auto& a = s.actors[static_cast<std::size_t>(k)];
      if (model.completions(k) != a.rounds) {
        model.fail(cat("actor ", k, " completed ", model.completions(k), " times in ", a.rounds,
                       " rounds"));
      }
    }
    if (model.undelivered()) model.fail("a decided completion never arrived");
    if (pool.in_use() != 0 || pool.queued() != 0) model.fail("slots or waiters left at the end");
  }
  std::string error = model.error();
  // Whatever is left (after a failure) dies with its lanes, before the pool.
  for (std::size_t i = 0; i < world.lanes(); ++i) world.destroy_lane(i);
  foreign.clear();
  return error;
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  out.push_back({.name = "two waiters, one slot held by another thread",
                 .max_concurrent = 1,
                 .max_queue = 4,
                 .max_wait = 100ms,
                 .foreign = 1,
                 .actors = {{}, {}},
                 .driver = {release_foreign(), advance(50ms), advance(60ms)}});
  out.push_back({.name = "a cancellation and a deadline race the grants",
                 .max_concurrent = 1,
                 .max_queue = 4,
                 .max_wait = 100ms,
                 .foreign = 1,
                 .actors = {{}, {.deadline = 50ms}, {}},
                 .driver = {cancel(0), advance(50ms), release_foreign(), advance(60ms)}});
  out.push_back({.name = "a full queue, holders on timers",
                 .max_concurrent = 1,
                 .max_queue = 1,
                 .max_wait = 100ms,
                 .foreign = 0,
                 .actors = {{.hold_time = 10ms}, {.hold_time = 10ms}, {.hold_time = 10ms}},
                 .driver = {advance(10ms), advance(10ms)}});
  out.push_back({.name = "two slots, rounds, a cancellation, max_wait",
                 .max_concurrent = 2,
                 .max_queue = 3,
                 .max_wait = 20ms,
                 .foreign = 1,
                 .actors = {{.rounds = 2, .hold_time = 5ms},
                            {.rounds = 2, .deadline = 30ms},
                            {.rounds = 2, .hold_yields = 2, .hold_time = 15ms}},
                 .driver = {advance(5ms), cancel(1), advance(5ms), release_foreign(), advance(10ms),
                            cancel(2), advance(30ms)}});
  return out;
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

TEST(AsyncBulkheadSchedule, ASlotGivenBackBeforeTheWaiterIsLinkedGoesToIt) {
  // A waiter whose take() failed, and which then linked itself, missed a slot given back
  // in between: the releaser saw no one queued and drained nothing, and the waiter
  // waited until max_wait with every slot free.
  Clock clock;
  ManualTimerClock::Binding bind(clock);
  FifoChooser fifo;
  World world(clock, fifo);
  Lane& lane = world.add_lane();
  Pool pool({.name = "p", .max_concurrent = 1, .max_queue = 4, .max_wait = 1s}, clock);
  auto other = pool.try_acquire();  // held by another thread
  ASSERT_TRUE(other);
  int given_back = 0;
  std::function<void(const char*)> point = [&](const char* name) {
    if (std::string(name) == kBeforeLink && other) {
      other->release();  // between the failed take() and link()
      ++given_back;
    }
  };
  g_point = &point;
  std::optional<Result> r;
  ::asio::co_spawn(
      lane.executor(),
      [&]() -> ::asio::awaitable<void> {
        r.emplace(co_await pool.acquire(Ctx(clock), ::asio::use_awaitable));
      },
      ::asio::detached);
  while (world.step()) {
  }
  g_point = nullptr;
  EXPECT_EQ(given_back, 1);
  ASSERT_TRUE(r.has_value()) << "the waiter still waits, with " << pool.in_use()
                             << " slots in use and " << pool.queued() << " queued";
  EXPECT_TRUE(*r);
  EXPECT_EQ(now_ticks(clock), 0);  // at once: no virtual time passed, max_wait did not end it
  EXPECT_EQ(pool.in_use(), 1u);
  EXPECT_EQ(pool.queued(), 0u);
  r.reset();
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(AsyncBulkheadSchedule, SmallScenariosEveryOrder) {
  // The first decisions of each schedule enumerated; the two- and three-waiter cases.
  const auto all = scenarios();
  // Decisions enumerated per scenario (about 2,600 and 5,000 schedules); more with
  // BULWARK_DFS_DEPTH.
  const std::size_t depths[] = {env_or("BULWARK_DFS_DEPTH", 8), env_or("BULWARK_DFS_DEPTH", 7)};
  for (std::size_t i = 0; i < 2; ++i) {
    DfsChooser dfs(depths[i]);
    long schedules = 0;
    do {
      ++schedules;
      const std::string error = run(all[i], dfs);
      ASSERT_EQ(error, "") << all[i].name << ", schedule " << schedules << " (path " << dfs.path()
                           << ")";
    } while (dfs.next() && schedules < 200'000);
    std::printf("%s: %ld schedules\n", all[i].name.c_str(), schedules);
    EXPECT_FALSE(dfs.nondeterministic()) << all[i].name;
    EXPECT_GT(schedules, 100) << all[i].name;
  }
}

TEST(AsyncBulkheadSchedule, EveryScenarioUnderSeededSchedules) {
  const std::uint64_t first = env_or("BULWARK_SCHEDULE_SEED", 1);
  const std::uint64_t count = env_or("BULWARK_SCHEDULES", 200);
  for (const Scenario& s : scenarios()) {
    for (std::uint64_t seed = first; seed < first + count; ++seed) {
      SeededChooser chooser(seed);
      const std::string error = run(s, chooser);
      ASSERT_EQ(error, "") << s.name << ", BULWARK_SCHEDULE_SEED=" << seed
                           << " BULWARK_SCHEDULES=1";
    }
  }
}

}  // namespace
}  // namespace bulwark::testing
