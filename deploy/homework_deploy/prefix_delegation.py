"""The router's DHCPv6 prefix-delegation client (RFC 8415, RFC 7084 WPD-2): dhcpcd on the WAN, IPv6 only, asking
for a /56 and taking what the ISP gives (/56, /60, /64), its hook writing the prefix and its lifetimes where the
controller reads it (`homework_controller.edge.lan.ipv6_files.DELEGATED_FILE`, in a directory of its own beside the
controller's database, the only one of the controller's the client writes). One definition for the image (a systemd
unit) and the emulated home (a process), both started as services.toml's `wan-pd`, which reads the files
`write_files` renders into the `SERVICE_FILES` directory.

dhcpcd, not systemd-networkd's DHCPv6 client: bookworm's networkd (252) assigns a delegated prefix to
interfaces it manages, and br-lan is the controller's; it writes the prefix nowhere another program reads.
"""

from __future__ import annotations

from pathlib import Path

DELEGATED_FILE = "wan-pd/ipv6-delegated-prefix"  # homework_controller.edge.lan.ipv6_files.DELEGATED_FILE
# The names services.toml's wan-pd command gives them in ${SERVICE_FILES}.
CONF_NAME, HOOK_NAME = "dhcpcd-wan.conf", "dhcpcd-pd-hook"

# The hook: the first delegated prefix still valid (a renumbering's reply also lists the old one with valid
# lifetime 0), with the preferred and valid lifetimes the ISP gave it (dhcpcd's IA_PD prefix option's pltime
# and vltime), which the controller counts from the file's modification time
# (homework_controller.wire.prefixes.parse_delegation); written atomically (the controller reads it at every tick);
# empty once the lease is gone.
_HOOK = """#!/bin/sh
out={out}
case "$reason" in
BOUND6|RENEW6|REBIND6|REBOOT6)
  line=
  for n in 1 2 3 4; do
    eval "p=\\$new_dhcp6_ia_pd1_prefix$n len=\\$new_dhcp6_ia_pd1_prefix${{n}}_length"
    eval "pl=\\$new_dhcp6_ia_pd1_prefix${{n}}_pltime vl=\\$new_dhcp6_ia_pd1_prefix${{n}}_vltime"
    if [ -n "$p" ] && [ "${{vl:-0}}" -gt 0 ]; then line="$p/$len $pl $vl"; break; fi
  done ;;
EXPIRE6|RELEASE6) line= ;;
*) exit 0 ;;
esac
printf '%s\\n' "$line" > "$out.tmp" && mv "$out.tmp" "$out"
"""


def hook(state_dir: Path) -> str:
    """dhcpcd's script (`dhcpcd -c`), writing the prefix into the controller's state directory."""
    return _HOOK.format(out=Path(state_dir) / DELEGATED_FILE)


def dhcpcd_conf(wan: str) -> str:
    """Only the WAN, IPv6 only, no router solicitations (the WAN's adverts, its default route, are another
    program's or none): DHCPv6 at once for a /56 (ia_pd 1), assigned to no interface (the controller gives
    devices their /64s; dhcpcd installs an unreachable route for the prefix, which their /64s on the LAN
    interface are more specific than). DUID-LL, from the WAN's MAC: the same identity after a reboot without
    storage, so the ISP delegates the same prefix again."""
    return f"allowinterfaces {wan}\nipv6only\nnoipv6rs\nduid ll\nia_pd 1/::/56 -\n"


def write_files(directory: Path, wan: str, state_dir: Path) -> None:
    """dhcpcd's configuration and hook where services.toml's wan-pd reads them (its `SERVICE_FILES`)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONF_NAME).write_text(dhcpcd_conf(wan))
    (directory / HOOK_NAME).write_text(hook(state_dir))
    (directory / HOOK_NAME).chmod(0o755)
