"""The signed update bundle: an uncompressed tar of `manifest.json`, `manifest.sig` (ed25519
over the manifest's bytes) and the payload (`root.squashfs`, `vmlinuz`, `initrd.img`), each
named in the manifest with its size and SHA-256. Signing and verifying use the `openssl`
command (OpenSSL 3), on the build machine and on the router alike.

The router checks the signature, then every payload's size and hash by reading the bundle,
before it writes anything. It reads the tar itself, header by header in order, and only as far
as the signed manifest names (`members`): a hostile tar of many members costs it one header."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from .boot import check_version

FORMAT = 1
MANIFEST, SIGNATURE = "manifest.json", "manifest.sig"
PAYLOAD = ("root.squashfs", "vmlinuz", "initrd.img")
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE


class BundleError(ValueError):
    """The bundle is not one this router may install; nothing was written."""


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


@dataclass(frozen=True)
class Manifest:
    version: str
    files: dict[str, dict]  # name -> {"size": int, "sha256": hex}


def file_digest(f: Readable) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    while chunk := f.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()


def manifest_bytes(version: str, files: dict[str, dict]) -> bytes:
    return (
        json.dumps(
            {"format": FORMAT, "version": check_version(version), "files": files}, sort_keys=True, indent=1
        ).encode()
        + b"\n"
    )


def parse_manifest(data: bytes) -> Manifest:
    try:
        doc = json.loads(data)
        if doc["format"] != FORMAT:
            raise BundleError(f"bundle format {doc['format']} (this router reads format {FORMAT})")
        files = doc["files"]
        if sorted(files) != sorted(PAYLOAD):
            raise BundleError(f"bundle holds {sorted(files)}, not {sorted(PAYLOAD)}")
        for name, info in files.items():
            if not isinstance(info["size"], int) or len(info["sha256"]) != 64:
                raise BundleError(f"bundle manifest: bad entry for {name}")
        return Manifest(check_version(doc["version"]), files)
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, BundleError):
            raise
        raise BundleError(f"bundle manifest is malformed: {exc!r}") from None


def _openssl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], capture_output=True)


def make_key(private_pem: Path, public_pem: Path) -> None:
    private_pem.parent.mkdir(parents=True, exist_ok=True)
    for cmd in (
        ["genpkey", "-algorithm", "ed25519", "-out", str(private_pem)],
        ["pkey", "-in", str(private_pem), "-pubout", "-out", str(public_pem)],
    ):
        proc = _openssl(*cmd)
        if proc.returncode != 0:
            raise RuntimeError(f"openssl {cmd[0]} failed: {proc.stderr.decode(errors='replace')}")
    private_pem.chmod(0o600)


def sign(data: bytes, private_pem: Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").write_bytes(data)
        proc = _openssl("pkeyutl", "-sign", "-rawin", "-inkey", str(private_pem), "-in", f"{tmp}/data")
    if proc.returncode != 0:
        raise RuntimeError(f"openssl could not sign: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def verify(data: bytes, signature: bytes, public_pem: Path) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").write_bytes(data)
        (Path(tmp) / "sig").write_bytes(signature)
        proc = _openssl(
            "pkeyutl",
            "-verify",
            "-pubin",
            "-inkey",
            str(public_pem),
            "-rawin",
            "-in",
            f"{tmp}/data",
            "-sigfile",
            f"{tmp}/sig",
        )
    return proc.returncode == 0


def write(out: Path, version: str, payload: dict[str, Path], private_pem: Path) -> Manifest:
    """Write a signed bundle of `payload` ({member name: file}) as `version`."""
    files = {}
    for name in PAYLOAD:
        with payload[name].open("rb") as f:
            size, digest = file_digest(f)
        files[name] = {"size": size, "sha256": digest}
    data = manifest_bytes(version, files)
    signature = sign(data, private_pem)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, blob in ((MANIFEST, data), (SIGNATURE, signature)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, io.BytesIO(blob))
        for name in PAYLOAD:
            info = tar.gettarinfo(str(payload[name]), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with payload[name].open("rb") as f:
                tar.addfile(info, f)
    tmp.replace(out)
    return parse_manifest(data)


def check(f: BinaryIO, public_pem: Path) -> Manifest:
    """The bundle's manifest, once its signature and every payload's size and hash check out.
    Raises BundleError otherwise. `f` is read from its start, once, never further than the
    members the manifest names; nothing of it is kept."""
    manifest = None
    for name, data in members(f, public_pem):
        info = data.info
        size, digest = file_digest(data)
        if (size, digest) != (info["size"], info["sha256"]):
            raise BundleError(f"{name} does not match its signed size and hash (corrupt download?)")
        manifest = data.manifest
    if manifest is None:
        raise BundleError("the bundle has no payload")
    return manifest


def members(f: BinaryIO, public_pem: Path) -> Iterator[tuple[str, PayloadReader]]:
    """The bundle's payload members in the order they come, each as a reader of its bytes,
    after the signature over the manifest (the first two members) checks out.

    Headers are read one at a time and only as far as the signed manifest goes: the manifest
    and its signature must come first (each read only up to a small size), then exactly the
    payload the manifest names, each once, then the end of the archive. Anything else (a
    member too many, a link, a long-name or pax extension header) is refused at its header, so
    a hostile tar costs the installer one header's worth of reading. The caller still checks
    each payload's size and hash against the manifest: the file may change while it is read."""
    try:
        f.seek(0)
    except OSError as exc:
        raise BundleError(f"the bundle cannot be read: {exc}") from None
    reader = _TarReader(f)
    data = reader.member_bytes(MANIFEST, 1 << 16)
    signature = reader.member_bytes(SIGNATURE, 1024)
    if not verify(data, signature, public_pem):
        raise BundleError("the signature does not match this router's update key")
    manifest = parse_manifest(data)
    left = set(manifest.files)
    while left:
        name, size = reader.next_member()
        if name not in left:
            raise BundleError(f"the bundle holds {name!r} where its manifest names {sorted(left)}")
        left.discard(name)
        if size != manifest.files[name]["size"]:
            raise BundleError(f"{name} does not match its signed size and hash (corrupt download?)")
        payload = PayloadReader(reader, manifest, name)
        yield name, payload
        reader.skip_rest()
    if not reader.at_end():
        raise BundleError("the bundle holds more than its manifest names")


class PayloadReader:
    """One payload member's bytes, read from the bundle in order."""

    def __init__(self, reader: _TarReader, manifest: Manifest, name: str):
        self.reader, self.manifest, self.name = reader, manifest, name
        self.info = manifest.files[name]

    def read(self, n: int, /) -> bytes:
        return self.reader.read(n)


class _TarReader:
    """A tar file's members in order, one 512-byte header at a time (tarfile's own reader
    indexes every header of the archive first, and follows extension headers of any size)."""

    def __init__(self, f: BinaryIO):
        self.f, self.left, self.padding = f, 0, 0

    def next_member(self) -> tuple[str, int]:
        block = self._block()
        if block == bytes(BLOCK):
            raise BundleError("the bundle ends before its manifest's payload")
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "strict")
        except tarfile.HeaderError as exc:
            raise BundleError(f"the bundle has a damaged member header: {exc}") from None
        if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            raise BundleError(f"bundle member {info.name!r} is not a plain file")
        self.left, self.padding = info.size, -info.size % BLOCK
        return info.name, info.size

    def member_bytes(self, name: str, limit: int) -> bytes:
        found, size = self.next_member()
        if found != name:
            raise BundleError(f"the bundle starts with {found!r}, not its {name}")
        if size > limit:
            raise BundleError(f"bundle member {name} is too large")
        data = self.read(size)
        if len(data) != size:
            raise BundleError(f"the bundle is cut off in {name}")
        self.skip_rest()
        return data

    def read(self, n: int) -> bytes:
        data = self.f.read(min(n, self.left))
        if not data and self.left:
            raise BundleError("the bundle is cut off (a broken download?)")
        self.left -= len(data)
        return data

    def skip_rest(self) -> None:
        while self.left:
            self.read(CHUNK)
        if len(self.f.read(self.padding)) != self.padding:
            raise BundleError("the bundle is cut off (a broken download?)")
        self.padding = 0

    def at_end(self) -> bool:
        """Whether the archive ends here (tar's end: a block of zeros)."""
        return self._block() == bytes(BLOCK)

    def _block(self) -> bytes:
        block = self.f.read(BLOCK)
        if len(block) != BLOCK:
            raise BundleError("the bundle is cut off (a broken download?)")
        return block


def chunks(f: Readable) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk
