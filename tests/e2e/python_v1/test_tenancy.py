"""Tenant separation, attacked through every face of the real `sandlot serve` (docs/security.md, "Tenants").

One server per backend (the native jail; Docker for the run faces), in the default configuration but for the
credentials: JWTs (`MCP_AUTH_ENABLED`, HS256), two named static tokens (`MCP_API_TOKENS=ci:...,ops:...`) and one
admin subject (`SANDLOT_ADMINS=admin-sub`). The tenants are two JWT subjects (alice, bob) and the two tokens (ci,
ops). For each pair `attacker-attacks-victim` the victim first makes things (a run writing `/data/secret.txt` in its
conversation, a Baponi thread and executions, its codegen and open-sandbox workspaces); the attacker then tries each
face and must find nothing: another tenant's conversation, run, execution, file or workspace is answered exactly as
one that does not exist (compared whole against the answer for a made-up id of the same kind, the id swapped and
trace ids left out), and what would act on it (a run, an upload, a deletion, a cancellation) is refused without
effect, which the victim checks afterwards. An admin sees the victim's things, and every tenant its own, so the test
cannot pass by everything failing.

Each face is one test function (or a parametrized case), named after the face and the action; the pair and the
backend are in the case id. Conversation and thread ids carry the victim's name (`v-conv-bob`), since one server
holds every tenant. So that one face that lets the attacker through does not spoil another's case, what uploads,
deletions and cancellations aim at is made for each pair apart (`v-spare-bob-alice`), and a case whose attack
changed one of the victim's shared conversations (a planted file, a deleted workspace) has the victim put it back.
Sessions are faces too: a request naming the victim's Streamable HTTP or legacy SSE session is answered as for an
unknown session. So are live sandboxes: `sandbox_session` and `/v1/conversations` show the attacker nothing of the
victim's, and change nothing of it.
"""

import base64
import hashlib
import hmac
import json
import os
import queue
import threading
import time
import urllib.parse
import uuid

import httpx
import pytest

from conftest import start_server, wait_until

SECRET = "jwt-secret-" + os.urandom(16).hex()
TOKENS = {"ci": "ci-token-" + os.urandom(12).hex(), "ops": "ops-token-" + os.urandom(12).hex()}
TENANTS = ["alice", "bob", "ci", "ops"]
ADMIN = "admin-sub"
# (attacker, victim): each JWT subject against the other, a token against a subject and back, a token against a token.
PAIRS = [("alice", "bob"), ("bob", "alice"), ("ci", "alice"), ("alice", "ci"), ("ci", "ops")]
PAIR_IDS = [f"{attacker}-attacks-{victim}" for attacker, victim in PAIRS]
BACKENDS = ["native", "docker"]
ACCEPT = "application/json, text/event-stream"
BIG = 1_100_000  # over SANDLOT_RESOURCE_READ_BYTES (1 MiB): its resources/read answer would carry a signed URL


def hs256(subject):
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": subject, "exp": int(time.time()) + 3600}).encode())
    signature = hmac.new(SECRET.encode(), f"{header}.{claims}".encode(), "sha256").digest()
    return f"{header}.{claims}.{b64(signature)}"


# dave and erin: subjects whose workspaces the admin makes before they come (dave's) or nobody does (erin's).
CREDENTIALS = {name: hs256(name) for name in ["alice", "bob", ADMIN, "dave", "erin"]} | TOKENS


def auth(tenant):
    return {"Authorization": f"Bearer {CREDENTIALS[tenant]}"}


def derived(prefix, tenant):
    """The workspace a profile derives for `tenant` (`codegen-<h>`, `osb-<h>`), as any caller can compute it."""
    return f"{prefix}-{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"


def made_up(prefix="nx"):
    return f"{prefix}-{os.urandom(6).hex()}"


def without_trace_ids(value):
    """`value` as JSON would carry it (tuples as lists), without its trace ids (fresh for every error)."""
    if isinstance(value, dict):
        return {k: without_trace_ids(v) for k, v in value.items() if k != "trace_id"}
    if isinstance(value, (list, tuple)):
        return [without_trace_ids(v) for v in value]
    return value


def swapped(value, old, new):
    """`value` with every occurrence of the id `old` written as `new` (ids are [A-Za-z0-9_-], no JSON escaping)."""
    return json.loads(json.dumps(value).replace(old, new))


def assert_reads_as_missing(probe, victim_id, fake_id):
    """The answer `probe(id)` gives for the victim's id is the one it gives for a made-up id, that id aside."""
    fake = without_trace_ids(probe(fake_id))
    answer = without_trace_ids(probe(victim_id))
    assert answer == swapped(fake, fake_id, victim_id), f"{victim_id} does not read as missing"
    return answer


# --- the servers -------------------------------------------------------------------------------------------------


class World:
    """One `sandlot serve` with the tenants' credentials, and what each tenant made on it (made once, when first
    needed, and shared by every case of the module)."""

    def __init__(self, backend, root):
        env = {"MCP_API_TOKEN": None, "MCP_AUTH_ENABLED": "true", "MCP_AUTH_JWT_SECRET": SECRET,
               "MCP_API_TOKENS": ",".join(f"{name}:{token}" for name, token in TOKENS.items()),
               "SANDLOT_ADMINS": ADMIN}
        if backend == "docker":
            env["SANDLOT_BACKEND"] = "docker"
        self.backend = backend
        self._server = start_server(root, env)
        self.server = next(self._server)
        self.base = self.server.base_url
        self.victims = {}
        self.spares = {}
        self.owned = {tenant: set() for tenant in CREDENTIALS}

    def stop(self):
        next(self._server, None)

    def victim(self, tenant):
        if tenant not in self.victims:
            self.victims[tenant] = Victim(self, tenant)
        return self.victims[tenant]

    def spare(self, victim, attacker):
        """A conversation of `victim` made for this pair alone, holding `secret.txt`: for the attacks that would
        change it if they got through."""
        key = (victim, attacker)
        if key not in self.spares:
            conversation = f"v-spare-{victim}-{attacker}"
            secret = f"spare-of-{victim}-{os.urandom(4).hex()}"
            result = run_code(self, victim, conversation, f"printf %s '{secret}' > secret.txt")
            assert result["success"] is True, result
            self.owned[victim].add(conversation)
            self.spares[key] = (conversation, secret)
        return self.spares[key]


class Victim:
    """What a tenant makes before it is attacked: a run writing `secret.txt` (and a file too big for a resource read)
    in `v-conv-<t>`; a Baponi thread `v-thread-<t>` written by `sandbox_execute` and read by a REST execution (its
    trace id); on the native backend, `secret.txt` in its codegen and open-sandbox workspaces."""

    def __init__(self, world, tenant):
        self.tenant = tenant
        self.secret = f"secret-of-{tenant}-{os.urandom(6).hex()}"
        self.conversation = f"v-conv-{tenant}"
        self.thread = f"v-thread-{tenant}"
        code = f"printf %s '{self.secret}' > secret.txt; head -c {BIG} /dev/zero | tr '\\0' x > big.txt; echo made"
        result = run_code(world, tenant, self.conversation, code)
        assert (result["success"], result["stdout"]) == (True, "made\n"), result
        self.run_id = result["runId"]
        self.file_urls = {f["name"]: f["url"] for f in result["files"]}
        world.owned[tenant].add(self.conversation)

        wrote = tool(world, tenant, "/p/baponi/mcp", "sandbox_execute", {
            "code": f"printf %s '{self.secret}' > /home/baponi/secret.txt; echo thread-made", "language": "bash",
            "thread_id": self.thread})
        assert wrote["result"]["isError"] is False, wrote
        world.owned[tenant].add(self.thread)
        status, lines = baponi_stream(world, tenant, {"code": "cat /home/baponi/secret.txt", "language": "bash",
                                                      "thread_id": self.thread})
        assert status == 200 and lines[-1]["result"]["stdout"] == self.secret, lines
        self.trace_id = lines[0]["trace_id"]
        runs = rest(world, tenant, "GET", "/v1/runs", params={"conversationId": self.thread})[1]["runs"]
        self.thread_run_ids = [run["id"] for run in runs]
        assert len(self.thread_run_ids) == 2, runs

        self.codegen = derived("codegen", tenant)
        self.osb = derived("osb", tenant)
        if world.backend == "native":
            # Written by the profiles' file tools, then read by their commands, which are runs in the history.
            with CodegenSession(world, tenant) as session:
                assert session.tool("Write", {"file_path": "secret.txt", "content": self.secret}) == (
                    f"wrote {len(self.secret)} bytes to secret.txt", False)
                assert session.tool("Bash", {"command": "cat secret.txt", "description": "read it"}) == (
                    f"{self.secret}\n", False)
            wrote = osb_tool(world, tenant, "file.write", {"path": "secret.txt", "content": self.secret})
            assert wrote["result"]["structuredContent"] == {"path": "/workspace/secret.txt"}, wrote
            ran = osb_tool(world, tenant, "shell.exec", {"command": "cat", "args": ["secret.txt"]})
            assert ran["result"]["structuredContent"] == {"stdout": self.secret, "stderr": "", "exit_code": 0}, ran
            world.owned[tenant] |= {self.codegen, self.osb}

    @property
    def conversations(self):
        return [self.conversation, self.thread, self.codegen, self.osb]

    def files(self, conversation):
        """The files the victim's conversation holds while no attack got through."""
        return ["big.txt", "secret.txt"] if conversation == self.conversation else ["secret.txt"]

    def restore(self, world, conversation):
        """Puts back, as the victim, what an attack that got through changed in one of its conversations (a planted
        file, a deletion), so that the next case starts from the victim's things (this one has failed already)."""
        status, listing = files_list(world, self.tenant, conversation)
        if status == 200 and [f["path"] for f in listing["files"]] == self.files(conversation):
            return
        run_code(world, self.tenant, conversation, f"rm -rf planted.txt; printf %s '{self.secret}' > secret.txt")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    assert os.geteuid() == 0, "the end-to-end tests start sandboxes and need root (run scripts/test.sh as root)"
    started = {}

    def get(backend):
        if backend not in started:
            started[backend] = World(backend, tmp_path_factory.mktemp(backend) / "conversations")
        return started[backend]

    yield get
    for world in started.values():
        world.stop()


@pytest.fixture(params=BACKENDS)
def world(request, worlds):
    """The server of each backend, for the faces that run code."""
    return worlds(request.param)


@pytest.fixture
def native(worlds):
    """The native server, for the faces that read and write without running code (the same on both backends)."""
    return worlds("native")


pairs = pytest.mark.parametrize("attacker,victim", PAIRS, ids=PAIR_IDS)


# --- the faces' clients ------------------------------------------------------------------------------------------


def jsonrpc_reply(response):
    assert response.status_code == 200, (response.status_code, response.text)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ") and '"id"' in line][-1]
    return json.loads(text)


def rpc(world, tenant, method, params=None, path="/mcp"):
    """One stateless JSON-RPC request; the whole reply (`result` or `error`)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
    response = httpx.post(world.base + path, json=body, timeout=120, headers={**auth(tenant), "Accept": ACCEPT})
    return jsonrpc_reply(response)


def tool(world, tenant, path, name, arguments):
    return rpc(world, tenant, "tools/call", {"name": name, "arguments": arguments}, path=path)


def run_code(world, tenant, conversation, code, path="/mcp"):
    reply = tool(world, tenant, path, "sandbox_run_code",
                 {"conversationId": conversation, "language": "bash", "code": code})
    assert "result" in reply, reply
    return reply["result"]["structuredContent"]


def read_resource(world, tenant, uri):
    return rpc(world, tenant, "resources/read", {"uri": uri})


def list_resources(world, tenant):
    """Every page of resources/list."""
    resources, cursor = [], None
    for _ in range(100):
        reply = rpc(world, tenant, "resources/list", {"cursor": cursor} if cursor else {})
        assert "result" in reply, reply
        resources += reply["result"]["resources"]
        cursor = reply["result"].get("nextCursor")
        if not cursor:
            return resources
    raise AssertionError(f"resources/list gave a next page 100 times: {cursor}")


def rest(world, tenant, method, path, **kwargs):
    """(status, JSON body or text)."""
    response = httpx.request(method, world.base + path, headers=auth(tenant), timeout=120, **kwargs)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


def baponi_stream(world, tenant, arguments):
    """`POST /p/baponi/v1/sandbox/execute` as NDJSON: (status, lines), the first line with the trace id."""
    response = httpx.post(f"{world.base}/p/baponi/v1/sandbox/execute", json=arguments, timeout=120,
                          headers={**auth(tenant), "Accept": "application/x-ndjson"})
    if response.status_code != 200:
        return response.status_code, response.json()
    return 200, [json.loads(line) for line in response.text.splitlines() if line.strip()]


def osb_tool(world, tenant, name, arguments):
    return tool(world, tenant, "/p/open-sandbox/mcp", name, arguments)


def files_list(world, tenant, thread):
    return rest(world, tenant, "POST", "/p/baponi/v1/files/list", json={"source": "thread", "id": thread})


class LegacySession:
    """A legacy HTTP+SSE session (sandlot's `/sse`, codegen's `/p/codegen/sse`), driven with plain HTTP: the stream
    in a thread, requests POSTed to the endpoint it names, answers read from the stream."""

    def __init__(self, world, tenant, path="/sse"):
        self.world, self.headers = world, auth(tenant)
        self.url = world.base + path
        self.endpoint, self.messages = queue.Queue(), queue.Queue()
        self.response = None
        self.next_id = 1

    def _listen(self):
        try:
            with httpx.stream("GET", self.url, headers=self.headers, timeout=None) as response:
                self.response = response
                if response.status_code != 200:
                    self.endpoint.put(("refused", response.status_code))
                    return
                event = None
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        if event == "endpoint":
                            self.endpoint.put(("ok", line[6:]))
                        else:
                            self.messages.put(json.loads(line[6:]))
        except Exception:  # closed under it at the end of the session
            pass

    def __enter__(self):
        threading.Thread(target=self._listen, daemon=True).start()
        state, endpoint = self.endpoint.get(timeout=30)
        assert state == "ok", f"the SSE stream was refused: {endpoint}"
        self.post_url = urllib.parse.urljoin(self.world.base, endpoint)
        self.session_id = urllib.parse.parse_qs(urllib.parse.urlsplit(self.post_url).query)["sessionId"][0]
        self.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                    "clientInfo": {"name": "tenancy-e2e", "version": "1"}})
        httpx.post(self.post_url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def __exit__(self, *_):
        try:
            self.response.close()
        except Exception:
            pass

    def request(self, method, params):
        request_id, self.next_id = self.next_id, self.next_id + 1
        sent = httpx.post(self.post_url, headers=self.headers, timeout=30,
                          json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        assert sent.status_code == 202, (sent.status_code, sent.text)
        while True:
            message = self.messages.get(timeout=120)
            if message.get("id") == request_id:
                return message

    def unanswered(self):
        """What reached the stream without being asked for by this session."""
        found = []
        while not self.messages.empty():
            found.append(self.messages.get())
        return found


class CodegenSession(LegacySession):
    """A session of codegen-sandbox's tools at `/p/codegen/sse`, in the tenant's default or named workspace."""

    def __init__(self, world, tenant, workspace=None):
        super().__init__(world, tenant, "/p/codegen/sse" + (f"?workspace={workspace}" if workspace else ""))

    def tool(self, name, arguments):
        """(the one text, isError)."""
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        assert "result" in reply, reply
        [content] = reply["result"]["content"]
        return content["text"], bool(reply["result"].get("isError"))


class Events:
    """A listener on `/mcp/events` for one tenant, collecting every event in a thread until closed."""

    def __init__(self, world, tenant, conversation=None):
        query = f"?conversationId={conversation}" if conversation else ""
        self.url, self.headers = f"{world.base}/mcp/events{query}", auth(tenant)
        self.events, self.opened, self.response = [], threading.Event(), None
        self.status = self.content_type = None
        threading.Thread(target=self._listen, daemon=True).start()
        assert self.opened.wait(30), "the event stream did not open"

    def _listen(self):
        try:
            with httpx.stream("GET", self.url, headers=self.headers, timeout=None) as response:
                self.response, self.status = response, response.status_code
                self.content_type = response.headers.get("content-type", "").split(";")[0]
                self.opened.set()
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line[6:]))
        except Exception:
            pass
        finally:
            self.opened.set()

    def finished(self, run_id):
        return any(e["method"] == "notifications/sandlot/run_finished" and e["params"]["runId"] == run_id
                   for e in self.events)

    def close(self):
        try:
            self.response.close()
        except Exception:
            pass


# --- sandlot's own MCP -------------------------------------------------------------------------------------------


def taken(conversation):
    """The refusal of a run or an upload into another tenant's conversation (`ConversationTaken`), trace id aside."""
    return {"code": -32602,
            "message": f'conversation "{conversation}" is not available to this caller; use another conversationId',
            "data": {"kind": "invalid_argument", "field": "conversationId"}}


def rest_taken(conversation):
    """The same refusal over sandlot's REST: an invalid argument."""
    return [400, {"error": "invalid_argument", "message": taken(conversation)["message"]}]


@pytest.mark.parametrize("path", ["/mcp", "/p/sandlot/mcp"])
@pairs
def test_sandlot_mcp_run_code_into_the_victims_conversation_is_refused(world, attacker, victim, path):
    made = world.victim(victim)
    try:
        reply = tool(world, attacker, path, "sandbox_run_code", {
            "conversationId": made.conversation, "language": "bash",
            "code": "cat secret.txt; ls -la; echo planted > planted.txt"})
        assert without_trace_ids(reply) == {"jsonrpc": "2.0", "id": 1, "error": taken(made.conversation)}
        # Nothing ran there: the victim's conversation holds its own files only, and no run of the attacker's.
        assert made.secret not in json.dumps(reply)
        status, listing = files_list(world, victim, made.conversation)
        assert (status, [f["path"] for f in listing["files"]]) == (200, made.files(made.conversation))
        runs = rest(world, ADMIN, "GET", "/v1/runs", params={"conversationId": made.conversation})[1]["runs"]
        assert made.run_id in [run["id"] for run in runs] and {run["caller"] for run in runs} == {victim}, runs
    finally:
        made.restore(world, made.conversation)


@pairs
def test_sandlot_mcp_upload_file_into_the_victims_conversation_is_refused(native, attacker, victim):
    conversation, secret = native.spare(victim, attacker)
    for arguments in [{"path": "planted.txt", "content": "planted"}, {"path": "secret.txt", "content": "replaced"}]:
        reply = tool(native, attacker, "/mcp", "sandbox_upload_file", {"conversationId": conversation, **arguments})
        assert without_trace_ids(reply) == {"jsonrpc": "2.0", "id": 1, "error": taken(conversation)}, arguments
    assert_victims_spare_is_untouched(native, victim, conversation, secret)


def assert_victims_spare_is_untouched(world, victim, conversation, secret):
    status, listing = files_list(world, victim, conversation)
    assert (status, [f["path"] for f in listing["files"]]) == (200, ["secret.txt"])
    read = read_resource(world, victim, f"sandlot://conversations/{conversation}/files/secret.txt")
    assert read["result"]["contents"][0]["text"] == secret


@pairs
def test_sandlot_mcp_resources_list_shows_nothing_of_the_victim(native, attacker, victim):
    made = native.victim(victim)
    native.victim(attacker)  # so that the attacker has things of its own to list
    resources = list_resources(native, attacker)
    text = json.dumps(resources)
    for secret_id in [*made.conversations, made.run_id, *made.thread_run_ids]:
        assert secret_id not in text, secret_id
    # Everything listed is the attacker's: its runs (callers as the admin reads them) and its conversations' files.
    for resource in resources:
        uri = resource["uri"]
        if uri.startswith("sandlot://runs/"):
            run = rest(native, ADMIN, "GET", f"/v1/runs/{uri.removeprefix('sandlot://runs/')}")[1]
            assert run["caller"] == attacker, (uri, run)
        elif uri.startswith("ui://"):
            pass  # the MCP Apps views: the same HTML for everyone, no data in them
        else:
            conversation = uri.removeprefix("sandlot://conversations/").split("/")[0]
            assert conversation in native.owned[attacker], uri


def resource_probes():
    """resources/read of the victim's things, each with the made-up id of its kind."""
    return {
        "file": lambda made: ("sandlot://conversations/{}/files/secret.txt", made.conversation, made_up()),
        "big-file": lambda made: ("sandlot://conversations/{}/files/big.txt", made.conversation, made_up()),
        "conversation-runs": lambda made: ("sandlot://conversations/{}/runs", made.conversation, made_up()),
        "thread-runs": lambda made: ("sandlot://conversations/{}/runs", made.thread, made_up()),
        "thread-file": lambda made: ("sandlot://conversations/{}/files/secret.txt", made.thread, made_up()),
        "run": lambda made: ("sandlot://runs/{}", made.run_id, os.urandom(16).hex()),
        "run-output": lambda made: ("sandlot://runs/{}/output", made.run_id, os.urandom(16).hex()),
        "run-live": lambda made: ("sandlot://runs/{}/live", made.run_id, os.urandom(16).hex()),
        "baponi-run": lambda made: ("sandlot://runs/{}", made.thread_run_ids[0], os.urandom(16).hex()),
        "baponi-run-output": lambda made: ("sandlot://runs/{}/output", made.thread_run_ids[0], os.urandom(16).hex()),
    }


@pytest.mark.parametrize("resource", list(resource_probes()))
@pairs
def test_sandlot_mcp_resources_read_of_the_victims_reads_as_missing(native, attacker, victim, resource):
    made = native.victim(victim)
    template, victim_id, fake_id = resource_probes()[resource](made)
    answer = assert_reads_as_missing(lambda id: read_resource(native, attacker, template.format(id)),
                                     victim_id, fake_id)
    assert made.secret not in json.dumps(answer) and "sig=" not in json.dumps(answer)


# --- sandlot's REST ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "/p/sandlot"])
@pairs
def test_rest_runs_list_shows_nothing_of_the_victim(world, attacker, victim, prefix):
    made = world.victim(victim)
    world.victim(attacker)
    status, body = rest(world, attacker, "GET", f"{prefix}/v1/runs", params={"limit": "500"})
    assert status == 200, body
    text = json.dumps(body)
    for secret_id in [*made.conversations, made.run_id, *made.thread_run_ids]:
        assert secret_id not in text, secret_id
    assert {run["caller"] for run in body["runs"]} == {attacker}
    # Asked for the victim's conversation by name: the answer for a conversation nobody used.
    for conversation in (made.conversation, made.thread):
        assert_reads_as_missing(lambda id: rest(world, attacker, "GET", f"{prefix}/v1/runs",
                                                params={"conversationId": id}), conversation, made_up())


@pytest.mark.parametrize("what", ["record", "output"])
@pytest.mark.parametrize("run", ["sandlot-run", "baponi-run"])
@pairs
def test_rest_run_lookup_of_the_victims_reads_as_missing(world, attacker, victim, run, what):
    made = world.victim(victim)
    run_id = made.run_id if run == "sandlot-run" else made.thread_run_ids[0]
    suffix = "" if what == "record" else "/output"
    answer = assert_reads_as_missing(lambda id: rest(world, attacker, "GET", f"/v1/runs/{id}{suffix}"),
                                     run_id, os.urandom(16).hex())
    assert answer[0] == 404 and made.secret not in json.dumps(answer)


@pairs
def test_rest_delete_of_the_victims_conversation_reads_as_missing(native, attacker, victim):
    conversation, secret = native.spare(victim, attacker)
    runs_before = rest(native, victim, "GET", "/v1/runs", params={"conversationId": conversation})
    assert_reads_as_missing(lambda id: rest(native, attacker, "DELETE", f"/v1/conversations/{id}"),
                            conversation, made_up())
    assert_victims_spare_is_untouched(native, victim, conversation, secret)
    assert rest(native, victim, "GET", "/v1/runs", params={"conversationId": conversation}) == runs_before


@pairs
def test_live_sandbox_of_the_victim_reads_as_missing_and_is_untouched(native, attacker, victim):
    """`sandbox_session` (status, restart, close) and `GET /v1/conversations[/{id}]` on the victim's conversation,
    which has a live sandbox: answered as for a conversation that does not exist, and the victim's interpreter keeps
    its variable in the same sandbox."""
    conversation, _ = native.spare(victim, attacker)

    def session_run(code):
        reply = tool(native, victim, "/mcp", "sandbox_run_code",
                     {"conversationId": conversation, "language": "python", "code": code, "session": True})
        assert reply["result"]["structuredContent"]["success"] is True, reply
        return reply["result"]["structuredContent"]

    def manage(tenant, id, action):
        return tool(native, tenant, "/mcp", "sandbox_session", {"conversationId": id, "action": action})

    started = session_run("kept = 'yes'")
    for action in ["status", "restart", "close"]:
        answer = assert_reads_as_missing(lambda id: manage(attacker, id, action), conversation, made_up())
        assert answer["result"]["structuredContent"]["live"] is False, answer
    assert_reads_as_missing(lambda id: rest(native, attacker, "GET", f"/v1/conversations/{id}"), conversation,
                            made_up())
    status, listed = rest(native, attacker, "GET", "/v1/conversations")
    assert status == 200 and conversation not in json.dumps(listed), listed
    # The admin sees it live, so the answers above are not everything failing.
    status, seen = rest(native, ADMIN, "GET", f"/v1/conversations/{conversation}")
    assert (status, seen["live"]["id"]) == (200, started["session"]["id"]), seen
    after = session_run("print(kept)")
    assert (after["stdout"], after["session"]["id"], after["session"]["stateLost"]) == (
        "yes\n", started["session"]["id"], False), after
    closed = manage(victim, conversation, "close")["result"]["structuredContent"]
    assert closed["closed"] is True, closed


@pairs
def test_live_output_of_the_victims_running_run_reads_as_missing(native, attacker, victim):
    """`sandlot://runs/{runId}/live` (what the MCP Apps run view polls) of the victim's run while it runs: answered as
    for a made-up run id, with nothing of its output, while the victim reads it (so the resource is working)."""
    conversation = f"v-live-{victim}-{attacker}"
    secret = f"live-of-{victim}-{os.urandom(4).hex()}"
    # Prints the secret, then waits for the release file the victim uploads once the probes are done (60 s at most).
    code = f"echo {secret}; for i in $(seq 600); do [ -e release ] && break; sleep 0.1; done"
    done = queue.Queue()
    threading.Thread(target=lambda: done.put(tool(native, victim, "/mcp", "sandbox_run_code", {
        "conversationId": conversation, "language": "bash", "code": code, "timeoutSeconds": 60})),
        daemon=True).start()
    native.owned[victim].add(conversation)
    try:
        def running_run():
            reply = read_resource(native, victim, f"sandlot://conversations/{conversation}/runs")
            runs = json.loads(reply["result"]["contents"][0]["text"])["runs"] if "result" in reply else []
            return runs[0]["id"] if runs and runs[0]["state"] == "running" else None

        wait_until(running_run, 30)
        run_id = running_run()
        assert run_id, "the victim's run never showed as running"

        def victims_live():
            reply = read_resource(native, victim, f"sandlot://runs/{run_id}/live")
            return "result" in reply and secret in reply["result"]["contents"][0]["text"]

        wait_until(victims_live, 30)
        assert victims_live(), "the victim does not read its own run's live output: the resource is not working"
        answer = assert_reads_as_missing(lambda id: read_resource(native, attacker, f"sandlot://runs/{id}/live"),
                                         run_id, os.urandom(16).hex())
        assert secret not in json.dumps(answer), answer
    finally:
        tool(native, victim, "/mcp", "sandbox_upload_file",
             {"conversationId": conversation, "path": "release", "content": "go"})
    ended = done.get(timeout=60)
    assert ended["result"]["structuredContent"]["stdout"] == secret + "\n", ended


def put_if_given(body):
    """An attack that got a URL uses it."""
    if isinstance(body, dict) and "url" in body:
        httpx.put(body["url"], content=b"planted", timeout=30)


@pairs
def test_rest_upload_url_into_the_victims_conversation_is_refused(native, attacker, victim):
    conversation, secret = native.spare(victim, attacker)
    for path in ["planted.txt", "secret.txt"]:
        answer = rest(native, attacker, "POST", f"/v1/conversations/{conversation}/uploads", json={"path": path})
        put_if_given(answer[1])
        assert without_trace_ids(answer) == rest_taken(conversation), path
    assert_victims_spare_is_untouched(native, victim, conversation, secret)


# --- the event stream --------------------------------------------------------------------------------------------


@pairs
def test_events_stream_shows_nothing_of_the_victims_runs(world, attacker, victim):
    made = world.victim(victim)
    filtered = Events(world, attacker, made.conversation)
    on_thread = Events(world, attacker, made.thread)
    everything = Events(world, attacker)
    own = Events(world, victim, made.conversation)
    elsewhere = Events(world, attacker, made_up())
    try:
        # Subscribing to the victim's conversation is answered as for one nobody used.
        for listener in (filtered, on_thread, elsewhere):
            assert (listener.status, listener.content_type) == (200, "text/event-stream"), listener.url
        ran = run_code(world, victim, made.conversation, "echo meanwhile")
        status, lines = baponi_stream(world, victim, {"code": "echo meanwhile", "language": "bash",
                                                      "thread_id": made.thread})
        assert status == 200 and lines[-1]["status"] == "success", lines
        wait_until(lambda: own.finished(ran["runId"]), 30)
        assert own.finished(ran["runId"]), "the victim's own listener saw nothing: the stream is not working"
        mine = run_code(world, attacker, f"a-events-{attacker}-{victim}", "echo mine")
        world.owned[attacker].add(f"a-events-{attacker}-{victim}")
        wait_until(lambda: everything.finished(mine["runId"]), 30)
        time.sleep(0.3)
        assert filtered.events == [] and on_thread.events == []
        # The unfiltered stream carried the attacker's own run (so it was live) and nothing else.
        assert {e["params"]["runId"] for e in everything.events} == {mine["runId"]}, everything.events
        methods = [e["method"] for e in everything.events]
        assert (methods[0], methods[-1]) == ("notifications/sandlot/run_started", "notifications/sandlot/run_finished")
    finally:
        for listener in (filtered, on_thread, everything, own, elsewhere):
            listener.close()


# --- Baponi ------------------------------------------------------------------------------------------------------


def assert_thread_untouched(world, made):
    status, listing = files_list(world, made.tenant, made.thread)
    assert (status, [f["path"] for f in listing["files"]]) == (200, ["secret.txt"])
    runs = rest(world, ADMIN, "GET", "/v1/runs", params={"conversationId": made.thread})[1]["runs"]
    assert {run["caller"] for run in runs} == {made.tenant}


ATTACK_CODE = "cat /home/baponi/secret.txt; ls -la /home/baponi; echo planted > /home/baponi/planted.txt"


def thread_taken_mcp(thread):
    """Baponi's MCP refusal of a run in another tenant's thread: an invalid `thread_id` (docs/profiles.md, "Baponi:
    tenants"), trace id aside."""
    message = f'thread "{thread}" is not available to this caller; use another thread_id'
    return {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": f"invalid thread_id: {message}",
                                                 "data": {"kind": "invalid_argument", "field": "thread_id"}}}


def thread_taken_rest(thread):
    """The same over Baponi's REST: 400 `validation_error`."""
    return [400, {"error": "validation_error",
                  "message": f'thread_id: thread "{thread}" is not available to this caller; use another thread_id'}]


def upload_taken_rest(thread):
    """Baponi's `upload_url` for another tenant's thread: 400 `validation_error` naming `id`."""
    return [400, {"error": "validation_error",
                  "message": f'id: thread "{thread}" is not available to this caller; use another id'}]


def baponi_execute_rest(world, tenant, thread, accept="application/json"):
    response = httpx.post(f"{world.base}/p/baponi/v1/sandbox/execute", timeout=120,
                          headers={**auth(tenant), "Accept": accept},
                          json={"code": ATTACK_CODE, "language": "bash", "thread_id": thread})
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


@pairs
def test_baponi_mcp_execute_in_the_victims_thread_is_refused(world, attacker, victim):
    made = world.victim(victim)
    try:
        reply = tool(world, attacker, "/p/baponi/mcp", "sandbox_execute",
                     {"code": ATTACK_CODE, "language": "bash", "thread_id": made.thread})
        assert without_trace_ids(reply) == thread_taken_mcp(made.thread)
        assert_thread_untouched(world, made)
    finally:
        made.restore(world, made.thread)


@pairs
def test_baponi_rest_execute_in_the_victims_thread_is_refused(world, attacker, victim):
    made = world.victim(victim)
    try:
        for accept in ["application/json", "application/x-ndjson"]:
            answer = baponi_execute_rest(world, attacker, made.thread, accept)
            assert without_trace_ids(answer) == thread_taken_rest(made.thread), accept
        assert_thread_untouched(world, made)
    finally:
        made.restore(world, made.thread)


@pairs
def test_baponi_mcp_files_download_from_the_victims_thread_reads_as_missing(native, attacker, victim):
    made = native.victim(victim)
    for path in ["secret.txt", "nothing.txt"]:
        answer = assert_reads_as_missing(
            lambda id: tool(native, attacker, "/p/baponi/mcp", "files_download",
                            {"source": "thread", "id": id, "path": path}), made.thread, made_up())
        assert made.secret not in json.dumps(answer)


@pytest.mark.parametrize("route,body", [
    ("list", {}), ("list", {"path": "secret.txt"}), ("download_url", {"path": "secret.txt"}),
], ids=["list", "list-one-file", "download_url"])
@pairs
def test_baponi_files_api_on_the_victims_thread_reads_as_missing(native, attacker, victim, route, body):
    made = native.victim(victim)
    for conversation in (made.thread, made.conversation):
        answer = assert_reads_as_missing(
            lambda id: rest(native, attacker, "POST", f"/p/baponi/v1/files/{route}",
                            json={"source": "thread", "id": id, **body}), conversation, made_up())
        assert made.secret not in json.dumps(answer) and "sig=" not in json.dumps(answer)


@pairs
def test_baponi_files_api_upload_url_into_the_victims_thread_is_refused(native, attacker, victim):
    conversation, secret = native.spare(victim, attacker)
    for path in ["planted.txt", "secret.txt"]:
        answer = rest(native, attacker, "POST", "/p/baponi/v1/files/upload_url",
                      json={"source": "thread", "id": conversation, "path": path, "content_length": 7})
        put_if_given(answer[1])
        assert without_trace_ids(answer) == upload_taken_rest(conversation), path
    assert_victims_spare_is_untouched(native, victim, conversation, secret)


def executions_probe(world, attacker, action):
    def probe(trace_id):
        if action == "get":
            return rest(world, attacker, "GET", f"/p/baponi/v1/executions/{trace_id}")
        if action == "cancel":
            return rest(world, attacker, "POST", f"/p/baponi/v1/executions/{trace_id}/cancel")
        return rest(world, attacker, "GET", f"/p/baponi/v1/executions/{trace_id}/output")
    return probe


@pytest.mark.parametrize("action", ["get", "output", "cancel"])
@pairs
def test_baponi_execution_of_the_victim_by_trace_id_reads_as_missing(native, attacker, victim, action):
    made = native.victim(victim)
    probe = executions_probe(native, attacker, action)
    fake = "trc_" + os.urandom(10).hex()
    answer = assert_reads_as_missing(probe, made.trace_id, fake)
    assert answer[0] == 404 and made.secret not in json.dumps(answer)
    # The run ids of the victim's executions written as trace ids, too.
    for run_id in made.thread_run_ids:
        assert_reads_as_missing(probe, "trc_" + run_id, fake)


@pytest.mark.parametrize("action", ["get", "output", "cancel"])
@pairs
def test_baponi_execution_of_the_victim_by_a_prefix_of_its_trace_id_reads_as_missing(native, attacker, victim,
                                                                                       action):
    made = native.victim(victim)
    native.victim(attacker)
    probe = executions_probe(native, attacker, action)
    digits = made.trace_id.removeprefix("trc_")
    fake = "trc_" + os.urandom(10).hex()
    # Only a whole trace id names a run (docs/profiles.md), so every shortened one is answered as an unknown id, even
    # where it would also start the trace id of a run of the attacker's own.
    for length in range(1, len(digits)):
        prefix = "trc_" + digits[:length]
        assert without_trace_ids(probe(prefix)) == swapped(without_trace_ids(probe(fake)), fake, prefix), prefix


@pairs
def test_baponi_cancel_of_and_execute_beside_the_victims_running_execution_are_refused(native, attacker, victim):
    made = native.victim(victim)
    conversation, _ = native.spare(victim, attacker)
    started, lines = queue.Queue(), []

    def execute():
        with httpx.stream("POST", f"{native.base}/p/baponi/v1/sandbox/execute", timeout=120,
                          headers={**auth(victim), "Accept": "application/x-ndjson"},
                          json={"code": "sleep 3; echo survived", "language": "bash",
                                "thread_id": conversation}) as response:
            for line in response.iter_lines():
                if line.strip():
                    lines.append(json.loads(line))
                    if len(lines) == 1:
                        started.put(lines[0])

    thread = threading.Thread(target=execute, daemon=True)
    thread.start()
    trace_id = started.get(timeout=60)["trace_id"]
    answer = assert_reads_as_missing(executions_probe(native, attacker, "cancel"), trace_id,
                                     "trc_" + os.urandom(10).hex())
    assert answer[0] == 404
    # While it runs, an execution of the attacker's in that thread is refused as for any thread of another tenant's:
    # never as busy, which would tell that the thread exists and works.
    reply = tool(native, attacker, "/p/baponi/mcp", "sandbox_execute",
                 {"code": ATTACK_CODE, "language": "bash", "thread_id": conversation})
    assert without_trace_ids(reply) == thread_taken_mcp(conversation)
    assert without_trace_ids(baponi_execute_rest(native, attacker, conversation)) == thread_taken_rest(conversation)
    thread.join(60)
    assert (lines[-1]["status"], lines[-1]["result"]["stdout"]) == ("success", "survived\n"), lines
    assert made.secret not in json.dumps(answer)


# --- codegen-sandbox and open-sandbox: derived workspaces --------------------------------------------------------


def derived_probes():
    """The faces through which an attacker might reach a workspace id it computed (`face`: probe(world, attacker,
    id) answering for an id; `refused`: for a face that would make the id, the exact refusal instead)."""
    return {
        "sandlot-run_code": lambda w, a, id: tool(w, a, "/mcp", "sandbox_run_code", {
            "conversationId": id, "language": "bash", "code": "cat secret.txt; echo planted > planted.txt"}),
        "sandlot-upload_file": lambda w, a, id: tool(w, a, "/mcp", "sandbox_upload_file", {
            "conversationId": id, "path": "planted.txt", "content": "planted"}),
        "rest-upload_url": lambda w, a, id: rest(w, a, "POST", f"/v1/conversations/{id}/uploads",
                                                 json={"path": "planted.txt"}),
        "sandlot-resources_read": lambda w, a, id: read_resource(
            w, a, f"sandlot://conversations/{id}/files/secret.txt"),
        "sandlot-conversation_runs": lambda w, a, id: read_resource(w, a, f"sandlot://conversations/{id}/runs"),
        "rest-runs": lambda w, a, id: rest(w, a, "GET", "/v1/runs", params={"conversationId": id}),
        "rest-delete": lambda w, a, id: rest(w, a, "DELETE", f"/v1/conversations/{id}"),
        "baponi-files_list": lambda w, a, id: rest(w, a, "POST", "/p/baponi/v1/files/list",
                                                   json={"source": "thread", "id": id}),
        "baponi-download_url": lambda w, a, id: rest(w, a, "POST", "/p/baponi/v1/files/download_url",
                                                     json={"source": "thread", "id": id, "path": "secret.txt"}),
        "baponi-files_download": lambda w, a, id: tool(w, a, "/p/baponi/mcp", "files_download",
                                                       {"source": "thread", "id": id, "path": "secret.txt"}),
        "baponi-upload_url": lambda w, a, id: rest(w, a, "POST", "/p/baponi/v1/files/upload_url", json={
            "source": "thread", "id": id, "path": "planted.txt", "content_length": 7}),
        "baponi-execute": lambda w, a, id: tool(w, a, "/p/baponi/mcp", "sandbox_execute", {
            "code": "cat /home/baponi/secret.txt; echo planted > /home/baponi/planted.txt", "language": "bash",
            "thread_id": id}),
    }


# Faces that would make a missing id, and their refusal for another's derived workspace (`refuse_derived_for_another`)
# whether or not its subject used it yet.
MAKING = {
    "sandlot-run_code": lambda id: {"jsonrpc": "2.0", "id": 1, "error": taken(id)},
    "sandlot-upload_file": lambda id: {"jsonrpc": "2.0", "id": 1, "error": taken(id)},
    "rest-upload_url": rest_taken,
    "baponi-upload_url": upload_taken_rest,
    "baponi-execute": thread_taken_mcp,
}


@pytest.mark.parametrize("face", list(derived_probes()))
@pytest.mark.parametrize("profile", ["codegen", "osb"])
@pairs
def test_the_victims_derived_workspace_is_out_of_reach(native, attacker, victim, profile, face):
    made = native.victim(victim)
    workspace = derived(profile, victim)
    probe = derived_probes()[face]
    try:
        if face in MAKING:
            # A derived id of a subject that never used it is reserved as well: no one may plant files for it.
            for id in (workspace, derived(profile, made_up("nobody"))):
                answer = probe(native, attacker, id)
                if isinstance(answer, tuple):
                    put_if_given(answer[1])
                assert without_trace_ids(answer) == MAKING[face](id), id
        else:
            # Compared with the derived id of a subject that never used it.
            answer = assert_reads_as_missing(lambda id: probe(native, attacker, id), workspace,
                                             derived(profile, made_up("nobody")))
            assert made.secret not in json.dumps(answer)
        status, listing = files_list(native, victim, workspace)
        assert (status, [f["path"] for f in listing["files"]]) == (200, ["secret.txt"])
    finally:
        made.restore(native, workspace)


@pairs
def test_codegen_tools_see_only_the_attackers_own_workspace(native, attacker, victim):
    made, mine = native.victim(victim), native.victim(attacker)
    with CodegenSession(native, attacker) as session:
        assert session.tool("Read", {"file_path": "secret.txt"}) == (f"1\t{mine.secret}\n", False)
        assert session.tool("Glob", {"pattern": "**/*"}) == ("secret.txt", False)
        assert session.tool("Grep", {"pattern": made.secret}) == ("", False)
        assert session.tool("Grep", {"pattern": "secret-of-", "output_mode": "files_with_matches"}) == (
            "secret.txt\n", False)
        # Naming the victim's workspace names one of the attacker's own (`codegen-<h(attacker)>-<id>`): empty.
        assert session.tool("Read", {"file_path": "secret.txt", "workspace": made.codegen}) == (
            "stat: stat /workspace/secret.txt: no such file or directory", True)
        assert session.tool("Read", {"file_path": f"/workspace/../{made.codegen}/files/secret.txt"}) == (
            "resolve path: path is outside workspace root", True)
        text, is_error = session.tool("Bash", {"command": "cat secret.txt; ls -a /workspace",
                                               "description": "look around"})
        assert (text, is_error) == (f"{mine.secret}.\n..\nsecret.txt\n", False)
    with CodegenSession(native, attacker, workspace=made.codegen) as session:
        assert session.tool("Glob", {"pattern": "**/*"}) == ("", False)


@pairs
def test_open_sandbox_tools_see_only_the_attackers_own_workspace(native, attacker, victim):
    made, mine = native.victim(victim), native.victim(attacker)

    def result(name, arguments):
        reply = osb_tool(native, attacker, name, arguments)
        assert made.secret not in json.dumps(reply)
        return reply.get("result", {}).get("structuredContent"), without_trace_ids(reply.get("error"))

    assert result("file.read", {"path": "secret.txt"}) == ({"content": mine.secret}, None)
    assert result("file.list", {}) == ({"entries": ["secret.txt"]}, None)
    assert result("shell.exec", {"command": "cat", "args": ["secret.txt"]}) == (
        {"stdout": mine.secret, "stderr": "", "exit_code": 0}, None)
    structured, error = result("file.read", {"path": f"/workspace/../{made.osb}/files/secret.txt"})
    assert structured is None and error["code"] == -32602, error


@pairs
def test_codegen_background_shell_of_the_victim_reads_as_unknown(native, attacker, victim):
    native.victim(victim)
    with CodegenSession(native, victim) as own, CodegenSession(native, attacker) as other:
        text, is_error = own.tool("Bash", {"command": "sleep 30", "description": "wait", "run_in_background": True})
        assert not is_error and text.startswith("shell_id: "), text
        shell = text.split("\n")[0].removeprefix("shell_id: ")
        try:
            for name in ["BashOutput", "KillShell"]:
                assert_reads_as_missing(lambda id: other.tool(name, {"shell_id": id}), shell, str(uuid.uuid4()))
            text, is_error = own.tool("BashOutput", {"shell_id": shell})
            assert (text.split("\n")[:2], is_error) == (["command: sleep 30", "status: running"], False), text
        finally:
            assert own.tool("KillShell", {"shell_id": shell}) == (f"killed: {shell}\n", False)


def test_a_workspace_the_admin_made_first_is_out_of_reach_through_the_profiles_own_tools(native):
    """A subject's derived workspaces that another tenant (here the admin, whom the reservation does not stop) made
    before the subject came: its own tools read them as workspaces that do not exist and refuse to write or run."""
    codegen, osb = derived("codegen", "dave"), derived("osb", "dave")
    for workspace in (codegen, osb):
        made = run_code(native, ADMIN, workspace, "printf %s admin-made > secret.txt")
        assert made["success"] is True, made
    with CodegenSession(native, "dave") as session:
        assert session.tool("Read", {"file_path": "secret.txt"}) == (
            "stat: stat /workspace/secret.txt: no such file or directory", True)
        assert session.tool("Glob", {"pattern": "**/*"}) == ("", False)
        assert session.tool("Grep", {"pattern": "admin"}) == ("", False)
        refused = (f"invalid workspace: {codegen} is not available to this caller; use another workspace", True)
        assert session.tool("Write", {"file_path": "mine.txt", "content": "x"}) == refused
        assert session.tool("Bash", {"command": "cat secret.txt", "description": "look"}) == refused
    # open-sandbox: reads answered as in a workspace nobody made (erin's), writes and runs refused.
    nobody = derived("osb", "erin")
    for name, arguments in [("file.read", {"path": "secret.txt"}), ("file.list", {}),
                            ("file.search", {"path": "secret.txt", "query": "admin"})]:
        dave = without_trace_ids(osb_tool(native, "dave", name, arguments))
        erin = without_trace_ids(osb_tool(native, "erin", name, arguments))
        assert dave == swapped(erin, nobody, osb), name
        assert "admin-made" not in json.dumps(dave)
    for name, arguments in [("file.write", {"path": "mine.txt", "content": "x"}),
                            ("shell.exec", {"command": "cat", "args": ["secret.txt"]})]:
        reply = without_trace_ids(osb_tool(native, "dave", name, arguments))
        assert reply == {"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32602, "message": "invalid params",
            "data": {"code": "invalid_params", "kind": "invalid_params",
                     "message": f"workspace {osb} is not available to this caller"}}}, name
    status, listing = files_list(native, ADMIN, osb)
    assert (status, [f["path"] for f in listing["files"]]) == (200, ["secret.txt"])


# --- sessions ----------------------------------------------------------------------------------------------------


def post_raw(world, tenant, url, body, headers=None, method="POST"):
    """(status, JSON body or text) of one request to `url` with the tenant's credential."""
    response = httpx.request(method, url, json=body, timeout=60,
                             headers={**auth(tenant), "Accept": ACCEPT, **(headers or {})})
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


def run_into(conversation, request_id=7):
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "sandbox_run_code", "arguments": {"conversationId": conversation, "language": "bash",
                                                   "code": "cat secret.txt; echo planted > planted.txt"}}}


@pairs
def test_sandlot_mcp_streamable_session_of_the_victim_reads_as_unknown(native, attacker, victim):
    made = native.victim(victim)
    headers = {"MCP-Protocol-Version": "2025-03-26"}
    opened = httpx.post(f"{native.base}/mcp", timeout=60, headers={**auth(victim), "Accept": ACCEPT, **headers},
                        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-03-26", "capabilities": {},
                            "clientInfo": {"name": "tenancy-e2e", "version": "1"}}})
    session = opened.headers["mcp-session-id"]
    own = {**headers, "Mcp-Session-Id": session}
    assert post_raw(native, victim, f"{native.base}/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    own)[0] == 202
    try:
        # A request in the victim's session (a run in its conversation), then the end of the session.
        for body, method in [(run_into(made.conversation), "POST"), (None, "DELETE")]:
            assert_reads_as_missing(lambda id: post_raw(native, attacker, f"{native.base}/mcp", body,
                                                        {**headers, "Mcp-Session-Id": id}, method),
                                    session, str(uuid.uuid4()))
        # The session is the victim's still, and nothing ran in its conversation.
        listed = httpx.post(f"{native.base}/mcp", timeout=60, headers={**auth(victim), "Accept": ACCEPT, **own},
                            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert listed.status_code == 200 and "sandbox_run_code" in listed.text, listed.text
        status, listing = files_list(native, victim, made.conversation)
        assert (status, [f["path"] for f in listing["files"]]) == (200, made.files(made.conversation))
    finally:
        httpx.delete(f"{native.base}/mcp", headers={**auth(victim), **own})
        made.restore(native, made.conversation)


@pytest.mark.parametrize("path", ["/sse", "/p/codegen/sse"], ids=["sandlot-legacy-sse", "codegen-sse"])
@pairs
def test_legacy_sse_session_of_the_victim_reads_as_unknown(native, attacker, victim, path):
    made = native.victim(victim)
    write = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
             "params": {"name": "Write", "arguments": {"file_path": "planted.txt", "content": "planted"}}}
    body = run_into(made.conversation) if path == "/sse" else write
    with LegacySession(native, victim, path) as session:
        base = session.post_url.split("?")[0]
        try:
            assert_reads_as_missing(lambda id: post_raw(native, attacker, f"{base}?sessionId={id}", body),
                                    session.session_id, str(uuid.uuid4()))
            time.sleep(0.3)
            # Nothing was done in the victim's session: no answer came on its stream, no file was planted.
            assert session.unanswered() == []
            workspace = made.conversation if path == "/sse" else made.codegen
            status, listing = files_list(native, victim, workspace)
            assert (status, [f["path"] for f in listing["files"]]) == (200, made.files(workspace))
        finally:
            made.restore(native, made.conversation)
            made.restore(native, made.codegen)


# --- signed URLs -------------------------------------------------------------------------------------------------


@pairs
def test_signed_urls_for_the_victims_files_come_from_no_face(native, attacker, victim):
    """Every face that hands out a signed URL, asked by the attacker about the victim's files: none names them."""
    made = native.victim(victim)
    conversation, _ = native.spare(victim, attacker)
    answers = [
        tool(native, attacker, "/mcp", "sandbox_run_code",
             {"conversationId": made.conversation, "language": "bash", "code": "true"}),
        tool(native, attacker, "/mcp", "sandbox_upload_file",
             {"conversationId": conversation, "path": "secret.txt", "content": "x"}),
        read_resource(native, attacker, f"sandlot://conversations/{made.conversation}/files/big.txt"),
        read_resource(native, attacker, f"sandlot://conversations/{made.conversation}/files/secret.txt"),
        rest(native, attacker, "POST", f"/v1/conversations/{conversation}/uploads", json={"path": "secret.txt"}),
        tool(native, attacker, "/p/baponi/mcp", "files_download",
             {"source": "thread", "id": made.conversation, "path": "big.txt"}),
        tool(native, attacker, "/p/baponi/mcp", "sandbox_execute",
             {"code": "true", "language": "bash", "thread_id": made.thread}),
        list_resources(native, attacker),
        rest(native, attacker, "GET", "/v1/runs", params={"limit": "500"}),
    ]
    for source in (made.conversation, made.thread, conversation):
        for route, body in [("download_url", {"path": "secret.txt"}),
                            ("upload_url", {"path": "secret.txt", "content_length": 1})]:
            answers.append(rest(native, attacker, "POST", f"/p/baponi/v1/files/{route}",
                                json={"source": "thread", "id": source, **body}))
    text = json.dumps(answers)
    for victims in (made.conversation, made.thread, conversation):
        assert f"/files/{victims}/" not in text, victims
    # And the victim's own URL is the only way in: a URL for another path with its signature is refused.
    url = urllib.parse.urlsplit(made.file_urls["secret.txt"])
    assert httpx.get(made.file_urls["secret.txt"]).text == made.secret
    forged = f"{url.scheme}://{url.netloc}/files/{made.conversation}/big.txt?{url.query}"
    assert httpx.get(forged).status_code == 403


# --- the admin, and each tenant's own things ---------------------------------------------------------------------


@pytest.mark.parametrize("victim", TENANTS)
def test_the_admin_sees_every_tenants_runs_and_files(world, victim):
    made = world.victim(victim)
    status, body = rest(world, ADMIN, "GET", "/v1/runs", params={"limit": "500"})
    listed = {run["id"]: run["caller"] for run in body["runs"]}
    assert status == 200 and {run: listed.get(run) for run in [made.run_id, *made.thread_run_ids]} == {
        run: victim for run in [made.run_id, *made.thread_run_ids]}
    assert rest(world, ADMIN, "GET", f"/v1/runs/{made.run_id}") == rest(world, victim, "GET", f"/v1/runs/{made.run_id}")
    read = read_resource(world, ADMIN, f"sandlot://conversations/{made.conversation}/files/secret.txt")
    assert read["result"]["contents"][0]["text"] == made.secret, read
    status, execution = rest(world, ADMIN, "GET", f"/p/baponi/v1/executions/{made.trace_id}")
    assert (status, execution["stdout"]) == (200, made.secret), execution


@pytest.mark.parametrize("tenant", TENANTS)
def test_each_tenant_sees_its_own_things(world, tenant):
    made = world.victim(tenant)
    status, run = rest(world, tenant, "GET", f"/v1/runs/{made.run_id}")
    assert (status, run["id"], run["caller"], run["conversationId"]) == (200, made.run_id, tenant, made.conversation)
    status, output = rest(world, tenant, "GET", f"/v1/runs/{made.run_id}/output")
    assert (status, output["stdout"]) == (200, "made\n")
    # (Other cases add runs of the tenant's to its conversation: the oldest of its own is the one that made it.)
    listed = rest(world, tenant, "GET", "/v1/runs", params={"conversationId": made.conversation})[1]["runs"]
    assert [r["id"] for r in listed if r["caller"] == tenant][-1] == made.run_id
    read = read_resource(world, tenant, f"sandlot://conversations/{made.conversation}/files/secret.txt")
    assert read["result"]["contents"][0]["text"] == made.secret
    big = read_resource(world, tenant, f"sandlot://conversations/{made.conversation}/files/big.txt")
    data = big["error"]["data"]
    assert data["kind"] == "too_large" and f"/files/{made.conversation}/big.txt" in data["url"], big
    runs = read_resource(world, tenant, f"sandlot://conversations/{made.conversation}/runs")
    assert json.loads(runs["result"]["contents"][0]["text"])["runs"] == listed
    # resources/list shows the newest runs and the files of the newest conversations: a run made now is there.
    again = run_code(world, tenant, made.conversation, "cat secret.txt")
    assert again["stdout"] == made.secret
    uris = [r["uri"] for r in list_resources(world, tenant)]
    assert f"sandlot://runs/{again['runId']}" in uris
    assert f"sandlot://conversations/{made.conversation}/files/secret.txt" in uris
    assert httpx.get(made.file_urls["secret.txt"]).text == made.secret
    # Baponi: its execution by trace id, its thread's files, a download URL that works, another run in its thread.
    status, execution = rest(world, tenant, "GET", f"/p/baponi/v1/executions/{made.trace_id}")
    assert (status, execution["status"], execution["stdout"]) == (200, "success", made.secret), execution
    status, listing = files_list(world, tenant, made.thread)
    assert (status, [f["path"] for f in listing["files"]]) == (200, ["secret.txt"])
    status, signed = rest(world, tenant, "POST", "/p/baponi/v1/files/download_url",
                          json={"source": "thread", "id": made.thread, "path": "secret.txt"})
    assert status == 200 and httpx.get(signed["url"]).text == made.secret
    again = tool(world, tenant, "/p/baponi/mcp", "sandbox_execute",
                 {"code": "cat /home/baponi/secret.txt; echo", "language": "bash", "thread_id": made.thread})
    assert again["result"]["content"][0]["text"] == (
        f"## Execution Result\n\n**stdout:**\n```\n{made.secret}\n```\n\n**Exit code:** 0")
    if world.backend == "native":
        with CodegenSession(world, tenant) as session:
            assert session.tool("Read", {"file_path": "secret.txt"}) == (f"1\t{made.secret}\n", False)
        reply = osb_tool(world, tenant, "file.read", {"path": "secret.txt"})
        assert reply["result"]["structuredContent"] == {"content": made.secret}
        # The profiles' workspaces are sandlot conversations of the tenant's: its own tools reach them.
        read = read_resource(world, tenant, f"sandlot://conversations/{made.codegen}/files/secret.txt")
        assert read["result"]["contents"][0]["text"] == made.secret
