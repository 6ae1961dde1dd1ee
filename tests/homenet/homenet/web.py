"""The emulated internet's web server: static files, and /paced/FILE sent at a fixed rate.

A paced download is the server's doing, as on a real slow site: the household sees the
bytes arrive over time, so a test can tell whether a decision cut a transfer off midway.
"""
from __future__ import annotations

import argparse
import functools
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PACED_PREFIX = "/paced/"
PACED_RATE_BPS = 100_000
CHUNK = 10_000


class Handler(SimpleHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        if not self.path.startswith(PACED_PREFIX):
            return super().do_GET()
        path = Path(self.directory) / Path(self.path[len(PACED_PREFIX):]).name
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
                self.wfile.write(data[offset:offset + CHUNK])
                self.wfile.flush()
            except OSError:
                return None
        return None

    def log_message(self, fmt, *args):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--directory", required=True)
    p.add_argument("--port", type=int, default=80)
    args = p.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("0.0.0.0", args.port), functools.partial(Handler, directory=args.directory)).serve_forever()


if __name__ == "__main__":
    main()
