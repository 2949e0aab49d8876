"""sandlot as an OAuth 2.1 resource server, against a real authorization server the test starts on this machine
(tests/e2e/oauth: metadata, JWKS, registration, an authorization endpoint that approves at once, PKCE): the
Protected Resource Metadata, 401 with `WWW-Authenticate` pointing at it, tokens refused for another audience, after
their expiry or without the scope a call needs (403 `insufficient_scope`), the tenant taken from the token, a key
rotation picked up, and the official Python SDK 2.x's OAuth client completing the whole flow by itself (discovery
from the 401, registration, authorization code with PKCE, the token for this resource) and running code. The server
takes OAuth tokens only (no static token)."""

import json
import time

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import start_server
from oauth.authorization_server import SUBJECT, AuthorizationServer


@pytest.fixture
def authorization_server():
    server = AuthorizationServer().start()
    yield server
    server.stop()


@pytest.fixture
def oauth_server(root, authorization_server):
    yield from start_server(root, {"SANDLOT_OAUTH_ISSUER": authorization_server.issuer, "MCP_API_TOKEN": None})


def call(server, token, arguments=None, method="tools/call"):
    params = {"name": "sandbox_run_code", "arguments": arguments} if method == "tools/call" else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(server.mcp_url, json=body, headers=headers, timeout=60)


def result_of(response):
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return json.loads(text)


def test_the_metadata_and_the_challenge_say_where_to_get_a_token(oauth_server, authorization_server):
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]:
        metadata = httpx.get(oauth_server.base_url + path).json()
        assert metadata["resource"] == oauth_server.mcp_url, metadata
        assert metadata["authorization_servers"] == [authorization_server.issuer], metadata
        assert set(metadata["scopes_supported"]) == {"sandlot:read", "sandlot:run", "sandlot:admin"}, metadata
    refused = call(oauth_server, None, {"conversationId": "o", "language": "bash", "code": "echo no"})
    assert refused.status_code == 401, refused.text
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and (
        f'resource_metadata="{oauth_server.base_url}/.well-known/oauth-protected-resource/mcp"') in challenge
    assert 'scope="sandlot:read sandlot:run"' in challenge, challenge


def test_a_token_for_this_resource_runs_code_as_its_subject(oauth_server, authorization_server):
    token = authorization_server.mint(oauth_server.mcp_url)
    response = call(oauth_server, token, {"conversationId": "oauth", "language": "bash", "code": "echo yes"})
    result = result_of(response)["result"]["structuredContent"]
    assert result["stdout"] == "yes\n", result
    record = httpx.get(f"{oauth_server.base_url}/v1/runs/{result['runId']}",
                       headers={"Authorization": f"Bearer {token}"}).json()
    assert record["caller"] == SUBJECT, record
    # Another subject sees none of it; with the admin scope, it sees every tenant's runs.
    def listed(token):
        response = httpx.get(f"{oauth_server.base_url}/v1/runs", params={"conversationId": "oauth"},
                             headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        return [run["id"] for run in response.json()["runs"]]
    assert listed(authorization_server.mint(oauth_server.mcp_url, subject="someone-else")) == []
    admin = authorization_server.mint(oauth_server.mcp_url, subject="an-operator", scope="sandlot:admin")
    assert listed(admin) == [result["runId"]]


@pytest.mark.parametrize("case", ["another audience", "expired", "another issuer", "unknown key"])
def test_a_token_not_meant_for_this_server_is_refused(oauth_server, authorization_server, case):
    from cryptography.hazmat.primitives.asymmetric import rsa
    token = {
        "another audience": lambda: authorization_server.mint("http://elsewhere.example/mcp"),
        "expired": lambda: authorization_server.mint(oauth_server.mcp_url, lifetime=-120),
        "another issuer": lambda: authorization_server.mint(oauth_server.mcp_url, issuer="http://127.0.0.1:1"),
        "unknown key": lambda: authorization_server.mint(
            oauth_server.mcp_url, key=rsa.generate_private_key(public_exponent=65537, key_size=2048), kid="forged"),
    }[case]()
    response = call(oauth_server, token, {"conversationId": "o", "language": "bash", "code": "echo no"})
    assert response.status_code == 401, (case, response.text)
    assert "resource_metadata=" in response.headers["www-authenticate"]
    assert "invalid token" in response.json()["message"], response.text


def test_a_call_needs_its_scope(oauth_server, authorization_server):
    reader = authorization_server.mint(oauth_server.mcp_url, scope="sandlot:read")
    response = call(oauth_server, reader, {"conversationId": "o", "language": "bash", "code": "echo no"})
    assert response.status_code == 403, response.text
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="sandlot:run"' in challenge, challenge
    assert result_of(response)["error"]["data"]["scope"] == "sandlot:run"
    # What reading needs, it may.
    listed = call(oauth_server, reader, method="resources/list")
    assert listed.status_code == 200 and "result" in result_of(listed), listed.text
    runs = httpx.get(f"{oauth_server.base_url}/v1/runs", headers={"Authorization": f"Bearer {reader}"})
    assert runs.status_code == 200, runs.text
    deleted = httpx.delete(f"{oauth_server.base_url}/v1/conversations/o", headers={"Authorization": f"Bearer {reader}"})
    assert deleted.status_code == 403, deleted.text


def test_a_rotated_key_is_picked_up_and_the_old_one_dropped(oauth_server, authorization_server):
    code = {"conversationId": "rotation", "language": "bash", "code": "echo ok"}
    old_key, old_kid = authorization_server.key, authorization_server.kid
    assert call(oauth_server, authorization_server.mint(oauth_server.mcp_url), code).status_code == 200
    # sandlot fetches the keys for an unknown key id at most once a second (a flood of made-up ids costs the
    # authorization server one request a second): this rotation comes after that.
    time.sleep(1.5)
    authorization_server.rotate()
    fetched = authorization_server.jwks_fetches
    fresh = authorization_server.mint(oauth_server.mcp_url)
    assert call(oauth_server, fresh, code).status_code == 200, "a token of the new key is taken at once"
    assert authorization_server.jwks_fetches == fetched + 1
    old = authorization_server.mint(oauth_server.mcp_url, key=old_key, kid=old_kid)
    refused = call(oauth_server, old, code)
    assert refused.status_code == 401 and "no key" in refused.json()["message"], refused.text


class MemoryStorage:
    def __init__(self):
        self.tokens, self.client = None, None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client: OAuthClientInformationFull):
        self.client = client


@pytest.mark.anyio
async def test_the_sdks_oauth_client_completes_the_flow_and_runs_code(oauth_server, authorization_server):
    redirected = {}

    async def redirect_handler(authorization_url):
        # The browser's part: the authorization server approves at once and redirects back with the code.
        async with httpx2.AsyncClient() as http:
            response = await http.get(authorization_url)
        location = httpx.URL(response.headers["location"])
        redirected["code"], redirected["state"] = location.params["code"], location.params.get("state")

    async def callback_handler():
        return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"])

    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=oauth_server.mcp_url,
        client_metadata=OAuthClientMetadata(client_name="sandlot-test", redirect_uris=["http://127.0.0.1:1/callback"],
                                            grant_types=["authorization_code", "refresh_token"],
                                            response_types=["code"], scope="sandlot:run"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler)
    http = httpx2.AsyncClient(auth=provider, timeout=60)
    async with Client(streamable_http_client(oauth_server.mcp_url, http_client=http)) as client:
        result = await client.call_tool("sandbox_run_code", {"conversationId": "sdk-oauth", "language": "python",
                                                             "code": "print('via oauth')"})
        assert result.structured_content["stdout"] == "via oauth\n", result
    assert storage.client is not None and storage.tokens is not None
    claims = __import__("jwt").decode(storage.tokens.access_token, options={"verify_signature": False})
    # The SDK asks for the scopes the server's challenge named.
    assert claims["aud"] == oauth_server.mcp_url and "sandlot:run" in claims["scope"].split(), claims


@pytest.fixture
def anyio_backend():
    return "asyncio"
