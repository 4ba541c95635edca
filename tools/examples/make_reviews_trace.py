#!/usr/bin/env python3
"""Writes a call trace of the reviews service's normal traffic, for `bulwark calibrate`.

Poisson arrivals at 400 calls/s, lognormal latency with a 120 ms median and a 350 ms
p99, 2 % errors: the traffic the built-in incident scenario calls normal. Deterministic
for a given --seed.

    python3 tools/examples/make_reviews_trace.py --duration 600 > reviews.csv
    bulwark calibrate reviews.csv
"""

import argparse
import math
import random
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=600, help="seconds of traffic (default 600)")
    p.add_argument("--rate", type=float, default=400, help="calls per second (default 400)")
    p.add_argument("--median-ms", type=float, default=120, help="median latency (default 120)")
    p.add_argument("--p99-ms", type=float, default=350, help="p99 latency (default 350)")
    p.add_argument("--error-rate", type=float, default=0.02, help="failures (default 0.02)")
    p.add_argument("--key", default="reviews", help="the key column (default reviews)")
    p.add_argument("--seed", type=int, default=2, help="random seed (default 2)")
    a = p.parse_args()
    for name, v in (("--duration", a.duration), ("--rate", a.rate), ("--median-ms", a.median_ms)):
        if not (v > 0 and math.isfinite(v)):
            p.error(f"{name} must be a positive number")
    if not a.p99_ms > a.median_ms:
        p.error("--p99-ms must be above --median-ms")
    if not 0 <= a.error_rate <= 1:
        p.error("--error-rate must be in [0, 1]")
    if "," in a.key or '"' in a.key or "\n" in a.key or "\r" in a.key:
        p.error("--key must not hold a comma, a quote or a line break")
    rng = random.Random(a.seed)
    sigma = math.log(a.p99_ms / a.median_ms) / 2.3263478740408408
    mu = math.log(a.median_ms)
    out = sys.stdout
    out.write("t_ms,key,duration_ms,outcome\n")
    t = 0.0
    end = a.duration * 1000
    lines = []
    while True:
        t += rng.expovariate(a.rate) * 1000
        if t >= end:
            break
        d = math.exp(rng.gauss(mu, sigma))
        outcome = "failure" if rng.random() < a.error_rate else "success"
        lines.append(f"{t:.3f},{a.key},{d:.3f},{outcome}\n")
        if len(lines) >= 10000:
            out.write("".join(lines))
            lines.clear()
    out.write("".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
