"""A small internet on this machine, for the egress tests: a network namespace joined to the host's by a veth pair
(203.0.113.0/24, TEST-NET-3: never routed on the real internet), with the servers of `servers.py` in it and a test
CA for its HTTPS. The egress proxy resolves names with its name server (SANDLOT_EGRESS_NAMESERVERS)."""

import os
import pathlib
import subprocess
import sys

from . import servers

HOST_SIDE = "203.0.113.1"


def run(*argv):
    subprocess.run(argv, check=True, capture_output=True)


class Internet:
    def __init__(self, work):
        self.work = pathlib.Path(work)
        suffix = os.urandom(3).hex()
        self.netns, self.veth = f"sl-inet-{suffix}", f"sli-{suffix}"
        self.ca = self.work / "ca.pem"
        self.query_log = self.work / "queries.log"
        self.auth_log = self.work / "auth.log"
        self.process = None

    def start(self):
        self.make_certificates()
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        run("ip", "addr", "add", f"{HOST_SIDE}/24", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        inside = ["ip", "netns", "exec", self.netns]
        run(*inside, "ip", "link", "set", "lo", "up")
        for address in (servers.ALLOWED, servers.DENIED, servers.OTHER, servers.DNS):
            run(*inside, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        run(*inside, "ip", "link", "set", "eth0", "up")
        self.query_log.touch()
        self.auth_log.touch()
        self.process = subprocess.Popen(
            [*inside, sys.executable, str(pathlib.Path(servers.__file__)), str(self.work / "server.pem"),
             str(self.work / "server.key"), str(self.query_log), str(self.auth_log)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def make_certificates(self):
        key, ca_key = self.work / "server.key", self.work / "ca.key"
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sandlot test CA",
            "-keyout", str(ca_key), "-out", str(self.ca))
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test", "-keyout", str(key),
            "-out", str(self.work / "server.csr"))
        extensions = self.work / "ext.cnf"
        extensions.write_text("subjectAltName=DNS:allowed.test\n")
        run("openssl", "x509", "-req", "-in", str(self.work / "server.csr"), "-CA", str(self.ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(self.work / "server.pem"))

    def authorizations(self):
        """(host, Authorization) of every request to `/auth`, in order."""
        return [tuple(line.split(" ", 1)) for line in self.auth_log.read_text().splitlines()]

    def queries(self):
        return self.query_log.read_text().split()

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
