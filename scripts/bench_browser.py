#!/usr/bin/env python3
"""The browser per conversation (issue 33), through `sandbox_browser` tools/calls: a conversation's first navigate
(its live sandbox and Chromium start; the sandbox is closed after, untimed), its first navigate+screenshot, and a
warm browser's navigate, screenshot and navigate+screenshot, against `chromium --headless --screenshot` run bare on
the host (a whole browser's start, one page and one screenshot). The page is a small HTML file in the conversation's
/data (file:///data/page.html), so no network is involved.

Usage: bench_browser.py SANDLOT [--runs N] [--env NAME=VALUE ...]   (as root)
"""

import argparse
import os
import tempfile
import time

from benchlib import Connection, free_port, print_latency_table, remove_work, round_robin, spawn_and_wait, start_server

CHROMIUM = "/usr/lib/chromium/chromium"
PAGE = ("<!doctype html><html><body style='margin:0'><div style='width:640px;height:400px;background:#14a0dc'>"
        "</div><p>sandlot benchmark page</p></body></html>")


def tool(connection, name, arguments):
    reply = connection.call({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": name, "arguments": arguments}})
    result = reply["result"]
    assert result.get("isError") is not True, reply
    return result


def browser_ms(connection, conversation, *actions):
    """Milliseconds for `actions` (each `(action, arguments)`) in the conversation's browser, one call each."""
    start = time.perf_counter_ns()
    for action, arguments in actions:
        tool(connection, "sandbox_browser", {"conversationId": conversation, "action": action, **arguments})
    return (time.perf_counter_ns() - start) / 1e6


NAVIGATE = ("navigate", {"url": "file:///data/page.html"})
SCREENSHOT = ("screenshot", {"path": "shot.png"})


def cold_ms(connection, counter, *actions):
    """A new conversation's first browser calls (the page uploaded first, untimed), then its live sandbox closed
    (untimed, so that sandboxes do not pile up to the cap)."""
    counter[0] += 1
    conversation = f"bench-cold-{counter[0]}"
    tool(connection, "sandbox_upload_file", {"conversationId": conversation, "path": "page.html", "content": PAGE})
    elapsed = browser_ms(connection, conversation, *actions)
    tool(connection, "sandbox_session", {"conversationId": conversation, "action": "close"})
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sandlot")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    sandlot = os.path.abspath(args.sandlot)
    work = tempfile.mkdtemp(prefix="sandlot-bench-browser-")
    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    env = {"PATH": "/usr/bin:/bin", "SANDLOT_LOG": "error", "MCP_API_TOKEN": token,
           "MCP_HTTP_ADDR": f"127.0.0.1:{port}", "SANDBOX_ROOT": os.path.join(work, "root"), "FILE_SECRET": "bench"}
    env.update(setting.split("=", 1) for setting in args.env)
    page = os.path.join(work, "page.html")
    with open(page, "w") as f:
        f.write(PAGE)
    bare = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={work}/bare-profile", f"--screenshot={work}/bare.png", "--window-size=1280,800",
            f"file://{page}"]
    # Its stderr (D-Bus complaints) silenced by a shell that execs it.
    quiet = ["/bin/sh", "-c", 'exec "$@" 2>/dev/null', "sh", *bare]
    server = start_server(sandlot, env, port)
    try:
        connection = Connection(port, token)
        tool(connection, "sandbox_upload_file", {"conversationId": "bench-warm", "path": "page.html", "content": PAGE})
        counter = [0]
        rows = [
            ("bare chromium --screenshot", lambda: spawn_and_wait(quiet, dict(os.environ, HOME=work))),
            ("cold: first navigate", lambda: cold_ms(connection, counter, NAVIGATE)),
            ("cold: navigate+screenshot", lambda: cold_ms(connection, counter, NAVIGATE, SCREENSHOT)),
            ("warm: navigate", lambda: browser_ms(connection, "bench-warm", NAVIGATE)),
            ("warm: screenshot", lambda: browser_ms(connection, "bench-warm", SCREENSHOT)),
            ("warm: navigate+screenshot", lambda: browser_ms(connection, "bench-warm", NAVIGATE, SCREENSHOT)),
        ]
        samples = round_robin(rows, args.runs, 2)
        print(f"sandbox_browser tools/calls, {args.runs} runs each, round-robin; the page is file:///data/page.html, "
              "the viewport 1280x800")
        print_latency_table(samples, [name for name, _ in rows], "bare chromium --screenshot", "bare")
        status = tool(connection, "sandbox_session", {"conversationId": "bench-warm", "action": "status"})
        usage = status["structuredContent"]["usage"]
        print(f"\na warm browser's live sandbox: {usage['memoryBytes'] / 2**20:.0f} MiB (cgroup memory.current), "
              f"{usage['pids']} processes and threads")
    finally:
        server.terminate()
        server.wait(timeout=20)
        remove_work(work)


if __name__ == "__main__":
    main()
