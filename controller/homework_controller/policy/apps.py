"""Which application a connection belongs to: the app table (data) and the classifier (pure).

The table is `apps.toml` in this package (or `--apps FILE`): each app's default priority, the
process names an end-host agent reports for it, the DNS names it is reached by, its service
ports; plus thresholds for judging a connection by its behaviour. The classifier takes what
the router knows of one connection and answers (app, source), first source that knows:
the agent, the names the device looked up, the port, the behaviour.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import NamedTuple

from ..flows import PROTO_TCP, PROTO_UDP, FiveTuple

PRIORITIES = ("high", "medium", "default")
OTHER = "other"  # what no source knows

# Where an app came from, strongest first.
AGENT, DNS, PORT, BEHAVIOUR, UNKNOWN = "agent", "dns", "port", "behaviour", "unknown"


class BadAppTable(ValueError):
    pass


@dataclass(frozen=True)
class Behaviour:
    """Thresholds for judging a connection nothing else names (see apps.toml)."""

    interactive_app: str = "interactive"
    interactive_max_bytes: int = 300
    interactive_min_pps: float = 2
    interactive_max_pps: float = 100
    bulk_app: str = "bulk"
    bulk_min_pps: float = 100


class FlowRates(NamedTuple):
    """A connection's rate over the last poll and the one before (0: it did not exist yet). A named
    tuple: made for every exported connection direction at every poll, under the lock."""

    pps: float
    previous_pps: float
    mean_packet_bytes: float


@dataclass
class AppTable:
    priorities: dict[str, str] = field(default_factory=dict)  # app -> its default priority
    processes: dict[str, str] = field(default_factory=dict)  # agent's process name -> app
    name_patterns: list[tuple[str, re.Pattern]] = field(default_factory=list)  # (app, compiled globs), file order
    ports: dict[tuple[int, int], str] = field(default_factory=dict)  # (proto, port) -> app
    behaviour: Behaviour = Behaviour()

    def default_priority(self, app: str) -> str:
        return self.priorities.get(app, "default")

    def app_of_process(self, process: str) -> str:
        """An agent's name for a program -> the app (a program no app lists is an app of its own)."""
        return self.processes.get(process.lower(), process)

    def app_of_names(self, names) -> str | None:
        for app, pattern in self.name_patterns:
            if any(pattern.fullmatch(name.lower().rstrip(".")) for name in names):
                return app
        return None

    def app_of_ports(self, flow: FiveTuple) -> str | None:
        """The service port decides, whichever end it is on (replies come from it)."""
        return self.ports.get((flow.proto, flow.dport)) or self.ports.get((flow.proto, flow.sport))

    def app_of_behaviour(self, rates: FlowRates) -> str | None:
        b = self.behaviour
        if rates.pps > b.bulk_min_pps and rates.previous_pps > b.bulk_min_pps:
            return b.bulk_app
        steady = rates.previous_pps > 0 and 0.5 <= rates.pps / rates.previous_pps <= 2
        if (
            steady
            and b.interactive_min_pps <= rates.pps <= b.interactive_max_pps
            and rates.mean_packet_bytes <= b.interactive_max_bytes
        ):
            return b.interactive_app
        return None


def _ports(app: str, proto: int, values) -> dict[tuple[int, int], str]:
    out = {}
    for value in values:
        if isinstance(value, int):
            lo = hi = value
        elif isinstance(value, str) and re.fullmatch(r"\d+-\d+", value):
            lo, hi = (int(x) for x in value.split("-"))
        else:
            raise BadAppTable(f'app {app}: a port is a number or "LOW-HIGH", not {value!r}')
        if not 0 < lo <= hi < 65536:
            raise BadAppTable(f"app {app}: port range {value!r} out of 1-65535")
        out.update({(proto, port): app for port in range(lo, hi + 1)})
    return out


def parse_table(text: str) -> AppTable:
    """apps.toml's text -> AppTable; BadAppTable says what is wrong and where."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadAppTable(f"not TOML: {exc}") from None
    table = AppTable()
    apps = data.get("apps")
    if not isinstance(apps, dict) or not apps:
        raise BadAppTable("no [apps.NAME] sections")
    for app, spec in apps.items():
        if not isinstance(spec, dict):
            raise BadAppTable(f"apps.{app} is not a section")
        unknown = set(spec) - {"priority", "names", "processes", "udp", "tcp"}
        if unknown:
            raise BadAppTable(f"app {app}: unknown keys {sorted(unknown)}")
        priority = spec.get("priority", "default")
        if priority not in PRIORITIES:
            raise BadAppTable(f"app {app}: priority must be one of {PRIORITIES}, not {priority!r}")
        table.priorities[app] = priority
        names, processes = spec.get("names", []), spec.get("processes", [])
        if not all(isinstance(x, str) and x for x in [*names, *processes]):
            raise BadAppTable(f"app {app}: names and processes are lists of non-empty strings")
        for process in processes:
            table.processes.setdefault(process.lower(), app)
        if names:
            globs = "|".join(fnmatch.translate(n.lower().rstrip(".")) for n in names)
            table.name_patterns.append((app, re.compile(globs)))
        for proto, key in ((PROTO_TCP, "tcp"), (PROTO_UDP, "udp")):
            for port_key, owner in _ports(app, proto, spec.get(key, [])).items():
                table.ports.setdefault(port_key, owner)  # the first app in the file that lists a port has it
    behaviour = data.get("behaviour", {})
    try:
        table.behaviour = Behaviour(**behaviour)
    except TypeError as exc:
        raise BadAppTable(f"[behaviour]: {exc}") from None
    return table


def load_table(path: str | None = None) -> AppTable:
    """The table from path, or the one shipped with the package."""
    if path is None:
        text = resources.files(__package__).joinpath("apps.toml").read_text(encoding="utf-8")
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    return parse_table(text)


def classify(
    table: AppTable,
    flow: FiveTuple,
    agent_process: str | None = None,
    by_name: str | None = None,
    rates: FlowRates | None = None,
) -> tuple[str, str]:
    """One connection's (app, source): the agent's report, else the app the names the device looked
    up for the far address name (`NameMemory.app_of`), else the service port, else its behaviour
    (once counted)."""
    if agent_process:
        return table.app_of_process(agent_process), AGENT
    if by_name:
        return by_name, DNS
    by_port = table.app_of_ports(flow)
    if by_port:
        return by_port, PORT
    by_behaviour = table.app_of_behaviour(rates) if rates is not None else None
    if by_behaviour:
        return by_behaviour, BEHAVIOUR
    return OTHER, UNKNOWN


class NameMemory:
    """Per device, the names its lookups answered for each address and the app they name: what the router's
    resolver saw, for naming the device's connections. The app is worked out when a name is learnt, not for
    every connection at every poll.

    Bounded per device and in all, least recently learnt first: a device holds at most `per_device` entries
    (every address it asks from: `owner_of` says whose an address is, so a device cycling addresses in its
    /64 is one device), and a full memory takes from the device holding the most, so one device's answers
    never erase another's names (and its apps' marks) while it holds less than its share."""

    def __init__(
        self,
        app_of_names: Callable[[Iterable[str]], str | None],
        max_entries: int = 20000,
        names_per_address: int = 4,
        per_device: int = 2048,
        owner_of: Callable[[str], str] = lambda device_ip: device_ip,
    ):
        self._app_of_names, self._owner_of = app_of_names, owner_of
        self.max_entries, self.names_per_address, self.per_device = max_entries, names_per_address, per_device
        self._names: dict[tuple[str, str], tuple[tuple[str, ...], str | None, str]] = {}  # ..., its owner
        self._of_owner: dict[str, OrderedDict[tuple[str, str], None]] = {}  # least recently learnt first

    def __len__(self) -> int:
        return len(self._names)

    def learn(self, device_ip: str, name: str, address: str) -> None:
        key = (device_ip, address)
        known = self._names.get(key)
        if known is None:
            names: tuple[str, ...] = ()
            owner = self._owner_of(device_ip)
            app = None
        else:
            names, app, owner = known
        if name not in names:
            names = (name, *names)[: self.names_per_address]  # the newest first
            app = self._app_of_names(names)
        self._names[key] = (names, app, owner)
        mine = self._of_owner.setdefault(owner, OrderedDict())
        mine[key] = None
        mine.move_to_end(key)
        if len(mine) > self.per_device:
            self._forget(owner)
        if len(self._names) > self.max_entries:
            self._forget(max(self._of_owner, key=lambda o: len(self._of_owner[o])))

    def _forget(self, owner: str) -> None:
        """The owner's least recently learnt entry goes."""
        mine = self._of_owner[owner]
        del self._names[mine.popitem(last=False)[0]]
        if not mine:
            del self._of_owner[owner]

    def names(self, device_ip: str, address: str) -> tuple[str, ...]:
        return self._names.get((device_ip, address), ((), None))[0]

    def app_of(self, device_ip: str, address: str) -> str | None:
        """The app the names the device looked up for the address name, if any."""
        known = self._names.get((device_ip, address))
        return known[1] if known is not None else None
