// Waiting for what another thread does, without betting on the scheduler.
//
// A test whose threads must meet somewhere (the scraper has scraped N times while the
// writers were still writing) loops until they have: it does not assert that they did
// within some count of iterations or some time, which a loaded machine does not give.
// Patience bounds such a loop generously, so that only a hang or a lost wakeup reaches
// the bound — never a slow machine — and the test then fails saying what it waited for.

#ifndef BULWARK_TESTS_SUPPORT_PATIENCE_H_
#define BULWARK_TESTS_SUPPORT_PATIENCE_H_

#include <chrono>

namespace bulwark::test {

class Patience {
 public:
  explicit Patience(std::chrono::seconds limit = std::chrono::seconds(120))
      : end_(std::chrono::steady_clock::now() + limit) {}
  // True once the bound has passed: the thing waited for is not coming.
  bool exhausted() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

}  // namespace bulwark::test

#endif  // BULWARK_TESTS_SUPPORT_PATIENCE_H_
