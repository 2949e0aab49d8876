"""The CPU one run costs the whole machine, sandlot's and the floors under it:
`python3 scripts/bench_floor.py SANDLOT [--runs N] [--rounds R]` (as root; SANDLOT a release build).

Throughput on a saturated machine is its cores divided by the CPU each run costs, so this measures that cost
directly, from /proc/stat (user, system, interrupts: every process and kernel thread, including the work the kernel
defers, such as a namespace's teardown), over N runs per row in R alternating rounds:
- bare interpreters, two at a time (the throughput goal's baseline);
- bubblewrap running the same bash, with fresh user, pid and mount namespaces (the least a fresh namespace sandbox
  per run costs on this kernel), and with a fresh network namespace too;
- sandlot: tools/call run_code of `echo 1` in bash and of `print(1)` in Python, from 32 clients (distinct
  conversations, as bench_load.py).
The last line says what a run may cost for sandlot's Python runs to reach twice the bare interpreter's runs/s."""

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench_load import PYTHON, run_clients, start_load_server

BWRAP_ROOT = ["--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
              "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc",
              "--dev", "/dev", "--tmpfs", "/tmp"]
BASH = ["/bin/bash", "-c", "echo 1"]


def busy_ticks():
    """The machine's busy clock ticks so far (all of /proc/stat's first line but idle and iowait)."""
    with open("/proc/stat") as stat:
        values = [int(value) for value in stat.readline().split()[1:9]]
    return sum(values) - values[3] - values[4]


def measure(work, runs):
    """(busy ticks, wall seconds) that `work(runs)` took."""
    before, start = busy_ticks(), time.perf_counter()
    work(runs)
    return busy_ticks() - before, time.perf_counter() - start


def two_at_a_time(argv):
    def work(runs):
        with ThreadPoolExecutor(2) as pool:
            codes = list(pool.map(lambda _: subprocess.run(argv, stdout=subprocess.DEVNULL).returncode, range(runs)))
        if any(codes):
            raise SystemExit(f"{argv[0]} failed: exit codes {set(codes)}")
    return work


def through_sandlot(port, token, clients, language, code):
    def work(runs):
        _, _, errors = asyncio.run(run_clients(port, token, clients, runs, language, code))
        if errors:
            raise SystemExit(f"sandlot {language}: {len(errors)} errors, the first: {errors[0]}")
    return work


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=1200, help="runs per row, all rounds together")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bubblewrap (bwrap) is needed: apt-get install bubblewrap")
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    per_round = args.runs // args.rounds
    with tempfile.TemporaryDirectory(prefix="sandlot-bench-floor-") as root:
        server, port, token = start_load_server(args.sandlot, os.path.join(root, "sandlot"))
        try:
            for language, code in (("bash", "echo 1"), ("python", "print(1)")):
                asyncio.run(run_clients(port, token, args.clients, 4 * args.clients, language, code))  # warm-up
            rows = [
                (f"bare {PYTHON} -c 'print(1)', 2 at a time", two_at_a_time([PYTHON, "-c", "print(1)"])),
                ("bare bash -c 'echo 1', 2 at a time", two_at_a_time(BASH)),
                ("bubblewrap (user, pid, mount ns) + bash", two_at_a_time([bwrap, "--unshare-user", "--unshare-pid",
                                                                           *BWRAP_ROOT, *BASH])),
                ("bubblewrap --unshare-all (+ net ns) + bash", two_at_a_time([bwrap, "--unshare-all", *BWRAP_ROOT,
                                                                              *BASH])),
                (f"sandlot tools/call bash 'echo 1', {args.clients} clients",
                 through_sandlot(port, token, args.clients, "bash", "echo 1")),
                (f"sandlot tools/call python 'print(1)', {args.clients} clients",
                 through_sandlot(port, token, args.clients, "python", "print(1)")),
            ]
            totals = {label: [0, 0.0] for label, _ in rows}
            for _ in range(args.rounds):  # alternating, so that drift on the machine hits every row alike
                for label, work in rows:
                    ticks, wall = measure(work, per_round)
                    totals[label][0] += ticks
                    totals[label][1] += wall
        finally:
            server.terminate()
            server.wait(15)
    runs = per_round * args.rounds
    cost = {label: ticks * tick_ms / runs for label, (ticks, _) in totals.items()}
    rate = {label: runs / wall for label, (_, wall) in totals.items()}
    bare = rows[0][0]
    print(f"{os.cpu_count()} cores, {runs} runs per row in {args.rounds} alternating rounds; CPU from /proc/stat")
    print("| | machine CPU per run, ms | runs/s | CPU vs bare python |")
    print("|---|---|---|---|")
    for label, _ in rows:
        print(f"| {label} | {cost[label]:.2f} | {rate[label]:.1f} | {cost[label] / cost[bare]:.2f} |")
    print(f"twice the bare interpreter's runs/s ({2 * rate[bare]:.1f}) on these cores needs at most "
          f"{cost[bare] / 2:.2f} ms of machine CPU per run")


if __name__ == "__main__":
    main()
