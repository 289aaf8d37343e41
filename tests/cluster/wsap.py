#!/usr/bin/env python3
"""A raw peer for the cluster tests: speaks the appliance's frames and
handshake by hand (protobuf encoded here, no generated code), so that a test
can send what a well-behaved daemon never would and check the answer.

  wsap.py HOST:PORT SCENARIO [OPTIONS]

Each scenario prints what happened and exits 0 when the daemon answered as
expected, 1 otherwise. Scenarios:

  register-before-proof  Hello, then Register before the AuthProof
  submit-before-hello    JobSubmit as the first frame
  wrong-proof            Hello, then a proof made with the wrong key
  silent                 says nothing; the daemon must close after its auth timeout
  hold                   opens connections from the --held addresses that stay
                         unauthenticated, then one from --source that must be
                         refused for a limit
  big-header             authenticates, then announces a header beyond the limit
  spam-list N            authenticates, sends N JobListQuery without reading
                         the answers; the daemon must drop the connection
  user-register          authenticates as a user, then sends Register
  slow-log JOB N         authenticates, asks for a job's log, reads nothing for
                         3 s, then reads it: N lines in order, then the end
"""
import argparse
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

MAGIC = b"WSAP"
# Envelope fields (proto/envelope.proto).
HELLO, AUTH_PROOF, ERROR, REGISTER = 1, 2, 3, 4
JOB_SUBMIT, JOB_LIST_QUERY, JOB_LOG_QUERY = 10, 29, 31
NAMES = {1: "hello", 2: "auth_proof", 3: "error", 4: "register", 5: "register_ack",
         10: "job_submit", 29: "job_list_query", 30: "job_list", 31: "job_log_query",
         32: "job_log_lines"}
ROLE_WSE_NODE, ROLE_CLIENT = 5, 6


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def envelope(num, body):
    return field_bytes(num, body)


def frame(header, payload=b"", header_len=None):
    n = len(header) if header_len is None else header_len
    return MAGIC + struct.pack("<HHII", 1, 0, n, len(payload)) + header + payload


def read_varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        key, i = read_varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(b, i)
        elif wt == 2:
            n, i = read_varint(b, i)
            v = b[i:i + n]
            i += n
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, v


class Peer:
    def __init__(self, addr, source=None, rcvbuf=None):
        host, port = addr.rsplit(":", 1)
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if source:
            self.s.bind((source, 0))
        self.s.settimeout(10)
        self.s.connect((host, int(port)))
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read(self):
        """The next frame as (message name, body bytes), or None at EOF."""
        if not self._need(16):
            return None
        hlen, plen = struct.unpack("<II", self.buf[8:16])
        if not self._need(16 + hlen + plen):
            return None
        header = self.buf[16:16 + hlen]
        self.buf = self.buf[16 + hlen + plen:]
        for num, body in fields(header):
            return NAMES.get(num, str(num)), body
        return "none", b""

    def closed(self):
        """True when the peer closes (after any frames still in flight)."""
        try:
            while True:
                f = self.read()
                if f is None:
                    return True
        except (ConnectionResetError, socket.timeout):
            return False

    def close(self):
        self.s.close()


def error_text(body):
    code, msg = 0, ""
    for num, v in fields(body):
        if num == 1:
            code = v - (1 << 64) if v >= 1 << 63 else v
        if num == 2:
            msg = v.decode()
    return code, msg


def hello_frame(role, name, nonce, insecure=False, user=""):
    h = field_varint(1, role) + field_bytes(2, name) + field_bytes(3, nonce) + field_varint(4, 1)
    if insecure:
        h += field_varint(5, 1)
    if user:
        h += field_bytes(6, user)
    return frame(envelope(HELLO, h))


def nonce_of(body):
    for num, v in fields(body):
        if num == 3:
            return v
    raise ValueError("hello without nonce")


def proof(key, side, dialer_nonce, acceptor_nonce, user=""):
    msg = b"wsap-auth-v1 " + side.encode() + b"\0" + dialer_nonce + acceptor_nonce
    if user:
        msg += user.encode() + b"\0"
    return hmac.new(key, msg, hashlib.sha256).digest()


def read_key(path):
    with open(path, "rb") as f:
        return f.read().rstrip(b"\r\n")


def expect(peer, name, what):
    f = peer.read()
    if f is None or f[0] != name:
        print("FAIL: expected %s (%s), got %r" % (name, what, f))
        sys.exit(1)
    return f[1]


def expect_error(peer, text):
    """The next frames hold an Error containing text, then the connection closes."""
    while True:
        f = peer.read()
        if f is None:
            print("FAIL: connection closed without an error containing %r" % text)
            sys.exit(1)
        if f[0] == "error":
            code, msg = error_text(f[1])
            print("error %d: %s" % (code, msg))
            if text not in msg:
                print("FAIL: expected %r in the error" % text)
                sys.exit(1)
            break
    if not peer.closed():
        print("FAIL: the connection stayed open after the error")
        sys.exit(1)
    print("connection closed by the daemon")


def authenticate(peer, key, role=ROLE_CLIENT, name="raw-peer", user=""):
    """Full handshake as the dialer; checks the daemon's proof too."""
    their = nonce_of(expect(peer, "hello", "the daemon's hello"))
    mine = os.urandom(32)
    peer.send(hello_frame(role, name, mine, user=user))
    p = expect(peer, "auth_proof", "the daemon's proof")
    mac = dict(fields(p)).get(1, b"")
    if not hmac.compare_digest(mac, proof(key, "acceptor", mine, their, user)):
        print("FAIL: the daemon's proof does not check out")
        sys.exit(1)
    peer.send(frame(envelope(AUTH_PROOF, field_bytes(1, proof(key, "dialer", mine, their, user)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("scenario")
    ap.add_argument("args", nargs="*", help="spam-list: N; slow-log: JOB N")
    ap.add_argument("--key-file")
    ap.add_argument("--user", default="")
    ap.add_argument("--expect", default="", help="text the refusal must contain")
    ap.add_argument("--source", help="local address to dial from (127.0.0.N)")
    ap.add_argument("--held", default="127.0.0.1", help="hold: addresses of the held connections")
    ap.add_argument("--max-ms", type=int, default=0, help="silent: the latest close expected")
    a = ap.parse_args()
    sc = a.scenario

    if sc == "register-before-proof":
        p = Peer(a.addr)
        expect(p, "hello", "the daemon's hello")
        p.send(hello_frame(ROLE_WSE_NODE, "raw-peer", os.urandom(32)))
        reg = field_varint(1, ROLE_WSE_NODE) + field_bytes(2, "raw-peer") + field_bytes(3, "127.0.0.1:1")
        p.send(frame(envelope(REGISTER, reg)))
        expect_error(p, a.expect or "register before authentication")
    elif sc == "submit-before-hello":
        p = Peer(a.addr)
        sub = field_bytes(1, "x.toml") + field_bytes(2, "[runconfig]\nmax_steps = 1\n")
        p.send(frame(envelope(JOB_SUBMIT, sub)))
        expect_error(p, a.expect or "job_submit before authentication")
    elif sc == "wrong-proof":
        p = Peer(a.addr)
        their = nonce_of(expect(p, "hello", "the daemon's hello"))
        mine = os.urandom(32)
        p.send(hello_frame(ROLE_CLIENT, "raw-peer", mine))
        p.send(frame(envelope(AUTH_PROOF, field_bytes(1, proof(b"not the secret", "dialer", mine, their)))))
        expect_error(p, a.expect or "authentication failed: wrong cluster secret")
    elif sc == "silent":
        p = Peer(a.addr)
        t0 = time.monotonic()
        expect_error(p, a.expect or "not authenticated within")
        ms = (time.monotonic() - t0) * 1000
        print("closed after %.0f ms" % ms)
        if a.max_ms and ms > a.max_ms:
            print("FAIL: later than %d ms" % a.max_ms)
            sys.exit(1)
    elif sc == "hold":
        held = []
        for src in a.held.split(","):
            p = Peer(a.addr, src)
            expect(p, "hello", "a held connection's hello")
            held.append(p)
        p = Peer(a.addr, a.source)
        expect_error(p, a.expect or "too many connections")
        for h in held:
            h.close()
    elif sc == "big-header":
        p = Peer(a.addr)
        authenticate(p, read_key(a.key_file))
        p.send(frame(b"\x00" * 16, header_len=10 << 20))
        expect_error(p, a.expect or "header")
    elif sc == "spam-list":
        p = Peer(a.addr, rcvbuf=4096)
        authenticate(p, read_key(a.key_file))
        q = frame(envelope(JOB_LIST_QUERY, b""))
        batch = q * 10000
        sent = 0
        try:
            while sent < int(a.args[0]):
                p.send(batch)
                sent += 10000
        except (BrokenPipeError, ConnectionResetError):
            pass
        print("sent %d queries without reading" % sent)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            try:
                f = p.read()
            except ConnectionResetError:
                f = None
            if f is None:
                print("connection closed by the daemon")
                return
        print("FAIL: the connection is still open")
        sys.exit(1)
    elif sc == "user-register":
        p = Peer(a.addr)
        authenticate(p, read_key(a.key_file), user=a.user)
        reg = field_varint(1, ROLE_WSE_NODE) + field_bytes(2, "raw-peer") + field_bytes(3, "127.0.0.1:1")
        p.send(frame(envelope(REGISTER, reg)))
        expect_error(p, a.expect or "register is not allowed for user")
    elif sc == "slow-log":
        p = Peer(a.addr, rcvbuf=4096)
        authenticate(p, read_key(a.key_file))
        p.send(frame(envelope(JOB_LOG_QUERY, field_bytes(1, a.args[0]))))
        time.sleep(3)
        got, frames = 0, 0
        while True:
            body = expect(p, "job_log_lines", "the log")
            frames += 1
            first, end, n = 0, False, 0
            for num, v in fields(body):
                if num == 2:
                    first = v
                elif num == 3:
                    n += 1
                elif num == 4:
                    end = bool(v)
            if first != got:
                print("FAIL: a frame starts at line %d, expected %d" % (first, got))
                sys.exit(1)
            got += n
            if end:
                break
        print("%d lines in %d frames" % (got, frames))
        if got != int(a.args[1]):
            print("FAIL: expected %s lines" % a.args[1])
            sys.exit(1)
    else:
        ap.error("unknown scenario " + sc)


if __name__ == "__main__":
    main()
