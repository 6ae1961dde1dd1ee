// The Guest Board's rules, kept free of Vue so they can be unit-tested.
import type { Allowance, PausedWhy, SharedAllowance } from './bedtime'

export type State = 'pending' | 'permitted' | 'denied' | 'blacklisted' | 'nearby'
export type Zone = 'outside' | 'asking' | 'inside'
export type Action = 'permit' | 'deny'
/** What may be done to one device: the controller's operations on a device (operations.DEVICE_VERBS). */
export type Verb =
  | Action | 'whitelist' | 'blacklist' | 'merge' | 'name' | 'pause' | 'pause-for' | 'resume' | 'schedule' | 'allowance'
  | 'bonus' | 'permit-dns' | 'deny-dns' | 'dns-rules' | 'route-owner' | 'wifi-key' | 'show-wifi-key' | 'revoke-wifi-key'
  | 'internet-only' | 'lan-access'

export interface Device {
  mac: string
  state: State
  ip: string | null
  hostname: string
  name: string
  vendor_class: string
  first_seen: number | null
  last_seen: number | null
  lease_seconds_left: number
  rssi: number | null
  retry_ratio: number
  /** The access point it is on: a satellite's name, 'router' for the router's own radio, null for a cable or
   * not known yet. */
  access_point?: string | null
  bytes_per_s: number
  share: number
  owner_id?: number | null
  /** What this session may do to the device now: the controller's table for the session's role (a member's only
   * on their own devices), as the web UI's backend gives it. The page offers these and no others. */
  may: Verb[]
  dns?: { available: boolean; rules: unknown }
  /** The router saw a second device under this one's MAC (until the household decides again). */
  clone_suspected?: { at: number; differs: string[] } | null
  /** The device joins Wi-Fi with a passphrase of its own (the passphrase itself is never listed). */
  wifi_key?: { keyid: string; created: number } | null
  /** The household paused it: its traffic stops (it keeps its address) until resumed. */
  paused?: boolean
  /** The household lets it reach the internet and the router only, never another device. */
  internet_only?: boolean
  /** The code its captive portal page shows while it waits ("K7-Q2"), so the wall panel can tell which newcomer is whose. */
  portal_code?: string
  /** Why it is paused and until when (the household's local time, ISO with its offset; null: until resumed). */
  paused_why?: PausedWhy | null
  paused_until?: string | null
  /** Its weekly bedtime in the controller's text ("mon,tue,wed,thu,sun 21:30-07:00"); empty: none. */
  schedule?: string
  /** A newcomer that looks like a device the household knows, away now (same DHCP name and client): that
   * device, and what of the two DHCP clients matched (in words: "host name", "requested options"...). */
  looks_like?: { mac: string; label: string; matched: string[] } | null
  /** A newcomer with the host name of a device the household knows, away now, whose DHCP client differs:
   * it is not offered as that device; what matched and what differs, in words. */
  resembles?: { mac: string; label: string; matched: string[]; differs: string[] } | null
  /** Its daily allowance and today's use (null: none). */
  allowance?: Allowance | null
  /** The allowance it shares with its owner's other devices, and their use together today (null: none). */
  shared_allowance?: SharedAllowance | null
}

// `hint` suits the wall panel's side-by-side zones, `narrowHint` a phone's stacked ones.
export const ZONES: { id: Zone; title: string; hint: string; narrowHint: string }[] = [
  { id: 'outside', title: 'Not connected', hint: 'Nearby, refused or blocked. Drag here to refuse.', narrowHint: 'Nearby, refused or blocked.' },
  { id: 'asking', title: 'Asking to join', hint: 'Drag right to let in, left to refuse.', narrowHint: 'Tap a device to let it in or refuse it.' },
  { id: 'inside', title: 'Connected', hint: 'Allowed on the home network. Drag here to let in.', narrowHint: 'Allowed on the home network.' },
]

export function zoneOf(d: Pick<Device, 'state'>): Zone {
  if (d.state === 'permitted') return 'inside'
  if (d.state === 'pending') return 'asking'
  return 'outside'
}

/** What dropping a device into a zone asks the router to do (null: nothing to do, or nothing this session may). */
export function dropAction(d: Pick<Device, 'state' | 'may'>, to: Zone): Action | null {
  const from = zoneOf(d)
  if (from === to || d.state === 'nearby') return null // a device that never asked has nothing to admit
  // A blacklist is lifted only by Unblock (whitelist, in the device's details): the router refuses everyone a
  // permit or deny of a blacklisted device.
  if (d.state === 'blacklisted') return null
  const action = to === 'inside' ? 'permit' : to === 'outside' ? 'deny' : null // no way back to "asking": the router only asks once
  return action && d.may.includes(action) ? action : null
}

/** Whether a label can be dragged at all: some zone would take it. */
export function draggable(d: Pick<Device, 'state' | 'may'>): boolean {
  return ZONES.some((z) => dropAction(d, z.id) !== null)
}

/** The keyboard alternative to dragging: → lets in, ← refuses. */
export function keyAction(d: Pick<Device, 'state' | 'may'>, key: string): Action | null {
  if (key === 'ArrowRight') return dropAction(d, 'inside')
  if (key === 'ArrowLeft') return dropAction(d, 'outside')
  return null
}

export const RSSI_WEAK = -90
export const RSSI_STRONG = -50
export const RETRY_ALERT = 0.1

/**
 * As on the original Guest Board: weak signal fades the label, a larger share of the
 * home's traffic makes it bigger, wireless retransmissions make it red.
 */
export function labelStyle(d: Pick<Device, 'rssi' | 'share' | 'retry_ratio'>) {
  let opacity = 1
  if (d.rssi !== null && d.rssi !== undefined) {
    const t = (d.rssi - RSSI_WEAK) / (RSSI_STRONG - RSSI_WEAK)
    opacity = 0.35 + 0.65 * Math.min(1, Math.max(0, t))
  }
  const share = Math.min(1, Math.max(0, d.share || 0))
  return {
    opacity: Math.round(opacity * 100) / 100,
    scale: Math.round((1 + share) * 100) / 100,
    retransmitting: (d.retry_ratio || 0) >= RETRY_ALERT,
  }
}

/** A newcomer's label carries the code its captive portal page shows, so whoever is at the wall panel can
 * tell which of three "Android" newcomers is the guest's (once let in, the code has done its job). */
export function showsCode(d: Pick<Device, 'state' | 'portal_code'>): boolean {
  return d.state === 'pending' && !!d.portal_code
}

export function displayName(d: Pick<Device, 'name' | 'hostname' | 'vendor_class' | 'mac'>): string {
  return d.name || d.hostname || d.vendor_class || `Unnamed device ${d.mac.slice(-5)}`
}

export function signalWords(rssi: number | null): string {
  if (rssi === null || rssi === undefined) return 'unknown'
  if (rssi >= -55) return 'strong'
  if (rssi >= -70) return 'good'
  if (rssi >= -82) return 'weak'
  return 'very weak'
}

/** Where a device joins the household's Wi-Fi, in words. */
export function accessPointWords(accessPoint: string | null | undefined): string {
  if (!accessPoint) return 'not on Wi-Fi, or not known yet'
  return accessPoint === 'router' ? "the router's own Wi-Fi" : `the access point "${accessPoint}"`
}

const BIT_RATES = ['bit/s', 'kbit/s', 'Mbit/s', 'Gbit/s']

export function formatRate(bytesPerSecond: number): string {
  return formatBytes(bytesPerSecond * 8, BIT_RATES)
}

/** Milliseconds of delay: tenths matter only for small ones (a loopback or a good line). */
export function formatMs(ms: number): string {
  return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`
}

/** A rate the router reports in kbit/s (the latency check, the shaper). */
export function formatKbit(kbit: number): string {
  return formatBytes(kbit * 1000, BIT_RATES)
}

export function formatBytes(n: number, units = ['B', 'kB', 'MB', 'GB', 'TB']): string {
  let i = 0
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000
    i++
  }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`
}

/** Devices of a zone: newest first in "asking" (the one at the door), by name elsewhere. */
export function devicesIn(devices: Device[], zone: Zone): Device[] {
  const list = devices.filter((d) => zoneOf(d) === zone)
  if (zone === 'asking') return list.sort((a, b) => (b.first_seen ?? 0) - (a.first_seen ?? 0))
  return list.sort((a, b) => displayName(a).localeCompare(displayName(b)))
}
