// Pause for a while, bedtimes and allowances on the phone page (issue 23): the page's rules, free of Vue.
import { formatBytes } from './board'

export const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const
export type Day = (typeof DAYS)[number]
export const DAY_LABELS: Record<Day, string> = { mon: 'Mo', tue: 'Tu', wed: 'We', thu: 'Th', fri: 'Fr', sat: 'Sa', sun: 'Su' }

/** One window of a weekly schedule: it starts on each of `days` at `start` and ends at `end` (the next day if not later). */
export interface ScheduleWindow {
  days: Day[]
  start: string
  end: string
}

/** A device's allowance and today's use, as the controller reports it on the device's status. */
export interface Allowance {
  kind: 'minutes' | 'bytes'
  amount: number
  text: string
  bonus: number
  allowed: number
  used: number
  warning: boolean
  used_up: boolean
  resets_at: string
}

/** An allowance several devices use together (a person's: every device their account owns). */
export interface SharedAllowance extends Allowance {
  name: string
  devices: string[]
}

/** The account whose allowance a shared one is ("person-3" -> 3; null: not a person's). */
export function personOf(shared: Pick<SharedAllowance, 'name'>): number | null {
  const m = /^person-(\d+)$/.exec(shared.name)
  return m ? Number(m[1]) : null
}

export type PausedWhy = 'paused' | 'bedtime' | 'allowance'

export const PAUSE_CHOICES = [
  { label: '30 minutes', for: '30' },
  { label: '1 hour', for: '60' },
  { label: 'Until tomorrow', for: 'tomorrow' },
] as const

/** A new window, as most households start: school nights. */
export const SCHOOL_NIGHTS: ScheduleWindow = { days: ['sun', 'mon', 'tue', 'wed', 'thu'], start: '21:30', end: '07:00' }

/** The controller's schedule text ("mon,tue,wed,thu,sun 21:30-07:00; daily 13:00-14:00") as windows. */
export function parseSchedule(text: string): ScheduleWindow[] {
  const windows: ScheduleWindow[] = []
  for (const part of text.split(';').map((p) => p.trim()).filter(Boolean)) {
    const m = /^(\S+)\s+(\d\d:\d\d)-(\d\d:\d\d)$/.exec(part)
    if (!m) continue
    const days = m[1] === 'daily' ? [...DAYS] : DAYS.filter((d) => m[1].split(',').includes(d))
    windows.push({ days, start: m[2], end: m[3] })
  }
  return windows
}

/** Windows as the text the controller takes; a window with no day is left out. */
export function scheduleText(windows: ScheduleWindow[]): string {
  return windows
    .filter((w) => w.days.length > 0)
    .map((w) => `${w.days.length === 7 ? 'daily' : DAYS.filter((d) => w.days.includes(d)).join(',')} ${w.start}-${w.end}`)
    .join('; ')
}

/** "21:30-07:00" crosses midnight: the page says so, so no one reads it as a daytime window. */
export function crossesMidnight(w: Pick<ScheduleWindow, 'start' | 'end'>): boolean {
  return w.end <= w.start
}

/** How much of today's allowance is used, 0-100 (the usage bar). */
export function usedPercent(a: Pick<Allowance, 'used' | 'allowed'>): number {
  if (a.allowed <= 0) return 100
  return Math.min(100, Math.max(0, Math.round((a.used / a.allowed) * 100)))
}

function amountWords(kind: Allowance['kind'], n: number): string {
  if (kind === 'bytes') return formatBytes(n)
  if (n >= 120 && n % 60 === 0) return `${n / 60} hours`
  return `${n} minute${n === 1 ? '' : 's'}`
}

/** "800 kB of 1.0 MB used today" / "24 of 30 minutes online today". */
export function usageWords(a: Pick<Allowance, 'kind' | 'used' | 'allowed'>): string {
  if (a.kind === 'bytes') return `${formatBytes(a.used)} of ${formatBytes(a.allowed)} used today`
  return `${a.used} of ${amountWords('minutes', a.allowed)} online today`
}

/** The one-tap bonus, in the allowance's own kind. */
export function bonusChoice(a: Pick<Allowance, 'kind'>): { label: string; amount: string } {
  return a.kind === 'bytes' ? { label: '+500 MB', amount: '500 MB' } : { label: '30 more minutes', amount: '30 min' }
}

/** The units an allowance is set in on the page (`allowanceAmount`'s). */
export const ALLOWANCE_UNITS = [
  { value: 'min', label: 'minutes online' },
  { value: 'h', label: 'hours online' },
  { value: 'MB', label: 'MB' },
  { value: 'GB', label: 'GB' },
] as const

/** An allowance from the page's fields: a number and a unit ("min", "h", "MB", "GB"). */
export function allowanceAmount(value: number, unit: string): string {
  if (!Number.isFinite(value) || value <= 0) return ''
  return `${value} ${unit}`
}

/**
 * What the page says of a paused device, in the household's time (the controller sends its local time
 * with the offset): "Paused until 07:00 (bedtime)". today: the household's date now (YYYY-MM-DD), so a
 * pause that ends on another day says which.
 */
export function pausedWords(why: PausedWhy | null | undefined, until: string | null | undefined, today: string): string {
  const reason = { paused: '', bedtime: ' (bedtime)', allowance: " (today's allowance is used up)" }[why ?? 'paused']
  if (!until) return `Paused until resumed${reason}`
  const day = until.slice(0, 10)
  const time = until.slice(11, 16)
  const when = day === today ? time : `${time} on ${weekday(day)}`
  return `Paused until ${when}${reason}`
}

function weekday(isoDate: string): string {
  const [y, m, d] = isoDate.split('-').map(Number)
  return ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'][new Date(Date.UTC(y, m - 1, d)).getUTCDay()]
}

/** The household's date now, in its time zone (IANA name), as YYYY-MM-DD. */
export function householdToday(timeZone: string, now: Date = new Date()): string {
  try {
    return new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(now)
  } catch {
    return now.toISOString().slice(0, 10)
  }
}
