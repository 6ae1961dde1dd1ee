"""The emulated internet's web server: static files, /paced/FILE sent at a fixed rate, and the
bulk transfers a speed or bufferbloat test uses: GET /bulk?bytes=N (N bytes as fast as the path
takes them) and POST /sink (reads the body and throws it away).

A paced download is the server's doing, as on a real slow site: the household sees the
bytes arrive over time, so a test can tell whether a decision cut a transfer off midway.
"""

from __future__ import annotations

import argparse
import functools
import socket
import time
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PACED_PREFIX = "/paced/"
PACED_RATE_BPS = 100_000
CHUNK = 10_000
BULK_DEFAULT_BYTES = 100_000_000
BULK_MAX_BYTES = 10_000_000_000
BULK_BLOCK = bytes(64 * 1024)


class Handler(SimpleHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/generate_204":  # the captive-portal probe Android makes: no portal here
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if url.path == "/bulk":
            return self._bulk(urllib.parse.parse_qs(url.query).get("bytes", [str(BULK_DEFAULT_BYTES)])[0])
        if not self.path.startswith(PACED_PREFIX):
            return super().do_GET()
        path = Path(self.directory) / Path(self.path[len(PACED_PREFIX) :]).name
        if not path.is_file():
            return self.send_error(404)
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        start = time.monotonic()
        for offset in range(0, len(data), CHUNK):
            # Each chunk leaves when the rate allows, whatever the client's buffers could take.
            time.sleep(max(0.0, start + offset / PACED_RATE_BPS - time.monotonic()))
            try:
                self.wfile.write(data[offset : offset + CHUNK])
                self.wfile.flush()
            except OSError:
                return None
        return None

    def do_POST(self):  # noqa: N802
        if urllib.parse.urlsplit(self.path).path != "/sink":
            return self.send_error(404)
        try:
            left = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self.send_error(411, "send a Content-Length")
        received = 0
        while left > 0 and (chunk := self.rfile.read(min(left, len(BULK_BLOCK)))):
            received += len(chunk)
            left -= len(chunk)
        body = str(received).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None

    def _bulk(self, requested: str) -> None:
        if not requested.isdigit() or not 0 < int(requested) <= BULK_MAX_BYTES:
            return self.send_error(400, f"bytes is a whole number from 1 to {BULK_MAX_BYTES}")
        left = int(requested)
        self.send_response(200)
        self.send_header("Content-Length", str(left))
        self.end_headers()
        try:
            while left > 0:
                self.wfile.write(BULK_BLOCK[:left])
                left -= min(left, len(BULK_BLOCK))
        except OSError:
            pass  # the client stopped reading: a test that ran long enough
        return None

    def log_message(self, fmt, *args):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--directory", required=True)
    p.add_argument("--port", type=int, default=80)
    args = p.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    DualStackServer(("::", args.port), functools.partial(Handler, directory=args.directory)).serve_forever()


class DualStackServer(ThreadingHTTPServer):
    """IPv4 and IPv6 on one socket (IPv4 clients appear as ::ffff:a.b.c.d)."""

    address_family = socket.AF_INET6
    # A real site's backlog (nginx: 511), not socketserver's 5: five devices loading a busy page open 300
    # connections at once, and a full accept queue drops SYNs into retries past a client's time-out.
    request_queue_size = 511

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


if __name__ == "__main__":
    main()
