// bulwark/lab/replay.h — a recorded call trace through real breakers, in trace time.
//
// To check a breaker configuration against real traffic before enforcing it: every
// row of the trace is a call that asks its key's breaker for permission at t_ms and, if
// permitted, reports its outcome at t_ms + duration_ms with that duration.
//
//   t_ms,key,duration_ms,outcome
//   0,payments,120,success
//   5,payments,2300,failure
//   5,,40,ignored                       <- an empty key is the default breaker
//
//   bulwark::lab::BreakerSpec spec = bulwark::lab::load_breaker_file("breaker.toml");
//   bulwark::lab::replay(spec, "trace.csv", stdout, {.decisions = true});
//
// Output, JSON Lines: one line per transition, as it happens
//   {"t_ms":120,"key":"payments","from":"closed","to":"open","reason":"failure_rate"}
// with `decisions`, one line per call
//   {"t_ms":125,"key":"payments","decision":"rejected"}
// and at the end one line per key, in order of first appearance
//   {"key":"payments","summary":{"permitted":…,"rejected":…,"success":…,"failure":…,
//                                "slow":…,"ignored":…,"opened":…}}
//
// t_ms and duration_ms are decimal milliseconds read exactly (no floating point) into
// whole nanoseconds: at most 6 significant decimal places, at most 4e12 ms, so
// Unix-epoch milliseconds replay and print exactly as written.
//
// Semantics: events run in time order; at equal times completions run before arrivals,
// and completions in the order their calls arrived. A ManualClock is set to each
// event's time, so the breaker's open periods, windows and slow calls are judged in
// trace time. Every key shares one BreakerPolicy (one configuration, one breaker per
// key, as in a registry). `slow` counts permitted calls, success or failure, whose
// duration exceeded slow_call_duration (0 when it is unset).
//
// Errors: the trace is read once, each row checked as it is replayed, and the output
// is held (past 1 MiB in a temporary file) until the last row has been, so a malformed
// trace produces an InputError naming file, line and column, and no output. Columns
// may come in any order; fields may be quoted ("a,b", with "" for "); numbers are
// decimal milliseconds (fractions allowed), never negative; rows must be in
// non-decreasing t_ms. Lines end in LF or CRLF: any other carriage return is an error.
// A line is at most 1 MiB, a key at most 1024 bytes.
//
// Cost: memory is bounded by the number of keys and the calls in flight at one time,
// not by the trace's length; time is O(rows · log(calls in flight)). Every key's
// breaker is kept to the end (for its summary), so replay refuses a trace whose
// distinct keys' breakers would take more than 256 MiB (about 120,000 keys with a time
// window, fewer with a large count window).

#ifndef BULWARK_LAB_REPLAY_H_
#define BULWARK_LAB_REPLAY_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "bulwark/lab/config.h"

namespace bulwark::lab {

struct ReplayOptions {
  bool decisions = false;  // also write one line per call
  // Called every 2^20 rows (for a progress line) with the rows read so far, and once
  // with done = true after the last row, before the output is written; may be empty.
  // On the replaying thread, between rows.
  void (*progress)(std::uint64_t rows, bool done, void* context) = nullptr;
  void* progress_context = nullptr;
};

// Replays the trace at `path` ("-": standard input). Throws InputError for a bad trace
// (before writing anything) and std::runtime_error if `out` cannot be written.
void replay_file(const BreakerSpec& spec, const std::string& path, std::FILE* out,
                 const ReplayOptions& options = {});

// Replays the trace read from `in`, named `name` in errors.
void replay(const BreakerSpec& spec, std::FILE* in, const std::string& name, std::FILE* out,
            const ReplayOptions& options = {});

// Replays a trace held in memory and returns the output (for tests and examples).
std::string replay_text(const BreakerSpec& spec, std::string_view csv,
                        const std::string& name = "trace.csv", const ReplayOptions& options = {});

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_REPLAY_H_
