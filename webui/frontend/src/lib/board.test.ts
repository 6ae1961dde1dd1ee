import { describe, expect, it } from 'vitest'
import { accessPointWords, devicesIn, displayName, draggable, dropAction, formatKbit, formatMs, formatRate, keyAction, labelStyle, showsCode, zoneOf, type Device } from './board'

const dev = (over: Partial<Device>): Device => ({
  mac: '02:00:00:00:00:01', state: 'pending', ip: null, hostname: '', name: '', vendor_class: '',
  first_seen: 0, last_seen: 0, lease_seconds_left: 0, rssi: null, retry_ratio: 0, bytes_per_s: 0, share: 0,
  may: ['permit', 'deny'], ...over,
})

describe('zones', () => {
  it('places devices by state', () => {
    expect(zoneOf(dev({ state: 'pending' }))).toBe('asking')
    expect(zoneOf(dev({ state: 'permitted' }))).toBe('inside')
    for (const state of ['denied', 'blacklisted', 'nearby'] as const) expect(zoneOf(dev({ state }))).toBe('outside')
  })
  it('turns drops into decisions', () => {
    expect(dropAction(dev({ state: 'pending' }), 'inside')).toBe('permit')
    expect(dropAction(dev({ state: 'pending' }), 'outside')).toBe('deny')
    expect(dropAction(dev({ state: 'pending' }), 'asking')).toBeNull()
    expect(dropAction(dev({ state: 'permitted' }), 'outside')).toBe('deny')
    expect(dropAction(dev({ state: 'denied' }), 'inside')).toBe('permit')
    expect(dropAction(dev({ state: 'permitted' }), 'asking')).toBeNull()
    expect(dropAction(dev({ state: 'nearby' }), 'inside')).toBeNull()
  })
  it('offers no drop for a blocked device: only the owner lifts a blacklist', () => {
    for (const to of ['inside', 'asking', 'outside'] as const) expect(dropAction(dev({ state: 'blacklisted' }), to)).toBeNull()
    expect(keyAction(dev({ state: 'blacklisted' }), 'ArrowRight')).toBeNull()
    expect(draggable(dev({ state: 'blacklisted' }))).toBe(false)
    expect(draggable(dev({ state: 'nearby' }))).toBe(false)
    for (const state of ['pending', 'permitted', 'denied'] as const) expect(draggable(dev({ state }))).toBe(true)
  })
  it('offers the same decisions from the keyboard', () => {
    expect(keyAction(dev({ state: 'pending' }), 'ArrowRight')).toBe('permit')
    expect(keyAction(dev({ state: 'pending' }), 'ArrowLeft')).toBe('deny')
    expect(keyAction(dev({ state: 'permitted' }), 'ArrowRight')).toBeNull()
    expect(keyAction(dev({ state: 'pending' }), 'Enter')).toBeNull()
  })
  it('lists the newest joiner first', () => {
    const list = devicesIn([dev({ mac: 'a', first_seen: 1 }), dev({ mac: 'b', first_seen: 5 }),
      dev({ mac: 'c', state: 'permitted' })], 'asking')
    expect(list.map((d) => d.mac)).toEqual(['b', 'a'])
  })
})

describe('label styling', () => {
  it('fades with weak signal', () => {
    expect(labelStyle(dev({ rssi: -40 })).opacity).toBe(1)
    expect(labelStyle(dev({ rssi: -95 })).opacity).toBe(0.35)
    const mid = labelStyle(dev({ rssi: -70 })).opacity
    expect(mid).toBeGreaterThan(0.35)
    expect(mid).toBeLessThan(1)
    expect(labelStyle(dev({ rssi: null })).opacity).toBe(1)
  })
  it('grows with bandwidth share', () => {
    expect(labelStyle(dev({ share: 0 })).scale).toBe(1)
    expect(labelStyle(dev({ share: 0.5 })).scale).toBe(1.5)
    expect(labelStyle(dev({ share: 3 })).scale).toBe(2)
  })
  it('shows red on retransmissions', () => {
    expect(labelStyle(dev({ retry_ratio: 0.02 })).retransmitting).toBe(false)
    expect(labelStyle(dev({ retry_ratio: 0.25 })).retransmitting).toBe(true)
  })
})

describe('words', () => {
  it('names devices sensibly', () => {
    expect(displayName(dev({ name: "Grandma's iPad", hostname: 'ipad' }))).toBe("Grandma's iPad")
    expect(displayName(dev({ hostname: 'htc-one' }))).toBe('htc-one')
    expect(displayName(dev({}))).toBe('Unnamed device 00:01')
  })
  it('formats rates', () => {
    expect(formatRate(0)).toBe('0 bit/s')
    expect(formatRate(125000)).toBe('1.0 Mbit/s')
    // The latency check and the shaper report kbit/s.
    expect(formatKbit(18000)).toBe('18.0 Mbit/s')
    expect(formatKbit(450)).toBe('450 kbit/s')
    expect(formatMs(0.04)).toBe('0.0 ms')
    expect(formatMs(4.96)).toBe('5.0 ms')
    expect(formatMs(212.4)).toBe('212 ms')
  })
  it('says which access point a device joined through', () => {
    expect(accessPointWords('router')).toBe("the router's own Wi-Fi")
    expect(accessPointWords('Landing')).toBe('the access point "Landing"')
    expect(accessPointWords(null)).toBe('not on Wi-Fi, or not known yet')
  })
})

describe('what a session may do', () => {
  it('offers a drag or a key only for what the device offers this session (its may)', () => {
    const members = dev({ state: 'pending', may: [] }) // a member: the owner or the wall panel decides
    for (const to of ['inside', 'outside'] as const) expect(dropAction(members, to)).toBeNull()
    expect(draggable(members)).toBe(false)
    expect(keyAction(members, 'ArrowRight')).toBeNull()
    const letInOnly = dev({ state: 'denied', may: ['permit'] })
    expect(dropAction(letInOnly, 'inside')).toBe('permit')
    expect(dropAction(dev({ state: 'permitted', may: ['permit'] }), 'outside')).toBeNull()
    expect(keyAction(dev({ state: 'pending', may: ['deny'] }), 'ArrowLeft')).toBe('deny')
    expect(keyAction(dev({ state: 'pending', may: ['deny'] }), 'ArrowRight')).toBeNull()
  })
  it('offers no drop of a blocked device even to a session that may permit: the router refuses everyone', () => {
    const owners = dev({ state: 'blacklisted', may: ['permit', 'deny', 'whitelist'] })
    expect(draggable(owners)).toBe(false)
  })
})

describe('the portal code on a label', () => {
  it('is shown on a newcomer that has one', () => {
    expect(showsCode(dev({ state: 'pending', portal_code: 'K7-Q2' }))).toBe(true)
  })
  it('is not shown once the device is decided, nor without a code', () => {
    for (const state of ['permitted', 'denied', 'blacklisted', 'nearby'] as const) expect(showsCode(dev({ state, portal_code: 'K7-Q2' }))).toBe(false)
    expect(showsCode(dev({ state: 'pending' }))).toBe(false)
  })
})
