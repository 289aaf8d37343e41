"""Round trips and bulk TCP between two hosts, for tests/cluster/delay.sh.

  netprobe.py echo ADDR PORT           UDP echo server (runs until killed)
  netprobe.py rtt ADDR PORT N          N UDP round trips to the echo server;
                                       prints the median and p90 in us
  netprobe.py sink ADDR PORT           TCP server: reads one connection to
                                       its end, answers with bytes and seconds
  netprobe.py bulk ADDR PORT SECONDS   sends for SECONDS; prints Gbit/s as
                                       the sink measured it
"""
import socket
import statistics
import sys
import time


def echo(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)


def rtt(addr, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((addr, port))
    s.settimeout(0.2)
    deadline = time.monotonic() + 5
    while True:  # until the server answers
        try:
            s.send(b"hello")
            s.recv(64)
            break
        except (socket.timeout, ConnectionRefusedError):
            if time.monotonic() > deadline:
                sys.exit("netprobe: no answer from the echo server at %s:%d" % (addr, port))
            time.sleep(0.05)
    s.settimeout(1)
    times = []
    for i in range(n):
        msg = b"%d" % i
        t = time.monotonic()
        s.send(msg)
        while s.recv(64) != msg:
            pass
        times.append((time.monotonic() - t) * 1e6)
        time.sleep(0.001)
    times.sort()
    print("%.1f %.1f" % (statistics.median(times), times[int(len(times) * 0.9)]))


def sink(addr, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    c, _ = ls.accept()
    buf = bytearray(1 << 20)
    total = 0
    n = c.recv_into(buf)
    t0 = time.monotonic()
    while n:
        total += n
        n = c.recv_into(buf)
    c.sendall(b"%d %.6f\n" % (total, time.monotonic() - t0))
    c.close()


def bulk(addr, port, seconds):
    deadline = time.monotonic() + 5
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    c.settimeout(30)
    chunk = b"\0" * (1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        c.sendall(chunk)
    c.shutdown(socket.SHUT_WR)
    total, secs = c.makefile().readline().split()
    print("%.3f" % (int(total) * 8 / float(secs) / 1e9))


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] in ("echo", "sink"):
        {"echo": echo, "sink": sink}[a[0]](a[1], int(a[2]))
    elif len(a) == 4 and a[0] == "rtt":
        rtt(a[1], int(a[2]), int(a[3]))
    elif len(a) == 4 and a[0] == "bulk":
        bulk(a[1], int(a[2]), float(a[3]))
    else:
        sys.exit(__doc__)
