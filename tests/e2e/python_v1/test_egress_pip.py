"""pip through the leash: `pip download` from a package index on an allowed host of the test internet
(tests/e2e/internet), over HTTPS through the proxy (pip honours HTTPS_PROXY), and refused from a denied one."""

from conftest import call
from internet import servers


def test_pip_downloads_from_an_allowed_index_only(egress_server, internet):
    ca = internet.ca.read_text()
    code = f"""
cat > /tmp/ca.pem <<'PEM'
{ca}PEM
pip() {{ python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --cert /tmp/ca.pem \\
    --retries 0 --timeout 10 -d /tmp/dl --index-url "$1" sandlot-test-pkg >/dev/null 2>&1; echo "exit $?"; }}
pip https://allowed.test/simple/
ls /tmp/dl
pip https://denied.test/simple/
"""
    result = call(egress_server, {"conversationId": "pip", "language": "bash", "code": code})
    assert result["stdout"].splitlines() == ["exit 0", servers.WHEEL_NAME, "exit 1"], result
