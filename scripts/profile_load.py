"""Where the CPU of a loaded server goes: `python3 scripts/profile_load.py SANDLOT [--calls N] [--perf FILE]`
(as root; SANDLOT a release build). One server as bench_load.py starts it gets N tools/call print(1) from 32
clients; prints runs/s and the machine's CPU per run (user, system, softirq: /proc/stat over the load), and with
--perf records a system-wide profile to FILE (`perf report -i FILE --sort comm`) for the same window."""

import argparse
import asyncio
import os
import subprocess
import tempfile

from bench_load import run_clients, start_load_server

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_ticks():
    with open("/proc/stat") as stat:
        return [int(value) for value in stat.readline().split()[1:9]]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sandlot")
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--perf", help="record a system-wide perf profile to this file")
    parser.add_argument("--language", default="python", help="the runs' language (python unless said)")
    parser.add_argument("--code", default="print(1)", help="the runs' code; it must print 1")
    args = parser.parse_args()
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="sandlot-profile-load-") as root:
        server, port, token = start_load_server(args.sandlot, os.path.join(root, "sandlot"))
        try:
            # Warm-up: every conversation exists.
            asyncio.run(run_clients(port, token, args.clients, 200, args.language, args.code))
            perf = None
            if args.perf:
                perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "999", "-o", args.perf],
                                        stderr=subprocess.DEVNULL)
            before = cpu_ticks()
            took, _, errors = asyncio.run(run_clients(port, token, args.clients, args.calls, args.language, args.code))
            after = cpu_ticks()
            if perf:
                perf.send_signal(2)
                perf.wait()
        finally:
            server.terminate()
            server.wait(15)
    spent = {name: (b - a) * tick_ms / args.calls for name, a, b in zip(FIELDS, before, after)}
    busy = sum(value for name, value in spent.items() if name not in ("idle", "iowait"))
    print(f"{args.calls / took:.1f} runs/s, {len(errors)} errors, {os.cpu_count()} cores")
    print("CPU per run, ms: " + ", ".join(f"{name} {spent[name]:.2f}" for name in ("user", "system", "softirq"))
          + f"; busy {busy:.2f}, idle {spent['idle']:.2f}")


if __name__ == "__main__":
    main()
