// A count of calls inside a section, with its high-water mark: stress tests check that
// the most ever inside at once stays within a limit.

#ifndef BULWARK_TESTS_SUPPORT_HIGH_WATER_H_
#define BULWARK_TESTS_SUPPORT_HIGH_WATER_H_

#include <atomic>

namespace bulwark::test {

struct HighWater {
  std::atomic<int> now{0};
  std::atomic<int> most{0};
  // Marks one more inside and raises the mark if it is a new high.
  void enter() {
    const int n = now.fetch_add(1) + 1;
    int seen = most.load();
    while (n > seen && !most.compare_exchange_weak(seen, n)) {
    }
  }
  void leave() { now.fetch_sub(1); }
};

}  // namespace bulwark::test

#endif  // BULWARK_TESTS_SUPPORT_HIGH_WATER_H_
