"""Fixtures for the end-to-end tests: the real sandlot binary, started as `serve` or `stdio`, on a temporary root.

The binary is $SANDLOT_BIN, or the newest debug build under target/. These tests start sandboxes and need root, like the
jail's own tests; scripts/test.sh runs them as root after the Rust tests (which build the binary).
"""

import collections
import json
import os
import pathlib
import socket
import subprocess
import threading
import time

import httpx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# The host uids the sandboxes of this test session run as: 1000 of their own (SANDLOT_SANDBOX_UIDS), not the default
# 900000-900999, so that a test looking for what is left of its runs never counts the sandboxes of another sandlot
# on the machine (another test run, a developer's server, the Rust tests). Above the Rust jail tests' ranges
# (1,100,000 to 7,500,000).
SANDBOX_UIDS_FIRST = 8_000_000 + (os.getpid() % 1000) * 1000
SANDBOX_UIDS = f"{SANDBOX_UIDS_FIRST}-{SANDBOX_UIDS_FIRST + 999}"


# The command line of a prepared sandbox's waiting child (SANDLOT_PREPARED_SANDBOXES): no run's yet.
PREPARED = b"sandlot: a prepared sandbox, waiting for its run"
# The preload of a Node waiting in a sandbox built for its conversation's next run (SANDLOT_AHEAD_SANDBOXES), there
# until its run comes.
AHEAD_PRELOAD = "tmp/.sandlot-ahead.js"


def sandbox_processes():
    """Processes running as a sandbox of this test session (host uids SANDBOX_UIDS), but the jail's own (its inits
    and pid 1s, copies of the sandlot binary, which end right after a sandbox's programs and which a server also
    keeps in the sandboxes it prepares for runs to come) and those of a prepared sandbox (every process in the pid
    namespace of a prepared child, or of a Node built ahead, that waits for its run)."""
    found, prepared = [], set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
            if not SANDBOX_UIDS_FIRST <= int(uid) <= SANDBOX_UIDS_FIRST + 999:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            if command.startswith(PREPARED) or os.path.exists(f"/proc/{pid}/root/{AHEAD_PRELOAD}"):
                prepared.add(os.readlink(f"/proc/{pid}/ns/pid"))
            if b"__jail-zygote" in command or not command:  # an init, or a pid 1 (which shares its init's memory)
                continue
        except (OSError, StopIteration):
            continue
        found.append(int(pid))

    def in_prepared(pid):
        for link in ("ns/pid", "ns/pid_for_children"):
            try:
                if os.readlink(f"/proc/{pid}/{link}") in prepared:
                    return True
            except OSError:
                pass
        return False

    return [pid for pid in found if not in_prepared(pid)]


def describe_processes(pids):
    """What `pids` are (command line, state, parent, pid namespace), for an assertion's message."""
    described = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
            described.append(f"{pid} {fields['State'].strip()} ppid {fields['PPid'].strip()} {namespace} {command!r}")
        except OSError:
            described.append(f"{pid} (gone)")
    return "; ".join(described)


def sandlot_binary():
    explicit = os.environ.get("SANDLOT_BIN")
    if explicit:
        return explicit
    # The most recently built one, should target/ hold builds for more than one target.
    candidates = [c for c in [*REPO.glob("target/*/debug/sandlot"), REPO / "target/debug/sandlot"] if c.is_file()]
    if not candidates:
        raise RuntimeError("no sandlot binary: run `cargo build` first or set SANDLOT_BIN")
    return str(max(candidates, key=lambda c: c.stat().st_mtime))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def detach_leftover_images(tmp_path_factory):
    """After the session, detaches every mount left below pytest's temporary directories: a test that kills its
    server (or runs `sandlot run`, which keeps its image mounted for the next run) leaves conversations' disk images
    mounted, each holding a loop device, and a directory with mounts in it cannot be removed."""
    yield
    base = str(tmp_path_factory.getbasetemp().parent)
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split(" ")[4] for line in mountinfo]
    for point in sorted((p for p in points if p.startswith(base + "/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)


@pytest.fixture
def root(tmp_path):
    assert os.geteuid() == 0, "the end-to-end tests start sandboxes and need root (run scripts/test.sh as root)"
    return tmp_path / "conversations"


class Server:
    def __init__(self, base_url, token, file_secret, root, process):
        self.base_url = base_url
        self.token = token
        self.file_secret = file_secret
        self.root = root
        self.process = process

    def drain_stderr(self):
        self.stderr_tail = collections.deque(maxlen=200)
        for line in self.process.stderr:
            self.stderr_tail.append(line.decode(errors="replace"))

    @property
    def mcp_url(self):
        return f"{self.base_url}/mcp"

    @property
    def auth(self):
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def stdio_env(self):
        """The environment of a `sandlot stdio` sharing this server's root and secret, so its URLs download here."""
        return {"SANDBOX_ROOT": str(self.root), "FILE_SECRET": self.file_secret, "PUBLIC_BASE_URL": self.base_url,
                "SANDLOT_LOG": "warn", "PATH": "/usr/local/bin:/usr/bin:/bin", "SANDLOT_SANDBOX_UIDS": SANDBOX_UIDS}


@pytest.fixture
def server(root):
    """`sandlot serve` on a free port, with a known token and file secret (the native backend)."""
    yield from start_server(root, {})


def python_env():
    """The scientific Python environment of scripts/python-env.sh: $SANDLOT_TEST_PYTHON_ENV, else its default."""
    env = pathlib.Path(os.environ.get("SANDLOT_TEST_PYTHON_ENV") or "/opt/sandlot/python")
    assert (env / "bin/python").exists(), f"no Python environment at {env}: run scripts/python-env.sh {env}"
    return env


@pytest.fixture
def science_server(root):
    """`sandlot serve` whose Python runner is the scientific environment (numpy, pandas, matplotlib)."""
    yield from start_server(root, {"SANDLOT_PYTHON": str(python_env() / "bin/python")})


@pytest.fixture
def docker_server(root):
    """`sandlot serve` with the Docker backend (needs dockerd and the runner images, as scripts/test.sh sets up)."""
    yield from start_server(root, {"SANDLOT_BACKEND": "docker"})


@pytest.fixture
def internet(tmp_path):
    """The test internet of tests/e2e/internet, up for one test."""
    from internet.internet import Internet
    net = Internet(tmp_path).start()
    yield net
    net.stop()


@pytest.fixture
def egress_server(root, internet):
    """`sandlot serve` whose egress policy allows the test internet's `allowed.test`, resolved by its name server."""
    from internet import servers
    yield from start_server(root, {"SANDLOT_EGRESS_POLICY": json.dumps({"allow": ["allowed.test"]}),
                                   "SANDLOT_EGRESS_NAMESERVERS": f"{servers.DNS}:53"})


def start_server(root, extra_env, prefix=()):
    """`sandlot serve` on `root` with the test's settings and `extra_env`, started through `prefix` (a command such as
    `unshare --mount`) when given."""
    port = free_port()
    token, secret = "test-token-" + os.urandom(8).hex(), "test-secret-" + os.urandom(8).hex()
    env = dict(os.environ, MCP_API_TOKEN=token, FILE_SECRET=secret, SANDBOX_ROOT=str(root),
               MCP_HTTP_ADDR=f"127.0.0.1:{port}", SANDLOT_LOG="warn", SANDLOT_SANDBOX_UIDS=SANDBOX_UIDS)
    env.update(extra_env)
    # A variable given as None is unset (e.g. MCP_API_TOKEN, for a server that takes JWTs only).
    env = {name: value for name, value in env.items() if value is not None}
    process = subprocess.Popen([*prefix, sandlot_binary(), "serve"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sandlot serve did not start: {process.stderr.read().decode()}")
        time.sleep(0.05)
    # Drained for the server's life: a pipe nobody reads fills at 64 KiB, and then every thread of the server that
    # logs (rmcp logs each error it answers as a warning) blocks writing to it. The last lines are kept for a look.
    server = Server(base, token, secret, root, process)
    threading.Thread(target=server.drain_stderr, daemon=True).start()
    yield server
    process.terminate()
    # The grace period for runs still going (10 s), then the removal of containers (within 40 s).
    process.wait(timeout=60)
    if extra_env.get("SANDLOT_BACKEND") == "docker":
        # The Docker backend mounts the root nosuid,nodev over itself; undo it so pytest can remove the directory.
        subprocess.run(["umount", "--lazy", str(root)], capture_output=True)


class RunEvents:
    """A listener on `GET /mcp/events?conversationId=`, in a thread, collecting the JSON-RPC notifications of one
    conversation until the first run_finished. `start()` returns once the stream is open; `wait()` returns them."""

    def __init__(self, server, conversation):
        self.url = f"{server.base_url}/mcp/events?conversationId={conversation}"
        self.headers = server.auth
        self.events, self.content_type = [], None
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self):
        with httpx.stream("GET", self.url, headers=self.headers, timeout=30) as response:
            self.content_type = response.headers.get("content-type", "") if response.status_code == 200 else None
            self._open.set()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
                    if self.events[-1]["method"] == "notifications/sandlot/run_finished":
                        return

    def start(self):
        self._thread.start()
        assert self._open.wait(30), "the event stream did not open"
        assert self.content_type is not None and self.content_type.startswith("text/event-stream")
        # No pause needed: the handler subscribes before it returns the response, so once the headers are here no
        # later event is missed.
        return self

    def wait(self, timeout=60):
        self._thread.join(timeout)
        return self.events


def call(server, arguments):
    """tools/call run_code over stateless Streamable HTTP; returns the structured result."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sandbox.run_code", "arguments": arguments}}
    response = httpx.post(server.mcp_url, json=body, timeout=60,
                          headers={**server.auth, "Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ") and '"result"' in line][-1]
    return json.loads(text)["result"]["structuredContent"]


def call_in_background(server, arguments):
    """`call` in a daemon thread, for a run the test stops the server under (its failure is the point)."""
    def run():
        try:
            call(server, arguments)
        except (httpx.HTTPError, AssertionError):
            pass

    threading.Thread(target=run, daemon=True).start()


def wait_until(condition, seconds, interval=0.05):
    """Polls `condition()` until it is true or `seconds` have passed; the caller asserts what it needs after."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(interval)
