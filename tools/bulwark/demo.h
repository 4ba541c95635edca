// `bulwark demo`: the hotel-reviews incident, live on loopback at reduced scale.
//
// An in-process upstream (cpp-httplib on 127.0.0.1) answers in 12 ms, then degrades to
// 1.4 s without a single error. A page-rendering caller with a fixed pool of workers
// asks it for reviews at a steady rate through bulwark::http::Client, twice: "before"
// (a long timeout, nothing else) and "after" (a short timeout, a slow-call breaker, a
// bulkhead and a fallback that renders the page without reviews). Prints a live
// progress line when stderr is a terminal, then a before/after table.

#ifndef BULWARK_TOOLS_DEMO_H_
#define BULWARK_TOOLS_DEMO_H_

#include <chrono>
#include <iosfwd>

namespace bulwark::cli {

struct DemoOptions {
  double rate = 40.0;                         // page requests per second
  std::chrono::milliseconds healthy{3000};    // before the upstream degrades
  std::chrono::milliseconds degraded{10000};  // how long it stays slow
  std::chrono::milliseconds fast_latency{12};
  std::chrono::milliseconds slow_latency{1400};
  int workers = 32;                               // the caller's page workers
  std::chrono::milliseconds page_patience{2000};  // a page not started by then is lost
};

// Runs both phases and writes the table to `out`. Returns 0, or 1 if the upstream could
// not be started.
int run_demo(const DemoOptions& options, std::ostream& out);

}  // namespace bulwark::cli

#endif  // BULWARK_TOOLS_DEMO_H_
