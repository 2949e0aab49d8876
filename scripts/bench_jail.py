#!/usr/bin/env python3
"""Start-up latency of `python3 -c 'print(1)'`: bare, through `sandlot run` (in one conversation, and in a new
conversation every run), and through bubblewrap.

Every command runs the same interpreter (/usr/bin/python3, never a pyenv shim). The commands are run
round-robin (one of each per round) so that drift on the machine affects all of them alike; each is spawned
with posix_spawn and timed from spawn to reap. Prints one table with p50/p95 and the ratios to bare.

Usage: bench_jail.py SANDLOT [OTHER_SANDLOT] [--runs N]   (OTHER_SANDLOT: a second build to compare, e.g. before a change)
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import print_latency_table, remove_work, round_robin, spawn_and_wait

PYTHON = "/usr/bin/python3"
CODE = "print(1)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("other", nargs="?")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="sandlot-bench-")
    code_file = os.path.join(work, "print1.py")
    with open(code_file, "w") as f:
        f.write(CODE + "\n")
    root = os.path.join(work, "root")
    data = os.path.join(work, "bwrap-data")
    os.makedirs(data)
    # The cgroup tuning changes the host, so sandlot does it only when asked; a benchmark asks, as an operator would.
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_PYTHON": PYTHON, "SANDLOT_LOG": "error", "SANDLOT_TUNE_CGROUPS": "true"}

    commands = [("bare python3", [PYTHON, "-c", CODE])]
    commands.append(("sandlot run", [os.path.abspath(args.sandlot), "run", "-l", "python", "--root", root, "-c", "bench", code_file]))
    if args.other:
        commands.append(("sandlot run (other)", [os.path.abspath(args.other), "run", "-l", "python", "--root", root, "-c", "bench", code_file]))
    bwrap = shutil.which("bwrap")
    if bwrap:
        commands.append((
            "bubblewrap",
            [bwrap, "--unshare-all", "--die-with-parent", "--new-session",
             "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
             "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
             "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", data, "/data", "--chdir", "/data",
             PYTHON, "-c", CODE],
        ))
    else:
        print("bubblewrap not installed: its row is left out (apt-get install bubblewrap)", file=sys.stderr)

    rows = [(name, lambda argv=argv: spawn_and_wait(argv, env)) for name, argv in commands]
    samples = round_robin(rows, args.runs, args.warmup)
    print(f"python3 -c 'print(1)' start-up, {args.runs} runs each, round-robin; interpreter {PYTHON}")
    print_latency_table(samples, [name for name, _ in rows], "bare python3", "bare")

    # The runs above are all in one conversation ("bench"), as an agent's are. Here every run starts a new
    # conversation (builds before 2026-11-24 pinned a network namespace per conversation, which this defeats).
    fresh = iter(range(1 << 30))
    sandlot = os.path.abspath(args.sandlot)
    rows = [rows[0], ("sandlot run, new conv.", lambda: spawn_and_wait(
        [sandlot, "run", "-l", "python", "--root", root, "-c", f"new-{next(fresh)}", code_file], env))]
    samples = round_robin(rows, args.runs // 2, args.warmup)
    print(f"\nthe same, a new conversation every run, {args.runs // 2} runs each")
    print_latency_table(samples, [name for name, _ in rows], "bare python3", "bare")
    remove_work(work)


if __name__ == "__main__":
    main()
