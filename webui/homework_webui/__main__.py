"""python -m homework_webui --listen 127.0.0.1:8080 --controller-url ... --hwdb ... --state-dir ..."""

from __future__ import annotations

import argparse
import logging

from .app import DEFAULT_DIST, create_app
from .latency import LatencyCheck, Target
from .live import StreamLimits
from .serving import create_server
from .updates import UpdateSpool


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="homework_webui", description=__doc__)
    p.add_argument(
        "--listen", action="append", default=None, help="HOST:PORT to serve on (repeatable; default 127.0.0.1:8080)"
    )
    p.add_argument(
        "--hostname",
        action="append",
        default=[],
        help="a name the router is reached by, e.g. router.home (repeatable); requests for any "
        "name other than these, the listen addresses and loopback are refused",
    )
    p.add_argument("--controller-url", default="http://127.0.0.1:8081")
    p.add_argument("--hwdb", default="127.0.0.1:987", help="hwdb HOST:PORT")
    p.add_argument("--state-dir", default="/var/lib/homework-webui")
    p.add_argument(
        "--setup-code-file",
        help="the first-run setup code provisioned by the firmware image; without it one is "
        "generated into STATE_DIR/setup-code",
    )
    p.add_argument("--dist", default=DEFAULT_DIST, help="the built frontend (frontend/dist)")
    p.add_argument("--secure-cookies", action="store_true", help="only when served over HTTPS")
    p.add_argument("--threads", type=int, default=16, help="worker threads for ordinary requests")
    p.add_argument(
        "--max-streams",
        type=int,
        default=StreamLimits.max_total,
        help="live-update streams open at once (each has its own thread besides --threads)",
    )
    p.add_argument(
        "--latency-target",
        metavar="URL",
        help="base URL of the test server for the phone page's latency-under-load check "
        "(serves GET URL/bulk?bytes=N and POST URL/sink); without it the check is off",
    )
    p.add_argument(
        "--latency-seconds", type=float, default=8.0, help="how long the check loads the connection (default 8)"
    )
    p.add_argument(
        "--update-dir",
        metavar="DIR",
        help="where uploaded firmware updates go to the router's installer (homework-update --spool "
        "DIR); without it (or empty) updates are console-only",
    )
    p.add_argument("--update-max-mb", type=int, default=512, help="the largest update bundle accepted")
    p.add_argument(
        "--agent-key-file",
        metavar="PATH",
        help="the household's agent key (made by hwdb), shown to the owner for end-host agents; "
        "without it the page does not offer one",
    )
    p.add_argument(
        "--role-spool",
        metavar="DIR",
        help="where the first-run page hands the choice to make this box an access point of the household's "
        "router to the image's homework-role; without it (or empty) the box is a router and nothing else",
    )
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    listen = args.listen or ["127.0.0.1:8080"]
    try:
        latency = LatencyCheck(Target.parse(args.latency_target), args.latency_seconds) if args.latency_target else None
    except ValueError as exc:
        p.error(str(exc))
    app = create_app(
        args.state_dir,
        args.controller_url,
        _hostport(args.hwdb),
        dist_dir=args.dist,
        cookie_secure=args.secure_cookies,
        setup_code_file=args.setup_code_file,
        hostnames=[*args.hostname, *(_hostport(a)[0] for a in listen)],
        stream_limits=StreamLimits(max_total=args.max_streams),
        latency_check=latency,
        update_spool=UpdateSpool(args.update_dir, args.update_max_mb << 20) if args.update_dir else None,
        agent_key_file=args.agent_key_file,
        role_spool=args.role_spool,
    )
    server = create_server(app, listen, args.threads, args.max_streams)
    server.print_listen("Serving on http://{}:{}")
    server.run()


if __name__ == "__main__":
    main()
