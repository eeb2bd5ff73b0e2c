#!/usr/bin/python3
"""TCP round trips between emulated hosts 0 and 1 (run by scripts/emucluster.sh on every host).

Host 1 listens on 198.18.0.2:PORT and echoes single bytes; host 0 connects (retrying while
host 1 starts), times the connect (SYN / SYN-ACK: one round trip) and COUNT one-byte
ping-pongs (TCP_NODELAY), prints
    rtt: connect C us, min M us, median D us over COUNT round trips
and closes. Other hosts do nothing. Used by tests/netns/netns_test.sh (case delay: a round trip
must take at least twice the one-way delay) and bench/delay_latency.sh (the forwarder's own
latency). usage: rtt_probe.py [COUNT] [PORT]
"""
import os
import socket
import sys
import time

count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
port = int(sys.argv[2]) if len(sys.argv) > 2 else 7777
host = int(os.environ["EMU_HOST"])
server = "198.18.0.2"

if host == 1:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((server, port))
    s.listen(1)
    s.settimeout(120)
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(1)
        if not d:
            break
        c.sendall(d)
    c.close()
elif host == 0:
    deadline = time.monotonic() + 120
    while True:
        s = socket.socket()
        t0 = time.perf_counter()
        try:
            s.connect((server, port))
            connect_us = (time.perf_counter() - t0) * 1e6
            break
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                sys.exit("rtt_probe: cannot connect to %s:%d" % (server, port))
            time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(count):
        t0 = time.perf_counter()
        s.sendall(b"x")
        if s.recv(1) != b"x":
            sys.exit("rtt_probe: the echo broke")
        rtts.append((time.perf_counter() - t0) * 1e6)
    s.close()
    rtts.sort()
    print("rtt: connect %.1f us, min %.1f us, median %.1f us over %d round trips"
          % (connect_us, rtts[0], rtts[len(rtts) // 2], count), flush=True)
