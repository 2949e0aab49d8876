"""The test internet's servers, run inside its network namespace by `internet.py` (never reachable from anywhere but
this machine): HTTP on ALLOWED:80, DENIED:80 and OTHER:80 (each answers its own name), HTTPS on ALLOWED:443 (a
test CA's certificate), a TCP echo on ALLOWED:2222, and a name server on DNS:53 that answers the test names and writes
every question it gets to the query log (so a test can show a sandbox's lookups never reach it). `/auth` on any of
them writes the request's host and `Authorization` to the auth log and answers whether it carried SECRET."""

import http.server
import socket
import socketserver
import ssl
import struct
import sys
import threading

ALLOWED, DENIED, OTHER, DNS = "203.0.113.10", "203.0.113.11", "203.0.113.12", "203.0.113.53"
NAMES = {"allowed.test": ALLOWED, "denied.test": DENIED, "other.test": OTHER}
SECRET = "s3cret-value"
AUTH_LOG = None


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello from {self.headers.get('Host', '?')} path {self.path}\n".encode()
        if self.path == "/auth":
            authorization = self.headers.get("Authorization", "")
            with open(AUTH_LOG, "a") as log:
                log.write(f"{self.headers.get('Host', '?')} {authorization}\n")
            body = b"authorized\n" if authorization == f"Bearer {SECRET}" else b"unauthorized\n"
        self.send_response(200)
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
