#!/usr/bin/env python3
"""Issue 32's latency and memory benchmark: stateless `tools/call` against bare interpreters, with Python runs forked
from the server's templates (as shipped) and with every run starting its own interpreter
(`SANDLOT_PYTHON_TEMPLATE=false`), interleaved in one run; then what the templates cost in memory.

Usage: bench_fast.py SANDLOT [--runs N] [--python PATH]   (as root; PATH: the interpreter of both sides, by default
the scientific one of scripts/python-env.sh when present, so that the pandas rows run)
"""

import argparse
import os
import tempfile
import time

from benchlib import (Connection, descendants, free_port, print_latency_table, pss_kib, round_robin, spawn_and_wait,
                      start_server, stop_servers, wait_for_templates)

SCIENTIFIC = "/opt/sandlot/python/bin/python3"
PANDAS = "import pandas; print(pandas.__version__)"


def command_of(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        parts = cmdline.read().split(b"\0")
    if b"-c" in parts and b"sandlot's Python template" in b" ".join(parts):
        with open(f"/proc/{pid}/environ", "rb") as environ:
            preload = [v for v in environ.read().split(b"\0") if v.startswith(b"SANDLOT_TEMPLATE_PRELOAD=")]
        return "Python template (preloaded)" if preload and preload[0].split(b"=", 1)[1] else "Python template (bare)"
    return os.path.basename(parts[0].decode()) + (" " + parts[1].decode() if len(parts) > 1 and parts[1] else "")


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def label_of(pid):
    """What a process below the server is: a template, a prepared sandbox's child (a template's child that waits),
    or one of the jail's own processes (the zygote, warm inits, prepared sandboxes' inits and pid 1s)."""
    name = command_of(pid)
    if name.startswith("Python template"):
        return name
    parent = command_of(parent_of(pid))
    if parent.startswith("Python template"):
        return "prepared child of the " + parent[len("Python "):]
    if "__jail-zygote" in name:
        return "jail: zygote, inits, pid 1s"
    return name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--python", default=SCIENTIFIC if os.path.exists(SCIENTIFIC) else "/usr/bin/python3")
    args = parser.parse_args()
    sandlot, python = os.path.abspath(args.sandlot), args.python
    work = tempfile.mkdtemp(prefix="sandlot-bench-fast-")
    servers = {}
    try:
        connections = {}
        for side, template in (("forked", "true"), ("exec", "false")):
            port, token = free_port(), "bench-" + os.urandom(8).hex()
            env = {"PATH": "/usr/bin:/bin", "SANDLOT_PYTHON": python, "SANDLOT_LOG": "error", "MCP_API_TOKEN": token,
                   "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, side),
                   "FILE_SECRET": "bench", "SANDLOT_PYTHON_TEMPLATE": template,
                   "SANDLOT_TUNE_CGROUPS": "true"}  # as an operator who benchmarks would (bench_server.py does)
            servers[side] = start_server(sandlot, env, port)
            wait_for_templates(port, token)
            connections[side] = Connection(port, token)
        has_pandas = spawn_and_wait_ok([python, "-c", "import pandas"])
        version = None
        if has_pandas:
            version = os.popen(f"{python} -c 'import pandas; print(pandas.__version__)'").read()
        rows = [
            ("bare python -c 'print(1)'", lambda: spawn_and_wait([python, "-c", "print(1)"], {})),
            ("tools/call print(1), forked", lambda: connections["forked"].run_code_ms()),
            ("tools/call print(1), own interpreter", lambda: connections["exec"].run_code_ms()),
        ]
        if has_pandas:
            rows += [
                ("bare python -c 'import pandas'", lambda: spawn_and_wait([python, "-c", PANDAS], {})),
                ("tools/call import pandas, forked", lambda: connections["forked"].run_code_ms(PANDAS, version)),
                ("tools/call import pandas, own interpreter", lambda: connections["exec"].run_code_ms(PANDAS, version)),
            ]
        print(f"{args.runs} runs of each, interleaved; interpreter {python}", flush=True)
        samples = round_robin(rows, args.runs, warmup=5)
        names = [name for name, _ in rows]
        print()
        print_latency_table(samples, names[:3], names[0], "bare")
        if has_pandas:
            print()
            print_latency_table(samples, names[3:], names[3], "bare")
        print()
        print("memory at rest, the shipped server (PSS, KiB; its prepared sandboxes full, as at rest)")
        time.sleep(2)
        server = servers["forked"].pid
        groups = {"sandlot serve": [pss_kib(server)]}
        for pid in descendants(server):
            try:
                groups.setdefault(label_of(pid), []).append(pss_kib(pid))
            except OSError:
                continue
        for name, sizes in groups.items():
            print(f"{name + (f' (x{len(sizes)})' if len(sizes) > 1 else ''):<44} {sum(sizes):>8}")
        print(f"{'total':<44} {sum(sum(sizes) for sizes in groups.values()):>8}")
    finally:
        stop_servers(servers.values(), work)


def spawn_and_wait_ok(argv):
    try:
        spawn_and_wait(argv, {})
        return True
    except SystemExit:
        return False


if __name__ == "__main__":
    main()
