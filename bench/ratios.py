#!/usr/bin/env python3
"""Reads Google Benchmark JSON (with repetitions) and prints each goal as a ratio of two
benchmarks measured in the same run, using the median of the repetitions.

    bulwark_bench --benchmark_repetitions=5 --benchmark_format=json > run.json
    python3 bench/ratios.py run.json
"""
import json
import sys

# (what, numerator, denominator, goal operator, goal value)
GOALS = [
    ("closed path / atomic fetch_add", "BM_Closed_AcquireRecordSuccess/threads:1",
     "BM_Baseline_AtomicFetchAdd/threads:1", "<=", 3.0),
    ("mutex breaker / closed path (speed-up)", "BM_Baseline_MutexBreaker/threads:1",
     "BM_Closed_AcquireRecordSuccess/threads:1", ">=", 10.0),
    ("open rejection / steady_clock::now()", "BM_Open_Reject/threads:1",
     "BM_Baseline_SteadyClockNow/threads:1", "<=", 1.5),
    ("closed path, 2 threads / 1 thread", "BM_Closed_AcquireRecordSuccess/threads:2",
     "BM_Closed_AcquireRecordSuccess/threads:1", "<=", 3.0),
    ("  for scale: fetch_add, 2 threads / 1 thread", "BM_Baseline_AtomicFetchAdd/threads:2",
     "BM_Baseline_AtomicFetchAdd/threads:1", None, None),
    ("open rejection, virtual clock / template clock", "BM_Open_Reject_VirtualClock/threads:1",
     "BM_Open_Reject/threads:1", None, None),
    ("half-open rejection / steady_clock::now()", "BM_HalfOpen_Reject/threads:1",
     "BM_Baseline_SteadyClockNow/threads:1", None, None),
    ("count window / atomic fetch_add", "BM_Closed_CountWindow/threads:1",
     "BM_Baseline_AtomicFetchAdd/threads:1", "<=", 6.0),
    ("count window, 2 threads / 1 thread", "BM_Closed_CountWindow/threads:2",
     "BM_Closed_CountWindow/threads:1", None, None),
    ("time window, 2 threads / 1 thread", "BM_Closed_TimeWindow/threads:2",
     "BM_Closed_TimeWindow/threads:1", None, None),
]

# Goals that are not a plain ratio of two benchmarks.
COMPOSITE = [
    # time window <= 6 x fetch_add + 1 x coarse clock read
    ("time window / (6 x fetch_add + coarse clock)", "BM_Closed_TimeWindow/threads:1",
     lambda t: 6 * t["BM_Baseline_AtomicFetchAdd/threads:1"] + t["BM_Baseline_CoarseClockNow/threads:1"],
     "<=", 1.0),
    # slow tracking adds at most what measuring one duration costs
    ("slow tracking's extra cost / measuring one duration",
     lambda t: t["BM_Closed_TimeWindow_SlowTracking/threads:1"] - t["BM_Closed_TimeWindow/threads:1"],
     lambda t: t["BM_Baseline_MeasureDuration/threads:1"], "<=", 1.0),
    ("  without in-flight counting", lambda t: t["BM_Closed_TimeWindow_SlowTracking_NoInFlight/threads:1"]
     - t["BM_Closed_TimeWindow/threads:1"], lambda t: t["BM_Baseline_MeasureDuration/threads:1"], None, None),
]


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[b["run_name"]] = b["real_time"]
        elif "aggregate_name" not in b and b["run_name"] not in out:
            out.setdefault("_single_" + b["run_name"], b["real_time"])
    for k, v in list(out.items()):
        if k.startswith("_single_") and k[8:] not in out:
            out[k[8:]] = v
    return {k: v for k, v in out.items() if not k.startswith("_single_")}


def main():
    times = medians(sys.argv[1])
    ok = True
    print(f"{'goal':50} {'ratio':>8} {'target':>9}  result")
    for what, num, den, op, limit in GOALS:
        if num not in times or den not in times:
            continue
        r = times[num] / times[den]
        if op is None:
            print(f"{what:50} {r:8.2f} {'':>9}")
            continue
        met = r <= limit if op == "<=" else r >= limit
        ok &= met
        print(f"{what:50} {r:8.2f} {op + ' ' + str(limit):>9}  {'met' if met else 'NOT MET'}")
    for what, num, den, op, limit in COMPOSITE:
        try:
            n = num(times) if callable(num) else times[num]
            d = den(times) if callable(den) else times[den]
        except KeyError:
            continue
        r = n / d
        if op is None:
            print(f"{what:50} {r:8.2f}")
            continue
        met = r <= limit if op == "<=" else r >= limit
        print(f"{what:50} {r:8.2f} {op + ' ' + str(limit):>9}  {'met' if met else 'NOT MET'}")
    print()
    print("medians (ns):")
    for k in sorted(times):
        print(f"  {k:60} {times[k]:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
