#!/usr/bin/env python3
"""Builds examples/consumer against an installed bulwark and runs it (ctest:
packaging_consumer_service).

Two builds of the same source, outside the tree:
  cmake   find_package(bulwark REQUIRED COMPONENTS http asio), CMAKE_PREFIX_PATH=<prefix>
  pkgconf pkg_check_modules(bulwark-http bulwark-asio), PKG_CONFIG_PATH=<prefix>/lib/pkgconfig
Each program is run against a loopback upstream (python3 -m http.server on a free port,
serving hello.txt): it must print one real answer from the sync client and one from the
async client, then serve /metrics, which must hold each source's breaker state line
(sync client, async client, the service's registry). GET /quit ends it. Every step is
bounded by a timeout; a program that hangs is killed.

usage: consumer_service.py --source S --work W --prefix P --cmake C --cxx C [--launcher L]
"""
import argparse
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def fail(msg):
    print("packaging_consumer_service: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, timeout, env=None):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        fail("%s failed (%d):\n%s" % (cmd[0], p.returncode, p.stdout))
    return p.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


def start_upstream(www):
    for _ in range(5):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=www,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = "http://127.0.0.1:%d/hello.txt" % port
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if get(url, 1) == (200, "hello\n"):
                    return server, url
                break
            except OSError:
                time.sleep(0.05)  # the server is starting: wait for it to listen
        server.kill()
        server.wait()
    fail("could not start python3 -m http.server")


def check_program(program, upstream):
    proc = subprocess.Popen([program, upstream, "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l.rstrip("\n")) for l in proc.stdout] and None,
                     daemon=True).start()
    seen = []
    try:
        metrics_url = None
        deadline = time.monotonic() + 30
        while metrics_url is None:
            left = deadline - time.monotonic()
            if left <= 0:
                fail("%s printed no metrics URL in 30 s:\n%s" % (program, "\n".join(seen)))
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(line)
            if line.startswith("metrics: "):
                metrics_url = line[len("metrics: "):]
        for want in ("sync: 200 hello", "async: 200 hello"):
            if want not in seen:
                fail("%s: expected the line %r in:\n%s" % (program, want, "\n".join(seen)))
        status, text = get(metrics_url)
        if status != 200:
            fail("%s: /metrics answered %d" % (program, status))
        for prefix in ("bulwark", "bulwark_async", "bulwark_service"):
            want = prefix + "_circuitbreaker_state{"
            state = [l for l in text.splitlines() if l.startswith(want) and 'state="closed"' in l]
            if not state or not state[0].endswith(" 1"):
                fail("%s: no closed %s...} 1 line in /metrics:\n%s" % (program, want, text))
        if "bulwark_http_client_requests_total{client=\"upstream_sync\"} 1" not in text:
            fail("%s: the sync client's request is not counted in /metrics:\n%s" % (program, text))
        get(metrics_url.replace("/metrics", "/quit"))
        proc.wait(timeout=20)
        if proc.returncode != 0:
            fail("%s exited with %d" % (program, proc.returncode))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print("%s: ok" % program, flush=True)


def main():
    ap = argparse.ArgumentParser()
    for a in ("source", "work", "prefix", "cmake", "cxx"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--launcher", default="")
    args = ap.parse_args()

    shutil.rmtree(args.work, ignore_errors=True)
    www = os.path.join(args.work, "www")
    os.makedirs(www)
    with open(os.path.join(www, "hello.txt"), "w", encoding="utf-8") as f:
        f.write("hello\n")

    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.join(args.prefix, "lib", "pkgconfig")
    programs = []
    for name, extra in (("cmake", ["-DCMAKE_PREFIX_PATH=" + args.prefix]),
                        ("pkgconf", ["-DCONSUMER_VIA_PKG_CONFIG=ON"])):
        build = os.path.join(args.work, name)
        configure = [args.cmake, "-S", args.source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                     "-DCMAKE_CXX_COMPILER=" + args.cxx] + extra
        if args.launcher:
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + args.launcher)
        run(configure, 120, env)
        run([args.cmake, "--build", build, "--parallel", "2"], 400, env)
        programs.append(os.path.join(build, "consumer"))

    server, url = start_upstream(www)
    try:
        for program in programs:
            check_program(program, url)
    finally:
        server.kill()
        server.wait()
    print("packaging_consumer_service: ok")


if __name__ == "__main__":
    main()
