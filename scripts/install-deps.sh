#!/usr/bin/env bash
# Install everything the router's services, the emulated home and the tests need.
# Idempotent: a second run only checks. Run as root (make deps does).
set -euo pipefail
cd "$(dirname "$0")/.."

# The toolchains the build relies on and Debian 12 does not ship new enough (its Go is 1.19, its Node
# 18): checked first, so a machine without them stops here, with one line naming each and where to get
# it, rather than halfway through a build. The versions are the projects' own: Go's from
# endhost-agent/go.mod, Rust's from hwdb/Cargo.toml (rust-version, the oldest its pinned crates build
# with), Python's from the controller's requires-python; Node's is what the web UI's Vite and
# Playwright declare (engines: ^20.19.0 || >=22.12.0).
version_at_least() { # have want: true when version have >= want
  [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]
}
check_toolchains() {
  local missing=() have
  local go_want rust_want python_want
  go_want=$(awk '$1 == "go" { print $2 }' endhost-agent/go.mod)
  rust_want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' hwdb/Cargo.toml)
  python_want=$(sed -n 's/^requires-python = ">=\(.*\)"/\1/p' controller/pyproject.toml)
  have=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || have=
  version_at_least "${have:-0}" "$go_want" ||
    missing+=("Go >= $go_want (have ${have:-none}: https://go.dev/dl/)")
  have=$(node --version 2>/dev/null | sed 's/^v//') || have=
  if ! { version_at_least "${have:-0}" 20.19.0 && ! version_at_least "${have:-0}" 21; } &&
    ! version_at_least "${have:-0}" 22.12.0; then
    missing+=("Node.js 20.19+ or 22.12+ with npm (have ${have:-none}: https://nodejs.org/en/download)")
  fi
  have=$(cargo --version 2>/dev/null | awk '{ print $2 }') || have=
  if ! command -v rustup >/dev/null || ! version_at_least "${have:-0}" "$rust_want"; then
    missing+=("rustup with Rust >= $rust_want (have ${have:-none}: https://rustup.rs, then rustup update stable)")
  fi
  have=$("${PYTHON:-python3}" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) || have=
  version_at_least "${have:-0}" "$python_want" ||
    missing+=("Python >= $python_want (have ${have:-none}: Debian 12's python3, apt-get install python3)")
  if ((${#missing[@]})); then
    local IFS=';'
    echo "deps: missing toolchains: ${missing[*]}" | sed 's/;/; /g' >&2
    exit 1
  fi
}
check_toolchains

APT_PACKAGES=(
  openvswitch-switch isc-dhcp-client iproute2 ethtool nftables iputils-ping iperf3
  dnsutils tcpdump dnsmasq-base hostapd wpasupplicant curl procps python3-venv
  chromium   # the web UI's browser tests (Playwright drives Debian's Chromium)
  shellcheck # the OpenWrt feed's init scripts (make lint)
  etcd-server # the slicers' shared household registry (isp-flowvisor's tests start their own)
  prometheus # promtool checks the slicer's alert rules (isp-flowvisor's tests)
  openvswitch-testcontroller # a household controller the project did not write (isp-flowvisor's tests)
  kea-dhcp6-server dhcpcd-base # DHCPv6 prefix delegation in the emulated home: the ISP's server, the router's client
  radvd      # a Thread border router's adverts, with Route Information (RFC 4191), in the emulated home
  openssl    # the image's update bundles are signed with it (image tests)
  # make image: a Debian root, squashfs root slots, the EFI system partition and its boot loader
  mmdebstrap squashfs-tools dosfstools mtools fdisk e2fsprogs zstd systemd-boot-efi grub-pc-bin
  # the image's boot test: the VM, its UEFI firmware, qemu-img (the overlay a saved router state lives in)
  qemu-system-x86 ovmf qemu-utils
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts the packaged services; the emulated home starts its own instances when it needs them.
for svc in iperf3 hostapd dnsmasq etcd prometheus openvswitch-testcontroller kea-dhcp6-server radvd; do
  systemctl disable --now "$svc" >/dev/null 2>&1 || true
done

# Rust's linters for hwdb (make lint): rustup components, not Debian packages.
for component in clippy rustfmt; do
  rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
done

# Python: one venv for the controller, the web UI backend, hwdb's client and the emulated home,
# from the lock file; the project's own packages are installed editable, so nothing needs PYTHONPATH.
PYTHON=${PYTHON:-python3}
PACKAGES=(deploy controller webui hwdb/python homenet isp-flowvisor image)
stamp=.venv/.requirements.sha256
# The packages' paths count too: a package moved in the tree is installed editable from its new place.
want=$({ echo "${PACKAGES[*]}"; cat requirements.lock "${PACKAGES[@]/%//pyproject.toml}"; } | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "deps: building the Python venv from requirements.lock"
  "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --require-virtualenv -r requirements.lock
  # --no-deps: every dependency is already pinned above; --no-build-isolation: build with the pinned setuptools.
  editable=()
  for pkg in "${PACKAGES[@]}"; do editable+=(-e "$pkg"); done
  .venv/bin/pip install -q --require-virtualenv --no-deps --no-build-isolation "${editable[@]}"
  echo "$want" > "$stamp"
fi
# Go modules of the end-host agent (pinned in its go.sum), fetched once.
(cd endhost-agent && go mod download)

echo "deps: ready"
