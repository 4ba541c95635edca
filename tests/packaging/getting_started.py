#!/usr/bin/env python3
"""Runs docs/getting-started.md as written (ctest: packaging_getting_started).

The page is the test's source, not a copy of it:
  - every fenced block whose info string has `title=<file>` (```cmake title=CMakeLists.txt,
    ```toml title=resilience.toml, ```cpp title=main.cc) is written to <work>/<file>;
  - every fenced block whose info string has `output=<case>` is what the program prints in
    that case: each of its lines must appear, in that order, as a whole line of the output
    (a line "..." stands for lines left out; the page's 127.0.0.1:8000 stands for the
    port the test picked). The cases:
      up    the URL is served: python3 -m http.server on a free loopback port, in a
            directory holding hello.txt ("hello"), as the page says;
      down  nothing answers: a loopback port bound but not listening (connections are
            refused, and no other process can take the port meanwhile).
The project is configured with CMAKE_PREFIX_PATH=<the packaging_install prefix>, built, and
run once per case, with the URL and the path of resilience.toml as its arguments. Every step is bounded by a timeout.

usage: getting_started.py --page P --work W --prefix P --cmake C --cxx C [--launcher L]
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(page):
    files, outputs = {}, {}
    for m in FENCE.finditer(page):
        attrs = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        if "title" in attrs:
            files[attrs["title"]] = m.group(3)
        if "output" in attrs:
            outputs[attrs["output"]] = m.group(3).splitlines()
    return files, outputs


def fail(msg):
    print("packaging_getting_started: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, timeout, **kw):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, **kw)
    if p.returncode != 0:
        fail("%s failed (%d):\n%s" % (cmd[0], p.returncode, p.stdout))
    return p.stdout


def expect(case, want, got, port):
    lines, at = got.splitlines(), 0
    for w in want:
        w = w.replace("127.0.0.1:8000", "127.0.0.1:%d" % port)
        if w.strip() == "...":
            continue
        while at < len(lines) and lines[at] != w:
            at += 1
        if at == len(lines):
            fail("case %s: expected the line %r (in the page's order) in:\n%s" % (case, w, got))
        at += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    for a in ("page", "work", "prefix", "cmake", "cxx"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--launcher", default="")
    args = ap.parse_args()

    with open(args.page, encoding="utf-8") as f:
        files, outputs = blocks(f.read())
    for name in ("CMakeLists.txt", "resilience.toml", "main.cc"):
        if name not in files:
            fail("%s: no block with title=%s" % (args.page, name))
    for case in ("up", "down"):
        if case not in outputs:
            fail("%s: no block with output=%s" % (args.page, case))

    shutil.rmtree(args.work, ignore_errors=True)
    src, build, www = (os.path.join(args.work, d) for d in ("src", "build", "www"))
    for d in (src, www):
        os.makedirs(d)
    for name, text in files.items():
        with open(os.path.join(src, name), "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(www, "hello.txt"), "w", encoding="utf-8") as f:
        f.write("hello\n")

    configure = [args.cmake, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_PREFIX_PATH=" + args.prefix, "-DCMAKE_CXX_COMPILER=" + args.cxx]
    if args.launcher:
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + args.launcher)
    run(configure, 120)
    run([args.cmake, "--build", build, "--parallel", "2"], 240)
    program = os.path.join(build, "hello")
    config = os.path.join(src, "resilience.toml")

    # up: a server answering on a free port (retried if another process took it first).
    for _ in range(5):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=www,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = "http://127.0.0.1:%d/hello.txt" % port
        deadline = time.monotonic() + 10
        ready = False
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    ready = r.read() == b"hello\n"
                break
            except OSError:
                time.sleep(0.05)  # the server is starting: wait for it to listen
        if ready:
            break
        server.kill()
        server.wait()
    else:
        fail("could not start python3 -m http.server")
    try:
        expect("up", outputs["up"], run([program, url, config], 60), port)
    finally:
        server.kill()
        server.wait()

    # down: connections to a bound, non-listening socket are refused.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = "http://127.0.0.1:%d/hello.txt" % port
        expect("down", outputs["down"], run([program, url, config], 60), port)
    print("packaging_getting_started: ok")


if __name__ == "__main__":
    main()
