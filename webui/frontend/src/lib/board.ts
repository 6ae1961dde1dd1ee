// The Guest Board's rules, kept free of Vue so they can be unit-tested.

export type State = 'pending' | 'permitted' | 'denied' | 'blacklisted' | 'nearby'
export type Zone = 'outside' | 'asking' | 'inside'
export type Action = 'permit' | 'deny'

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
  bytes_per_s: number
  share: number
  owner_id?: number | null
  dns?: { available: boolean; rules: unknown }
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

/** What dropping a device into a zone asks the router to do (null: nothing to do). */
export function dropAction(d: Pick<Device, 'state'>, to: Zone): Action | null {
  const from = zoneOf(d)
  if (from === to || d.state === 'nearby') return null // a device that never asked has nothing to admit
  if (to === 'inside') return 'permit'
  if (to === 'outside') return 'deny'
  return null // there is no way back to "asking": the router only asks once
}

/** The keyboard alternative to dragging: → lets in, ← refuses. */
export function keyAction(d: Pick<Device, 'state'>, key: string): Action | null {
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

export function formatRate(bytesPerSecond: number): string {
  return formatBytes(bytesPerSecond * 8, ['bit/s', 'kbit/s', 'Mbit/s', 'Gbit/s'])
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
