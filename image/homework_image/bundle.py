"""The signed update bundle: an uncompressed tar of `manifest.json`, `manifest.sig` (ed25519
over the manifest's bytes) and the payload (`root.squashfs`, `vmlinuz`, `initrd.img`), each
named in the manifest with its size and SHA-256. Signing and verifying use the `openssl`
command (OpenSSL 3), on the build machine and on the router alike.

The router checks the signature, then every payload's size and hash by reading the bundle,
before it writes anything."""

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
from typing import IO, Protocol

from .boot import check_version

FORMAT = 1
MANIFEST, SIGNATURE = "manifest.json", "manifest.sig"
PAYLOAD = ("root.squashfs", "vmlinuz", "initrd.img")
CHUNK = 1 << 20


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


def open_verified(path: Path, public_pem: Path) -> tuple[Manifest, tarfile.TarFile]:
    """The bundle's manifest, once its signature and every payload's size and hash check out,
    with the open tar to read the payload from (`payload_file`). Raises BundleError otherwise."""
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 - returned open, the caller closes it
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{path} is not an update bundle: {exc}") from None
    try:
        data, signature = _member_bytes(tar, MANIFEST, 1 << 16), _member_bytes(tar, SIGNATURE, 1024)
        if not verify(data, signature, public_pem):
            raise BundleError(f"{path}: the signature does not match this router's update key")
        manifest = parse_manifest(data)
        for name, info in manifest.files.items():
            size, digest = file_digest(payload_file(tar, name))
            if (size, digest) != (info["size"], info["sha256"]):
                raise BundleError(f"{path}: {name} does not match its signed size and hash (corrupt download?)")
        return manifest, tar
    except tarfile.TarError as exc:  # cut off (a broken download) or damaged past its first member
        tar.close()
        raise BundleError(f"{path} is not a whole update bundle: {exc}") from None
    except BaseException:
        tar.close()
        raise


def _member_bytes(tar: tarfile.TarFile, name: str, limit: int) -> bytes:
    f = payload_file(tar, name)
    data = f.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"bundle member {name} is too large")
    return data


def payload_file(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    try:
        member = tar.getmember(name)
    except KeyError:
        raise BundleError(f"the bundle has no {name}") from None
    f = tar.extractfile(member) if member.isfile() else None
    if f is None:
        raise BundleError(f"bundle member {name} is not a file")
    return f


def chunks(f: Readable) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk
