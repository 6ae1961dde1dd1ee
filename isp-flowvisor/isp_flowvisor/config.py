"""The slicer's own configuration (TOML). Households live in the registry, not here."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    pass


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{what}: expected host:port, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass
class SlicerConfig:
    switch_listen: tuple[str, int] = ("127.0.0.1", 6653)
    # Or a Unix socket (OVS: set-controller unix:PATH), for a switch in another network namespace.
    switch_unix: str = ""
    household_listen: tuple[str, int] = ("0.0.0.0", 6643)
    # TLS is the default and only production mode; plain TCP exists for tests (identity = source address).
    plain_tcp: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    shared_ports: frozenset[int] = frozenset()
    rpc_listen: tuple[str, int] = ("127.0.0.1", 6644)
    metrics_listen: tuple[str, int] = ("127.0.0.1", 9644)
    registry: dict[str, Any] = field(default_factory=lambda: {"backend": "file", "path": "households.json"})
    batch: int = 8
    inbox: int = 256
    queues: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Path = Path(".")) -> SlicerConfig:
        cfg = cls()
        switch = data.get("switch", {})
        households = data.get("households", {})
        admin = data.get("admin", {})
        listen = str(switch.get("listen", ""))
        if listen.startswith("unix:"):
            cfg.switch_unix = str(base / listen.removeprefix("unix:"))
        elif listen:
            cfg.switch_listen = _address(listen, "switch.listen")
        cfg.shared_ports = frozenset(int(p) for p in switch.get("shared_ports", ()))
        if "listen" in households:
            cfg.household_listen = _address(households["listen"], "households.listen")
        cfg.plain_tcp = bool(households.get("plain_tcp", False))
        for key in ("tls_cert", "tls_key", "tls_ca"):
            value = households.get(key, "")
            setattr(cfg, key, str(base / value) if value else "")
        if not cfg.plain_tcp and not (cfg.tls_cert and cfg.tls_key and cfg.tls_ca):
            raise ConfigError("households: tls_cert, tls_key and tls_ca are required unless plain_tcp = true")
        cfg.batch = int(households.get("batch", cfg.batch))
        cfg.inbox = int(households.get("inbox", cfg.inbox))
        if "rpc" in admin:
            cfg.rpc_listen = _address(admin["rpc"], "admin.rpc")
        if "metrics" in admin:
            cfg.metrics_listen = _address(admin["metrics"], "admin.metrics")
        for host, what in ((cfg.rpc_listen[0], "admin.rpc"), (cfg.metrics_listen[0], "admin.metrics")):
            if host not in ("127.0.0.1", "::1", "localhost"):
                raise ConfigError(f"{what} must listen on loopback, not {host}")
        registry = dict(data.get("registry", cfg.registry))
        if registry.get("backend", "file") == "file":
            registry["path"] = str(base / registry.get("path", "households.json"))
        elif registry["backend"] != "etcd":
            raise ConfigError("registry.backend: 'file' or 'etcd'")
        cfg.registry = registry
        cfg.queues = dict(data.get("queues", {}))
        return cfg

    @classmethod
    def load(cls, path: str | Path) -> SlicerConfig:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
        return cls.from_dict(data, path.parent)
