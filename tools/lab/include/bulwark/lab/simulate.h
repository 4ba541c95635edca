// bulwark/lab/simulate.h — a scenario's traffic through real bulwark objects, in
// virtual time.
//
// A discrete-event simulation: arrivals, attempt completions, retry wake-ups, bulkhead
// wait expiries and page completions are events in one time-ordered queue, and a
// ManualClock is set to each event's time before the library objects see it. The
// breaker, bulkhead, retry policy and retry budget are the library's own, driven
// through their non-blocking APIs (try_acquire / Permit::record, the bulkhead's
// try_acquire, RetryPolicy::decide, RetryBudget::deposit / try_withdraw); nothing
// blocks or sleeps, so ten minutes of 400 req/s take a fraction of a second.
// Configurations are independent: SimulateOptions::threads runs them side by side.
//
//   bulwark::lab::Scenario scenario = bulwark::lab::builtin_scenario();
//   bulwark::lab::SimulationResult r = bulwark::lab::simulate(scenario);
//   for (const auto& c : r.configurations)
//     std::cout << c.name << ": " << c.lost << " requests lost\n";
//
// The model, per request (one search page):
//   arrival      takes a caller worker, or is lost if every worker is busy
//   breaker      try_acquire(); a rejection goes to the fallback (or fails the page)
//   bulkhead     try_acquire(); when full, waits up to max_wait for a slot, FIFO
//   attempts     each samples the dependency's phase at its start: latency and error.
//                A call that would take longer than the timeout fails at the timeout.
//                With a server ([dependency.server]) the attempt is served by one of its
//                workers, after waiting in its FIFO queue, or refused when the queue is
//                full; a caller's timeout abandons it, but the server still serves it.
//                A configuration's [shedder] (a LoadShedder in front of the server)
//                decides first: try_acquire() with the attempt's deadline (its
//                timeout); a request the limit has no slot for waits in the shedder's
//                queue (controlled delay, LIFO while the queue stands) until a permit
//                is given back; a refusal (503) fails the attempt at once and its
//                Retry-After is the retry's hint. The permit is held until the server
//                has served the call.
//   retry        after a failed attempt: RetryPolicy::decide, then the budget's ticket;
//                the worker stays busy through the backoff
//   fallback     a failure whose reason it covers serves the page degraded
//   page         the page's own work, then the worker is free
// Every configuration sees the same arrivals and, request by request and attempt by
// attempt, the same latency and error draws (common random numbers), so differences
// between configurations are the configurations' doing.
//
// Cost: O(events · log(events in flight)) time; memory bounded by the requests in
// flight plus the timeline (one entry per step) — not by the number of requests.
// Each call builds and owns its objects: calls on different threads are independent.
// With `threads` = 1 (the default) no thread is started.

#ifndef BULWARK_LAB_SIMULATE_H_
#define BULWARK_LAB_SIMULATE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/fallback.h"
#include "bulwark/lab/config.h"

namespace bulwark::lab {

struct SimulateOptions {
  Nanos timeline_step = std::chrono::seconds(1);  // > 0; at most 1,000,000 steps
  // Called every 2^18 events (for a progress line) with the configuration being run,
  // its virtual time and the scenario's duration; may be empty.
  void (*progress)(std::string_view configuration, Nanos at, Nanos duration,
                   void* context) = nullptr;
  void* progress_context = nullptr;
  // simulate(): configurations run at once on up to this many threads (the caller's
  // among them); 1 runs them one after another on the caller's. The result is the same
  // either way; calls to `progress` are then serialized, and may come from any of them.
  unsigned threads = 1;
};

// One step of the timeline. Counts are of events inside the step; peaks are the
// highest level reached during it (a level carried in from before counts).
struct TimelineStep {
  Nanos start = Nanos::zero();
  std::uint64_t arrivals = 0;
  std::uint64_t lost = 0;      // found every worker busy
  std::uint64_t full = 0;      // pages done, with the dependency's answer
  std::uint64_t degraded = 0;  // pages done by the fallback
  std::uint64_t failed = 0;    // pages done with an error
  std::uint64_t calls = 0;     // attempts sent to the dependency
  std::uint32_t peak_in_flight = 0;
  std::uint32_t peak_busy = 0;
  std::optional<State> state;          // the breaker's state at the step's end (none: no breaker)
  std::optional<std::uint32_t> limit;  // the adaptive limit at the step's end (none: no limit)
};

struct BreakerTransition {
  Nanos at;
  State from;
  State to;
  TransitionReason reason;
};

struct ConfigurationResult {
  std::string name;

  // Every request ends in exactly one of: lost, served_full, served_degraded, failed.
  // Pages in progress at the scenario's end finish (no arrival comes after it); their
  // counts go to these totals but not to the timeline.
  std::uint64_t requests = 0;         // arrivals
  std::uint64_t lost = 0;             // lost to caller saturation
  std::uint64_t served_full = 0;      // pages with the dependency's answer
  std::uint64_t served_degraded = 0;  // pages the fallback answered
  std::uint64_t failed = 0;           // pages that failed (no fallback for the reason)

  std::uint32_t peak_in_flight = 0;  // calls in flight to the dependency
  std::uint32_t peak_busy = 0;       // caller workers busy
  std::uint64_t calls = 0;           // attempts sent to the dependency
  std::uint64_t calls_while_degraded = 0;

  // Why pages did not get the dependency's answer, by Reason (fallback.h).
  std::array<std::uint64_t, kReasonCount> reasons{};
  std::uint64_t retries = 0;

  // Page latency, arrival to page done, of every page that got a worker.
  Nanos p50 = Nanos::zero();
  Nanos p99 = Nanos::zero();
  Nanos max = Nanos::zero();

  // Breaker (empty/zero without one).
  bool has_breaker = false;
  std::optional<Nanos> time_to_open;  // from the first degraded phase's start
  std::uint64_t opens = 0;
  Nanos longest_open = Nanos::zero();          // longest stretch away from CLOSED
  std::optional<Nanos> alert_when_open_for;    // the configuration's alert threshold
  std::optional<Nanos> alert_at;               // when that threshold was exceeded
  std::vector<BreakerTransition> transitions;  // up to the scenario's end

  std::vector<TimelineStep> timeline;  // [0, duration) in steps of the timeline step

  // With a server dependency (Dependency::server); zero/empty without one.
  std::uint64_t refused = 0;          // attempts the server refused (its queue was full)
  std::uint64_t shed = 0;             // attempts the shedder refused (503), at once or queued
  std::uint64_t wasted = 0;           // attempts the server served after the caller gave up
  std::uint32_t peak_queued = 0;      // attempts waiting in the server's queue
  Nanos success_p99 = Nanos::zero();  // page latency of the pages served fully
  // From the end of the trigger (Scenario::degraded_until) to the start of the first
  // timeline step from which, in every step, at least 95 % of the pages done (and the
  // requests lost) were served fully;
  // empty when that never happens (still overloaded at the end) or with no trigger.
  std::optional<Nanos> recovered_after;
  // With an adaptive limit: its mean at the ends of the steps in the second half of the
  // first phase (where it settled before any trigger), and its lowest at a step's end.
  std::optional<double> limit_settled;
  std::optional<std::uint32_t> limit_lowest;
  // The configuration's LoadGoal, checked (empty without one).
  std::optional<bool> goal_met;
};

struct SimulationResult {
  Scenario scenario;
  Nanos timeline_step = std::chrono::seconds(1);
  std::vector<ConfigurationResult> configurations;
};

// Runs every configuration of `scenario`. Throws InputError for bad options (threads
// 0 among them), and for a retry of more than kMaxAttempts attempts (the work per
// request is bounded by it); with several threads, the first configuration's error.
SimulationResult simulate(const Scenario& scenario, const SimulateOptions& options = {});

// Runs one configuration (the building block of simulate()).
ConfigurationResult simulate_configuration(const Scenario& scenario,
                                           const ResilienceConfig& configuration,
                                           const SimulateOptions& options = {});

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_SIMULATE_H_
