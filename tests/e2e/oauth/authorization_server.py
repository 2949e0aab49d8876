"""A small OAuth 2.1 authorization server for the tests, on this machine's loopback: RFC 8414 metadata, a JWKS with
key ids, dynamic client registration (RFC 7591), an authorization endpoint that approves at once (no user to ask:
it redirects with a code), and a token endpoint that checks PKCE (S256) and mints RS256 access tokens for the
`resource` asked (RFC 8707) with the scopes asked. `mint` makes a token directly (any audience, expiry or scope, for
the refusal tests) and `rotate` replaces the signing key (the old one leaves the JWKS)."""

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

SUBJECT = "oauth-user"


class AuthorizationServer:
    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.codes = {}
        self.clients = {}
        self.jwks_fetches = 0
        self.rotate()

    def start(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()

    def rotate(self):
        """A new signing key with a new key id; the JWKS lists only it from now on."""
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "key-" + secrets.token_hex(4)

    def jwks(self):
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def mint(self, audience, scope="sandlot:run", lifetime=600, subject=SUBJECT, issuer=None, key=None, kid=None):
        now = int(time.time())
        claims = {"iss": issuer or self.issuer, "sub": subject, "aud": audience, "iat": now, "exp": now + lifetime,
                  "scope": scope}
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid})

    def metadata(self):
        return {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token", "registration_endpoint": f"{self.issuer}/register",
                "jwks_uri": f"{self.issuer}/jwks", "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
                "scopes_supported": ["sandlot:read", "sandlot:run", "sandlot:admin"]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=None, headers=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
                    return self.reply(200, server.metadata())
                if url.path == "/jwks":
                    server.jwks_fetches += 1
                    return self.reply(200, server.jwks())
                if url.path == "/authorize":
                    query = dict(urllib.parse.parse_qsl(url.query))
                    code = secrets.token_urlsafe(16)
                    server.codes[code] = query
                    target = query["redirect_uri"] + "?" + urllib.parse.urlencode(
                        {"code": code, "state": query.get("state", "")})
                    return self.reply(302, headers={"Location": target})
                return self.reply(404, {"error": "not_found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                if self.path == "/register":
                    request = json.loads(raw)
                    client_id = "client-" + secrets.token_hex(4)
                    server.clients[client_id] = request
                    return self.reply(201, {**request, "client_id": client_id,
                                            "client_id_issued_at": int(time.time())})
                if self.path == "/token":
                    form = dict(urllib.parse.parse_qsl(raw))
                    asked = server.codes.pop(form.get("code"), None)
                    if form.get("grant_type") != "authorization_code" or asked is None:
                        return self.reply(400, {"error": "invalid_grant"})
                    verifier = form.get("code_verifier", "")
                    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
                    if challenge.decode() != asked.get("code_challenge"):
                        return self.reply(400, {"error": "invalid_grant", "error_description": "PKCE"})
                    resource = form.get("resource") or asked.get("resource")
                    scope = asked.get("scope", "sandlot:run")
                    token = server.mint(resource, scope=scope)
                    return self.reply(200, {"access_token": token, "token_type": "Bearer", "expires_in": 600,
                                            "scope": scope})
                return self.reply(404, {"error": "not_found"})

        return Handler
