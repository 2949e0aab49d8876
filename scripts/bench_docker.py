#!/usr/bin/env python3
"""The Docker backend's speed (issue 4): `print(1)` through sandlot's Docker backend (the CLI, and a warm server's
tools/call), against a raw `docker run --rm -i runner-python` and against the native jail, round-robin.

Usage: bench_docker.py SANDLOT [--runs N]   (root; dockerd running; runner images built)
"""

import argparse
import os
import shutil
import tempfile

from benchlib import Connection, free_port, print_latency_table, remove_work, round_robin, spawn_and_wait, start_server


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    sandlot = os.path.abspath(args.sandlot)
    docker = shutil.which("docker")
    work = tempfile.mkdtemp(prefix="sandlot-bench-docker-")
    code_file = os.path.join(work, "print1.py")
    with open(code_file, "w") as f:
        f.write("print(1)\n")
    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "SANDLOT_LOG": "error", "SANDLOT_PYTHON": "/usr/bin/python3",
           "MCP_API_TOKEN": token, "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, "srv"),
           "FILE_SECRET": "bench", "SANDLOT_BACKEND": "docker"}
    server = start_server(sandlot, env, port)
    try:
        connection = Connection(port, token)
        native_env = {k: v for k, v in env.items() if k != "SANDLOT_BACKEND"}
        rows = [
            ("docker run --rm -i", lambda: spawn_and_wait([docker, "run", "--rm", "-i", "runner-python"], env, code_file)),
            ("sandlot run (docker)", lambda: spawn_and_wait([sandlot, "run", "-l", "python", "--root", os.path.join(work, "cli"), code_file], env)),
            ("tools/call (docker)", connection.run_code_ms),
            ("sandlot run (native)", lambda: spawn_and_wait([sandlot, "run", "-l", "python", "--root", os.path.join(work, "native"), code_file], native_env)),
        ]
        samples = round_robin(rows, args.runs, 3)
        print(f"print(1), {args.runs} runs each, round-robin")
        print_latency_table(samples, [name for name, _ in rows], "docker run --rm -i", "docker run")
    finally:
        server.terminate()
        server.wait(timeout=20)
        remove_work(work)


if __name__ == "__main__":
    main()
