"""The household registry: one interface, two backends (a JSON file, or etcd shared by slicers).

Every change is a transaction: it is validated against all other households (addresses, slots,
certificates may not overlap), written atomically, and visible to `snapshot()` as soon as the
call returns. Slots come from a counter that only grows, so a removed household's slot is never
handed to a newcomer while some slicer might still hold its rules.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import fcntl
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from .model import MAX_SLOT, Household, InvalidHousehold, check_disjoint

OnChange = Callable[[dict[str, Household]], Awaitable[None]]


class RegistryError(RuntimeError):
    pass


def _apply_update(current: Household, changes: dict[str, Any]) -> Household:
    if "name" in changes and changes["name"] != current.name:
        raise InvalidHousehold("a household's name cannot change (remove and add it)")
    if "slot" in changes and changes["slot"] != current.slot:
        raise InvalidHousehold("the slot is assigned by the registry")
    return Household.from_dict({**current.to_dict(), **changes})


class Registry(abc.ABC):
    @abc.abstractmethod
    async def snapshot(self) -> dict[str, Household]: ...

    @abc.abstractmethod
    async def add(self, household: Household) -> Household: ...

    @abc.abstractmethod
    async def update(self, name: str, changes: dict[str, Any]) -> Household: ...

    @abc.abstractmethod
    async def remove(self, name: str) -> None: ...

    @abc.abstractmethod
    async def follow(self, on_change: OnChange) -> None:
        """Call `on_change(all households)` after every change by anyone; runs until cancelled."""

    async def close(self) -> None:
        return None


# --- file backend -----------------------------------------------------------------------------


class FileRegistry(Registry):
    """`{"next_slot": n, "households": {name: record}}`, replaced atomically (write, fsync, rename)."""

    def __init__(self, path: str | Path, poll_interval: float = 0.5):
        self.path = Path(path)
        self.poll_interval = poll_interval
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"next_slot": 1, "households": {}}
        except (OSError, ValueError) as exc:
            raise RegistryError(f"{self.path}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("households", {}), dict):
            raise RegistryError(f"{self.path}: expected an object with 'households'")
        return data

    def _parse(self, data: dict[str, Any]) -> dict[str, Household]:
        households = {}
        for name, record in data.get("households", {}).items():
            households[name] = Household.from_dict({**record, "name": name})
        check_disjoint(list(households.values()))
        return households

    def _write(self, next_slot: int, households: dict[str, Household]) -> None:
        check_disjoint(list(households.values()))
        records = {h.name: {k: v for k, v in h.to_dict().items() if k != "name"} for h in households.values()}
        text = json.dumps({"next_slot": next_slot, "households": records}, indent=2, sort_keys=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def snapshot(self) -> dict[str, Household]:
        return self._parse(self._read())

    async def add(self, household: Household) -> Household:
        with self._locked():
            data = self._read()
            households = self._parse(data)
            if household.name in households:
                raise InvalidHousehold(f"household {household.name} already exists")
            next_slot = max(int(data.get("next_slot", 1)), 1)
            if next_slot > MAX_SLOT:
                raise RegistryError("no slots left")
            added = household.with_slot(next_slot)
            households[added.name] = added
            self._write(next_slot + 1, households)
            return added

    async def update(self, name: str, changes: dict[str, Any]) -> Household:
        with self._locked():
            data = self._read()
            households = self._parse(data)
            if name not in households:
                raise InvalidHousehold(f"no household {name}")
            households[name] = _apply_update(households[name], changes)
            self._write(int(data.get("next_slot", 1)), households)
            return households[name]

    async def remove(self, name: str) -> None:
        with self._locked():
            data = self._read()
            households = self._parse(data)
            if households.pop(name, None) is None:
                raise InvalidHousehold(f"no household {name}")
            self._write(int(data.get("next_slot", 1)), households)

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    async def follow(self, on_change: OnChange) -> None:
        # Every write replaces the file (new inode), so (inode, mtime, size) changes on every change.
        seen = self._stamp()
        while True:
            await asyncio.sleep(self.poll_interval)
            stamp = self._stamp()
            if stamp != seen:
                seen = stamp
                try:
                    households = await self.snapshot()
                except (RegistryError, InvalidHousehold):
                    continue  # a hand-edited file that does not parse: keep the last good registry
                await on_change(households)


# --- etcd backend (v3 JSON gateway) ------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def _prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


class EtcdRegistry(Registry):
    """Households under `{prefix}/households/{name}`, the slot counter at `{prefix}/next_slot`.

    Talks to etcd 3.4's gRPC gateway (`/v3/kv/range`, `/v3/kv/txn`, `/v3/watch`) over plain HTTP
    with asyncio streams. Each change is one etcd transaction guarded by mod_revision compares, so
    two slicers changing the registry at once cannot both win with clashing slots or addresses.
    """

    def __init__(self, endpoint: str, prefix: str = "/isp-flowvisor"):
        host, _, port = endpoint.removeprefix("http://").rstrip("/").rpartition(":")
        self.host, self.port = host, int(port)
        self.prefix = prefix.rstrip("/")

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            payload = json.dumps(body).encode()
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
        head, _, rest = raw.partition(b"\r\n\r\n")
        if b"chunked" in head.lower():
            rest = _dechunk(rest)
        status = head.split(b" ", 2)[1]
        result = json.loads(rest or b"{}")
        if status != b"200":
            raise RegistryError(f"etcd {path}: {result.get('message') or result}")
        return result

    async def _range(self) -> tuple[dict[str, tuple[Household, int]], int, int]:
        """(name -> (household, mod_revision)), next_slot, next_slot's mod_revision."""
        key = f"{self.prefix}/"
        result = await self._post("/v3/kv/range", {"key": _b64(key), "range_end": _prefix_end(key)})
        households: dict[str, tuple[Household, int]] = {}
        next_slot, next_rev = 1, 0
        for kv in result.get("kvs", []):
            name = _unb64(kv["key"])[len(key) :]
            value = _unb64(kv["value"])
            if name == "next_slot":
                next_slot, next_rev = int(value), int(kv["mod_revision"])
            elif name.startswith("households/"):
                h = Household.from_dict(json.loads(value))
                households[h.name] = (h, int(kv["mod_revision"]))
        return households, next_slot, next_rev

    async def snapshot(self) -> dict[str, Household]:
        households, _, _ = await self._range()
        return {name: h for name, (h, _) in households.items()}

    def _key(self, name: str) -> str:
        return f"{self.prefix}/households/{name}"

    async def _txn(self, compare: list[dict], success: list[dict]) -> None:
        result = await self._post("/v3/kv/txn", {"compare": compare, "success": success})
        if not result.get("succeeded"):
            raise RegistryError("the registry changed underneath this change; retry")

    def _mod_revision_is(self, key: str, revision: int) -> dict:
        return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}

    def _put(self, key: str, value: str) -> dict:
        return {"request_put": {"key": _b64(key), "value": _b64(value)}}

    async def add(self, household: Household) -> Household:
        households, next_slot, next_rev = await self._range()
        if household.name in households:
            raise InvalidHousehold(f"household {household.name} already exists")
        added = household.with_slot(next_slot)
        check_disjoint([h for h, _ in households.values()] + [added])
        counter = f"{self.prefix}/next_slot"
        await self._txn(
            [self._mod_revision_is(counter, next_rev), self._mod_revision_is(self._key(added.name), 0)],
            [self._put(counter, str(next_slot + 1)), self._put(self._key(added.name), json.dumps(added.to_dict()))],
        )
        return added

    async def update(self, name: str, changes: dict[str, Any]) -> Household:
        households, _, _ = await self._range()
        if name not in households:
            raise InvalidHousehold(f"no household {name}")
        current, revision = households[name]
        updated = _apply_update(current, changes)
        check_disjoint([h for n, (h, _) in households.items() if n != name] + [updated])
        await self._txn(
            [self._mod_revision_is(self._key(name), revision)],
            [self._put(self._key(name), json.dumps(updated.to_dict()))],
        )
        return updated

    async def remove(self, name: str) -> None:
        households, _, _ = await self._range()
        if name not in households:
            raise InvalidHousehold(f"no household {name}")
        await self._txn(
            [self._mod_revision_is(self._key(name), households[name][1])],
            [{"request_delete_range": {"key": _b64(self._key(name))}}],
        )

    async def follow(self, on_change: OnChange) -> None:
        key = f"{self.prefix}/"
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(1)
                continue
            try:
                body = json.dumps({"create_request": {"key": _b64(key), "range_end": _prefix_end(key)}}).encode()
                writer.write(
                    f"POST /v3/watch HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                await reader.readuntil(b"\r\n\r\n")
                # A change may have happened between our last snapshot and the watch starting.
                await on_change(await self.snapshot())
                while True:
                    size_line = await reader.readline()
                    if not size_line:
                        break
                    size = int(size_line.strip() or b"0", 16)
                    if size == 0:
                        break
                    chunk = await reader.readexactly(size + 2)
                    event = json.loads(chunk)
                    if event.get("result", {}).get("events"):
                        await on_change(await self.snapshot())
            except (OSError, asyncio.IncompleteReadError, ValueError, RegistryError):
                pass
            finally:
                writer.close()
            await asyncio.sleep(1)


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


def open_registry(spec: dict[str, Any]) -> Registry:
    if spec.get("backend", "file") == "etcd":
        return EtcdRegistry(spec.get("endpoint", "http://127.0.0.1:2379"), spec.get("prefix", "/isp-flowvisor"))
    return FileRegistry(spec["path"])
