"""python -m homework_webui --listen 127.0.0.1:8080 --controller-url ... --hwdb ... --state-dir ..."""
from __future__ import annotations

import argparse
import logging

import waitress

from .app import DEFAULT_DIST, create_app


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="homework_webui", description=__doc__)
    p.add_argument("--listen", action="append", default=None,
                   help="HOST:PORT to serve on (repeatable; default 127.0.0.1:8080)")
    p.add_argument("--controller-url", default="http://127.0.0.1:8081")
    p.add_argument("--hwdb", default="127.0.0.1:987", help="hwdb HOST:PORT")
    p.add_argument("--state-dir", default="/var/lib/homework-webui")
    p.add_argument("--dist", default=DEFAULT_DIST, help="the built frontend (frontend/dist)")
    p.add_argument("--secure-cookies", action="store_true", help="only when served over HTTPS")
    p.add_argument("--threads", type=int, default=32,
                   help="worker threads; every open page holds one for its live stream")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(args.state_dir, args.controller_url, _hostport(args.hwdb), dist_dir=args.dist,
                     cookie_secure=args.secure_cookies)
    listen = " ".join(args.listen or ["127.0.0.1:8080"])
    # No proxy in front of us: remote_addr must be the real peer for the device-access rule,
    # so waitress is told to trust no forwarding headers.
    waitress.serve(app, listen=listen, threads=args.threads, ident="homework-webui",
                   channel_timeout=60, clear_untrusted_proxy_headers=True)


if __name__ == "__main__":
    main()
