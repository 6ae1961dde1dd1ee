// Which live alerts become a system notification on a household member's phone, and their text.
// Pure: the page's notifications.ts shows what this returns.

/** An `alert` from the live stream: an hwdb Events row (time in seconds). */
export interface Alert {
  time: number
  kind: string
  mac?: string
  message: string
}

export interface Notice {
  title: string
  body: string
  /** The same event has the same tag, so two open pages show it once (the system replaces it). */
  tag: string
}

const TITLES: Record<string, string> = {
  'new-device': 'Something new asks to join',
  'newcomer-storm': 'Many devices are asking to join at once',
  'mac-clone': 'Another device is using a device’s address',
  allowance: 'An allowance is used up',
  'new-address': 'A device is back under a new address',
}

/** The notification for an alert, or null when it is not one the household is told of this way
 * (the queue overload is a banner on Priorities) or the page is the wall panel's: the panel
 * shows the board itself, and it is in a room guests share. */
export function noticeFor(alert: Alert, role: string): Notice | null {
  const title = TITLES[alert.kind]
  if (!title || (role !== 'owner' && role !== 'member')) return null
  return { title, body: alert.message, tag: `${alert.kind}:${alert.mac ?? ''}:${alert.time}` }
}

/** Remembers the last `size` tags shown, so an event heard twice (a reconnect that replays it)
 * is shown once. */
export class Shown {
  private tags: string[] = []
  constructor(private size = 200) {}

  /** True the first time a tag is offered. */
  first(tag: string): boolean {
    if (this.tags.includes(tag)) return false
    this.tags.push(tag)
    if (this.tags.length > this.size) this.tags.shift()
    return true
  }
}
