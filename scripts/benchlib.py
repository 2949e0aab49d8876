"""Helpers shared by the benchmark scripts: timing a spawned command, percentiles, a raw MCP connection."""

import json
import os
import random
import re
import shutil
import socket
import subprocess
import statistics
import time
import urllib.request


def percentile(samples, p):
    """The p-th percentile (nearest rank) of the samples."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def print_latency_table(samples, names, baseline, ratio_label):
    """One row per name: p50, p95 and mean milliseconds, p50 and p95 against the `baseline` row, and the p50
    overhead over it in ms (the ratio moves with the machine's speed at the baseline; the overhead is sandlot's)."""
    base50, base95 = percentile(samples[baseline], 50), percentile(samples[baseline], 95)
    width = max(len(name) for name in names) + 2
    p50_label, p95_label = f"p50/{ratio_label}", f"p95/{ratio_label}"
    print(f"{'command':<{width}} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {p50_label:>{len(p50_label) + 1}} "
          f"{p95_label:>{len(p95_label) + 1}} {'+ms p50':>8}")
    for name in names:
        s = samples[name]
        p50, p95 = percentile(s, 50), percentile(s, 95)
        print(f"{name:<{width}} {p50:8.2f} {p95:8.2f} {statistics.fmean(s):8.2f} "
              f"{p50 / base50:{len(p50_label) + 1}.2f} {p95 / base95:{len(p95_label) + 1}.2f} {p50 - base50:8.2f}")


def spawn_and_wait(argv, env, stdin_path=None):
    """Milliseconds from posix_spawn to reaping `argv` (stdout discarded, stdin from `stdin_path` if given); fails
    on a non-zero exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1)]
    if stdin_path:
        actions.append((os.POSIX_SPAWN_OPEN, 0, stdin_path, os.O_RDONLY, 0))
    try:
        start = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
        _, status = os.waitpid(pid, 0)
        elapsed = time.perf_counter_ns() - start
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed ({status}): {' '.join(argv)}")
    return elapsed / 1e6


def round_robin(rows, runs, warmup):
    """Runs every `(name, measure)` row `warmup` times, then `runs` times, one of each per round (so that drift on
    the machine hits all rows alike), in a new random order each round: a command is measurably faster or slower
    depending on which one ran just before it (up to 0.5 ms for `sandlot run`, which runs after bare python or after
    another sandbox), so no row may always follow the same one. Returns the milliseconds each `measure()` returned,
    by name."""
    order = random.Random(1)  # the same orders on every invocation
    for _ in range(warmup):
        for _, measure in rows:
            measure()
    samples = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, measure in order.sample(rows, len(rows)):
            samples[name].append(measure())
    return samples


class Connection:
    """One keep-alive HTTP/1.1 connection posting JSON-RPC to /mcp (stateless: no session, no initialize)."""

    def __init__(self, port, token):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.token = token
        self.buffer = b""

    def call(self, payload):
        body = json.dumps(payload).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.sock.sendall(head + body)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(65536)
        header, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)content-length: *(\d+)", header).group(1))
        while len(self.buffer) < length:
            self.buffer += self.sock.recv(65536)
        data, self.buffer = self.buffer[:length], self.buffer[length:]
        return json.loads(data)

    def run_code_ms(self, code="print(1)", expected_stdout="1\n", language="python", conversation="bench"):
        """Milliseconds for one `sandbox.run_code` tools/call of `code` in `language` in `conversation`, checking its
        stdout."""
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox.run_code",
                "arguments": {"conversationId": conversation, "language": language, "code": code}}}
        start = time.perf_counter_ns()
        reply = self.call(call)
        elapsed = (time.perf_counter_ns() - start) / 1e6
        assert reply["result"]["structuredContent"]["stdout"] == expected_stdout, reply
        return elapsed


def start_server(sandlot, env, port):
    """Starts `sandlot serve` with `env` and waits for /healthz."""
    import urllib.request
    server = subprocess.Popen([sandlot, "serve"], env=env, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.05)
    server.terminate()
    raise SystemExit("sandlot serve did not start")


def wait_for_templates(port, token):
    """Waits until the server's readiness says its Python templates are ready (at once without templates)."""
    for _ in range(1200):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/readyz", headers={"Authorization": f"Bearer {token}"})
        checks = json.load(urllib.request.urlopen(request, timeout=5))["checks"]
        template = [c for c in checks if c["name"] == "python-template"]
        if not template or template[0]["detail"].startswith("ready"):
            return
        time.sleep(0.05)
    raise SystemExit("the Python templates did not get ready")


def stop_servers(servers, work):
    """Stops the benchmark's servers, then removes its work directory (see `remove_work`)."""
    for server in servers:
        server.terminate()
        server.wait(timeout=20)
    remove_work(work)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_work(path):
    """Removes a benchmark's work directory. `sandlot run` leaves its conversation's disk image mounted (as root, for
    the next run), so first detach every mount below `path`, deepest first: a directory with mounts in it cannot be
    removed, and each would hold a loop device."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split(" ")[4] for line in mountinfo]
    below = [p for p in points if p == path or p.startswith(path.rstrip("/") + "/")]
    for point in sorted(below, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def pss_kib(pid):
    """Proportional set size of one process (its share of pages it shares with others)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))


def descendants(pid):
    """Pids of every process below `pid`."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
