"""Write the feed's generated files, which OpenWrt's build cannot make itself (it runs no Python of ours):

- each service's procd init script, `homework-<name>/files/homework-<name>.init`, rendered from
  deploy/services.toml by homework_deploy.procd;
- the Makefile of each PyPI package OpenWrt's packages feed lacks, `python-<name>/Makefile`, from
  pypi.toml.

    python render.py                  # write them
    python render.py --check          # change nothing; exit 1 naming every file that is stale
    python render.py --check --feed DIR   # the same for a copy of the feed (the tests' negative control)
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from homework_deploy import ServicesError, procd

FEED = Path(__file__).resolve().parent
REGENERATE = "make -C openwrt-feed render"

PYPI_MAKEFILE = """\
# Generated from pypi.toml by render.py ({regenerate}): edit pypi.toml, not this file.
include $(TOPDIR)/rules.mk

PKG_NAME:=python-{name}
PKG_VERSION:={version}
PKG_RELEASE:=1

PYPI_NAME:={pypi}
{source_line}PKG_HASH:={sha256}

PKG_LICENSE:={license}

PKG_BUILD_DEPENDS:={build_depends}
{host_pip_line}
include $(TOPDIR)/feeds/packages/lang/python/pypi.mk
include $(INCLUDE_DIR)/package.mk
include $(TOPDIR)/feeds/packages/lang/python/python3-package.mk

define Package/python3-{name}
  SECTION:=lang
  CATEGORY:=Languages
  SUBMENU:=Python
  TITLE:={title}
  URL:={url}
  DEPENDS:={depends}
endef

define Package/python3-{name}/description
  {pypi} {version} from PyPI: {title}.
endef

$(eval $(call Py3Package,python3-{name}))
$(eval $(call BuildPackage,python3-{name}))
$(eval $(call BuildPackage,python3-{name}-src))
"""

# pbr is no OpenWrt host package: pip installs it on the build host from this hash-pinned file.
HOST_PIP_REQUIREMENTS = {"pbr": "$(CURDIR)/../host-pip-requirements/pbr.txt"}


def load_pypi(feed: Path = FEED) -> dict[str, dict]:
    return tomllib.loads((feed / "pypi.toml").read_text())


def pypi_makefile(name: str, spec: dict) -> str:
    host_pip = [HOST_PIP_REQUIREMENTS[b] for b in spec["build"] if b in HOST_PIP_REQUIREMENTS]
    build = ["python3/host"] + [b for b in spec["build"] if b not in HOST_PIP_REQUIREMENTS]
    if host_pip:
        build.append("python-setuptools/host")  # what pip builds pbr and pbr-based packages with
    return PYPI_MAKEFILE.format(
        regenerate=REGENERATE,
        name=name,
        version=spec["version"],
        pypi=spec.get("pypi", name),
        source_line=f"PYPI_SOURCE_NAME:={spec['source']}\n" if "source" in spec else "",
        sha256=spec["sha256"],
        license=spec["license"],
        build_depends=" ".join(dict.fromkeys(build)),
        host_pip_line=f"HOST_PYTHON3_PACKAGE_BUILD_DEPENDS:={' '.join(host_pip)}\n" if host_pip else "",
        title=spec["title"],
        url=spec["url"],
        depends=" ".join(f"+{d}" for d in ["python3-light", *spec["depends"]]),
    )


def generated(feed: Path = FEED) -> dict[Path, str]:
    """Path -> text of every generated file of the feed at `feed`."""
    files = {}
    for name, text in procd.render().items():
        files[feed / name.removesuffix(".init") / "files" / name] = text
    for name, spec in load_pypi(feed).items():
        files[feed / f"python-{name}" / "Makefile"] = pypi_makefile(name, spec)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; fail if a generated file is stale")
    p.add_argument("--feed", type=Path, default=FEED, help="the feed's folder (default: this one)")
    args = p.parse_args(argv)
    try:
        files = generated(args.feed.resolve())
    except (ServicesError, OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"error: cannot render the feed: {exc!r}", file=sys.stderr)
        return 1
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"stale: {path.relative_to(args.feed.resolve())} differs from what deploy/services.toml "
                f"and openwrt-feed/pypi.toml give; regenerate with `{REGENERATE}`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        print(f"wrote {path.relative_to(args.feed.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
