"""The load benchmark of scripts/bench-load.sh: sandlot's throughput with many clients against the hardware's
baseline (bare interpreters, two at a time, on this machine's cores)."""

import argparse
import asyncio
import json
import os
import re
import tempfile
import threading
import time

from benchlib import free_port, percentile, spawn_and_wait, start_server, wait_for_templates

PYTHON = "/usr/bin/python3"
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sandbox.run_code", "arguments": {"language": "python", "code": "print(1)"}}}


def run_threads(workers, total, once):
    """Runs `once()` `total` times from `workers` threads, each taking the next run as it finishes; returns (wall
    seconds, [latency ms], [errors])."""
    lock, taken, latencies, errors = threading.Lock(), [0], [], []

    def worker():
        while True:
            with lock:
                if taken[0] >= total:
                    return
                taken[0] += 1
            start = time.perf_counter_ns()
            once()
            latencies.append((time.perf_counter_ns() - start) / 1e6)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies, errors


async def run_clients(port, token, clients, total, language="python", code="print(1)"):
    """`total` tools/call run_code of `code` (print(1) unless said; it must print 1) from `clients` keep-alive
    connections (one conversation each), driven by one asyncio loop so that the load generator itself costs little
    CPU; returns (wall seconds, [latency ms], [errors])."""
    taken, latencies, errors = [0], [], []

    async def client(index):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        arguments = {"language": language, "code": code, "conversationId": f"load-{index}"}
        body = json.dumps({**CALL, "params": {**CALL["params"], "arguments": arguments}}).encode()
        request = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                   f"Content-Type: application/json\r\nAccept: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        while taken[0] < total:
            taken[0] += 1
            start = time.perf_counter_ns()
            writer.write(request)
            header = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", header).group(1))
            reply = json.loads(await reader.readexactly(length))
            latencies.append((time.perf_counter_ns() - start) / 1e6)
            content = reply.get("result", {}).get("structuredContent", {})
            if not header.startswith(b"HTTP/1.1 200") or content.get("stdout") != "1\n":
                errors.append(f"unexpected reply: {reply}")
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return time.perf_counter() - start, latencies, errors


def start_load_server(sandlot, root, template="true"):
    """`sandlot serve` as the load benchmarks run it, on `root`, its Python templates ready: (process, port, token).
    Python is /usr/bin/python3; it asks for the cgroup tuning (SANDLOT_TUNE_CGROUPS), as an operator who benchmarks
    would; `template`: SANDLOT_PYTHON_TEMPLATE."""
    port, token = free_port(), "bench-" + os.urandom(8).hex()
    env = dict(os.environ, MCP_API_TOKEN=token, SANDBOX_ROOT=root, MCP_HTTP_ADDR=f"127.0.0.1:{port}",
               SANDLOT_LOG="warn", SANDLOT_TUNE_CGROUPS="true", SANDLOT_PYTHON_TEMPLATE=template,
               SANDLOT_PYTHON=PYTHON)
    server = start_server(sandlot, env, port)
    try:
        wait_for_templates(port, token)
    except BaseException:
        server.terminate()
        raise
    return server, port, token


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return kib / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sandlot")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cores = os.cpu_count()
    per_round = args.calls // args.rounds

    # Two servers: as shipped (Python runs forked from a template), and with every run starting its own interpreter
    # (SANDLOT_PYTHON_TEMPLATE=false, as before issue 32).
    sides = {"bare": [0.0, [], []], "sandlot": [0.0, [], []], "exec": [0.0, [], []]}
    print(f"{args.calls} x {PYTHON} -c 'print(1)' 2 at a time, and {args.calls} tools/call run_code print(1) from "
          f"{args.clients} clients to each of two servers, in {args.rounds} alternating rounds ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="sandlot-bench-load-") as root:
        servers = {}
        try:
            for name, template in (("sandlot", "true"), ("exec", "false")):
                servers[name] = start_load_server(args.sandlot, os.path.join(root, name), template)
                _, port, token = servers[name]
                asyncio.run(run_clients(port, token, 1, 20))  # warm-up
            # Alternating rounds, so that drift on the machine hits every side alike.
            for _ in range(args.rounds):
                results = {"bare": run_threads(
                    2, per_round, lambda: spawn_and_wait([PYTHON, "-c", "print(1)"], {}))}
                for name, (_, port, token) in servers.items():
                    results[name] = asyncio.run(run_clients(port, token, args.clients, per_round))
                for name, (took, samples, failed) in results.items():
                    side = sides[name]
                    side[0], side[1], side[2] = side[0] + took, side[1] + samples, side[2] + failed
            rss = {name: peak_rss_mib(server.pid) for name, (server, _, _) in servers.items()}
        finally:
            for server, _, _ in servers.values():
                server.terminate()
                server.wait(15)

    rates = {name: (len(latencies) + len(errors)) / wall for name, (wall, latencies, errors) in sides.items()}
    print()
    print(f"{cores} cores; sandlot runs at most {2 * cores} at once (SANDLOT_MAX_CONCURRENT_RUNS default)")
    print("| | clients | runs/s | p50 ms | p99 ms | errors | peak RSS | runs/s vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    rows = (("bare", "bare python3 -c 'print(1)'", 2, "-", ""),
            ("sandlot", "sandlot tools/call run_code", args.clients, f"{rss['sandlot']:.1f} MiB", " (target >= 2)"),
            ("exec", "same, SANDLOT_PYTHON_TEMPLATE=false", args.clients, f"{rss['exec']:.1f} MiB", ""))
    for name, label, clients, peak, note in rows:
        _, latencies, errors = sides[name]
        print(f"| {label} | {clients} | {rates[name]:.1f} | {percentile(latencies, 50):.2f} | "
              f"{percentile(latencies, 99):.2f} | {len(errors)} | {peak} | {rates[name] / rates['bare']:.2f}{note} |")
    for error in (sides["sandlot"][2] + sides["exec"][2])[:5]:
        print("error:", error)


if __name__ == "__main__":
    main()
