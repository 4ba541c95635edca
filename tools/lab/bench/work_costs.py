#!/usr/bin/env python3
"""The CPU time `bulwark simulate` spends per unit of work, the figures its run bound
is derived from (include/bulwark/lab/config.h, docs/lab.md "How long a run may take").

Runs probe scenarios, each the worst shape for its unit, and prints microseconds of
CPU time (user + system, of the child) per unit:

  attempt        every attempt failing and retried (10 attempts, 1 ms apart), through
                 every stage (timeout, time-window breaker, bulkhead, retry, budget,
                 fallback), with caller.workers busy at 90 %: by caller.workers
  fleet attempt  the same calls over a fleet's isolated and shared runs (its single
                 run, measured alone, subtracted): by fleet.instances
  fleet sync     one Fleet::sync() a millisecond per instance, every instance voting
                 (quorum = instances, fleet windows on) through a degradation that
                 opens them all (the same scenario syncing once a minute subtracted):
                 by fleet.instances

Each probe makes 1e7 to 3e7 units and takes 5 to 60 s of CPU time; the whole run takes
about ten minutes. Run it on an otherwise idle machine: others' load slows it.

  python3 tools/lab/bench/work_costs.py build/release/tools/bulwark/bulwark [--quick]

--quick makes each probe ten times smaller (a rough figure, in seconds).
"""

import json
import os
import resource
import subprocess
import sys
import tempfile

FULL = """
[config.a]
timeout = "24h"
breaker_scope = "attempt"
[config.a.breaker]
kind = "time"
window.length = "10s"
failure_rate = 1.0
minimum_calls = 1000000
[config.a.bulkhead]
max_concurrent = 1000000
[config.a.retry]
max_attempts = 10
[config.a.retry.backoff]
kind = "constant"
delay = "1ms"
[config.a.retry_budget]
ratio = 1000000
min_retries_per_second = 1000000
max_tokens = 1000000000000
[config.a.fallback]
on = ["all"]
"""


def calls_scenario(rate, seconds, workers, fleet=None):
    s = f"""duration = "{seconds}s"
[arrivals]
process = "poisson"
rate = {rate}
[caller]
workers = {workers}
[dependency]
[[dependency.phases]]
start = "0s"
latency = "100ms"
error_rate = 1.0
""" + FULL
    if fleet:
        s += f"""[fleet]
instances = {fleet}
sync_interval = "1min"
store_latency = "0ms"
"""
    return s


def sync_scenario(instances, seconds, interval):
    degraded = seconds / 4
    return f"""duration = "{seconds}s"
[arrivals]
rate = {20 * instances}
[caller]
workers = 1000
[dependency]
[[dependency.phases]]
start = "0s"
latency = {{ distribution = "lognormal", median = "120ms", p99 = "350ms" }}
error_rate = 0.005
[[dependency.phases]]
start = "{degraded}s"
latency = "14s"
degraded = true
[config.after]
timeout = "800ms"
[config.after.breaker]
kind = "time"
window.length = "10s"
failure_rate = 0.3
slow_call_rate = 0.3
slow_call_duration = "400ms"
minimum_calls = 20
[config.after.bulkhead]
max_concurrent = 80
[config.after.fallback]
on = ["all"]
[fleet]
instances = {instances}
sync_interval = "{interval}"
store_latency = "0ms"
quorum = {instances}
fleet_window = true
"""


def run(bulwark, toml):
    """CPU seconds of one `bulwark simulate` of `toml`, and its JSON results."""
    with tempfile.TemporaryDirectory() as d:
        scenario, results = os.path.join(d, "s.toml"), os.path.join(d, "r.json")
        with open(scenario, "w") as f:
            f.write(toml)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([bulwark, "simulate", scenario, "--json", results],
                       check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(results) as f:
            data = json.load(f)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, data


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bulwark, scale = sys.argv[1], (0.1 if "--quick" in sys.argv[2:] else 1.0)
    units = 2e7 * scale
    print("unit            shape                      us per unit")
    for workers in (1_000, 10_000, 100_000, 1_000_000):
        # A request lasts about 10 x 101 ms: keep 90 % of the workers busy.
        rate = min(1e6, 0.9 * workers / 1.01)
        seconds = max(3, round(units / (10 * rate)))
        cpu, data = run(bulwark, calls_scenario(rate, seconds, workers))
        attempts = sum(c["summary"]["calls"] for c in data["configurations"])
        print(f"attempt         workers {workers:>9,}          {cpu / attempts * 1e6:6.2f}")
    for instances in (100, 1_000, 10_000):
        # Half as many: 1e7 fleet attempts at 10,000 instances is half the run bound.
        rate, seconds = 100_000, max(3, round(units / 2 / (2 * 10 * 100_000)))
        single, _ = run(bulwark, calls_scenario(rate, seconds, 1000))
        cpu, data = run(bulwark, calls_scenario(rate, seconds, 1000, fleet=instances))
        runs = data["configurations"][0]["runs"]
        attempts = sum(r["calls"] for r in runs if r["name"] != "single")
        print(f"fleet attempt   instances {instances:>7,}          "
              f"{(cpu - single) / attempts * 1e6:6.2f}")
    for instances in (100, 1_000, 10_000):
        seconds = max(2, round(units / (instances * 1000)))
        quiet, _ = run(bulwark, sync_scenario(instances, seconds, "1min"))
        cpu, data = run(bulwark, sync_scenario(instances, seconds, "1ms"))
        shared = [r for r in data["configurations"][0]["runs"] if r["name"] == "shared"][0]
        syncs = shared["store_exchanges"]
        print(f"fleet sync      instances {instances:>7,}          "
              f"{(cpu - quiet) / syncs * 1e6:6.2f}")


if __name__ == "__main__":
    main()
