"""python -m homework_webui --listen 127.0.0.1:8080 --controller-url ... --hwdb ... --state-dir ..."""
from __future__ import annotations

import argparse
import logging

import waitress

from .app import DEFAULT_DIST, create_app
from .live import StreamLimits


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def waitress_options(listen: list[str], workers: int, max_streams: int) -> dict:
    """Every live stream holds a thread for as long as the page is open, so the server gets
    one thread per allowed stream on top of `workers` for ordinary requests: however many
    streams are open, sign-in and the API still have their own threads."""
    return {
        "listen": " ".join(listen),
        "threads": workers + max_streams,
        # waitress stops accepting at this many connections: room for every stream besides
        # its default 100 for everything else.
        "connection_limit": 100 + max_streams,
        "ident": "homework-webui",
        "channel_timeout": 60,
        # Keep reading a connection while its request runs, so a live stream learns at once
        # that its page has gone (environ["waitress.client_disconnected"]).
        "channel_request_lookahead": 5,
        # No proxy in front of us: remote_addr must be the real peer for the device-access
        # rule, so waitress trusts no forwarding headers.
        "clear_untrusted_proxy_headers": True,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="homework_webui", description=__doc__)
    p.add_argument("--listen", action="append", default=None,
                   help="HOST:PORT to serve on (repeatable; default 127.0.0.1:8080)")
    p.add_argument("--hostname", action="append", default=[],
                   help="a name the router is reached by, e.g. router.home (repeatable); requests for any "
                        "name other than these, the listen addresses and loopback are refused")
    p.add_argument("--controller-url", default="http://127.0.0.1:8081")
    p.add_argument("--hwdb", default="127.0.0.1:987", help="hwdb HOST:PORT")
    p.add_argument("--state-dir", default="/var/lib/homework-webui")
    p.add_argument("--setup-code-file",
                   help="the first-run setup code provisioned by the firmware image; without it one is "
                        "generated into STATE_DIR/setup-code")
    p.add_argument("--dist", default=DEFAULT_DIST, help="the built frontend (frontend/dist)")
    p.add_argument("--secure-cookies", action="store_true", help="only when served over HTTPS")
    p.add_argument("--threads", type=int, default=16, help="worker threads for ordinary requests")
    p.add_argument("--max-streams", type=int, default=StreamLimits.max_total,
                   help="live-update streams open at once (each has its own thread besides --threads)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    listen = args.listen or ["127.0.0.1:8080"]
    app = create_app(args.state_dir, args.controller_url, _hostport(args.hwdb), dist_dir=args.dist,
                     cookie_secure=args.secure_cookies, setup_code_file=args.setup_code_file,
                     hostnames=[*args.hostname, *(_hostport(a)[0] for a in listen)],
                     stream_limits=StreamLimits(max_total=args.max_streams))
    waitress.serve(app, **waitress_options(listen, args.threads, args.max_streams))


if __name__ == "__main__":
    main()
