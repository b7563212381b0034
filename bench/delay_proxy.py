#!/usr/bin/env python3
"""A TCP relay that holds every chunk it reads for a one-way delay (and its bytes over a rate) before passing it on,
in each direction, in order: the link model of tandem's emulated links (src/split/transport_link.cpp) for a program
that cannot use them, on a kernel without tc netem (bench/llama_rpc.sh puts it between llama.cpp's RPC client and
server). A benchmark tool, not part of tandem.

  python3 bench/delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT ONE_WAY_MS [GBIT]

Each accepted connection opens one to the target; per direction a reader thread stamps each chunk with its due time
(send time + bytes / rate, queued behind the previous chunk, + the delay) and a writer thread sends it then. Sockets
have TCP_NODELAY, as llama.cpp's and Open MPI's do.
"""
import collections
import socket
import sys
import threading
import time


def relay(src, dst, delay_s, bytes_per_s):
    queue = collections.deque()
    cv = threading.Condition()

    def reader():
        free_at = 0.0  # when the emulated link has sent what it holds
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            now = time.monotonic()
            if data and bytes_per_s > 0:
                free_at = max(now, free_at) + len(data) / bytes_per_s
            else:
                free_at = max(now, free_at)
            with cv:
                queue.append((free_at + delay_s, data))
                cv.notify()
            if not data:
                return

    def writer():
        while True:
            with cv:
                while not queue:
                    cv.wait()
                due, data = queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the source closed: close our side towards the destination
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    threads = [threading.Thread(target=reader, daemon=True), threading.Thread(target=writer, daemon=True)]
    for t in threads:
        t.start()
    return threads


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    lhost, lport = sys.argv[1].rsplit(":", 1)
    thost, tport = sys.argv[2].rsplit(":", 1)
    delay_s = float(sys.argv[3]) / 1000.0
    bytes_per_s = float(sys.argv[4]) * 1e9 / 8 if len(sys.argv) > 4 else 0.0
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((lhost, int(lport)))
    server.listen(16)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((thost, int(tport)))
        except OSError as e:
            print("delay_proxy: cannot reach %s:%s: %s" % (thost, tport, e), file=sys.stderr)
            client.close()
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        relay(client, upstream, delay_s, bytes_per_s)
        relay(upstream, client, delay_s, bytes_per_s)


if __name__ == "__main__":
    main()
