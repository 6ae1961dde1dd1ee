"""`isp-flowvisor CONFIG.toml`: run the slicer beside one aggregation switch."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from .admin import DEFAULT_TOKEN_FILE, Admin, TokenError, load_or_create_token, serve_http
from .config import ConfigError, SlicerConfig
from .queues import DownlinkQueues
from .registry import open_registry
from .relay import Slicer

LOG = logging.getLogger("isp_flowvisor")
USAGE_INTERVAL = 5.0


async def run(config: SlicerConfig, token: str, ready: asyncio.Event | None = None) -> None:
    registry = open_registry(config.registry)
    slicer = Slicer(config, registry)
    queues = DownlinkQueues.from_config(config.queues) if config.queues.get("interface") else None
    admin = Admin(slicer, token, queue_stats=queues.stats_by_household if queues else None)
    await slicer.start()
    if queues is not None:
        queues.apply(slicer.households.values())
        slicer.on_households_changed.append(lambda households: queues.apply(households.values()))
    servers = [await serve_http(*config.rpc_listen, admin.rpc), await serve_http(*config.metrics_listen, admin.metrics)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP re-reads the registry; sessions of unchanged households are untouched.
    loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(slicer.apply_registry_from_source()))
    switch = config.switch_unix or "{}:{}".format(*config.switch_listen)
    LOG.info(
        "switch on %s, households on %s:%d (%s), fvctl on %s:%d, metrics on %s:%d",
        switch,
        *config.household_listen,
        "plain TCP" if config.plain_tcp else "TLS",
        *config.rpc_listen,
        *config.metrics_listen,
    )
    if ready is not None:
        ready.set()

    async def poll_usage() -> None:
        while True:
            await asyncio.sleep(USAGE_INTERVAL)
            if slicer.switch_ready.is_set():
                with contextlib.suppress(TimeoutError, ConnectionError):
                    admin.usage = await slicer.usage()

    poller = asyncio.create_task(poll_usage())
    try:
        await stop.wait()
    finally:
        poller.cancel()
        for server in servers:
            server.close()
        await slicer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="isp-flowvisor", description=__doc__)
    parser.add_argument("config", type=Path, help="the slicer's TOML configuration")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=DEFAULT_TOKEN_FILE,
        help=f"fvctl's token (mode 0600), made here at the first start (default {DEFAULT_TOKEN_FILE})",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = SlicerConfig.load(args.config)
    except ConfigError as exc:
        print(f"isp-flowvisor: {exc}", file=sys.stderr)
        return 2
    try:
        token = load_or_create_token(args.token_file)
    except (OSError, TokenError) as exc:
        print(f"isp-flowvisor: fvctl's token: {exc}", file=sys.stderr)
        return 2
    asyncio.run(run(config, token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
