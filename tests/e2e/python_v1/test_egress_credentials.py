"""Credentials that never enter the sandbox: an operator maps allowed.test to a secret; the sandbox sees only a
placeholder, the test internet's server gets the secret on requests to that host, and another host gets the
placeholder as it was sent. Default settings but the policy and the credential."""

import json

import pytest

from conftest import call, start_server
from internet import servers

CREDENTIALS = [{"host": "allowed.test", "placeholder_env": "TOKEN", "secret": servers.SECRET}]


@pytest.fixture
def keyed_server(root, internet):
    yield from start_server(root, {
        "SANDLOT_EGRESS_POLICY": json.dumps({"allow": ["allowed.test", "other.test"]}),
        "SANDLOT_EGRESS_NAMESERVERS": f"{servers.DNS}:53",
        "SANDLOT_EGRESS_CREDENTIALS": json.dumps(CREDENTIALS),
        "SANDLOT_EGRESS_UPSTREAM_CA": str(internet.ca)})


def run(server, language, code):
    return call(server, {"conversationId": "keyed", "language": language, "code": code})


def test_the_secret_reaches_its_host_only(keyed_server, internet):
    code = """
echo "token=$TOKEN"
curl -sS https://allowed.test/auth -H "Authorization: Bearer $TOKEN"
curl -sS --noproxy '*' https://allowed.test/auth -H "Authorization: Bearer $TOKEN"
python3 -c "
import os, urllib.request
request = urllib.request.Request('https://allowed.test/auth', headers={'Authorization': 'Bearer ' + os.environ['TOKEN']})
print(urllib.request.urlopen(request).read().decode(), end='')"
curl -sS http://other.test/auth -H "Authorization: Bearer $TOKEN"
"""
    result = run(keyed_server, "bash", code)
    lines = result["stdout"].splitlines()
    assert lines[0].startswith("token=sandlot-placeholder-"), result
    assert lines[1:] == ["authorized", "authorized", "authorized", "unauthorized"], result
    seen = internet.authorizations()
    assert seen[:3] == [("allowed.test", f"Bearer {servers.SECRET}")] * 3, seen
    assert seen[3][0] == "other.test" and servers.SECRET not in seen[3][1], seen
    assert seen[3][1] == "Bearer " + lines[0].removeprefix("token="), seen


def test_the_secret_is_nowhere_in_the_sandbox(keyed_server):
    # The code names the secret reversed: the program's own file and command line must not hold it.
    code = f"""
import os, subprocess
secret = {servers.SECRET[::-1]!r}[::-1].encode()
found = []
for top in ['/etc', '/tmp', '/data', '/run', '/proc/self', '/proc/1']:
    for directory, _, files in os.walk(top):
        for name in files if not directory.startswith('/proc') else ['environ', 'cmdline']:
            try:
                with open(os.path.join(directory, name), 'rb') as file:
                    if secret in file.read():
                        found.append(os.path.join(directory, name))
            except OSError:
                pass
        if top.startswith('/proc'):
            break
if secret.decode() in repr(dict(os.environ)):
    found.append('environment')
for proxy in (['-x', ''], ['--noproxy', '*']):
    answer = subprocess.run(['curl', '-sS', '--max-time', '5', *proxy, 'http://198.18.0.1:3128/'], capture_output=True)
    if secret in answer.stdout + answer.stderr:
        found.append('the proxy port')
print('found', found)
"""
    result = run(keyed_server, "python", code)
    assert result["stdout"] == "found []\n", result
