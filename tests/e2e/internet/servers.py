"""The test internet's servers, run inside its network namespace by `internet.py` (never reachable from anywhere but
this machine): HTTP on ALLOWED:80, DENIED:80 and OTHER:80 (each answers its own name), HTTPS on ALLOWED:443 (a
test CA's certificate), a TCP echo on ALLOWED:2222, and a name server on DNS:53 that answers the test names and writes
every question it gets to the query log (so a test can show a sandbox's lookups never reach it). `/auth` on any of
them writes the request's host and `Authorization` to the auth log and answers whether it carried SECRET; `/simple/`
is a package index (PEP 503) with one package, WHEEL_NAME, a wheel built here."""

import hashlib
import http.server
import io
import socket
import socketserver
import ssl
import struct
import sys
import threading
import zipfile

ALLOWED, DENIED, OTHER, DNS = "203.0.113.10", "203.0.113.11", "203.0.113.12", "203.0.113.53"
NAMES = {"allowed.test": ALLOWED, "denied.test": DENIED, "other.test": OTHER}
SECRET = "s3cret-value"
AUTH_LOG = None
WHEEL_NAME = "sandlot_test_pkg-1.0-py3-none-any.whl"


def wheel():
    """A minimal wheel of an empty package: its bytes."""
    files = {
        "sandlot_test_pkg/__init__.py": "VERSION = '1.0'\n",
        "sandlot_test_pkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sandlot-test-pkg\nVersion: 1.0\n",
        "sandlot_test_pkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: sandlot\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "sandlot_test_pkg-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in {**files, "sandlot_test_pkg-1.0.dist-info/RECORD": record}.items():
            archive.writestr(name, text)
    return buffer.getvalue()


WHEEL = wheel()


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        content_type = "text/plain"
        body = f"hello from {self.headers.get('Host', '?')} path {self.path}\n".encode()
        if self.path.rstrip("/") in ("/simple", "/simple/sandlot-test-pkg"):
            digest = hashlib.sha256(WHEEL).hexdigest()
            link = (f'<a href="/packages/{WHEEL_NAME}#sha256={digest}">{WHEEL_NAME}</a>'
                    if self.path.startswith("/simple/sandlot-test-pkg") else '<a href="sandlot-test-pkg/">sandlot-test-pkg</a>')
            body = f"<!DOCTYPE html><html><body>{link}</body></html>\n".encode()
            content_type = "text/html"
        elif self.path == f"/packages/{WHEEL_NAME}":
            body, content_type = WHEEL, "application/octet-stream"
        if self.path == "/auth":
            authorization = self.headers.get("Authorization", "")
            with open(AUTH_LOG, "a") as log:
                log.write(f"{self.headers.get('Host', '?')} {authorization}\n")
            body = b"authorized\n" if authorization == f"Bearer {SECRET}" else b"unauthorized\n"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_http(address, port, context=None):
    server = Server((address, port), Page)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def serve_echo(address, port):
    listener = socket.create_server((address, port))

    def loop():
        while True:
            connection, _ = listener.accept()
            connection.sendall(b"echo\n")
            connection.close()

    threading.Thread(target=loop, daemon=True).start()


def answer(query):
    """A DNS answer to `query`: A records of NAMES, NXDOMAIN otherwise; (answer, the question's name)."""
    ident, _flags, _qd = struct.unpack(">HHH", query[:6])
    labels, at = [], 12
    while query[at]:
        length = query[at]
        labels.append(query[at + 1:at + 1 + length].decode(errors="replace"))
        at += 1 + length
    question = query[12:at + 5]
    qtype = struct.unpack(">H", query[at + 1:at + 3])[0]
    name = ".".join(labels).lower()
    address = NAMES.get(name)
    if address is None:
        return struct.pack(">HHHHHH", ident, 0x8183, 1, 0, 0, 0) + question, name
    if qtype != 1:
        return struct.pack(">HHHHHH", ident, 0x8180, 1, 0, 0, 0) + question, name
    record = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
    return struct.pack(">HHHHHH", ident, 0x8180, 1, 1, 0, 0) + question + record, name


def serve_dns(log_path):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((DNS, 53))
    with open(log_path, "a", buffering=1) as log:
        while True:
            query, peer = sock.recvfrom(4096)
            try:
                reply, name = answer(query)
            except (IndexError, struct.error):
                continue
            log.write(name + "\n")
            sock.sendto(reply, peer)


def main():
    global AUTH_LOG
    cert, key, log_path, AUTH_LOG = sys.argv[1:5]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    serve_http(ALLOWED, 80)
    serve_http(DENIED, 80)
    serve_http(OTHER, 80)
    serve_http(ALLOWED, 443, context)
    serve_echo(ALLOWED, 2222)
    print("ready", flush=True)
    serve_dns(log_path)


if __name__ == "__main__":
    main()
