"""Real parts for tests and benches, the slicer's own and those of everything that talks to a
slicer (the controller's slice link, the emulated home's ISP): a private Open vSwitch, the slicer
as a process, households as raw OpenFlow clients, a throwaway certificate authority.

Nothing here touches the system OVS or another test's namespaces: OVS runs with its own database,
run directory and sockets under a temp dir, and every kernel name starts with `fv`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec
from isp_flowvisor.config import SlicerConfig
from isp_flowvisor.model import Household as Record
from isp_flowvisor.registry import Registry
from isp_flowvisor.relay import Slicer
from isp_flowvisor.session import BatchedWriter, HouseholdSession

VENV_BIN = Path(sys.executable).parent
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


def wait_until(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


PORT_ATTEMPTS = 5  # first starts that may each lose a chosen port to another process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CA:
    """A throwaway certificate authority: the slicer's server certificate and households' client
    certificates (cryptography), written as PEM files under `directory`."""

    def __init__(self, directory: Path, name: str = "fv-test-ca"):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.path = self.dir / f"{name}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, cn: str, server: bool = False, address: str = "") -> dict[str, str]:
        """A certificate and key for `cn`; server: named `cn` (a DNS name) for TLS clients to check,
        address: an IP address they dial instead."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
        )
        names: list[x509.GeneralName] = [x509.DNSName(cn)] if server else []
        names += [x509.IPAddress(ipaddress.ip_address(address))] if address else []
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.dir / f"{cn}.crt", self.dir / f"{cn}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        key_path.chmod(0o600)
        return {
            "cert": str(cert_path),
            "key": str(key_path),
            "ca": str(self.path),
            "sha256": hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest(),
        }


class PrivateOVS:
    """ovsdb-server + ovs-vswitchd of our own, in a network namespace of our own.

    The userspace datapath creates kernel tap devices (`ovs-netdev`, one per bridge) whose names
    would clash with the system OVS's; in our own namespace they cannot. The slicer is reached
    over a Unix socket, which namespaces do not separate.
    """

    def __init__(self, workdir: Path):
        self.dir = workdir
        self.netns = f"fv-ovs{os.getpid() % 100000}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "OVS_RUNDIR": str(self.dir),
            "OVS_DBDIR": str(self.dir),
            "OVS_LOGDIR": str(self.dir),
            "OVS_PKGDATADIR": "/usr/share/openvswitch",
        }
        self.db_sock = self.dir / "db.sock"
        self.bridges: list[str] = []

    def run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def vsctl(self, *args: str) -> str:
        return self.run("ovs-vsctl", f"--db=unix:{self.db_sock}", "--timeout=30", *args)

    def start(self) -> PrivateOVS:
        self.run("ip", "netns", "add", self.netns)
        self.run("ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
        self.run("ovsdb-tool", "create", str(self.dir / "conf.db"), SCHEMA)
        self.run(
            "ip",
            "netns",
            "exec",
            self.netns,
            "ovsdb-server",
            str(self.dir / "conf.db"),
            f"--remote=punix:{self.db_sock}",
            f"--unixctl={self.dir / 'ovsdb.ctl'}",
            f"--pidfile={self.dir / 'ovsdb.pid'}",
            "--detach",
            f"--log-file={self.dir / 'ovsdb.log'}",
        )
        self.vsctl("--no-wait", "init")
        self.start_vswitchd()
        return self

    def start_vswitchd(self) -> None:
        self.run(
            "ip",
            "netns",
            "exec",
            self.netns,
            "ovs-vswitchd",
            f"unix:{self.db_sock}",
            f"--unixctl={self.dir / 'vswitchd.ctl'}",
            f"--pidfile={self.dir / 'vswitchd.pid'}",
            "--detach",
            f"--log-file={self.dir / 'vswitchd.log'}",
        )

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.dir / f"{name}.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop_vswitchd(self) -> None:
        pid = self._pid("vswitchd")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, "ovs-vswitchd to exit")

    def add_bridge(self, name: str, controller: str, ports: int = 3) -> str:
        """A bridge whose controller is the slicer, with internal ports numbered 1..ports."""
        assert name.startswith("fv") and len(name) <= 15
        self.vsctl(
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail_mode=secure",
            "other-config:disable-in-band=true",
            f"other-config:datapath-id={0xabcdef:016x}",
        )
        for n in range(1, ports + 1):
            port = f"{name}p{n}"
            self.vsctl("add-port", name, port, "--", "set", "interface", port, "type=internal", f"ofport_request={n}")
        self.vsctl("set-controller", name, controller)
        self.bridges.append(name)
        return name

    def ofctl(self, bridge: str, *args: str) -> str:
        return self.run("ovs-ofctl", "-O", "OpenFlow13", *args[:1], f"unix:{self.dir / bridge}.mgmt", *args[1:])

    def flows(self, bridge: str) -> list[str]:
        return [line.strip() for line in self.ofctl(bridge, "dump-flows").splitlines() if "cookie=" in line]

    def stop(self) -> None:
        for bridge in self.bridges:
            with contextlib.suppress(Exception):
                self.vsctl("--if-exists", "del-br", bridge)
        for name in ("vswitchd", "ovsdb"):
            pid = self._pid(name)
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                proc_dir = Path(f"/proc/{pid}")
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: not proc_dir.exists(), 20, f"{name} to exit")  # noqa: B023 (called at once)
        self.run("ip", "netns", "del", self.netns, check=False)


def private_ovs_fixture(tmp_path_factory) -> Iterator[PrivateOVS]:
    """The body of a pytest fixture giving a started private OVS (the tests are skipped unless root)."""
    import pytest  # the bench imports this module too, without pytest

    if os.geteuid() != 0:
        pytest.skip("needs root for Open vSwitch")
    switch = PrivateOVS(tmp_path_factory.mktemp("ovs")).start()
    yield switch
    switch.stop()


class SlicerProcess:
    """`isp-flowvisor CONFIG` as a child process, with its ports chosen here."""

    def __init__(
        self,
        workdir: Path,
        registry: dict[str, Any],
        tls: dict[str, str] | None = None,
        shared_ports: tuple[int, ...] = (1,),
        extra: str = "",
        switch_socket: Path | None = None,
    ):
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        # OVS connects only to Unix sockets in its own run directory.
        self.switch_socket = switch_socket or self.dir / "switch.sock"
        self._settings = (registry, tls, shared_ports, extra)
        self.config = self.dir / "slicer.toml"
        self._choose_ports()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "slicer.log"
        self.token_file = self.dir / "fvctl.token"  # made by the slicer at its first start
        self.started = False

    def _choose_ports(self) -> None:
        """Free ports now, written into the slicer's configuration. Another process may take one before the
        slicer binds it (a port is free only while nobody asks): `start` then chooses again."""
        registry, tls, shared_ports, extra = self._settings
        self.household_port = free_port()
        self.rpc_port, self.metrics_port = free_port(), free_port()
        if registry.get("backend", "file") == "file":
            registry_toml = f'backend = "file"\npath = "{registry["path"]}"'
        else:
            registry_toml = f'backend = "etcd"\nendpoint = "{registry["endpoint"]}"\nprefix = "{registry["prefix"]}"'
        tls_toml = (
            "plain_tcp = true"
            if tls is None
            else f'tls_cert = "{tls["cert"]}"\ntls_key = "{tls["key"]}"\ntls_ca = "{tls["ca"]}"'
        )
        self.config.write_text(f"""
[switch]
listen = "unix:{self.switch_socket}"
shared_ports = {list(shared_ports)}

[households]
listen = "127.0.0.1:{self.household_port}"
{tls_toml}

[admin]
rpc = "127.0.0.1:{self.rpc_port}"
metrics = "127.0.0.1:{self.metrics_port}"

[registry]
{registry_toml}
{extra}
""")

    @property
    def controller(self) -> str:
        """What OVS's set-controller takes to reach this slicer."""
        return f"unix:{self.switch_socket}"

    def start(self) -> SlicerProcess:
        """Start it and wait until it listens. At its first start (no client knows its ports yet) a port
        another process took since it was chosen makes it choose again; a restart keeps its ports."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            logged = self.log.stat().st_size if self.log.exists() else 0
            try:
                self._spawn()
                wait_until(self._listening, 30, "the slicer to listen")
            except AssertionError:
                lost_a_port = "address already in use" in self.log.read_bytes()[logged:].decode(errors="replace")
                if self.started or not lost_a_port or attempt == PORT_ATTEMPTS:
                    raise
                self._choose_ports()
                continue
            self.started = True
            return self
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(VENV_BIN / "isp-flowvisor"),
                    str(self.config),
                    "--log-level",
                    "INFO",
                    "--token-file",
                    str(self.token_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the slicer exited: {self.log.read_text()[-2000:]}")
        # The metrics port opens just after fvctl's: wait for both (switch_connected reads metrics).
        for port in (self.rpc_port, self.metrics_port):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) != 0:
                    return False
        return True

    def switch_connected(self) -> bool:
        return "\nisp_flowvisor_switch_connected 1\n" in self.metrics()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def fvctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [
                str(VENV_BIN / "fvctl"),
                "--rpc",
                f"127.0.0.1:{self.rpc_port}",
                "--token-file",
                str(self.token_file),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"fvctl {' '.join(args)}: {result.stderr}")
        return result

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Household:
    """An emulated household controller: OpenFlow 1.3 over TCP or TLS, encoded by os-ken."""

    def __init__(
        self,
        port: int,
        source: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
        hello: bytes | None = None,
        handshake: bool = True,
    ):
        raw = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        self.sock: socket.socket = tls.wrap_socket(raw, server_hostname="isp-flowvisor") if tls else raw
        self.sock.settimeout(30)
        self.buffer = b""
        self.received: list[Any] = []
        self.xid = 1000
        if handshake:
            self.sock.sendall(hello if hello is not None else codec.hello())
            first = self.read_frame()
            assert codec.header(first)[1] == ofp.OFPT_HELLO, f"expected HELLO, got {codec.header(first)}"

    def read_frame(self, timeout: float = 30.0) -> bytes:
        self.sock.settimeout(timeout)
        while True:
            if len(self.buffer) >= 8:
                length = codec.frame_length(self.buffer[:8])
                if len(self.buffer) >= length:
                    frame, self.buffer = self.buffer[:length], self.buffer[length:]
                    return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the slicer closed the connection")
            self.buffer += chunk

    def send(self, msg: Any) -> int:
        self.xid += 1
        self.sock.sendall(codec.encode(msg, self.xid))
        return self.xid

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def expect(self, predicate: Callable[[Any], bool], timeout: float = 30.0, what: str = "a message") -> Any:
        """The first received message (earlier ones kept too) for which predicate holds."""
        for msg in self.received:
            if predicate(msg):
                self.received.remove(msg)
                return msg
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout:.0f}s; got {self.received[-5:]}")
            try:
                msg = codec.decode(self.read_frame(left))
            except TimeoutError:
                continue
            if predicate(msg):
                return msg
            self.received.append(msg)

    def reply_to(self, xid: int, timeout: float = 30.0) -> Any:
        return self.expect(lambda m: m.xid == xid, timeout, f"reply to xid {xid}")

    def barrier(self, timeout: float = 30.0) -> None:
        xid = self.send(parser.OFPBarrierRequest(codec.CODEC))
        msg = self.reply_to(xid, timeout)
        assert isinstance(msg, parser.OFPBarrierReply), msg

    def request(self, msg: Any, timeout: float = 30.0) -> list:
        """A multipart request's reply parts."""
        xid = self.send(msg)
        parts = [self.reply_to(xid, timeout)]
        while isinstance(parts[-1], parser.OFPMultipartReply) and parts[-1].flags & ofp.OFPMPF_REPLY_MORE:
            parts.append(self.reply_to(xid, timeout))
        return parts

    def error_for(self, xid: int, timeout: float = 30.0) -> Any:
        msg = self.reply_to(xid, timeout)
        assert isinstance(msg, parser.OFPErrorMsg), f"expected an error for xid {xid}, got {msg}"
        return msg

    def no_error_for(self, xid: int) -> None:
        """Nothing refused: a barrier after the message comes back and no error carries its xid."""
        self.barrier()
        errors = [m for m in self.received if isinstance(m, parser.OFPErrorMsg) and m.xid == xid]
        assert not errors, f"unexpected error {errors[0]}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class FrameSink:
    """A peer's end of a stream, as the frames it would read."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.frames += codec.split_frames(bytearray(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _OneHousehold(Registry):
    def __init__(self, household: Record):
        self.household = household

    async def snapshot(self) -> dict[str, Record]:
        return {self.household.name: self.household}

    async def add(self, household: Record) -> Record:
        raise NotImplementedError

    async def update(self, name: str, changes: dict[str, Any]) -> Record:
        raise NotImplementedError

    async def remove(self, name: str) -> None:
        raise NotImplementedError

    async def follow(self, on_change: Any) -> None:
        await asyncio.Event().wait()


def socketless_slicer(household: Record) -> tuple[Slicer, HouseholdSession, FrameSink, FrameSink]:
    """A slicer (call it inside an event loop) with the household's session, whose switch and household
    ends are lists of frames: what the slicer writes reaches them one event-loop iteration later."""
    slicer = Slicer(SlicerConfig(plain_tcp=True, shared_ports=frozenset({1})), _OneHousehold(household))
    session = slicer.register(household)
    switch, household_end = FrameSink(), FrameSink()
    slicer.switch_writer = switch  # type: ignore[assignment]
    slicer._switch_out = BatchedWriter(switch)  # type: ignore[arg-type]
    session.connect(None, household_end)  # type: ignore[arg-type]
    return slicer, session, household_end, switch


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
