"""The network on a leash, against a small internet of this machine's own (tests/e2e/internet): what an egress
policy lets a sandbox reach, by every route a program takes (proxy variables, or none and caught by the gateway),
what it refuses (other names, raw TCP, DNS to anyone), and the run's audit trail. Default settings but the policy."""

import json

import httpx
import pytest

from conftest import call, start_server
from internet import servers

POLICY = {"allow": ["allowed.test"]}


def run(server, language, code, **extra):
    return call(server, {"conversationId": "leash", "language": language, "code": code, **extra})


def record(server, result):
    return httpx.get(f"{server.base_url}/v1/runs/{result['runId']}", headers=server.auth).json()


def test_an_allowed_host_answers_by_every_route(egress_server):
    code = """
curl -sS http://allowed.test/proxied
curl -sS --noproxy '*' http://allowed.test/caught
python3 -c "import urllib.request; print(urllib.request.urlopen('http://allowed.test/urllib').read().decode(), end='')"
"""
    result = run(egress_server, "bash", code)
    assert result["stdout"] == ("hello from allowed.test path /proxied\nhello from allowed.test path /caught\n"
                                "hello from allowed.test path /urllib\n"), result
    # requests (Debian's, in the system Python): through HTTP_PROXY, and caught with the environment ignored.
    requests = run(egress_server, "bash", """/usr/bin/python3 - <<'PY'
import requests
print(requests.get('http://allowed.test/requests', timeout=10).text, end='')
session = requests.Session()
session.trust_env = False
print(session.get('http://allowed.test/direct', timeout=10).text, end='')
PY""")
    assert requests["stdout"] == ("hello from allowed.test path /requests\n"
                                  "hello from allowed.test path /direct\n"), requests
    node = run(egress_server, "javascript",
               "const r = await fetch('http://allowed.test/fetch'); process.stdout.write(await r.text());")
    assert node["stdout"] == "hello from allowed.test path /fetch\n", node


def test_https_goes_through_end_to_end(egress_server, internet):
    (egress_server.root / "leash").mkdir(exist_ok=True)
    ca = internet.ca.read_text()
    code = f"""
import ssl, urllib.request
open('/tmp/ca.pem', 'w').write({ca!r})
context = ssl.create_default_context(cafile='/tmp/ca.pem')
print(urllib.request.urlopen('https://allowed.test/tls', context=context).read().decode(), end='')
"""
    result = run(egress_server, "python", code)
    assert result["stdout"] == "hello from allowed.test path /tls\n", result


def test_a_denied_host_is_refused_by_every_route(egress_server):
    code = """
curl -sS -o /dev/null -w '%{http_code}\\n' http://denied.test/ 2>&1
curl -sS --noproxy '*' http://denied.test/ 2>&1 | head -n 1
curl -sS --noproxy '*' --max-time 5 http://203.0.113.11/ 2>&1 | head -n 1
"""
    result = run(egress_server, "bash", code)
    lines = result["stdout"].splitlines()
    assert lines[0] == "403", result
    assert "hello" not in result["stdout"], result
    assert "resolve" in lines[1].lower(), result  # the name server knows no denied name
    assert "unreachable" in lines[2].lower() or "connect" in lines[2].lower(), result


def test_raw_tcp_and_other_ports_are_refused(egress_server):
    code = """
import socket
for target in [('203.0.113.10', 2222), ('203.0.113.10', 80), ('8.8.8.8', 53)]:
    try:
        socket.create_connection(target, timeout=5).close()
        print(target, 'connected')
    except OSError as error:
        print(target, type(error).__name__)
"""
    result = run(egress_server, "python", code)
    assert "connected" not in result["stdout"], result
    assert result["stdout"].count("Error") == 3, result


def test_lookups_never_reach_a_name_server(egress_server, internet):
    code = """
import socket
for name in ['exfil-4f2a.denied.test', 'exfil-77b1.example.com']:
    try:
        socket.getaddrinfo(name, 80)
        print(name, 'resolved')
    except socket.gaierror:
        print(name, 'refused')
"""
    result = run(egress_server, "python", code)
    assert result["stdout"].count("refused") == 2, result
    assert not [name for name in internet.queries() if "exfil" in name], internet.queries()


def test_the_audit_trail_lists_exactly_the_connections(egress_server):
    result = run(egress_server, "bash",
                 "curl -sS -o /dev/null http://allowed.test/one; curl -sS -o /dev/null http://denied.test/ || true")
    connections = record(egress_server, result)["network"]["connections"]
    seen = sorted((c["host"], c["port"], c["allowed"]) for c in connections if c["route"] != "dns")
    assert seen == [("allowed.test", 80, True), ("denied.test", 80, False)], connections
    allowed = next(c for c in connections if c["allowed"])
    assert allowed["bytesReceived"] > 0 and allowed["runId"] == result["runId"], allowed
    # The same trail as an MCP resource.
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read",
            "params": {"uri": f"sandlot://runs/{result['runId']}"}}
    response = httpx.post(egress_server.mcp_url, json=body, timeout=60,
                          headers={**egress_server.auth, "Accept": "application/json, text/event-stream"})
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    resource = json.loads(json.loads(text)["result"]["contents"][0]["text"])
    assert resource["network"]["connections"] == connections, resource


def test_a_run_narrows_the_policy_and_cannot_widen_it(egress_server):
    narrowed = run(egress_server, "bash", "curl -sS -o /dev/null -w '%{http_code}' http://allowed.test/",
                   network={"allow": []})
    assert narrowed["stdout"] == "403", narrowed
    widened = run(egress_server, "bash", "curl -sS -o /dev/null -w '%{http_code}' http://denied.test/",
                  network={"allow": ["denied.test"]})
    assert widened["stdout"] == "403", widened


NARROW_TOKEN = "narrow-tenant-token-" + "7" * 16


@pytest.fixture
def tenant_server(root, internet):
    """Two tenants: the default token's, with the server's policy, and `narrow`, whose own allows one host."""
    yield from start_server(root, {
        "SANDLOT_EGRESS_POLICY": json.dumps({"allow": ["allowed.test", "other.test"]}),
        "SANDLOT_EGRESS_TENANT_POLICIES": json.dumps({"narrow": {"allow": ["other.test"]}}),
        "SANDLOT_EGRESS_NAMESERVERS": f"{servers.DNS}:53",
        "MCP_API_TOKENS": f"narrow:{NARROW_TOKEN}"})


def test_a_tenant_policy_narrows_that_tenants_runs_only(tenant_server):
    code = "for host in allowed.test other.test denied.test; do " \
           "curl -sS -o /dev/null -w \"$host %{http_code}\\n\" http://$host/; done"
    wide = run(tenant_server, "bash", code)
    assert wide["stdout"] == "allowed.test 200\nother.test 200\ndenied.test 403\n", wide
    tenant_server.token = NARROW_TOKEN
    narrow = call(tenant_server, {"conversationId": "narrow-leash", "language": "bash", "code": code})
    assert narrow["stdout"] == "allowed.test 403\nother.test 200\ndenied.test 403\n", narrow
    widened = call(tenant_server, {"conversationId": "narrow-leash", "language": "bash", "code": code,
                                   "network": {"allow": ["allowed.test", "other.test"]}})
    assert widened["stdout"] == narrow["stdout"], widened


def test_without_a_policy_a_run_cannot_ask_for_network(server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox.run_code", "arguments": {
        "conversationId": "leash", "language": "bash", "code": "true", "network": {"allow": ["allowed.test"]}}}}
    response = httpx.post(server.mcp_url, json=body, timeout=60,
                          headers={**server.auth, "Accept": "application/json, text/event-stream"})
    assert "no egress policy" in response.text, response.text


def test_a_live_sandbox_keeps_its_leash_and_each_call_its_trail(egress_server):
    first = run(egress_server, "python", "import urllib.request as u\n"
                "page = u.urlopen('http://allowed.test/live').read().decode()\nprint(page, end='')", session=True)
    assert first["stdout"] == "hello from allowed.test path /live\n", first
    second = run(egress_server, "python", "print(page.split()[-1])", session=True)
    assert second["stdout"] == "/live\n", second
    hosts = [c["host"] for c in record(egress_server, first)["network"]["connections"]]
    assert hosts == ["allowed.test"], hosts
    assert "network" not in record(egress_server, second), record(egress_server, second)
    denied = run(egress_server, "bash", "curl -sS -o /dev/null -w '%{http_code}' http://denied.test/", session=True)
    assert denied["stdout"] == "403", denied
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sandbox.run_code", "arguments": {
        "conversationId": "leash", "language": "python", "code": "print(1)", "session": True,
        "network": {"allow": []}}}}
    response = httpx.post(egress_server.mcp_url, json=body, timeout=60,
                          headers={**egress_server.auth, "Accept": "application/json, text/event-stream"})
    assert "keeps the network its first call had" in response.text, response.text
