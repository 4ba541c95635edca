// A per-key registry extra with real components that count for themselves — "get or
// create a breaker and optionally a bulkhead and retry budget by key" — reported with
// read_metrics (what prometheus.h exposes per key and sums per registry). Shared by
// the registry and exposition tests.

#ifndef BULWARK_TESTS_SUPPORT_HOST_GUARDS_H_
#define BULWARK_TESTS_SUPPORT_HOST_GUARDS_H_

#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/metrics.h"
#include "bulwark/retry_budget.h"

namespace bulwark_test {

struct HostGuards {
  bulwark::BasicBulkhead<bulwark::ManualClock> bulkhead;
  bulwark::BasicRetryBudget<bulwark::ManualClock> budget;
  void read_metrics(bulwark::ComponentReading& r) {
    r.add_bulkhead(bulkhead);
    r.add_budget(budget);
  }
};

}  // namespace bulwark_test

#endif  // BULWARK_TESTS_SUPPORT_HOST_GUARDS_H_
