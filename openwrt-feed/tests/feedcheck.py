"""The feed's static checks, as pure functions of file contents (the tests run them on the feed and on
broken copies). No OpenWrt SDK can be downloaded on our machines, so this is what can be checked
without building: Makefile structure, installed files, init scripts, UCI defaults, sysupgrade's list."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

REQUIRED_VARIABLES = ("PKG_NAME", "PKG_VERSION", "PKG_RELEASE", "PKG_LICENSE")
PACKAGE_MK = "include $(INCLUDE_DIR)/package.mk"


class UciError(ValueError):
    """A UCI file that OpenWrt's uci would not read."""


def variables(makefile: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z0-9_]+)\s*:?=[ \t]*(.*?)\s*$", makefile, re.M))


def built_packages(makefile: str) -> list[str]:
    return re.findall(r"^\$\(eval \$\(call BuildPackage,([^)]+)\)\)", makefile, re.M)


def makefile_problems(makefile: str, package_dir: Path) -> list[str]:
    """What keeps an OpenWrt package Makefile from being one, or from installing what it names."""
    found = variables(makefile)
    problems = [f"{v} is not defined" for v in REQUIRED_VARIABLES if not found.get(v)]
    if PACKAGE_MK not in makefile.splitlines():
        problems.append(f"does not `{PACKAGE_MK}`")
    packages = built_packages(makefile)
    if not packages:
        problems.append("builds no package: no $(eval $(call BuildPackage,...))")
    py3_packages = re.findall(r"^\$\(eval \$\(call Py3Package,([^)]+)\)\)", makefile, re.M)
    for package in packages:
        # Py3Package defines the -src package and, unless the Makefile does, the install section.
        from_py3 = package in py3_packages or package.removesuffix("-src") in py3_packages
        if not from_py3 and not re.search(rf"^define Package/{re.escape(package)}\s*$", makefile, re.M):
            problems.append(f"builds {package} without `define Package/{package}`")
        if not from_py3 and not re.search(rf"^define Package/{re.escape(package)}/install\s*$", makefile, re.M):
            problems.append(f"builds {package} without `define Package/{package}/install`")
    for name in re.findall(r"\./files/([\w.@+-]+)", makefile):
        if not (package_dir / "files" / name).is_file():
            problems.append(f"installs ./files/{name}, which does not exist")
    return problems


def shell_problems(script: Path) -> list[str]:
    """`sh -n` and `shellcheck -s sh`: what each says about an init script, or nothing."""
    problems = []
    for argv in (["sh", "-n", str(script)], ["shellcheck", "-s", "sh", str(script)]):
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            problems.append(f"`{' '.join(argv)}` failed:\n{run.stdout}{run.stderr}")
    return problems


def parse_uci(text: str) -> dict[str, dict[str, str | list[str]]]:
    """A UCI file as {section name: {option: value}} (`.type` holds the section's type; anonymous
    sections are named @TYPE[i]). Refuses what uci would refuse, with the line."""
    sections: dict[str, dict[str, str | list[str]]] = {}
    current: dict[str, str | list[str]] | None = None
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise UciError(f"line {number}: {exc}: {line!r}") from None
        if not words:
            continue
        keyword, args = words[0], words[1:]
        name_ok = all(re.fullmatch(r"[A-Za-z0-9_]+", a) for a in args[: 1 if keyword != "config" else 2])
        if keyword == "config" and len(args) in (1, 2) and name_ok:
            kind = args[0]
            name = args[1] if len(args) == 2 else f"@{kind}[{counts.get(kind, 0)}]"
            counts[kind] = counts.get(kind, 0) + 1
            if name in sections:
                raise UciError(f"line {number}: section {name!r} appears twice")
            current = sections[name] = {".type": kind}
        elif keyword in ("option", "list") and len(args) == 2 and name_ok:
            if current is None:
                raise UciError(f"line {number}: {keyword} before any config section")
            if keyword == "option":
                current[args[0]] = args[1]
            else:
                existing = current.setdefault(args[0], [])
                if not isinstance(existing, list):
                    raise UciError(f"line {number}: {args[0]!r} is both an option and a list")
                existing.append(args[1])
        else:
            raise UciError(
                f"line {number}: not `config TYPE [NAME]`, `option NAME VALUE` or `list NAME VALUE`: " f"{line!r}"
            )
    return sections


def options_read(script: str) -> set[tuple[str, str]]:
    """(section, option) of every `config_get` in an init script (either form)."""
    printed = re.findall(r"\$\(config_get ([\w]+) ([\w]+)\)", script)
    assigned = re.findall(r"config_get(?:_bool)? \w+ ([\w]+) ([\w]+)", script)
    return set(printed) | set(assigned)


def unset_options(script: str, uci: dict[str, dict[str, str | list[str]]]) -> list[str]:
    return sorted(f"homework.{s}.{o}" for s, o in options_read(script) if o not in uci.get(s, {}))


def keep_problems(kept: str, state_files: list[str], state_dir: str) -> list[str]:
    """Each file a service writes under the state directory, with its SQLite write-ahead log, must
    be kept by sysupgrade (a directory keeps everything in it)."""
    lines = {line.strip() for line in kept.splitlines() if line.strip()}
    problems = []
    for name in state_files:
        wanted = [f"{state_dir}/{name}"] + ([f"{state_dir}/{name}-wal"] if name.endswith(".sqlite") else [])
        for path in wanted:
            if not any(path == k.rstrip("/") or (k.endswith("/") and path.startswith(k)) for k in lines):
                problems.append(f"sysupgrade would lose {path}: not in keep.d")
    return problems


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_problems(pypi: dict[str, dict], lock: str) -> list[str]:
    """Each PyPI package the feed builds must carry requirements.lock's version and a sha256."""
    pins = {_normal(n): v for n, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", lock, re.M)}
    problems = []
    for name, package in pypi.items():
        pinned = pins.get(_normal(package.get("pypi", name)))
        if pinned != package["version"]:
            problems.append(f"{name} {package['version']}: requirements.lock has {pinned}")
        if not re.fullmatch(r"[0-9a-f]{64}", package["sha256"]):
            problems.append(f"{name}: sha256 {package['sha256']!r} is not 64 hex digits")
    return problems


def dependency_problems(needed: list[str], makefiles: list[str], elsewhere: set[str]) -> list[str]:
    """Each Python distribution in `needed` must be some package's dependency (+python3-NAME), and each
    python3-* dependency must be built by the feed or be in `elsewhere` (OpenWrt's packages feed)."""
    built = {p for m in makefiles for p in built_packages(m)}
    named = {d for m in makefiles for d in re.findall(r"\+(python3-[a-z0-9-]+)", m)}
    problems = [
        f"nothing depends on python3-{_normal(d)} ({d})" for d in needed if f"python3-{_normal(d)}" not in named
    ]
    problems += [f"{d} is neither built here nor known in the packages feed" for d in sorted(named - built - elsewhere)]
    return problems
