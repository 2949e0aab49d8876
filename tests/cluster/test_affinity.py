"""Conversation affinity through the shipped HAProxy configuration (deploy/haproxy/haproxy.cfg) in front of three
real `sandlot serve` nodes on loopback (docs/scaling.md).

- Each node its own root, one run history for all in PostgreSQL (`SANDLOT_HISTORY_URL`, a database of its own in the
  tests' cluster, scripts/postgres-test.sh): 32 client threads make 1,000 `tools/call sandbox_run_code` calls over 100
  conversations through HAProxy, half as 2026-07-28 clients (the `Mcp-Param-Conversation-Id` header, stateless) and
  half as older ones (the id only in the JSON body). Every call succeeds; every conversation's calls are served by one
  node (the `X-Served-By` header HAProxy adds), and every node's `/v1/runs` lists all 1,000 runs; each call appends a
  line to the conversation's `/data/log` and prints how many it found, so the counts go 0, 1, 2, ... with no gap
  (every call saw the files of the ones before). Then: the header's Base64 form reaches the same node; sessions stay
  on the node of their `initialize`; a legacy HTTP+SSE stream and its messages meet on one node; and
  deploy/nginx/nginx.conf in front of the same nodes keeps header-named conversations on one node each and older
  clients' on their token's.
- One root shared by the three nodes (the shared-storage layout): a node is killed (SIGKILL) under load. Its calls in
  flight fail with an error the client sees (recorded), every other call succeeds, and its conversations are then
  served by one other node each, which finds their files: their counts go on where they were.
- Two nodes, one history in PostgreSQL: a node killed for good leaves a run in flight, which the other node ends as
  interrupted once the dead node's lease runs out, leaving its own run alone. And event streams on one node hear
  the other's runs, only their tenant's.
- Two HAProxy instances sharing the sessions' stick table (the shipped peers section filled in): a session
  initialized through one keeps its node through the other.
- Throughput through HAProxy with one node and with three, printed for docs/benchmarks.md. On this project's 2-core
  machine the nodes share the same two cores, so the figures show the proxy's and the nodes' overhead, not a
  speed-up; nothing is asserted on them.

Needs root (the nodes start sandboxes), `haproxy` and `nginx` (Debian 12's; scripts/setup.sh installs them). The
binary is $SANDLOT_BIN, else target/debug/sandlot. Run: sudo .venv-e2e2/bin/python -m pytest -q -s tests/cluster
"""

import base64
import collections
import json
import os
import pathlib
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import httpx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy/haproxy/haproxy.cfg"
VERSION = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "affinity-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
TOKEN = "cluster-token-" + os.urandom(8).hex()
SECRET = "cluster-secret-" + os.urandom(8).hex()
# The nodes' sandboxes run as host uids of this test's (SANDLOT_SANDBOX_UIDS), above the other end-to-end tests'
# ranges (8,000,000 to 8,999,999). Nodes with a root each get 1,000 each. Nodes sharing a root must share one range:
# its first uid owns every conversation's files on disk, and a node of another range sees them as another user's
# (a run can read them, not write them). Leases of run uids are host-wide (a lock file per uid in
# /run/sandlot/uids), so nodes of one range on one host never run two sandboxes as the same uid.
UIDS_FIRST = 9_000_000 + (os.getpid() % 300) * 3000
# Each call: the lines its conversation's log had, then one more. `set -o noclobber` is not needed: a node runs a
# conversation's calls one at a time, so two calls reading the same count means two nodes ran it at once.
CODE = 'n=$(cat /data/log 2>/dev/null | wc -l); echo x >> /data/log || exit 3; echo "$n"'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary():
    return os.environ.get("SANDLOT_BIN") or str(REPO / "target/debug/sandlot")


def wait_until(condition, seconds, interval=0.05):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(interval)
    return condition()


class Node:
    def __init__(self, index, root, log_dir, shared, history_url=None, extra_env=None):
        self.name = f"node{index + 1}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        first = UIDS_FIRST + (0 if shared else index * 1000)
        env = dict(os.environ, MCP_API_TOKEN=TOKEN, FILE_SECRET=SECRET, SANDBOX_ROOT=str(root),
                   MCP_HTTP_ADDR=f"127.0.0.1:{self.port}", SANDLOT_LOG="warn",
                   SANDLOT_SANDBOX_UIDS=f"{first}-{first + 999}",
                   # Bash only here: no Python templates or prepared sandboxes to start on 2 busy cores.
                   SANDLOT_PYTHON_TEMPLATE="false", SANDLOT_PREPARED_LIVE_SANDBOXES="0", SANDLOT_PROFILES="none",
                   SANDLOT_TRUSTED_PROXIES="127.0.0.1")
        if history_url:
            env["SANDLOT_HISTORY_URL"] = history_url
        env.update(extra_env or {})
        self.log = open(log_dir / f"{self.name}.log", "wb")
        self.process = subprocess.Popen([binary(), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def ready(self):
        try:
            return httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def runs(self, conversation):
        response = httpx.get(f"{self.base}/v1/runs", params={"conversationId": conversation, "limit": 500},
                             headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()["runs"]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class HAProxy:
    """The shipped configuration, its listener and servers replaced by this test's, with a stats socket; with
    `peers` ([(name, port)]) its peers section filled in as its comment says, this instance being `local`."""

    def __init__(self, nodes, directory, peers=None, local=None):
        text = CONFIG.read_text()
        local_args = ["-L", local] if local else []
        self.port = free_port()
        self.directory = directory
        self.socket = directory / "haproxy.sock"
        text = text.replace("bind :8080", f"bind 127.0.0.1:{self.port}", 1)
        text = text.replace("global\n", f"global\n    stats socket {self.socket} mode 600 level admin\n", 1)
        servers = "".join(f"    server {n.name} 127.0.0.1:{n.port} id {i + 1}\n" for i, n in enumerate(nodes))
        text, count = re.subn(r"(    server node\d .*\n)+", servers, text)
        assert count == 1, "the shipped haproxy.cfg no longer lists its servers as the test expects"
        if peers:
            section = "peers sandlot_lbs\n" + "".join(f"    peer {name} 127.0.0.1:{port}\n" for name, port in peers)
            text, count = re.subn(r"# peers sandlot_lbs\n(#     peer .*\n)+", section, text)
            assert count == 1, "the shipped haproxy.cfg no longer has its peers section's template"
            text, count = re.subn(r"(\n    stick-table type string [^\n]*)", r"\1 peers sandlot_lbs", text)
            assert count == 1, "the shipped haproxy.cfg no longer has its sessions' stick table"
        path = directory / "haproxy.cfg"
        path.write_text(text)
        checked = subprocess.run(["haproxy", "-c", *local_args, "-f", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        self.log = open(directory / "haproxy.log", "wb")
        self.process = subprocess.Popen(["haproxy", "-db", *local_args, "-f", str(path)], stdout=self.log,
                                        stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def command(self, line):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def status(self):
        """Each server's state as HAProxy's health checks see it: {name: "UP" | "DOWN" | ...}."""
        try:
            lines = self.command("show stat").splitlines()
        except OSError:
            return {}
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","))) for line in lines[1:] if line]
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "sandlot" and r["svname"] not in
                ("FRONTEND", "BACKEND")}

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def cluster(tmp_path):
    """cluster(count, shared, history_url=None, env=None): `count` nodes behind HAProxy, on one shared root or a
    root each, with the run history in PostgreSQL at `history_url` when given, and `env` added to their environment."""
    assert os.geteuid() == 0, "the nodes start sandboxes and need root"
    assert shutil.which("haproxy"), "haproxy is missing (scripts/setup.sh installs it)"
    started = []

    def start(count, shared, history_url=None, env=None):
        nodes = [Node(i, tmp_path / ("root" if shared else f"root{i + 1}"), tmp_path, shared, history_url, env)
                 for i in range(count)]
        proxy = HAProxy(nodes, tmp_path)
        started.extend([*nodes, proxy])
        # A node's start on 2 busy cores: its zygote and warm inits; 60 s is far above it and still fails a node
        # that never becomes ready.
        assert wait_until(lambda: all(n.ready() for n in nodes), 60), [n.name for n in nodes if not n.ready()]
        assert wait_until(lambda: set(proxy.status().values()) == {"UP"}, 30), proxy.status()
        return nodes, proxy

    yield start
    for thing in reversed(started):
        thing.stop()
    # A killed node leaves its conversations' disk images mounted; detach them so the directory can go.
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split(" ")[4] for line in mountinfo]
    for point in sorted((p for p in points if p.startswith(str(tmp_path) + "/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)


def call(client, url, conversation, modern, header=None, session=None):
    """One `tools/call` through the proxy: (status, the count the run printed or None, the node, the error). A
    modern call sends `header` as its `Mcp-Param-Conversation-Id` when given; an older one may name a session."""
    arguments = {"conversationId": conversation, "language": "bash", "code": CODE}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sandbox_run_code", "arguments": arguments}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    if modern:
        body["params"]["_meta"] = META
        headers.update({"MCP-Protocol-Version": VERSION, "Mcp-Method": "tools/call", "Mcp-Name": "sandbox_run_code",
                        "Mcp-Param-Conversation-Id": header or conversation})
    if session:
        headers["Mcp-Session-Id"] = session
    try:
        response = client.post(url, json=body, headers=headers, timeout=120)
    except httpx.HTTPError as error:
        return None, None, None, type(error).__name__
    node = response.headers.get("x-served-by")
    if response.status_code != 200:
        return response.status_code, None, node, response.text[:200]
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    message = json.loads(text)
    result = message.get("result", {}).get("structuredContent")
    if not result or result.get("exitCode") != 0:
        return 200, None, node, json.dumps(message)[:300]
    return 200, int(result["stdout"]), node, None


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def task_request(client, url, method, task_id=None, arguments=None):
    """A 2026-07-28 request of a client that declares the Tasks extension: (status, JSON body, node)."""
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": TASKS}
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": VERSION, "Mcp-Method": method}
    if arguments is None:
        params, headers["Mcp-Name"] = {"taskId": task_id}, task_id
    else:
        params = {"name": "sandbox_run_code", "arguments": arguments}
        headers.update({"Mcp-Name": "sandbox_run_code", "Mcp-Param-Conversation-Id": arguments["conversationId"]})
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    response = client.post(url, json=body, headers=headers, timeout=60)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return response.status_code, json.loads(text), response.headers.get("x-served-by")


def create_task(client, url, conversation):
    """A `sandbox_run_code` call made a task: (its id, the node that took it)."""
    arguments = {"conversationId": conversation, "language": "bash", "code": "sleep 1; echo task"}
    status, body, node = task_request(client, url, "tools/call", arguments=arguments)
    assert status == 200 and body["result"]["resultType"] == "task", body
    return body["result"]["taskId"], node


class Load:
    """`clients` threads calling through the proxy, taking conversations from a shuffled list of calls."""

    def __init__(self, url, conversations, calls_each, clients=32, seed=0):
        self.url = url
        work = [c for c in conversations for _ in range(calls_each)]
        random.Random(seed).shuffle(work)
        self.work = queue.Queue()
        for c in work:
            self.work.put(c)
        self.results = []  # (conversation, status, count, node, error, started, ended)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def client(self):
        with httpx.Client() as client:
            while True:
                try:
                    conversation = self.work.get_nowait()
                except queue.Empty:
                    return
                started = time.monotonic()
                # Even-numbered conversations speak 2026-07-28, odd ones as older clients (body only).
                modern = int(conversation.rsplit("-", 1)[1]) % 2 == 0
                status, count, node, error = call(client, self.url, conversation, modern)
                with self.lock:
                    self.results.append((conversation, status, count, node, error, started, time.monotonic()))

    def run(self):
        self.began = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def wait(self, seconds=240):
        for t in self.threads:
            t.join(max(0.0, self.began + seconds - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "the load did not finish in time"
        self.seconds = time.monotonic() - self.began
        return self

    def done(self):
        with self.lock:
            return len(self.results)


def by_conversation(results):
    grouped = collections.defaultdict(list)
    for result in sorted(results, key=lambda r: r[5]):
        grouped[result[0]].append(result)
    return grouped


THROUGHPUT = {}


def report(label, load):
    ok = sum(1 for r in load.results if r[4] is None)
    latencies = sorted(r[6] - r[5] for r in load.results)
    THROUGHPUT[label] = (len(load.results), ok, ok / load.seconds, latencies[len(latencies) // 2] * 1000,
                         latencies[int(len(latencies) * 0.99) - 1] * 1000)


TEST_POSTGRES_URL = os.environ.get("SANDLOT_TEST_POSTGRES_URL")


def psql(url, sql):
    subprocess.run(["psql", "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1", url, "--command", sql], check=True,
                   capture_output=True, text=True)


@pytest.fixture
def history_url():
    """A PostgreSQL database of this test's own in the tests' cluster (scripts/test.sh exports its URL)."""
    assert TEST_POSTGRES_URL, "SANDLOT_TEST_POSTGRES_URL is unset: start scripts/postgres-test.sh and export its URL"
    database = "sandlot_cluster_" + os.urandom(6).hex()
    psql(TEST_POSTGRES_URL, f"CREATE DATABASE {database}")
    yield urllib.parse.urlsplit(TEST_POSTGRES_URL)._replace(path=f"/{database}").geturl()
    psql(TEST_POSTGRES_URL, f"DROP DATABASE {database} WITH (FORCE)")


def test_each_conversation_stays_on_one_node(cluster, history_url):
    nodes, proxy = cluster(3, shared=False, history_url=history_url)
    conversations = [f"aff-{i}" for i in range(100)]
    load = Load(proxy.url, conversations, calls_each=10).run().wait()
    report("3 nodes, a root each", load)
    errors = [r for r in load.results if r[4] is not None]
    assert errors == [], errors[:5]
    homes = {}
    for conversation, results in by_conversation(load.results).items():
        served = {r[3] for r in results}
        assert len(served) == 1, (conversation, served)
        homes[conversation] = served.pop()
        # Every call saw the files of the calls before it: they all ran on the node that holds them.
        assert sorted(r[2] for r in results) == list(range(10)), (conversation, results)
    # One history for all: every node lists every conversation's 10 runs, all 1,000 together.
    for node in nodes:
        listed = sum(len(node.runs(conversation)) for conversation in conversations)
        assert listed == 1000, (node.name, listed)
    # The hash spreads them: each node has a share (a third each on average; 15 is far below it, and above what a
    # configuration that sent everything to one or two nodes would give the third).
    shares = collections.Counter(homes.values())
    assert all(shares[n.name] >= 15 for n in nodes), shares
    print(f"\nconversations per node: {dict(shares)}")

    with httpx.Client() as client:
        # The header's Base64 form (which 2026-07-28 allows for any value) reaches the same node as the plain one.
        for conversation in conversations[:10:2]:
            encoded = "=?base64?" + base64.b64encode(conversation.encode()).decode() + "?="
            status, count, node, error = call(client, proxy.url, conversation, True, header=encoded)
            assert (status, count, node, error) == (200, 10, homes[conversation], None), (conversation, error)
        # A Streamable HTTP session stays on the node that answered its initialize, whatever conversations its
        # calls name (they live on that node: the session's state is there).
        for _ in range(4):
            session, first_node = initialize(client, proxy.url)
            for i in range(3):
                status, count, node, error = call(client, proxy.url, f"session-{session[:8]}-{i}", False,
                                                  session=session)
                assert (status, count, node, error) == (200, 0, first_node, None), (session, error)
        # A task (2026-07-28 Tasks) is polled and cancelled on the node that holds it: its id starts with its
        # conversation's, which the proxy hashes as the conversation's calls.
        for conversation in conversations[10:16]:
            task_id, node = create_task(client, proxy.url, conversation)
            assert node == homes[conversation], (conversation, node)
            status, body, node = task_request(client, proxy.url, "tasks/get", task_id)
            assert status == 200 and body["result"]["taskId"] == task_id and node == homes[conversation], body
    # Legacy HTTP+SSE: the stream and its messages are hashed on the credential, so they meet on one node.
    stream_node, message_node, reply = legacy_sse_call(proxy)
    assert stream_node == message_node, (stream_node, message_node)
    assert '"stdout":"0\\n"' in reply.replace(" ", ""), reply

    # nginx with the shipped configuration, in front of the same nodes: conversations named by the header stay on
    # one node each; older clients' calls (the id in the body only) go by the credential, so all of this test's
    # reach one node, and each conversation there starts from what that node has.
    nginx = Nginx(nodes, proxy.directory)
    try:
        assert wait_until(nginx.ready, 30)
        modern = [f"ngx-{i}" for i in range(0, 40, 2)]
        older = [f"ngx-{i}" for i in range(1, 40, 2)]
        load = Load(nginx.url, modern + older, calls_each=3, clients=8).run().wait()
        assert [r for r in load.results if r[4] is not None] == []
        grouped = by_conversation(load.results)
        for conversation in modern + older:
            assert len({r[3] for r in grouped[conversation]}) == 1, grouped[conversation]
            assert sorted(r[2] for r in grouped[conversation]) == [0, 1, 2], grouped[conversation]
        assert len({grouped[c][0][3] for c in older}) == 1, "older clients' calls went to several nodes"
        assert len({grouped[c][0][3] for c in modern}) > 1, "the header did not spread conversations"
    finally:
        nginx.stop()


def legacy_sse_call(proxy):
    """A `tools/call` over legacy HTTP+SSE through the proxy: the stream's node, the message's, and the reply."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    base = proxy.url.removesuffix("/mcp")
    events, endpoint, done = [], queue.Queue(), threading.Event()
    served = {}

    def listen():
        with httpx.stream("GET", f"{base}/sse", headers=headers, timeout=60) as response:
            served["stream"] = response.headers.get("x-served-by")
            event = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    if event == "endpoint":
                        endpoint.put(line[6:])
                    elif '"id":7' in line.replace(" ", ""):
                        events.append(line[6:])
                        done.set()
                        return

    threading.Thread(target=listen, daemon=True).start()
    path = endpoint.get(timeout=30)
    for message in [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": "2024-11-05", "capabilities": {},
                        "clientInfo": {"name": "affinity", "version": "1"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                        "name": "sandbox_run_code",
                        "arguments": {"conversationId": "legacy-sse", "language": "bash", "code": CODE}}}]:
        response = httpx.post(base + path, headers=headers, timeout=60, json=message)
        assert response.status_code == 202, response.text
    assert done.wait(60), "no reply on the stream"
    return served["stream"], response.headers.get("x-served-by"), events[0]


class Nginx:
    """deploy/nginx/nginx.conf, its listener, servers and pid file replaced by this test's."""

    def __init__(self, nodes, directory):
        text = (REPO / "deploy/nginx/nginx.conf").read_text()
        self.port = free_port()
        text = text.replace("listen 8080;", f"listen 127.0.0.1:{self.port};", 1)
        text = text.replace("pid /run/nginx-sandlot.pid;", f"pid {directory}/nginx.pid;", 1)
        servers = "".join(f"        server 127.0.0.1:{n.port} max_fails=2 fail_timeout=10s;\n" for n in nodes)
        text, count = re.subn(r"(        server 127\.0\.0\.1:808\d .*\n)+", servers, text)
        assert count == 1, "the shipped nginx.conf no longer lists its servers as the test expects"
        path = directory / "nginx.conf"
        path.write_text(text)
        self.log = open(directory / "nginx.log", "wb")
        self.process = subprocess.Popen(["nginx", "-c", str(path), "-g", "daemon off;"], stdout=self.log,
                                        stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def ready(self):
        try:
            return httpx.get(self.url.removesuffix("/mcp") + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def initialize(client, url):
    """An older client's `initialize` and `notifications/initialized`: its session id and the node that has it."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    response = client.post(url, headers=headers, timeout=60, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "affinity", "version": "1"}}})
    assert response.status_code == 200, response.text
    session, node = response.headers["mcp-session-id"], response.headers["x-served-by"]
    response = client.post(url, headers={**headers, "Mcp-Session-Id": session}, timeout=60,
                           json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202 and response.headers["x-served-by"] == node, response.text
    return session, node


def test_a_dead_nodes_runs_end_interrupted_once_its_lease_runs_out(cluster, history_url):
    """Two nodes, one history: a node killed for good (SIGKILL, never restarted) leaves a run in flight. The other
    node, which cannot see the dead one's processes, ends that run as interrupted once the dead node's lease in the
    history runs out (30 s without a renewal, looked for every 5 s: docs/scaling.md), and leaves its own run alone."""
    nodes, _ = cluster(2, shared=False, history_url=history_url)
    dying, living = nodes

    def start(node, conversation, code):
        """Calls `code` on `node` from a thread of its own (the call lasts as long as the run, or the node)."""
        # Past the default timeout (30 s), which would end the living node's run before the lease runs out.
        arguments = {"conversationId": conversation, "language": "bash", "code": code, "timeoutSeconds": 600}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "sandbox_run_code", "arguments": arguments}}
        headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}

        def send():
            try:
                httpx.post(f"{node.base}/mcp", json=body, headers=headers, timeout=600)
            except httpx.HTTPError:
                pass  # the dying node's call ends with its node
        threading.Thread(target=send, daemon=True).start()

    def state(conversation):
        runs = living.runs(conversation)
        return (runs[0]["state"], runs[0].get("outcome"), runs[0].get("error")) if runs else None

    start(dying, "lease-dying", "sleep 600")
    start(living, "lease-living", "sleep 600")
    assert wait_until(lambda: state("lease-dying") is not None and state("lease-dying")[0] == "running", 60), \
        state("lease-dying")
    assert wait_until(lambda: state("lease-living") is not None and state("lease-living")[0] == "running", 60), \
        state("lease-living")
    dying.process.send_signal(signal.SIGKILL)
    dying.process.wait()
    killed_at = time.monotonic()
    # A dead node's runs are not taken at once: its lease still holds.
    assert state("lease-dying")[0] == "running", state("lease-dying")
    # Within the lease and a round (35 s); 90 s for a loaded machine, and a lease never acted on still fails.
    assert wait_until(lambda: state("lease-dying")[0] == "finished", 90), state("lease-dying")
    took = time.monotonic() - killed_at
    _, outcome, error = state("lease-dying")
    assert outcome == "interrupted" and "lease" in error, (outcome, error)
    print(f"\nthe dead node's run was ended {took:.1f} s after the kill: {error}")
    assert state("lease-living")[0] == "running", state("lease-living")


class EventStream:
    """A `GET /mcp/events` stream on `node` with `token`, read by a thread of its own into `events`."""

    def __init__(self, node, token):
        self.events = []
        self.open = threading.Event()
        threading.Thread(target=self.read, args=(node, token), daemon=True).start()
        assert self.open.wait(30), "the event stream did not open"

    def read(self, node, token):
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        try:
            with httpx.stream("GET", f"{node.base}/mcp/events", headers=headers, timeout=None) as response:
                assert response.status_code == 200, response.status_code
                self.open.set()
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        self.events.append(json.loads(line[5:]))
        except httpx.HTTPError:
            pass  # the node stopped

    def of(self, conversation):
        return [e for e in list(self.events) if e["params"]["conversationId"] == conversation]

    def output(self, conversation):
        return "".join(e["params"]["data"] for e in self.of(conversation) if e["method"].endswith("run_output"))

    def finished(self, conversation):
        return any(e["method"].endswith("run_finished") for e in self.of(conversation))


def run_on(node, token, conversation, code):
    """A stateless `tools/call sandbox_run_code` straight to `node`; returns its stdout."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox_run_code", "arguments": {
        "conversationId": conversation, "language": "bash", "code": code}}}
    response = httpx.post(f"{node.base}/mcp", json=body, headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    text = response.text
    if text.startswith("event:") or text.startswith("data:"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)["result"]["structuredContent"]["stdout"]


def test_event_streams_hear_every_nodes_runs_and_only_their_tenants(cluster, history_url):
    """Two nodes, one history in PostgreSQL, two tenants and an administrator: a `GET /mcp/events` stream on one
    node hears the runs of the other, relayed through the database (docs/scaling.md), with all their output (one
    line larger than a notification can carry, in pieces); a tenant's stream hears only its own conversations'
    runs, whichever node ran them, and the administrator's all."""
    alice, bob = "alice-token-" + os.urandom(8).hex(), "bob-token-" + os.urandom(8).hex()
    env = {"MCP_API_TOKENS": f"alice:{alice},bob:{bob}", "SANDLOT_ADMINS": "api-token"}
    nodes, _ = cluster(2, shared=False, history_url=history_url, env=env)
    here, there = nodes
    streams = {name: EventStream(here, token) for name, token in
               [("alice", alice), ("bob", bob), ("admin", TOKEN)]}
    # Each node starts listening as it starts, and relays output once it has heard that another node has listeners
    # (the streams just opened): runs until one's output reaches the other (a second or two at most).
    warmed = False
    for attempt in range(20):
        run_on(there, TOKEN, f"warm-{attempt}", "echo warm")
        if wait_until(lambda: streams["admin"].output(f"warm-{attempt}") == "warm\n", 1):
            warmed = True
            break
    assert warmed, "no run of one node ever reached the other's event stream"
    large = "y" * 20_000
    # The result shows a head and a tail of it (within its text budget); the events carry all of it.
    assert run_on(there, alice, "ev-alice", f"echo from-there; printf {large}").startswith("from-there\n")
    assert run_on(there, bob, "ev-bob", "echo bobs") == "bobs\n"
    assert run_on(here, bob, "ev-bob-here", "echo bobs here") == "bobs here\n"
    for name, conversations in [("alice", ["ev-alice"]), ("bob", ["ev-bob", "ev-bob-here"]),
                                ("admin", ["ev-alice", "ev-bob", "ev-bob-here"])]:
        stream = streams[name]
        assert wait_until(lambda: all(stream.finished(c) for c in conversations), 30), (name, stream.events[-5:])
    assert streams["alice"].output("ev-alice") == f"from-there\n{large}"
    assert streams["admin"].output("ev-alice") == f"from-there\n{large}"
    methods = [e["method"].rsplit("/", 1)[1] for e in streams["bob"].of("ev-bob")]
    assert methods == ["run_started", "run_output", "run_finished"], methods
    # Only their own: nothing of bob's for alice, nothing of alice's for bob.
    assert {e["params"]["conversationId"] for e in streams["alice"].events} == {"ev-alice"}
    assert {e["params"]["conversationId"] for e in streams["bob"].events} == {"ev-bob", "ev-bob-here"}


def test_sessions_hold_through_either_of_two_load_balancers_sharing_their_table(cluster, tmp_path):
    """Two HAProxy instances in front of the same two nodes, the shipped configuration's peers section filled in
    (docs/scaling.md): a session initialized through one is served by its node through the other, every call. Without
    the shared table the other would find no entry and spread the session's calls over both nodes (round robin), so
    six calls in a row on one node fail unless the table reached it."""
    nodes, _ = cluster(2, shared=False)
    ports = [("lb1", free_port()), ("lb2", free_port())]
    balancers = []
    try:
        for name, _ in ports:
            (tmp_path / name).mkdir()
            balancers.append(HAProxy(nodes, tmp_path / name, peers=ports, local=name))
        first, second = balancers
        assert wait_until(lambda: all(set(b.status().values()) == {"UP"} for b in balancers), 30)
        with httpx.Client() as client:
            session, node = initialize(client, first.url)
            # The peers protocol pushes each new entry to the other instance at once; a second is far above it.
            assert wait_until(lambda: session in second.command("show table sandlot"), 10), \
                second.command("show table sandlot")
            served = [call(client, second.url, f"lb-{i}", False, session=session) for i in range(6)]
        assert [(status, at, error) for status, _, at, error in served] == [(200, node, None)] * 6, served
    finally:
        for balancer in balancers:
            balancer.stop()


def test_a_lost_nodes_conversations_move_with_their_files(cluster):
    nodes, proxy = cluster(3, shared=True)
    conversations = [f"lost-{i}" for i in range(100)]
    # Warm-up: one call per conversation, so that each has a home and a log.
    first = Load(proxy.url, conversations, calls_each=1).run().wait()
    assert [r for r in first.results if r[4] is not None] == []
    homes = {r[0]: r[3] for r in first.results}
    victim = nodes[1]
    load = Load(proxy.url, conversations, calls_each=8, seed=1).run()
    # Kill the node a third into the load, when it has calls in flight.
    assert wait_until(lambda: load.done() >= 250, 120), load.done()
    killed_at, ended_before = time.monotonic(), load.done()
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    load.wait()
    print(f"\nkilled {victim.name} after {ended_before} of {len(load.results)} calls had ended; "
          f"HAProxy: {proxy.status()}")
    failed = [r for r in load.results if r[4] is not None]
    # What the clients of the killed node's calls in flight saw (HAProxy's 502, or a reset).
    seen = collections.Counter((r[1], r[4][:60] if r[1] is None else "") for r in failed)
    print(f"failed calls: {len(failed)} {dict(seen)}")
    for r in failed:
        # Only calls of the victim's conversations, in flight when it died (started before the kill).
        assert homes[r[0]] == victim.name and r[5] < killed_at + 1, r
        assert r[1] in (None, 502, 503, 504), r
    # At most the calls it could have had in flight: 32 clients.
    assert len(failed) <= 32, len(failed)
    for conversation, results in by_conversation(first.results + load.results).items():
        served_after = {r[3] for r in results if r[4] is None and r[5] > killed_at + 1}
        counts = [r[2] for r in results if r[4] is None]
        # No two calls read the same count: never two nodes running the conversation at once.
        assert len(counts) == len(set(counts)), (conversation, results)
        if homes[conversation] == victim.name:
            assert victim.name not in served_after and len(served_after) <= 1, (conversation, served_after)
            # The files came along (the shared root): the count goes on from where it was, past every call that
            # succeeded (a call killed in flight may or may not have written its line).
            assert max(counts) >= len(counts) - 1, (conversation, results)
        else:
            assert served_after <= {homes[conversation]}, (conversation, served_after)
    moved = {r[3] for r in load.results if homes[r[0]] == victim.name and r[4] is None and r[5] > killed_at + 1}
    print(f"{victim.name}'s conversations went to: {sorted(moved)}")


def test_throughput_with_one_node_and_three(cluster):
    """Last: the table of both figures (the three-node one comes from the first test, same load)."""
    nodes, proxy = cluster(1, shared=False)
    load = Load(proxy.url, [f"one-{i}" for i in range(100)], calls_each=10).run().wait()
    report("1 node", load)
    assert [r for r in load.results if r[4] is not None] == []
    print("\nthrough HAProxy: 1,000 tools/call (bash echo) from 32 clients over 100 conversations")
    print(f"{'':24} {'calls':>6} {'ok':>6} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for label, (calls, ok, rate, p50, p99) in THROUGHPUT.items():
        print(f"{label:24} {calls:6d} {ok:6d} {rate:8.1f} {p50:8.1f} {p99:8.1f}")
