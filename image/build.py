"""Build the router image: `python image/build.py image` (what `make image` runs), as root.

Steps: a Debian root from pinned packages (mmdebstrap, cached under build/image/cache keyed by
the package list and lock), the project's components into one venv, the systemd units rendered
from deploy/services.toml, a read-only squashfs root, an EFI system partition with systemd-boot
(UEFI) and GRUB's configuration (legacy BIOS), and a GPT disk: ESP, root slots A and B, the data
partition, and GRUB in the protective MBR and a BIOS boot partition. Also the signed update bundle.

    python image/build.py image [--version V] [--fast]
        build/homework-router-x86_64.{img,img.zst,bundle,packages}, SHA256SUMS
    python image/build.py lock
        resolve the newest packages; rewrite image/packages.lock
    python image/build.py bundle --version V [--overlay DIR] [--out FILE] [--fast]
        an update bundle from the last build's root with DIR's files laid on top (a developer's fix)

--fast compresses the root with zstd (quick) instead of xz (small).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

IMAGE_DIR = Path(__file__).resolve().parent
REPO = IMAGE_DIR.parent
sys.path[:0] = [str(IMAGE_DIR), str(REPO / "deploy")]

import homework_deploy  # noqa: E402
from homework_deploy import prefix_delegation, systemd  # noqa: E402
from homework_image import (  # noqa: E402
    BRIDGE,
    DATA_PARTLABEL,
    ESP_PARTLABEL,
    LABEL_SETUP_CODE,
    LAN_PORT,
    ROOT_PARTLABEL,
    ROUTER_LAN_IP,
    RUN,
    SHARE,
    STATE,
    VENV,
    WAN_IFACE,
    boot,
    bundle,
    role,
    state,
)
from homework_image.radio import PSK_FILE, RADIO_PORT, WIFI_CONFIG  # noqa: E402

BUILD = REPO / "build"
WORK = BUILD / "image"
CACHE = WORK / "cache"
NAME = "homework-router-x86_64"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
# non-free-firmware: the Wi-Fi cards router boxes ship with need their vendors' firmware (FIRMWARE).
COMPONENTS = ("main", "non-free-firmware")
PACKAGES_FILE, LOCK_FILE = IMAGE_DIR / "packages.txt", IMAGE_DIR / "packages.lock"

# The project's components, one a line. Python packages (their folders, each with a
# pyproject.toml) go into one venv with their pinned dependencies from requirements.lock;
# files are copied to where the services find them.
PYTHON_COMPONENTS = ("deploy", "controller", "webui", "hwdb/python", "image")
SITE = VENV / "lib/python3.11/site-packages"
FILES = {
    "hwdb/target/release/hwdb": Path("/usr/lib/homework/bin/hwdb"),
    # The web UI serves its frontend from ../frontend/dist beside its package, and the controller
    # reads hostapd's template from ../hostapd (neither is package data yet).
    "webui/frontend/dist": SITE / "frontend/dist",
    "controller/hostapd/hostapd.conf.in": SITE / "hostapd/hostapd.conf.in",
}
# The values deploy/services.toml's settings take on the router.
SETTINGS = {
    "PYTHON": VENV / "bin/python",
    "HWDB_BIN": FILES["hwdb/target/release/hwdb"],
    "STATE": STATE,
    "RUN": RUN,
    "LAN_IFACE": BRIDGE,
    "WLAN_PORT": LAN_PORT,
    # Where devices are: the radio the router serves as its access point (homework_image.radio; on a
    # box without one the bridge has no such port and the controller serves the others) and the LAN port.
    "ACCESS_PORTS": f"{RADIO_PORT},{LAN_PORT}",
    "UPSTREAM_DNS": "127.0.0.53",
    "STATIONS": "nl80211:wlan0",
    "LAN_ADDRESS": ROUTER_LAN_IP,
    "WAN_IFACE": WAN_IFACE,
    # 802.1X on the LAN port, for the access point's stations (driver=wired on the bridge).
    "HOSTAPD_IFACE": BRIDGE,
    # The network's name is the one hostapd serves (the household's, radio.py). Devices' own
    # passphrases go into hostapd's key file (WPA2, reloaded at once) and, through
    # homework-radio-refresh.path, its SAE passwords (hostapd restarted). No connection-check server.
    "WIFI_SSID": "",
    "WIFI_PSK_FILE": PSK_FILE,
    # The household's radio settings, changed in the web UI: homework-radio-refresh.path follows the file.
    "RADIO_SETTINGS": WIFI_CONFIG,
    "LATENCY_TARGET": "",
    # The web UI hands uploaded updates to homework-update-spool.path (the installer runs as root).
    "UPDATES": RUN / "update",
    "SETUP_CODE_FILE": LABEL_SETUP_CODE,
    # The first-run page may make the box an access point of the household's router (homework-role.path).
    "ROLE_SPOOL": role.ROLE_SPOOL,
    # The line's rates are the household's to set; until the web UI can, shape at a gigabit
    # (the queues still get their fair leaves, the line's own queue is not yet moved here).
    "UPLINK_KBIT": 1_000_000,
    "DOWNLINK_KBIT": 1_000_000,
    # No ISP slice until the household has one (its ISP's slicer, certificates and public address).
    "SLICE": "",
    "SLICE_CERT": "",
    "SLICE_KEY": "",
    "SLICE_CA": "",
    "PUBLIC_ADDRESS": "",
    # dhcpcd's configuration and hook for homework-wan-pd.service (homework_deploy.prefix_delegation).
    "SERVICE_FILES": Path("/usr/lib/homework"),
}
# A router box (an APU's 1 GHz cores) or a VM without KVM starts the services several times
# slower than the machines services.toml's ready timeouts were measured on.
SLOWNESS = 4
SYSTEM_UNITS = (
    "homework-state.service",
    "homework-network.service",
    "homework-health.service",
    "homework-console.service",
    "homework-update-spool.path",
    "homework-role.path",
    # Tests only: runs when the kernel command line has homework.test_radios=N (the boot test's).
    "homework-test-radios.service",
    "nftables.service",
    "systemd-networkd.service",
    "systemd-resolved.service",
)
# Debian's own hostapd.service is not the router's (homework-hostapd.service is).
MASKED_UNITS = (
    "hostapd.service",
    "systemd-networkd-wait-online.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
)

# Kernel modules no router box uses (graphics, sound, cameras, exotic buses and file systems):
# dpkg never unpacks them, so they are not in the initrd or the root either.
MODULE_EXCLUDES = [
    f"/lib/modules/*/kernel/{d}/*"
    for d in (
        "sound",
        "drivers/gpu",
        "drivers/media",
        "drivers/infiniband",
        "drivers/staging",
        "drivers/iio",
        "drivers/comedi",
        "drivers/isdn",
        "drivers/bluetooth",
        "net/bluetooth",
        "drivers/target",
        "drivers/md",
        "drivers/mtd",
        "drivers/video",
        "drivers/net/can",
        "drivers/net/wwan",
        "drivers/net/ieee802154",
        "drivers/net/fddi",
        "drivers/net/arcnet",
        "drivers/net/wan",
        "drivers/net/hamradio",
        "drivers/hwmon",
        "drivers/input/joystick",
        "drivers/input/touchscreen",
        "drivers/input/tablet",
        "drivers/firewire",
        "fs/xfs",
        "fs/btrfs",
        "fs/ocfs2",
        "fs/nfs",
        "fs/nfsd",
        "fs/smb",
        "fs/f2fs",
        "fs/gfs2",
        "fs/jfs",
        "fs/ceph",
        "fs/reiserfs",
        "fs/nilfs2",
        "fs/ubifs",
        "fs/orangefs",
        "fs/afs",
        "fs/coda",
        "net/sunrpc",
        "net/ceph",
        "net/rxrpc",
        "net/sctp",
        "net/rds",
        "net/tipc",
        "net/dccp",
    )
] + [
    # SCSI host adapters (each in its own folder); sd_mod and friends sit at the top.
    "/lib/modules/*/kernel/drivers/scsi/*/*"
]
# The firmware files kept of the firmware packages (dpkg leaves out the rest, most of their 110 MB):
# the kernel's regulatory database (cfg80211 reads the household's country from it), and the Wi-Fi
# cards of the boxes the router is built for. ath9k (the PC Engines APU's Compex WLE200NX) needs
# none; ath10k: QCA988X (WLE600VX, WLE900VX on APUs), QCA9888 and QCA9984 (the 802.11ac wave 2
# mini-PCIe cards sold for them); mt76: MT7921 (mt7921e, as MT7961) and MT7915 in Protectli boxes.
# dpkg keeps an excluded directory only when an include pattern's text before its first wildcard
# starts with the directory's path, hence the `*` right after /lib/firmware/ (the directories of
# the firmware packages stay, empty but for these files).
FIRMWARE = [
    "/lib/firmware/regulatory.db*",
    "/lib/firmware/*ath10k/QCA988X/*",
    "/lib/firmware/*ath10k/QCA9888/*",
    "/lib/firmware/*ath10k/QCA9984/*",
    "/lib/firmware/*mediatek/WIFI_*MT7961*",
    "/lib/firmware/*mediatek/mt7915_*",
]
DPKG_EXCLUDES = [
    "/lib/firmware/*",
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/locale/*",
    "/usr/share/info/*",
    "/usr/share/lintian/*",
    "/usr/share/bash-completion/*",
    "/usr/share/zsh/*",
    *MODULE_EXCLUDES,
]
# Storage the initrd needs to find the root on a router box or a VM (MODULES=list keeps it small).
INITRD_MODULES = (
    "squashfs",
    "ext4",
    "vfat",
    "nls_cp437",
    "nls_ascii",
    "virtio_blk",
    "virtio_pci",
    "virtio_scsi",
    "ahci",
    "sd_mod",
    "nvme",
    "usb_storage",
    "uas",
    "xhci_pci",
    "ehci_pci",
    "sdhci_pci",
    "mmc_block",
)

MIB = 1 << 20
BIOS_BOOT_MIB, ESP_MIB, SLOT_MIB, DATA_MIB = 1, 96, 200, 256
# The compressed image a household downloads (`.img.zst`, its root compressed with xz) must stay
# within this: the build that makes it fails beyond it, and `--prove-size` holds a quick build to it.
SHIPPED_IMAGE_GOAL_BYTES = 150_000_000
BIOS_BOOT_PARTLABEL = "homework-bios-boot"
PART_TYPES = {
    "esp": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
    "root": "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709",
    "data": "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
    "bios": "21686148-6449-6E6F-744E-656564454649",
}
# Legacy BIOS boot: GRUB (the build host's grub-pc-bin) with everything it needs built into the
# core image in the BIOS boot partition; its prefix is the ESP's grub/ (grub.cfg, grubenv).
GRUB_BIOS_DIR = Path("/usr/lib/grub/i386-pc")
GRUB_MODULES = ("biosdisk", "part_gpt", "fat", "normal", "linux", "loadenv", "test", "echo", "serial", "terminal")
KEY, PUBKEY = BUILD / "update-key.pem", BUILD / "update-key.pub.pem"


class BuildError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[image {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(*cmd: object, cwd: Path | None = None, capture: bool = False, input: str | None = None) -> str:
    argv = [str(c) for c in cmd]
    proc = subprocess.run(
        argv,
        cwd=cwd,
        text=True,
        input=input,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
    )
    if proc.returncode != 0:
        detail = f": {proc.stderr.strip()[-2000:]}" if capture else ""
        raise BuildError(f"`{' '.join(argv)}` failed ({proc.returncode}){detail}")
    return proc.stdout or ""


def wanted_packages() -> list[str]:
    return [
        line.strip() for line in PACKAGES_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]


def read_lock() -> dict[str, str]:
    if not LOCK_FILE.exists():
        return {}
    pins = {}
    for line in LOCK_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split()
            pins[name] = version
    return pins


# ---- the Debian root


def base_root(pinned: bool = True) -> Path:
    """A tarball of the Debian root: cached by the package list, the lock and how it is made."""
    pins = read_lock() if pinned else {}
    tarball = base_cache(pins)
    if tarball.exists():
        log(f"Debian root: cached {tarball.name}")
        return tarball
    include = [f"{n}={v}" for n, v in sorted(pins.items())] if pins else wanted_packages()
    log(f"Debian root: mmdebstrap {len(include)} packages{' (pinned by packages.lock)' if pins else ''}")
    mmdebstrap(include, tarball, pinned=bool(pins))
    return tarball


def mmdebstrap(include: list[str], tarball: Path, pinned: bool) -> None:
    """A Debian root with `include` (and what they need) into `tarball`, made the router's way: its
    initrd's modules and compression, dpkg's exclusions."""
    CACHE.mkdir(parents=True, exist_ok=True)
    initramfs = (
        f'mkdir -p "$1/etc/initramfs-tools/conf.d"; '
        f'printf "MODULES=list\\nCOMPRESS=zstd\\n" > "$1/etc/initramfs-tools/conf.d/homework.conf"; '
        f'printf "%s\\n" {" ".join(INITRD_MODULES)} > "$1/etc/initramfs-tools/modules"'
    )
    tmp = tarball.with_suffix(".tmp.tar")
    cmd = [
        "mmdebstrap",
        "--variant=apt",
        "--mode=root",
        "--quiet",
        f"--components={','.join(COMPONENTS)}",
        *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES),
        *(f"--dpkgopt=path-include={p}" for p in FIRMWARE),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        f"--essential-hook={initramfs}",
        f"--include={','.join(include)}",
        SUITE,
        tmp,
        MIRROR,
    ]
    proc = subprocess.run([str(c) for c in cmd], text=True, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        if pinned and (
            "was not found" in proc.stderr
            or "Unable to locate" in proc.stderr
            or "has no installation candidate" in proc.stderr
        ):
            raise BuildError(
                "the Debian mirror no longer serves a version pinned in image/packages.lock:\n"
                f"{proc.stderr.strip()[-1500:]}\nRefresh the lock with `make image-lock` and commit it."
            )
        raise BuildError(f"mmdebstrap failed:\n{proc.stderr.strip()[-3000:]}")
    tmp.replace(tarball)


def base_cache(pins: dict[str, str]) -> Path:
    recipe = json.dumps(
        [wanted_packages(), sorted(pins.items()), DPKG_EXCLUDES, FIRMWARE, INITRD_MODULES, SUITE, COMPONENTS]
    )
    return CACHE / f"base-{hashlib.sha256(recipe.encode()).hexdigest()[:16]}.tar"


def installed_packages(root: Path) -> dict[str, str]:
    out = sh("chroot", root, "dpkg-query", "-W", "-f", "${Package} ${Version}\n", capture=True)
    return dict(line.split() for line in out.splitlines() if line.strip())


def write_lock(packages: dict[str, str]) -> None:
    LOCK_FILE.write_text(
        f"# Every Debian package in the router image ({SUITE}), as the build resolved them.\n"
        "# The build installs exactly these; `make image-lock` refreshes them.\n"
        + "".join(f"{n} {v}\n" for n, v in sorted(packages.items()))
    )


def extract(tarball: Path, root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    sh("tar", "-C", root, "--numeric-owner", "-xpf", tarball)


# ---- the project's components


def wheels() -> Path:
    """Wheels of every component and its pinned runtime dependencies (the dependencies are
    downloaded once into the cache; the components are built fresh every time)."""
    out = WORK / "wheels"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    deps = CACHE / "wheels"
    deps.mkdir(parents=True, exist_ok=True)
    pip = [REPO / ".venv/bin/pip", "--disable-pip-version-check", "--quiet"]
    # setuptools copies a component's modules into its build/lib and adds that to the wheel as it finds it:
    # a module moved or deleted since the last build would still ship, beside its new self.
    for component in PYTHON_COMPONENTS:
        shutil.rmtree(REPO / component / "build", ignore_errors=True)
    # setuptools and wheel are only build tools here: never constrained away from what pip needs.
    sh(*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", out, *(REPO / c for c in PYTHON_COMPONENTS))
    sh(
        *pip,
        "wheel",
        "-w",
        deps,
        "--find-links",
        deps,
        "--find-links",
        out,
        "-c",
        REPO / "requirements.lock",
        "--prefer-binary",
        *(out / w.name for w in sorted(out.glob("*.whl"))),
    )
    for wheel in deps.glob("*.whl"):
        if not (out / wheel.name).exists():
            shutil.copy2(wheel, out / wheel.name)
    return out


def install_components(root: Path, wheel_dir: Path) -> None:
    log("components: venv")
    sh("chroot", root, "python3", "-m", "venv", "--without-pip", VENV)
    sh(
        REPO / ".venv/bin/pip",
        "--disable-pip-version-check",
        "--quiet",
        "install",
        "--no-index",
        "--find-links",
        wheel_dir,
        "--root",
        root,
        "--prefix",
        VENV,
        "--ignore-installed",
        "--no-compile",
        "--no-warn-script-location",
        *(_dist_name(REPO / c) for c in PYTHON_COMPONENTS),
    )
    # pip wrote this machine's interpreter into the scripts' first lines.
    for script in (root / str(VENV).lstrip("/") / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and b"python" in text.split(b"\n", 1)[0]:
                script.write_bytes(b"#!" + str(VENV / "bin/python").encode() + b"\n" + text.split(b"\n", 1)[1])
    for source, target in FILES.items():
        dest = root / str(target).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = REPO / source
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)
    # The root is read-only: compile now, with the image's own interpreter, every module the services
    # import (Debian's and ours). Hash-based: the root's squashfs gives every file the same time
    # (`squash`), which no timestamp-based .pyc matches, so each Python start compiled every module it
    # imported again, in memory (three times the CPU of the controller's start, and every service and
    # boot step is a Python start). Checked, not unchecked: a bundle made with files laid over this
    # root (`bundle --overlay`) changes a module's source without its .pyc, and the source must win.
    sh(
        "chroot",
        root,
        "python3",
        "-m",
        "compileall",
        "-q",
        "-f",
        "-j",
        "2",
        "--invalidation-mode",
        "checked-hash",
        "/usr/lib/python3.11",
        "/usr/lib/python3/dist-packages",
        VENV / "lib",
    )


def _dist_name(component: Path) -> str:
    import tomllib

    return tomllib.loads((component / "pyproject.toml").read_text())["project"]["name"]


# ---- the router's configuration


def configure(root: Path, version: str) -> None:
    log("configuration: overlay, units, keys")
    sh("cp", "-a", "--no-preserve=ownership", f"{IMAGE_DIR / 'rootfs'}/.", root)
    # The services' own users and groups (usr/lib/sysusers.d/homework.conf), made now: /etc is
    # read-only on the router.
    sh("chroot", root, "systemd-sysusers")
    services = homework_deploy.load(SETTINGS, platform="image")
    units = root / "usr/lib/systemd/system"
    for name, text in systemd.render_all(
        services,
        str(SETTINGS["PYTHON"]),
        requires=["homework-network.service"],
        slowness=SLOWNESS,
        role_file=str(role.ROLE_FILE),
    ).items():
        (units / name).write_text(text)
    launcher = root / "usr/sbin/homework-state"
    launcher.write_text(state.launcher(str(SETTINGS["PYTHON"])))
    launcher.chmod(0o755)
    # homework-wan-pd.service's dhcpcd: the delegated prefix goes beside the controller's database.
    prefix_delegation.write_files(root / str(SETTINGS["SERVICE_FILES"]).lstrip("/"), WAN_IFACE, STATE)
    share = root / str(SHARE).lstrip("/")
    share.mkdir(parents=True, exist_ok=True)
    # What the boot's health check waits for and watches: the services that run, not a oneshot that a
    # change starts (a refresh the household's settings made fail is not the update's).
    # Each role's own (homework_image.role): a box is a router unless it was made an access point.
    for name, box_role in (("services.json", "router"), ("satellite-services.json", "satellite")):
        running = {n: s.ready for n, s in services.items() if not s.oneshot and box_role in s.roles}
        (share / name).write_text(json.dumps(running, indent=1) + "\n")
    (share / "version").write_text(version + "\n")
    shutil.copy2(PUBKEY, share / "update-key.pem")
    shutil.copy2(LOCK_FILE, share / "packages.lock")
    enable = [*SYSTEM_UNITS, *systemd.enabled_units(services)]
    sh("systemctl", f"--root={root}", "enable", "--quiet", *enable)
    sh("systemctl", f"--root={root}", "mask", "--quiet", *MASKED_UNITS)
    (root / "etc/machine-id").write_text("")  # a new one each boot (the root is read-only)
    for path in ("var/lib/homework", "efi"):
        (root / path).mkdir(parents=True, exist_ok=True)
    for junk in ("var/cache/apt", "var/lib/apt/lists", "var/log"):
        for child in (root / junk).glob("*"):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def take_kernel(root: Path, dest: Path) -> dict[str, Path]:
    """Move the kernel and initrd out of the root (they boot from the EFI system partition)."""
    dest.mkdir(parents=True, exist_ok=True)
    found = {}
    for member, pattern, name in (("vmlinuz", "vmlinuz-*", boot.KERNEL), ("initrd.img", "initrd.img-*", boot.INITRD)):
        matches = sorted((root / "boot").glob(pattern))
        if len(matches) != 1:
            raise BuildError(f"expected one {pattern} in the root's /boot, found {[m.name for m in matches]}")
        shutil.move(matches[0], dest / name)
        found[member] = dest / name
    for child in (root / "boot").iterdir():
        child.unlink()
    for link in ("vmlinuz", "vmlinuz.old", "initrd.img", "initrd.img.old"):
        (root / link).unlink(missing_ok=True)
    return found


def squash(root: Path, out: Path, fast: bool = False) -> Path:
    """The read-only root: xz (smallest), or zstd level 3 for a developer's quick bundle."""
    compression = ["-comp", "zstd", "-Xcompression-level", "3"] if fast else ["-comp", "xz", "-Xbcj", "x86"]
    log(f"root: mksquashfs ({compression[1]})")
    out.unlink(missing_ok=True)
    sh(
        "nice",
        "-n",
        "10",
        "mksquashfs",
        root,
        out,
        *compression,
        "-noappend",
        "-quiet",
        "-no-progress",
        "-mkfs-time",
        "0",
        "-all-time",
        "0",
        "-processors",
        "2",
    )
    size = out.stat().st_size
    if size > SLOT_MIB * MIB:
        raise BuildError(f"the root image is {size / MIB:.0f} MiB; a slot holds {SLOT_MIB} MiB")
    return out


# ---- partitions and the disk


def esp_image(out: Path, root: Path, kernel: dict[str, Path], version: str) -> None:
    out.unlink(missing_ok=True)
    sh("mkfs.vfat", "-C", "-F", "32", "-n", "HOMEWORK", out, ESP_MIB * 1024, capture=True)
    efi = root / "usr/lib/systemd/boot/efi/systemd-bootx64.efi"
    stage = WORK / "esp"
    shutil.rmtree(stage, ignore_errors=True)
    for d in ("EFI/BOOT", "EFI/systemd", "loader/entries", boot.slot_dir("a")):
        (stage / d).mkdir(parents=True)
    shutil.copy2(efi, stage / "EFI/BOOT/BOOTX64.EFI")
    shutil.copy2(efi, stage / "EFI/systemd/systemd-bootx64.efi")
    # No menu (hold a key at power-on for it) and no editing the kernel command line.
    (stage / "loader/loader.conf").write_text("timeout 0\neditor no\nauto-entries no\nauto-firmware no\n")
    entry = boot.entry_name(version, "a")
    (stage / "loader/entries" / entry).write_text(boot.entry_text(version, "a"))
    (stage / boot.GRUB_DIR).mkdir()
    (stage / boot.GRUB_DIR / "grub.cfg").write_text(boot.grub_config({entry: boot.entry_text(version, "a")}))
    (stage / boot.GRUB_DIR / "grubenv").write_bytes(boot.grubenv_block({}))
    shutil.copy2(kernel["vmlinuz"], stage / boot.slot_dir("a") / boot.KERNEL)
    shutil.copy2(kernel["initrd.img"], stage / boot.slot_dir("a") / boot.INITRD)
    sh("mcopy", "-s", "-i", out, *sorted(stage.iterdir()), "::", capture=True)


def data_image(out: Path) -> None:
    out.unlink(missing_ok=True)
    sh("mkfs.ext4", "-q", "-F", "-L", DATA_PARTLABEL, "-E", "root_owner=0:0", out, f"{DATA_MIB}M", capture=True)


def disk(out: Path, esp: Path, root_a: Path, data: Path) -> None:
    log("disk: GPT, BIOS boot, ESP, slots A and B, data")
    # Numbered in this order (the ESP is partition 1); on the disk GRUB's BIOS boot partition
    # comes first, so the data partition stays last, free to grow.
    layout = [
        ("esp", ESP_PARTLABEL, ESP_MIB, esp),
        ("root", ROOT_PARTLABEL.format(slot="a"), SLOT_MIB, root_a),
        ("root", ROOT_PARTLABEL.format(slot="b"), SLOT_MIB, None),
        ("data", DATA_PARTLABEL, DATA_MIB, data),
        ("bios", BIOS_BOOT_PARTLABEL, BIOS_BOOT_MIB, None),
    ]
    starts, start = {}, 1
    for _, label, size, _ in [layout[-1], *layout[:-1]]:
        starts[label] = start
        start += size
    out.unlink(missing_ok=True)
    with out.open("wb") as f:
        f.truncate((start + 1) * MIB)
    script = ["label: gpt"] + [
        f'start={starts[label]}MiB, size={size}MiB, type={PART_TYPES[kind]}, name="{label}"'
        for kind, label, size, _ in layout
    ]
    sh("sfdisk", "--quiet", out, input="\n".join(script) + "\n", capture=True)
    for _, label, _, content in layout:
        if content is not None:
            sh(
                "dd",
                f"if={content}",
                f"of={out}",
                "bs=1M",
                f"seek={starts[label]}",
                "conv=notrunc,sparse",
                "status=none",
            )
    grub_bios(out)


def grub_bios(disk_image: Path) -> None:
    """GRUB for legacy BIOS: its boot.img into the protective MBR, a core image (prefix: the ESP's
    grub/, partition 1) into the BIOS boot partition, by grub-bios-setup as grub-install does."""
    stage = WORK / "grub-bios"
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "mnt").mkdir(parents=True)
    core = stage / "core.img"
    sh("grub-mkimage", "-O", "i386-pc", "-o", core, "-p", f"(hd0,gpt1)/{boot.GRUB_DIR}", *GRUB_MODULES, capture=True)
    # grub-bios-setup insists on naming the block device that holds its directory (grub-install's
    # case: /boot/grub on the target disk). The ESP is a FAT image that is never mounted (build
    # hosts need no vfat module), so the directory sits on a scratch ext2 file, loop-mounted.
    scratch = stage / "dir.ext2"
    with scratch.open("wb") as f:
        f.truncate(4 * MIB)
    sh("mkfs.ext2", "-q", "-F", scratch, capture=True)
    sh("mount", "-o", "loop", scratch, stage / "mnt", capture=True)
    try:
        shutil.copy2(GRUB_BIOS_DIR / "boot.img", stage / "mnt/boot.img")
        shutil.copy2(core, stage / "mnt/core.img")
        loop = sh("findmnt", "-n", "-o", "SOURCE", stage / "mnt", capture=True).strip()
        (stage / "device.map").write_text(f"(hd0) {disk_image}\n(hd1) {loop}\n")
        sh(GRUB_BIOS_DIR / "grub-bios-setup", "-m", stage / "device.map", "-d", stage / "mnt", disk_image, capture=True)
    finally:
        sh("umount", stage / "mnt", capture=True)
    shutil.rmtree(stage)


def ensure_key() -> None:
    if KEY.exists() and PUBKEY.exists():
        return
    log(f"no update signing key given: making a DEVELOPMENT key in {KEY} (keep it, or updates will not verify)")
    bundle.make_key(KEY, PUBKEY)


# ---- commands


# A minimal Debian booted the same way as the router (`make bench`'s boot ratio): the same kernel, systemd,
# initrd, boot loader, partitions and read-only root, and nothing of the router's own.
BASELINE_PACKAGES = ("linux-image-amd64", "initramfs-tools", "systemd", "systemd-sysv", "systemd-boot", "udev", "kmod")
BASELINE = "debian-minimal-x86_64"


def build_baseline(version: str) -> Path:
    """build/debian-minimal-x86_64.img: the baseline the router's boot is measured against."""
    pins = read_lock()
    include = [f"{n}={v}" for n, v in sorted(pins.items()) if n in BASELINE_PACKAGES or n.startswith("linux-image-")]
    recipe = json.dumps([include, DPKG_EXCLUDES, INITRD_MODULES, SUITE, COMPONENTS])
    tarball = CACHE / f"baseline-{hashlib.sha256(recipe.encode()).hexdigest()[:16]}.tar"
    if tarball.exists():
        log(f"baseline root: cached {tarball.name}")
    else:
        log(f"baseline root: mmdebstrap {len(include)} packages (pinned by packages.lock)")
        mmdebstrap(include, tarball, pinned=True)
    work = WORK / "baseline"
    root = work / "root"
    extract(tarball, root)
    # The router's console (autologin root on the serial port) and its read-only root's tmpfs mounts;
    # none of its services, data or boot-loader mounts.
    for overlay in ("etc/systemd/system/serial-getty@ttyS0.service.d", "etc/hostname"):
        sh("cp", "-a", "--no-preserve=ownership", IMAGE_DIR / "rootfs" / overlay, root / overlay)
    # Those whose mount point the minimal root has (a read-only root cannot make one: /etc/openvswitch
    # and the like are the router's packages').
    fstab = (IMAGE_DIR / "rootfs/etc/fstab").read_text().splitlines()
    tmpfs = [line for line in fstab if line.startswith("tmpfs") and (root / line.split()[1].lstrip("/")).is_dir()]
    (root / "etc/fstab").write_text("".join(f"{line}\n" for line in tmpfs))
    (root / "etc/machine-id").write_text("")
    kernel = take_kernel(root, work / "kernel")
    squashfs = squash(root, work / "root.squashfs", fast=True)
    esp_image(work / "esp.img", root, kernel, version)
    data_image(work / "data.img")
    img = BUILD / f"{BASELINE}.img"
    disk(img, work / "esp.img", squashfs, work / "data.img")
    log(f"baseline: {img}")
    return img


def check_shipped_size(shipped: int, goal: int = SHIPPED_IMAGE_GOAL_BYTES) -> str:
    """What to log of the shipped image's size; BuildError if it is over its goal."""
    if shipped > goal:
        raise BuildError(
            f"the shipped image would be {shipped / 1e6:.1f} MB, over its goal of {goal / 1e6:.0f} MB: "
            "make room first (a package, the firmware list)"
        )
    return f"shipped image: {shipped / 1e6:.1f} MB (goal {goal / 1e6:.0f} MB)"


def build_image(version: str, fast: bool = False, prove_size: bool = False) -> None:
    started = time.monotonic()
    if not (REPO / "hwdb/target/release/hwdb").exists() or not (REPO / "webui/frontend/dist/index.html").exists():
        raise BuildError("hwdb or the web UI is not built: run `make deps` first")
    ensure_key()
    first_lock = not LOCK_FILE.exists()
    tarball = base_root()
    root = WORK / "root"
    extract(tarball, root)
    packages = installed_packages(root)
    if first_lock:
        write_lock(packages)
        tarball.replace(base_cache(packages))  # it is what the lock pins: the next build reuses it
        log(f"wrote {LOCK_FILE.relative_to(REPO)} ({len(packages)} packages): commit it")
    elif packages != read_lock():
        differ = sorted(set(packages.items()) ^ set(read_lock().items()))[:10]
        raise BuildError(f"the root's packages differ from image/packages.lock ({differ}): run `make image-lock`")
    install_components(root, wheels())
    configure(root, version)
    kernel = take_kernel(root, WORK / "kernel")
    squashfs = squash(root, WORK / "root.squashfs", fast)
    esp_image(WORK / "esp.img", root, kernel, version)
    data_image(WORK / "data.img")
    img = BUILD / f"{NAME}.img"
    disk(img, WORK / "esp.img", squashfs, WORK / "data.img")
    log("update bundle, compressed copy, sums")
    bundle.write(BUILD / f"{NAME}.bundle", version, {"root.squashfs": squashfs, **kernel}, KEY)
    (BUILD / f"{NAME}.packages").write_text(LOCK_FILE.read_text())
    sh("nice", "-n", "10", "zstd", "-q", "-f", "-T2", "-10", img, "-o", BUILD / f"{NAME}.img.zst")
    outputs = [f"{NAME}.img", f"{NAME}.img.zst", f"{NAME}.bundle", f"{NAME}.packages"]
    (BUILD / "SHA256SUMS").write_text(sh("sha256sum", *outputs, cwd=BUILD, capture=True))
    sizes: dict[str, Any] = {
        "version": version,
        "root_slot_bytes": squashfs.stat().st_size,
        "slot_partition_bytes": SLOT_MIB * MIB,
        "esp_used_bytes": sum(p.stat().st_size for p in kernel.values()),
        **{o: (BUILD / o).stat().st_size for o in outputs},
        "image_disk_bytes": img.stat().st_blocks * 512,
        "build_seconds": round(time.monotonic() - started),
    }
    if not fast:
        sizes["shipped_image_bytes"] = sizes[f"{NAME}.img.zst"]
    elif prove_size:
        # The shipped image from the same root: its root slot compressed with xz instead, the rest as here
        # (a squashfs is already compressed, so the outer zstd leaves its size as it is, either way).
        shipped_root = squash(root, WORK / "root-shipped.squashfs")
        sizes["shipped_image_bytes"] = sizes[f"{NAME}.img.zst"] - squashfs.stat().st_size + shipped_root.stat().st_size
        sizes["shipped_image_estimated"] = True
        shipped_root.unlink()
    (BUILD / f"{NAME}.sizes.json").write_text(json.dumps(sizes, indent=1) + "\n")
    if "shipped_image_bytes" in sizes:
        log(check_shipped_size(sizes["shipped_image_bytes"]))
    log(
        f"done in {sizes['build_seconds']} s: root slot {sizes['root_slot_bytes'] / MIB:.1f} MiB, "
        f"compressed image {sizes[NAME + '.img.zst'] / MIB:.1f} MiB, bundle {sizes[NAME + '.bundle'] / MIB:.1f} MiB"
    )


def build_bundle(version: str, overlay: Path | None, out: Path, fast: bool) -> None:
    """A bundle from the last build's root, with `overlay`'s files laid on top."""
    root, kernel = WORK / "root", WORK / "kernel"
    if not root.exists():
        raise BuildError("no built root: run `make image` first")
    ensure_key()
    variant = WORK / "bundle-root"
    if variant.exists():
        shutil.rmtree(variant)
    sh("cp", "-a", root, variant)
    if overlay:
        sh("cp", "-a", "--no-preserve=ownership", f"{overlay}/.", variant)
    (variant / str(SHARE).lstrip("/") / "version").write_text(version + "\n")
    squashfs = squash(variant, WORK / "bundle-root.squashfs", fast)
    bundle.write(
        out,
        version,
        {"root.squashfs": squashfs, "vmlinuz": kernel / boot.KERNEL, "initrd.img": kernel / boot.INITRD},
        KEY,
    )
    shutil.rmtree(variant)
    log(f"bundle {out} (version {version})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    img = sub.add_parser("image")
    img.add_argument("--version", default=time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    img.add_argument("--fast", action="store_true", help="compress the root quickly (zstd) rather than small (xz)")
    img.add_argument(
        "--prove-size",
        action="store_true",
        help="with --fast: also compress the root as shipped (xz) and fail if the shipped image would be over its goal",
    )
    sub.add_parser("lock")
    base = sub.add_parser("baseline", help="a minimal Debian booted the same way, for the boot ratio")
    base.add_argument("--version", default=time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    bun = sub.add_parser("bundle")
    bun.add_argument("--version", required=True)
    bun.add_argument("--overlay", type=Path)
    bun.add_argument("--out", type=Path, default=BUILD / f"{NAME}.bundle")
    bun.add_argument("--fast", action="store_true", help="compress quickly (zstd) rather than small (xz)")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("build.py needs root (mmdebstrap, chroot)", file=sys.stderr)
        return 1
    try:
        if args.command == "image":
            build_image(boot.check_version(args.version), args.fast, args.prove_size)
        elif args.command == "baseline":
            build_baseline(boot.check_version(args.version))
        elif args.command == "lock":
            tarball = base_root(pinned=False)
            root = WORK / "lock-root"
            extract(tarball, root)
            write_lock(installed_packages(root))
            shutil.rmtree(root)
            log(f"wrote {LOCK_FILE.relative_to(REPO)}: commit it")
        else:
            build_bundle(boot.check_version(args.version), args.overlay, args.out, args.fast)
    except (BuildError, boot.BootError, homework_deploy.ServicesError) as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
