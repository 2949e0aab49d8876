"""Time to first byte through the whole egress path: `python3 scripts/bench_egress_path.py SANDLOT [--requests N]`
(as root; SANDLOT a build of sandlot). Builds the test internet of tests/e2e/internet (a network namespace with an
HTTP server on TEST-NET-3), starts `sandlot serve` with a policy allowing its host, and times `curl`'s first byte
for N requests, each on a new connection: from the host straight to the server (the baseline), and from inside one
sandbox run through sandlot's link, gateway and proxy, both with the proxy variables (`HTTP_PROXY`) and without
them (caught by the gateway). One table, ratios to the baseline."""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

from benchlib import free_port, percentile, start_server  # noqa: E402
from internet import servers  # noqa: E402
from internet.internet import Internet  # noqa: E402

CURL = "curl -s -o /dev/null -w '%{time_starttransfer}\\n'"


def sandbox_times(port, token, requests, proxied):
    """First-byte seconds of `requests` curls from one sandbox run."""
    flag = "" if proxied else "--noproxy '*'"
    code = f"for i in $(seq {requests}); do {CURL} {flag} http://allowed.test/bench; done"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code",
        "arguments": {"conversationId": "bench-egress", "language": "bash", "code": code, "timeoutSeconds": 300}}})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body.encode(), headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
    reply = json.loads(urllib.request.urlopen(request, timeout=600).read())
    stdout = reply["result"]["structuredContent"]["stdout"]
    return [float(line) * 1000 for line in stdout.split()]


def host_times(requests):
    script = f"for i in $(seq {requests}); do {CURL} http://{servers.ALLOWED}/bench -H 'Host: allowed.test'; done"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return [float(line) * 1000 for line in out.split()]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sandlot")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandlot-bench-egress-") as work:
        internet = Internet(work).start()
        server = None
        try:
            port, token = free_port(), "bench-" + os.urandom(8).hex()
            env = dict(os.environ, MCP_API_TOKEN=token, SANDBOX_ROOT=os.path.join(work, "root"),
                       MCP_HTTP_ADDR=f"127.0.0.1:{port}", SANDLOT_LOG="warn",
                       SANDLOT_EGRESS_POLICY=json.dumps({"allow": ["allowed.test"]}),
                       SANDLOT_EGRESS_NAMESERVERS=f"{servers.DNS}:53")
            server = start_server(args.sandlot, env, port)
            sandbox_times(port, token, 10, True)  # warm-up: the conversation, the synthetic name
            rows = {"direct, from the host": host_times(args.requests),
                    "sandbox, HTTP_PROXY": sandbox_times(port, token, args.requests, True),
                    "sandbox, caught (no proxy)": sandbox_times(port, token, args.requests, False)}
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
            internet.stop()
    base = percentile(rows["direct, from the host"], 50)
    print(f"time to first byte, {args.requests} requests each, a new connection each (curl, plain HTTP)")
    print(f"{'path':<30} {'p50 ms':>8} {'p95 ms':>8} {'p50/direct':>11} {'+ms p50':>8}")
    for name, samples in rows.items():
        p50 = percentile(samples, 50)
        print(f"{name:<30} {p50:8.3f} {percentile(samples, 95):8.3f} {p50 / base:11.2f} {p50 - base:8.3f}")


if __name__ == "__main__":
    main()
