import { describe, expect, it } from 'vitest'
import {
  allowanceAmount, bonusChoice, crossesMidnight, householdToday, parseSchedule, pausedWords, personOf, scheduleText, usageWords,
  usedPercent,
} from './bedtime'

describe('the schedule editor', () => {
  it("reads the controller's text and writes it back", () => {
    const text = 'mon,tue,wed,thu,sun 21:30-07:00; daily 13:00-14:00'
    const windows = parseSchedule(text)
    expect(windows).toEqual([
      { days: ['mon', 'tue', 'wed', 'thu', 'sun'], start: '21:30', end: '07:00' },
      { days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'], start: '13:00', end: '14:00' },
    ])
    expect(scheduleText(windows)).toBe(text)
    expect(parseSchedule('')).toEqual([])
  })
  it('writes days in week order whatever order they were ticked in, and leaves out a window with none', () => {
    expect(scheduleText([{ days: ['sun', 'fri', 'mon'], start: '22:00', end: '06:30' }, { days: [], start: '01:00', end: '02:00' }]))
      .toBe('mon,fri,sun 22:00-06:30')
  })
  it('says when a window crosses midnight', () => {
    expect(crossesMidnight({ start: '21:30', end: '07:00' })).toBe(true)
    expect(crossesMidnight({ start: '13:00', end: '14:00' })).toBe(false)
  })
})

describe('the allowance', () => {
  const data = { kind: 'bytes' as const, used: 800_000, allowed: 1_000_000 }
  it('fills its bar and says what is used', () => {
    expect(usedPercent(data)).toBe(80)
    expect(usedPercent({ used: 2_000_000, allowed: 1_000_000 })).toBe(100)
    expect(usageWords(data)).toBe('800 kB of 1.0 MB used today')
    expect(usageWords({ kind: 'minutes', used: 24, allowed: 120 })).toBe('24 of 2 hours online today')
    expect(usageWords({ kind: 'minutes', used: 24, allowed: 30 })).toBe('24 of 30 minutes online today')
  })
  it('offers a bonus in its own kind', () => {
    expect(bonusChoice({ kind: 'minutes' })).toEqual({ label: '30 more minutes', amount: '30 min' })
    expect(bonusChoice({ kind: 'bytes' })).toEqual({ label: '+500 MB', amount: '500 MB' })
  })
  it('is made from a number and a unit, and nothing from a bad number', () => {
    expect(allowanceAmount(2, 'h')).toBe('2 h')
    expect(allowanceAmount(0, 'MB')).toBe('')
    expect(allowanceAmount(Number.NaN, 'MB')).toBe('')
  })
})

describe('what a paused device says', () => {
  it('says until when and why, in the household time', () => {
    expect(pausedWords('bedtime', '2026-06-02T07:00:00+02:00', '2026-06-02')).toBe('Paused until 07:00 (bedtime)')
    expect(pausedWords('bedtime', '2026-06-02T07:00:00+02:00', '2026-06-01')).toBe('Paused until 07:00 on Tuesday (bedtime)')
    expect(pausedWords('allowance', '2026-06-02T04:00:00+02:00', '2026-06-01')).toBe(
      "Paused until 04:00 on Tuesday (today's allowance is used up)",
    )
    expect(pausedWords('paused', null, '2026-06-01')).toBe('Paused until resumed')
  })
  it("knows the household's date in its own zone", () => {
    const instant = new Date('2026-06-01T23:30:00Z')
    expect(householdToday('Europe/Berlin', instant)).toBe('2026-06-02')
    expect(householdToday('America/New_York', instant)).toBe('2026-06-01')
    expect(householdToday('Not/AZone', instant)).toBe('2026-06-01')
  })
})

describe('a shared allowance', () => {
  it("is a person's when the web UI named it for their account, and no one's otherwise", () => {
    expect(personOf({ name: 'person-12' })).toBe(12)
    expect(personOf({ name: 'person-' })).toBeNull()
    expect(personOf({ name: 'family' })).toBeNull()
    expect(personOf({ name: 'person-3-extra' })).toBeNull()
  })
})
