#!/usr/bin/env python3
"""Turns one Google Benchmark run into the project's goals, each a ratio of figures
measured in that same run (medians of the repetitions), so the machine's speed and
load cancel out.

    bulwark_bench --benchmark_repetitions=5 --benchmark_format=json > run.json
    python3 bench/ratios.py run.json
"""
import json
import sys


def load(path):
    """Median real time (ns) per benchmark, and the medians of its user counters."""
    with open(path) as f:
        data = json.load(f)
    times, counters, singles = {}, {}, {}
    unit = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for b in data["benchmarks"]:
        name = b["run_name"]
        t = b.get("real_time", 0.0) * unit[b.get("time_unit", "ns")]
        extra = {k: v for k, v in b.items() if isinstance(v, (int, float)) and k not in (
            "real_time", "cpu_time", "iterations", "repetitions", "repetition_index", "threads",
            "family_index", "per_family_instance_index")}
        if b.get("aggregate_name") == "median":
            times[name], counters[name] = t, extra
        elif "aggregate_name" not in b:
            singles.setdefault(name, (t, extra))
    for name, (t, extra) in singles.items():  # benchmarks run once have no aggregates
        times.setdefault(name, t)
        counters.setdefault(name, extra)
    return times, counters


def goals(t, c):
    """(what, value, operator, target): value is None when the run lacks a benchmark."""
    fa1 = t.get("BM_Baseline_AtomicFetchAdd/threads:1")

    def r(a, b):
        return t[a] / t[b] if a in t and b in t else None

    def minus(a, b):
        return t[a] - t[b] if a in t and b in t else None

    def safe(f):
        """f() or None when the run lacks one of its benchmarks (a filtered run)."""
        try:
            return f()
        except (KeyError, TypeError, ZeroDivisionError):
            return None

    out = [
        ("Breaker", None, "section", None),
        ("closed path / atomic fetch_add", r("BM_Closed_AcquireRecordSuccess/threads:1",
                                             "BM_Baseline_AtomicFetchAdd/threads:1"), "<=", 0.8),
        ("mutex breaker / closed path (speed-up)", r("BM_Baseline_MutexBreaker/threads:1",
                                                     "BM_Closed_AcquireRecordSuccess/threads:1"), ">=", 30.0),
        ("open rejection / coarse clock read", r("BM_Open_Reject/threads:1",
                                                 "BM_Baseline_CoarseClockNow/threads:1"), "<=", 2.0),
        ("open rejection / steady_clock::now()", r("BM_Open_Reject/threads:1",
                                                   "BM_Baseline_SteadyClockNow/threads:1"), None, None),
        ("open rejection, virtual clock / template clock", r("BM_Open_Reject_VirtualClock/threads:1",
                                                             "BM_Open_Reject/threads:1"), None, None),
        ("  with a cheap clock (ManualClock): virtual / template",
         r("BM_Open_Reject_ManualClock_Virtual", "BM_Open_Reject_ManualClock"), None, None),
        ("half-open rejection / steady_clock::now()", r("BM_HalfOpen_Reject/threads:1",
                                                        "BM_Baseline_SteadyClockNow/threads:1"), None, None),
        ("Two threads on one object: wall time per call, 2 threads / 1", None, "section", None),
        ("closed path", r("BM_Closed_AcquireRecordSuccess/threads:2",
                          "BM_Closed_AcquireRecordSuccess/threads:1"), "<=", 0.6),
        ("open rejection", r("BM_Open_Reject/threads:2", "BM_Open_Reject/threads:1"), "<=", 0.6),
        ("count window", r("BM_Closed_CountWindow/threads:2", "BM_Closed_CountWindow/threads:1"),
         "<=", 0.6),
        ("time window, striped", r("BM_Closed_TimeWindow_Striped/threads:2",
                                   "BM_Closed_TimeWindow_Striped/threads:1"), "<=", 0.6),
        ("pipeline, no-op stages", r("BM_Pipeline_NoOp/threads:2", "BM_Pipeline_NoOp/threads:1"),
         "<=", 0.6),
        ("  the same without its bulkhead", r("BM_Pipeline_NoOp_NoBulkhead/threads:2",
                                              "BM_Pipeline_NoOp_NoBulkhead/threads:1"), None, None),
        ("  the same, its bulkhead striped (2 stripes)",
         r("BM_Pipeline_NoOp_StripedBulkhead/threads:2",
           "BM_Pipeline_NoOp_StripedBulkhead/threads:1"), "<=", 0.6),
        ("bulkhead acquire+release", r("BM_Bulkhead_AcquireRelease/threads:2",
                                       "BM_Bulkhead_AcquireRelease/threads:1"), None, None),
        ("  striped (2 stripes)", r("BM_Bulkhead_AcquireRelease_Striped/threads:2",
                                    "BM_Bulkhead_AcquireRelease_Striped/threads:1"), None, None),
        ("registry lookup + call, 1,024 keys", r("BM_Registry_LookupExisting/1024/threads:2",
                                                 "BM_Registry_LookupExisting/1024/threads:1"), "<=", 0.6),
        ("  for scale: fetch_add, 2 threads / 1 thread", r("BM_Baseline_AtomicFetchAdd/threads:2",
                                                           "BM_Baseline_AtomicFetchAdd/threads:1"), None, None),
        ("  for scale: share-nothing work, 2 threads / 1 thread",
         r("BM_Baseline_ShareNothing/threads:2", "BM_Baseline_ShareNothing/threads:1"), None, None),
        ("Windows", None, "section", None),
        ("count window / atomic fetch_add", r("BM_Closed_CountWindow/threads:1",
                                              "BM_Baseline_AtomicFetchAdd/threads:1"), "<=", 6.0),
        ("time window / (6 x fetch_add + coarse clock read)",
         safe(lambda: t["BM_Closed_TimeWindow/threads:1"] /
              (6 * fa1 + t["BM_Baseline_CoarseClockNow/threads:1"])), "<=", 1.0),
        ("slow tracking's extra cost / measuring one duration",
         safe(lambda: minus("BM_Closed_TimeWindow_SlowTracking/threads:1",
                            "BM_Closed_TimeWindow/threads:1") /
              t["BM_Baseline_MeasureDuration/threads:1"]), "<=", 1.0),
        ("in-flight counting's extra cost / measuring one duration",
         safe(lambda: minus("BM_Closed_TimeWindow_SlowTracking_InFlight/threads:1",
                            "BM_Closed_TimeWindow_SlowTracking/threads:1") /
              t["BM_Baseline_MeasureDuration/threads:1"]), None, None),
        ("count window failures, 65,535 calls / 100 calls", r("BM_CountWindow_Failures/65535",
                                                              "BM_CountWindow_Failures/100"), "<=", 1.5),
        ("time window, 2 threads / 1 thread", r("BM_Closed_TimeWindow/threads:2",
                                                "BM_Closed_TimeWindow/threads:1"), None, None),
        ("Pipeline", None, "section", None),
        ("pipeline's cost over a direct call / fetch_add",
         safe(lambda: minus("BM_Pipeline_NoOp/threads:1", "BM_Baseline_DirectCall") / fa1),
         "<=", 15.0),
        ("retry budget acquire / fetch_add", r("BM_RetryBudget_Acquire/threads:1",
                                               "BM_Baseline_AtomicFetchAdd/threads:1"), None, None),
        ("bulkhead acquire+release / fetch_add", r("BM_Bulkhead_AcquireRelease/threads:1",
                                                   "BM_Baseline_AtomicFetchAdd/threads:1"), None, None),
        ("Load shedder", None, "section", None),
        ("shedder admit+release / bulkhead acquire+release",
         r("BM_LoadShedder_AdmitRelease/threads:1", "BM_Bulkhead_AcquireRelease/threads:1"), None, None),
        ("  the same, timed with the coarse clock",
         r("BM_LoadShedder_AdmitRelease_CoarseTiming/threads:1",
           "BM_Bulkhead_AcquireRelease/threads:1"), None, None),
        ("  the same with a clock that costs nothing",
         r("BM_LoadShedder_AdmitRelease_ConstantClock/threads:1",
           "BM_Bulkhead_AcquireRelease/threads:1"), None, None),
        ("  2 threads", r("BM_LoadShedder_AdmitRelease/threads:2",
                          "BM_Bulkhead_AcquireRelease/threads:2"), None, None),
        ("Adaptive concurrency limit", None, "section", None),
        ("adaptive acquire+complete / bulkhead acquire+release",
         r("BM_AdaptiveLimit_AcquireComplete/threads:1", "BM_Bulkhead_AcquireRelease/threads:1"),
         "<=", 2.0),
        ("  with coarse_clock / bulkhead acquire+release",
         r("BM_AdaptiveLimit_AcquireComplete_Coarse/threads:1",
           "BM_Bulkhead_AcquireRelease/threads:1"), None, None),
        ("  without its two steady_clock reads / bulkhead",
         safe(lambda: (t["BM_AdaptiveLimit_AcquireComplete/threads:1"] -
                       2 * t["BM_Baseline_SteadyClockNow/threads:1"]) /
              t["BM_Bulkhead_AcquireRelease/threads:1"]), None, None),
        ("  2 threads / 1 thread", r("BM_AdaptiveLimit_AcquireComplete/threads:2",
                                     "BM_AdaptiveLimit_AcquireComplete/threads:1"), None, None),
        ("Rate limiter and throttle", None, "section", None),
        ("rate limiter admission / atomic fetch_add", r("BM_RateLimiter_Admit/threads:1",
                                                        "BM_Baseline_AtomicFetchAdd/threads:1"), "<=", 3.0),
        ("  / (fetch_add + steady_clock::now()): the clock read is most of it",
         safe(lambda: t["BM_RateLimiter_Admit/threads:1"] /
              (fa1 + t["BM_Baseline_SteadyClockNow/threads:1"])), None, None),
        ("  on a clock that costs nothing (ManualClock) / fetch_add",
         r("BM_RateLimiter_Admit_ManualClock/threads:1", "BM_Baseline_AtomicFetchAdd/threads:1"),
         None, None),
        ("  2 threads / 1 thread", r("BM_RateLimiter_Admit/threads:2",
                                     "BM_RateLimiter_Admit/threads:1"), None, None),
        ("rate limiter refusal / steady_clock::now()", r("BM_RateLimiter_Refuse/threads:1",
                                                         "BM_Baseline_SteadyClockNow/threads:1"), None, None),
        ("throttle, healthy (acquire + record) / fetch_add", r("BM_Throttle_Healthy/threads:1",
                                                               "BM_Baseline_AtomicFetchAdd/threads:1"), None, None),
        ("Registry and exposition", None, "section", None),
        ("registry lookup + call / bare call, 1 thread", r("BM_Registry_LookupExisting/1/threads:1",
                                                           "BM_Closed_AcquireRecordSuccess/threads:1"), "<=", 4.0),
        ("registry lookup + call / bare call, 2 threads", r("BM_Registry_LookupExisting/1/threads:2",
                                                            "BM_Closed_AcquireRecordSuccess/threads:2"), "<=", 4.0),
        ("  1024 keys / 1024 breakers in an array", r("BM_Registry_LookupExisting/1024/threads:1",
                                                      "BM_Registry_Baseline_BreakerArray/1024/threads:1"), None, None),
        ("  with idle_ttl / bare call", r("BM_Registry_LookupExisting_IdleTtl/1/threads:1",
                                          "BM_Closed_AcquireRecordSuccess/threads:1"), None, None),
        ("scrape 10k breakers / same text from constants", r("BM_Prometheus_Scrape_10k",
                                                             "BM_Baseline_Format_10k"), "<=", 2.0),
        ("Async pipeline (bulwark::asio)", None, "section", None),
        ("pipeline, no deadline / bare co_await", r("BM_Asio_Pipeline_Direct", "BM_Asio_BareCoAwait"),
         "<=", 2.0),
        ("  a do-nothing wrapper coroutine / bare co_await (the floor)",
         r("BM_Asio_WrapperCoAwait", "BM_Asio_BareCoAwait"), None, None),
        ("  pipeline, no deadline / the wrapper", r("BM_Asio_Pipeline_Direct", "BM_Asio_WrapperCoAwait"),
         None, None),
        ("  pipeline with no stage / the wrapper", r("BM_Asio_Pipeline_NoStage",
                                                    "BM_Asio_WrapperCoAwait"), None, None),
        ("  breaker alone / bare co_await", r("BM_Asio_Pipeline_BreakerOnly", "BM_Asio_BareCoAwait"),
         "<=", 2.0),
        ("  bulkhead alone / bare co_await", r("BM_Asio_Pipeline_BulkheadOnly", "BM_Asio_BareCoAwait"),
         None, None),
        ("  retry with budget alone / bare co_await", r("BM_Asio_Pipeline_RetryOnly",
                                                       "BM_Asio_BareCoAwait"), None, None),
        ("pipeline, deadline + timeout / bare co_await", r("BM_Asio_Pipeline_Deadline",
                                                          "BM_Asio_BareCoAwait"), None, None),
        ("pipeline, hedged / bare co_await", r("BM_Asio_Pipeline_Hedged", "BM_Asio_BareCoAwait"),
         None, None),
        ("loopback echo round trip, pipeline / bare", r("BM_Asio_Echo_Pipeline", "BM_Asio_Echo_Bare"),
         None, None),
    ]
    for name in ("BM_Asio_BareCoAwait", "BM_Asio_Pipeline_Direct", "BM_Asio_Pipeline_Deadline",
                 "BM_Asio_Pipeline_Hedged", "BM_Asio_Echo_Bare", "BM_Asio_Echo_Pipeline"):
        if name in c and "allocs_per_call" in c[name]:
            out.append((f"  allocations per call, {name[8:]}", c[name]["allocs_per_call"], None, None))
    for name in ("BM_Asio_Echo_Bare", "BM_Asio_Echo_Pipeline"):
        if name in c and "items_per_second" in c[name]:
            out.append((f"  requests per second, {name[8:]}", c[name]["items_per_second"], None, None))
    # One breaker shared by every core: wall time per call at n threads / at 1.
    out.append(("Every core: wall time per call, n threads / 1", None, "section", None))
    one = t.get("BM_Closed_SharedByEveryCore/threads:1")
    for n in range(2, 257):
        name = f"BM_Closed_SharedByEveryCore/threads:{n}"
        if one and name in t:
            out.append((f"  one breaker, every core: {n} threads / 1", t[name] / one, None, None))
    # The same curve for work that shares nothing: what n threads reach on this machine.
    alone = t.get("BM_Baseline_ShareNothing/threads:1")
    for n in range(2, 257):
        name = f"BM_Baseline_ShareNothing/threads:{n}"
        if alone and name in t:
            out.append((f"  share-nothing work, every core: {n} threads / 1", t[name] / alone, None, None))
    mem = next((v for k, v in c.items() if k.startswith("BM_Registry_Memory_1M")), None)
    if mem and "bytes_per_key_over_breaker" in mem:
        out.append(("bytes per key over sizeof(breaker), 1M keys", mem["bytes_per_key_over_breaker"], "<=", 200.0))
    return out


def main():
    times, counters = load(sys.argv[1])
    print(f"{'goal':56} {'value':>9} {'target':>9}  result")
    section = None  # printed before its first figure: a run of one binary has only some
    for what, value, op, target in goals(times, counters):
        if op == "section":
            section = what
            continue
        if value is None:
            continue
        if section is not None:
            print(f"\n{section}")
            section = None
        if op is None:
            print(f"{what:56} {value:9.2f}")
            continue
        met = value <= target if op == "<=" else value >= target
        print(f"{what:56} {value:9.2f} {op + ' ' + format(target, 'g'):>9}  {'met' if met else 'NOT MET'}")
    print("\nmedians (ns):")
    for k in sorted(times):
        print(f"  {k:64} {times[k]:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
