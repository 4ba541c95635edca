// Breakers driven through calls fed one at a time, writing nothing: replay's own
// machinery (the same events, order and clock as `bulwark replay`), for the lab's
// checks of a configuration on modified traffic. Internal to the lab (not installed).
//
//   ReplayRun run(spec, [&](Ticks at, std::uint32_t key) { opened_at.push_back(at); });
//   for (const Row& row : rows) run.call(row);   // non-decreasing row.t
//   run.finish();                                // completes the calls in flight
//
// `key` in the callback counts the keys in order of first appearance. Memory: one
// breaker per key and the calls in flight. Not thread-safe.

#ifndef BULWARK_LAB_SRC_REPLAY_RUN_H_
#define BULWARK_LAB_SRC_REPLAY_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "bulwark/clock.h"
#include "bulwark/lab/config.h"
#include "trace_reader.h"

namespace bulwark::lab::detail {

class ReplayRun {
 public:
  using OnOpen = std::function<void(Ticks at, std::uint32_t key)>;
  ReplayRun(const BreakerSpec& spec, OnOpen on_open);
  ~ReplayRun();
  ReplayRun(const ReplayRun&) = delete;
  ReplayRun& operator=(const ReplayRun&) = delete;

  void call(const Row& row);
  void finish();

  struct Base {
    virtual ~Base() = default;
    virtual void call(const Row& row) = 0;
    virtual void finish() = 0;
  };

 private:
  std::unique_ptr<Base> impl_;
};

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_REPLAY_RUN_H_
