#!/usr/bin/env python3
"""free_ports.py N: prints a port P such that P .. P+N-1 are all free on every interface now
(bound with SO_REUSEADDR, as the ranks' metrics listeners bind), P chosen at random in
20000..59999, for tests that give `tessera run --metrics-port` a range. Exits 1 when 200 tries
found none. Another process may take a port after this returns: tessera run checks again."""
import random
import socket
import sys


def free(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    for _ in range(200):
        port = random.randrange(20000, 60000 - count)
        if all(free(p) for p in range(port, port + count)):
            print(port)
            return 0
    print(f"free_ports.py: no {count} consecutive free ports found", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
