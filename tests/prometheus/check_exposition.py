#!/usr/bin/python3
"""Checks bulwark's Prometheus exposition with tools that are not bulwark.

  check_exposition.py parse <exposition_gen>
      Parses `exposition_gen scrape` with the official Python client's parser
      (Debian's python3-prometheus-client) and checks the values of the scenario in
      exposition_gen.cc, label values included (quotes, backslashes, newlines, UTF-8),
      plus structural rules: help and type for every family, no duplicate series,
      cumulative histogram buckets ending in +Inf == _count, registry totals equal to
      the sums of the per-breaker series (computed here, independently).

  check_exposition.py promtool-metrics <exposition_gen> <promtool>
      `promtool check metrics` on the same text: must exit 0 and report nothing.

  check_exposition.py parse|promtool-metrics ... scrape-prometheus-cpp
      The same, on the scenario served through bulwark::prometheus_cpp (a Collector whose
      families prometheus-cpp's TextSerializer writes): same names, labels and values.

  check_exposition.py prometheus-server <exposition_gen> <prometheus> <workdir>
      Starts `exposition_gen serve` (the scenario behind a prometheus-cpp Exposer) and a
      real Prometheus server scraping it every second on loopback ports, and queries
      the server's API until the scenario's series are there (at most 90 s).

  check_exposition.py alert-test <exposition_gen> <promtool> <rules.yml> <workdir>
      Generates a promtool rule test from series bulwark produced and runs
      `promtool test rules` on it.

Run with /usr/bin/python3: the Debian package is installed for the system Python.
"""

import math
import os
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def generate(gen, mode="scrape"):
    out = subprocess.run([gen, mode], check=True, stdout=subprocess.PIPE, timeout=60)
    return out.stdout.decode("utf-8")  # must be valid UTF-8: raises otherwise


def need_tool(path):
    if not os.path.exists(path):
        fail(path + " not found: install the Debian 'prometheus' package (scripts/install-deps.sh)")


def parse(text):
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(text))
    samples = {}
    for fam in families:
        if not fam.documentation:
            fail("family %s has no HELP" % fam.name)
        if fam.type not in ("counter", "gauge", "histogram"):
            fail("family %s has type %s" % (fam.name, fam.type))
        if not fam.name.startswith("bulwark_"):
            fail("family %s lacks the bulwark_ prefix" % fam.name)
        for s in fam.samples:
            if fam.type == "counter" and not s.name.endswith("_total"):
                fail("counter sample %s does not end in _total" % s.name)
            key = (s.name, frozenset(s.labels.items()))
            if key in samples:
                fail("duplicate series %s %s" % (s.name, s.labels))
            samples[key] = s.value
    return families, samples


class Samples:
    def __init__(self, samples):
        self.samples = samples

    # The metric name is positional-only: `name` is also a label.
    def get(self, metric, /, **labels):
        key = (metric, frozenset(labels.items()))
        if key not in self.samples:
            fail("missing %s%s" % (metric, labels))
        return self.samples[key]

    def has(self, metric, /, **labels):
        return (metric, frozenset(labels.items())) in self.samples

    def expect(self, metric, value, /, **labels):
        got = self.get(metric, **labels)
        if isinstance(value, float) and math.isnan(value):
            ok = math.isnan(got)
        else:
            ok = math.isclose(got, value, rel_tol=1e-12, abs_tol=1e-12)
        if not ok:
            fail("%s%s = %r, expected %r" % (metric, labels, got, value))

    def where(self, metric, /, **labels):
        """Samples of `name` whose labels include `labels`: [(labels dict, value)]."""
        out = []
        for (n, lab), v in self.samples.items():
            d = dict(lab)
            if n == metric and all(d.get(k) == val for k, val in labels.items()):
                out.append((d, v))
        return out


def check_histograms(families):
    for fam in families:
        if fam.type != "histogram":
            continue
        series = {}
        for s in fam.samples:
            base = frozenset((k, v) for k, v in s.labels.items() if k != "le")
            series.setdefault(base, {"buckets": [], "sum": None, "count": None})
            if s.name.endswith("_bucket"):
                series[base]["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                series[base]["sum"] = s.value
            elif s.name.endswith("_count"):
                series[base]["count"] = s.value
        for base, h in series.items():
            b = sorted(h["buckets"])
            if not b or b[-1][0] != math.inf:
                fail("%s %s: no +Inf bucket" % (fam.name, dict(base)))
            if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
                fail("%s %s: buckets are not cumulative" % (fam.name, dict(base)))
            if b[-1][1] != h["count"]:
                fail("%s %s: +Inf bucket %r != _count %r" % (fam.name, dict(base), b[-1][1], h["count"]))
            if h["sum"] is None:
                fail("%s %s: no _sum" % (fam.name, dict(base)))


def check_scenario(s):
    up = {"name": "upstream"}
    cb = "bulwark_circuitbreaker_"

    # plain:443: 3 successes (3, 7, 120 ms) and a failure (900 ms), components counted.
    p = dict(up, key="plain:443")
    s.expect(cb + "state", 1, state="closed", **p)
    s.expect(cb + "state", 0, state="open", **p)
    s.expect(cb + "open_seconds", 0, **p)
    s.expect(cb + "calls_total", 3, kind="successful", **p)
    s.expect(cb + "calls_total", 1, kind="failed", **p)
    s.expect(cb + "calls_total", 0, kind="ignored", **p)
    h = cb + "call_duration_seconds"
    for le, n in (("0.0025", 0), ("0.005", 1), ("0.01", 2), ("0.1", 2), ("0.25", 3), ("0.5", 3), ("1", 4)):
        s.expect(h + "_bucket", n, le=le, **p)
    s.expect(h + "_bucket", 4, le="+Inf", **p)
    s.expect(h + "_count", 4, **p)
    s.expect(h + "_sum", 1.03, **p)
    s.expect("bulwark_fallback_calls_total", 2, kind="rejected", **p)
    s.expect("bulwark_fallback_calls_total", 1, kind="failed", **p)
    s.expect("bulwark_retry_calls_total", 1, kind="successful_with_retry", **p)
    s.expect("bulwark_retry_calls_total", 0, kind="failed_with_retry", **p)
    s.expect("bulwark_retry_retries_total", 1, **p)
    s.expect("bulwark_retry_budget_exhausted_total", 1, **p)
    s.expect("bulwark_bulkhead_concurrent_calls", 1, **p)
    s.expect("bulwark_bulkhead_rejected_calls_total", 1, **p)
    if s.has("bulwark_bulkhead_max_allowed_concurrent_calls", **p):
        fail("a bulkhead limit was exposed though none is known")

    # Tricky keys come back exactly; an invalid UTF-8 byte becomes the text \xHH, so
    # keys that differ only in such a byte stay distinct series.
    for key in ('quote"d', "back\\slash", "new\nline", "ünïcødé ☃ 🚀", "bad \\xff utf8",
                "bad \\xfe utf8"):
        s.expect(cb + "calls_total", 1, kind="successful", name="upstream", key=key)
        s.expect(cb + "state", 1, state="closed", name="upstream", key=key)

    # down:443 opened at t=0 and every probe failed since: 510 s of outage at the
    # scrape, though its current OPEN began at t=420.
    d = dict(up, key="down:443")
    s.expect(cb + "state", 1, state="open", **d)
    s.expect(cb + "open_seconds", 510, **d)
    s.expect(cb + "time_in_state_seconds", 90, **d)
    s.expect(cb + "calls_total", 9, kind="failed", **d)
    s.expect(cb + "not_permitted_calls_total", 3, kind="not_permitted", **d)
    s.expect(cb + "opens_total", 8, **d)
    t = cb + "transitions_total"
    s.expect(t, 1, **{"from": "closed", "to": "open"}, **d)
    s.expect(t, 7, **{"from": "open", "to": "half_open"}, **d)
    s.expect(t, 7, **{"from": "half_open", "to": "open"}, **d)
    s.expect(t, 0, **{"from": "half_open", "to": "closed"}, **d)

    # recovered:443 opened at 420 s and closed at 480 s: no outage now.
    r = dict(up, key="recovered:443")
    s.expect(cb + "state", 1, state="closed", **r)
    s.expect(cb + "open_seconds", 0, **r)
    s.expect(cb + "time_in_state_seconds", 30, **r)
    s.expect(t, 1, **{"from": "half_open", "to": "closed"}, **r)

    # forced:443 forced open by an operator 30 s ago: a manual transition shows up.
    f = dict(up, key="forced:443")
    s.expect(cb + "state", 1, state="forced_open", **f)
    s.expect(cb + "open_seconds", 30, **f)
    s.expect(t, 1, **{"from": "closed", "to": "forced_open"}, **f)
    s.expect(cb + "opens_total", 1, **f)

    # Integer keys, and a standalone breaker without a key label.
    for k in ("0", "1", "2"):
        s.expect(cb + "calls_total", 1, kind="successful", name="ledger", key=k)
    s.expect(cb + "calls_total", 1, kind="successful", name="solo")
    s.expect(cb + "state", 1, state="closed", name="solo")

    # A breaker with a window: ratios (NaN = not enough calls) and the window's counts.
    s.expect(cb + "failure_ratio", float("nan"), name="rated", key="few")
    s.expect(cb + "failure_ratio", 0.25, name="rated", key="many")
    s.expect(cb + "slow_call_ratio", 0.5, name="rated", key="many")
    s.expect(cb + "buffered_calls", 3, kind="successful", name="rated", key="many")
    s.expect(cb + "buffered_calls", 1, kind="failed", name="rated", key="many")
    s.expect(cb + "slow_calls", 1, kind="successful", name="rated", key="many")
    s.expect(cb + "slow_calls", 1, kind="failed", name="rated", key="many")
    s.expect(cb + "slow_calls", 1, kind="failed", name="rated", key="few")
    s.expect(cb + "flapping", 0, name="rated", key="many")
    if s.has(cb + "failure_ratio", name="upstream", key="plain:443"):
        fail("a breaker without a window has a failure ratio series")

    # Registry totals, against sums computed here from the per-key series.
    reg = {"registry": "hosts"}
    rg = "bulwark_registry_"
    s.expect(rg + "keys", 10, **reg)
    s.expect(rg + "keys_created_total", 10, **reg)
    s.expect(rg + "keys_evicted_total", 0, **reg)
    s.expect(rg + "max_open_seconds", 510, **reg)
    s.expect(rg + "breakers", 8, state="closed", **reg)
    s.expect(rg + "breakers", 1, state="open", **reg)
    s.expect(rg + "breakers", 1, state="forced_open", **reg)
    if s.get(rg + "memory_bytes", **reg) <= 10 * 128:
        fail("registry memory is less than its entries")
    for kind in ("successful", "failed", "ignored", "cancelled"):
        total = sum(v for _, v in s.where(cb + "calls_total", kind=kind, name="upstream"))
        s.expect(rg + "calls_total", total, kind=kind, **reg)
    for fam in ("not_permitted_calls_total", "opens_total"):
        total = sum(v for _, v in s.where(cb + fam, name="upstream"))
        s.expect(rg + fam, total, **reg)
    for lab, v in s.where(rg + "transitions_total", **reg):
        pair = {"from": lab["from"], "to": lab["to"]}
        total = sum(x for _, x in s.where(t, name="upstream", **pair))
        if v != total:
            fail("registry transitions %s = %r, per-key sum %r" % (pair, v, total))
    buckets = {}
    for lab, v in s.where(h + "_bucket", name="upstream"):
        buckets[lab["le"]] = buckets.get(lab["le"], 0) + v
    for le, v in buckets.items():
        s.expect(rg + "call_duration_seconds_bucket", v, le=le, **reg)
    s.expect(rg + "fallback_calls_total", 2, kind="rejected", **reg)
    s.expect(rg + "keys", 3, registry="partitions")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def prometheus_server(gen, prometheus, workdir):
    import json
    import shutil
    import time
    import urllib.parse
    import urllib.request

    need_tool(prometheus)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    served = subprocess.Popen([gen, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    server = None
    try:
        port = served.stdout.readline().decode().strip()
        if not port.isdigit():
            fail("exposition_gen serve printed %r instead of its port" % port)
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                    "  - job_name: bulwark\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%s']\n" % port)
        web = free_port()
        log = open(os.path.join(workdir, "prometheus.log"), "w")
        server = subprocess.Popen([prometheus, "--config.file=" + config,
                                   "--storage.tsdb.path=" + os.path.join(workdir, "data"),
                                   "--web.listen-address=127.0.0.1:%d" % web], stdout=log,
                                  stderr=subprocess.STDOUT)

        def query(expr):
            url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (web, urllib.parse.quote(expr))
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except (OSError, ValueError, KeyError):
                return None
            return float(result[0]["value"][1]) if len(result) == 1 else None

        wanted = {
            'up{job="bulwark"}': 1,
            'bulwark_registry_keys{registry="partitions"}': 3,
            'bulwark_circuitbreaker_state{key="forced:443",state="forced_open"}': 1,
            'bulwark_circuitbreaker_call_duration_seconds_count{key="plain:443"}': 4,
        }
        deadline = time.monotonic() + 90
        seen = {}
        while time.monotonic() < deadline:
            if server.poll() is not None:
                fail("prometheus exited with %d (see %s)" % (server.returncode, log.name))
            seen = {expr: query(expr) for expr in wanted}
            if seen == wanted:
                print("OK: Prometheus scraped the prometheus-cpp Exposer: %s" % seen)
                return
            time.sleep(0.5)
        fail("after 90 s Prometheus's answers were %s, expected %s (log: %s)" % (seen, wanted, log.name))
    finally:
        if server is not None:
            stop(server)
        served.stdin.close()
        stop(served)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    mode, gen = sys.argv[1], sys.argv[2]
    if mode == "parse":
        families, samples = parse(generate(gen, *sys.argv[3:4]))
        check_histograms(families)
        check_scenario(Samples(samples))
        print("OK: %d families, %d samples parsed by prometheus_client and checked" % (len(families), len(samples)))
    elif mode == "promtool-metrics":
        promtool = sys.argv[3]
        need_tool(promtool)
        text = generate(gen, *sys.argv[4:5])
        r = subprocess.run([promtool, "check", "metrics"], input=text.encode("utf-8"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        report = r.stdout.decode("utf-8", "replace").strip()
        if r.returncode != 0 or report:
            fail("promtool check metrics (exit %d):\n%s" % (r.returncode, report))
        print("OK: promtool check metrics passed on %d lines" % text.count("\n"))
    elif mode == "prometheus-server":
        prometheus_server(gen, sys.argv[3], sys.argv[4])
    elif mode == "alert-test":
        promtool, rules, workdir = sys.argv[3], sys.argv[4], sys.argv[5]
        need_tool(promtool)
        os.makedirs(workdir, exist_ok=True)
        test_file = os.path.join(workdir, "generated.rules.test.yml")
        subprocess.run([gen, "alert-test", os.path.abspath(rules), test_file], check=True)
        r = subprocess.run([promtool, "test", "rules", test_file], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print(r.stdout.decode("utf-8", "replace"))
        if r.returncode != 0:
            fail("promtool test rules failed on series bulwark produced")
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
