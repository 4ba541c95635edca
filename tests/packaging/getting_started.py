#!/usr/bin/env python3
"""Runs docs/getting-started.md as written (ctest: packaging_getting_started).

The page is the test's source, not a copy of it:
  - every fenced block whose info string has `title=<file>` (```cmake title=CMakeLists.txt,
    ```cpp title=main.cc, ```yaml title=prometheus.yml, ...) is written to <work>/src/<file>
    (`append=yes`: appended to the file of an earlier block);
  - every ```sh block is run, command by command, in <work>/src: the first one (step 4,
    the hello program) as the code below does it, checked line for line against STEP4; each
    later one through bash exactly as written, except that the page's loopback ports
    8000 (the upstream), 8080 (the service) and 9090 (Prometheus) become free ports the test
    picked (in commands, in the files and in the outputs), `cmake` is the CMake under test,
    `bulwark` and the installed programs are found on PATH (<prefix>/bin first) and
    BULWARK_SOURCE is the source tree. A command ending in `&` runs in the background
    until the end of the test; the test waits until the last port it names accepts
    connections (bounded). A program a command needs that is not installed fails the
    test, naming the Debian package (scripts/install-deps.sh installs them all);
  - every fenced block whose info string has `output=<case>` is what is printed in that
    case: each of its lines must appear, in that order, as a whole line of the output (a
    line "..." stands for lines left out, a "..." inside a line for any text). The cases
    up and down are the hello program's (below); any other is the output of the ```sh
    block before it, its commands' outputs in order. `promtool query` is repeated until
    the output matches, for at most 60 s: Prometheus has to scrape first.
The hello program's cases:
      up    the URL is served: python3 -m http.server on a free loopback port, in a
            directory holding hello.txt ("hello"), as the page says;
      down  nothing answers: a loopback port bound but not listening (connections are
            refused, and no other process can take the port meanwhile).
The project is configured with CMAKE_PREFIX_PATH=<the packaging_install prefix>, built, and
run once per case, with the URL and the path of resilience.toml as its arguments. The
page's alerts.yml must hold the alert expressions the project ships
(docs/alerts/bulwark.rules.yml), and the Prometheus server must have loaded it. Every step
is bounded by a timeout.

usage: getting_started.py --page P --work W --prefix P --cmake C --cxx C [--launcher L]
"""
import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)

# Step 4's commands, which main() performs itself (with the test's ports and compiler).
STEP4 = [
    "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release",
    "cmake --build build",
    "mkdir -p www && echo hello > www/hello.txt",
    "python3 -m http.server 8000 --bind 127.0.0.1 --directory www &",
    "./build/hello http://127.0.0.1:8000/hello.txt resilience.toml",
]
PAGE_PORTS = (8000, 8080, 9090)
# The Debian package of each program a command may need.
PACKAGES = {"curl": "curl", "prometheus": "prometheus", "promtool": "prometheus",
            "python3": "python3", "sed": "sed", "head": "coreutils", "grep": "grep"}
POLL_SECONDS = 60


def blocks(page):
    """The titled files, the output blocks, and the sh blocks: [(commands, [case, ...])]."""
    files, outputs, scripts = {}, {}, []
    for m in FENCE.finditer(page):
        attrs = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        if "title" in attrs:
            name = attrs["title"]
            if attrs.get("append") == "yes":
                if name not in files:
                    fail("a block appends to %s before any block titled %s" % (name, name))
                files[name] += "\n" + m.group(3)
            else:
                files[name] = m.group(3)
        if "output" in attrs:
            outputs[attrs["output"]] = m.group(3).splitlines()
            if scripts:
                scripts[-1][1].append(attrs["output"])
        if m.group(1) == "sh":
            commands = [c for c in m.group(3).splitlines() if c.strip()]
            scripts.append((commands, []))
    return files, outputs, scripts


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


def localize(text, ports, bare=False):
    """The page's loopback ports (127.0.0.1:PORT; with `bare`, any PORT) made the test's."""
    prefix = r"\b" if bare else r"(?<=127\.0\.0\.1:)"
    return re.sub(prefix + r"(%s)\b" % "|".join(str(p) for p in ports),
                  lambda m: str(ports[int(m.group(1))]), text)


def matches(want, got, ports):
    """None if every line of `want` appears in order in `got`, else the first missing one."""
    lines, at = got.splitlines(), 0
    for w in want:
        w = localize(w, ports)
        if w.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in w.split("...")) + r"\Z")
        while at < len(lines) and not pattern.match(lines[at]):
            at += 1
        if at == len(lines):
            return w
        at += 1
    return None


def expect(case, want, got, ports):
    missing = matches(want, got, ports)
    if missing is not None:
        fail("case %s: expected the line %r (in the page's order) in:\n%s" % (case, missing, got))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, process, what, log):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            fail("%s exited with %d before listening on port %d:\n%s"
                 % (what, process.returncode, port, read(log)))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)  # it is starting: wait for it to listen
    fail("%s did not listen on port %d within 30 s:\n%s" % (what, port, read(log)))


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def stop(process):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class Shell:
    """Runs the page's commands in `cwd`, as a reader's shell would."""

    def __init__(self, cwd, env, ports, cmake):
        self.cwd, self.env, self.ports, self.cmake = cwd, env, ports, cmake
        self.background = []  # (process, log path)

    def command(self, line):
        cmd = localize(line, self.ports, bare=True)
        if cmd.startswith("cmake "):
            cmd = shlex.quote(self.cmake) + cmd[len("cmake"):]
        program = line.split()[0]
        if "/" not in program and shutil.which(program, path=self.env["PATH"]) is None:
            fail("the page's command %r needs %s, which is not installed: install the Debian "
                 "package %r (scripts/install-deps.sh does)"
                 % (line, program, PACKAGES.get(program, program)))
        return cmd

    def start(self, line):
        cmd = self.command(line.rstrip().rstrip("&").rstrip())
        log = os.path.join(self.cwd, "job%d.log" % (len(self.background) + 1))
        print("$ %s &  (output: %s)" % (cmd, log), flush=True)
        with open(log, "w") as out:
            process = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=self.cwd, env=self.env,
                                       stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        self.background.append((process, log))
        named = [int(p) for p in re.findall(r"\b(%s)\b" % "|".join(map(str, PAGE_PORTS)), line)]
        if named:
            wait_listening(self.ports[named[-1]], process, line, log)
        return log

    def output(self, line):
        cmd = self.command(line)
        print("$ " + cmd, flush=True)
        p = subprocess.run(["bash", "-c", cmd], cwd=self.cwd, env=self.env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        if p.returncode != 0:
            fail("the page's command %r failed (%d):\n%s" % (line, p.returncode, p.stdout))
        return p.stdout

    def script(self, commands, want):
        """Runs one sh block; `want`: the output block that follows it (or None)."""
        got = ""
        for line in commands:
            if line.rstrip().endswith("&"):
                self.start(line)
            elif line.startswith("promtool query") and want is not None:
                deadline = time.monotonic() + POLL_SECONDS
                while True:
                    out = self.output(line)
                    if matches(want, got + out, self.ports) is None:
                        break
                    if time.monotonic() > deadline:
                        fail("after %d s, %r still answers:\n%s\nnot the page's output:\n%s\n"
                             "(the background jobs' output: %s)"
                             % (POLL_SECONDS, line, out, "\n".join(want),
                                ", ".join(log for _, log in self.background)))
                    time.sleep(1)  # Prometheus has not scraped the service yet
                got += out
            else:
                got += self.output(line)
        return got

    def stop_all(self):
        for process, _ in reversed(self.background):
            stop(process)


def main():
    ap = argparse.ArgumentParser()
    for a in ("page", "work", "prefix", "cmake", "cxx"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--launcher", default="")
    args = ap.parse_args()
    source = os.path.dirname(os.path.dirname(os.path.abspath(args.page)))

    with open(args.page, encoding="utf-8") as f:
        files, outputs, scripts = blocks(f.read())
    for name in ("CMakeLists.txt", "resilience.toml", "main.cc", "service.cc", "prometheus.yml",
                 "alerts.yml"):
        if name not in files:
            fail("%s: no block with title=%s" % (args.page, name))
    for case in ("up", "down"):
        if case not in outputs:
            fail("%s: no block with output=%s" % (args.page, case))
    if not scripts or scripts[0][0] != STEP4:
        fail("%s: the first ```sh block is not the commands this test runs for it:\n%s\n"
             "(update STEP4 and what main() does with them together)"
             % (args.page, "\n".join(scripts[0][0] if scripts else [])))
    for commands, cases in scripts[1:]:
        if len(cases) > 1:
            fail("%s: several output blocks (%s) after the ```sh block %r"
                 % (args.page, ", ".join(cases), commands))
    # The page's alert is the one the project ships.
    shipped = read(os.path.join(source, "docs", "alerts", "bulwark.rules.yml"))
    exprs = re.findall(r"^\s*expr:\s*(.+)$", files["alerts.yml"], re.M)
    if not exprs or any(e not in shipped for e in exprs):
        fail("alerts.yml: its expressions %s are not docs/alerts/bulwark.rules.yml's" % exprs)

    ports = {p: free_port() for p in PAGE_PORTS}
    while len(set(ports.values())) < len(ports):
        ports = {p: free_port() for p in PAGE_PORTS}
    shutil.rmtree(args.work, ignore_errors=True)
    src = os.path.join(args.work, "src")
    build, www = os.path.join(src, "build"), os.path.join(src, "www")
    os.makedirs(www)
    for name, text in files.items():
        with open(os.path.join(src, name), "w", encoding="utf-8") as f:
            f.write(localize(text, ports))
    with open(os.path.join(www, "hello.txt"), "w", encoding="utf-8") as f:
        f.write("hello\n")

    configure = [args.cmake, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_PREFIX_PATH=" + args.prefix, "-DCMAKE_CXX_COMPILER=" + args.cxx]
    if args.launcher:
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + args.launcher)
    run(configure, 120)
    run([args.cmake, "--build", build, "--parallel", "2"], 300)
    program = os.path.join(build, "hello")
    config = os.path.join(src, "resilience.toml")

    # up: a server answering on the upstream's port.
    port = ports[8000]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=www,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d/hello.txt" % port
    try:
        deadline = time.monotonic() + 10
        ready = False
        while not ready and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    ready = r.read() == b"hello\n"
            except OSError:
                time.sleep(0.05)  # the server is starting: wait for it to listen
        if not ready:
            fail("python3 -m http.server did not serve %s within 10 s" % url)
        expect("up", outputs["up"], run([program, url, config], 60), ports)
    finally:
        stop(server)

    # down: connections to a bound, non-listening socket are refused.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = dict(ports)
        down[8000] = s.getsockname()[1]
        url = "http://127.0.0.1:%d/hello.txt" % down[8000]
        expect("down", outputs["down"], run([program, url, config], 60), down)

    # The later steps: each command as written, in the project's directory.
    env = dict(os.environ)
    env["PATH"] = os.path.join(args.prefix, "bin") + os.pathsep + env.get("PATH", "")
    env["BULWARK_SOURCE"] = source
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"  # curl: loopback, never a proxy
    shell = Shell(src, env, ports, args.cmake)
    try:
        for commands, cases in scripts[1:]:
            got = shell.script(commands, outputs[cases[0]] if cases else None)
            if cases:
                expect(cases[0], outputs[cases[0]], got, ports)
        # Prometheus loaded the alert rule too.
        rules = "http://127.0.0.1:%d/api/v1/rules" % ports[9090]
        with urllib.request.urlopen(rules, timeout=10) as r:
            body = r.read().decode("utf-8")
        if "CircuitBreakerOpenTooLong" not in body:
            fail("Prometheus did not load alerts.yml: %s answered %s" % (rules, body))
    finally:
        shell.stop_all()
    print("packaging_getting_started: ok")


if __name__ == "__main__":
    main()
