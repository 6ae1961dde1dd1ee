import { describe, expect, it } from 'vitest'
import { noticeFor, Shown, type Alert } from './notify'

const joined: Alert = { time: 1764110000.5, kind: 'new-device', mac: '02:00:00:00:00:01', message: 'htc-one-x (02:00:00:00:00:01) asks to join' }

describe('which alerts notify', () => {
  it('a newcomer notifies an owner and a member, naming the device', () => {
    for (const role of ['owner', 'member']) {
      expect(noticeFor(joined, role)).toEqual({
        title: 'Something new asks to join',
        body: 'htc-one-x (02:00:00:00:00:01) asks to join',
        tag: 'new-device:02:00:00:00:00:01:1764110000.5',
      })
    }
  })

  it('the wall panel is told nothing, the same newcomer', () => {
    expect(noticeFor(joined, 'kiosk')).toBeNull()
    expect(noticeFor(joined, '')).toBeNull()
  })

  it('a storm, a copied address, a used-up allowance and a device back under a new address notify; a queue overload does not', () => {
    const of = (kind: string, message: string, mac = '') => noticeFor({ time: 1, kind, mac, message }, 'member')
    expect(of('newcomer-storm', '40 devices asked to join within 10 seconds')?.title).toBe('Many devices are asking to join at once')
    expect(of('mac-clone', 'tv: its address is being used by another device too', '02:00:00:00:00:02')?.title)
      .toBe('Another device is using a device’s address')
    const used = of('allowance', "Tom's tablet has used up today's allowance; paused until 04:00", '02:00:00:00:00:03')
    expect(used?.title).toBe('An allowance is used up')
    expect(used?.body).toBe("Tom's tablet has used up today's allowance; paused until 04:00")
    const back = of('new-address', "Anna's phone is back from a new address, 06:11:22:33:44:55 (it joined with its own passphrase): it is still Anna's phone", '06:11:22:33:44:55')
    expect(back?.title).toBe('A device is back under a new address')
    expect(of('qos-overload', 'high-priority queue dropped 10 packets')).toBeNull()
    expect(of('flow-budget', 'too many connections')).toBeNull()
  })

  it('the same event has the same tag; another event of the same device another', () => {
    const again = noticeFor({ ...joined }, 'owner')!
    const later = noticeFor({ ...joined, time: joined.time + 60 }, 'owner')!
    expect(again.tag).toBe(noticeFor(joined, 'owner')!.tag)
    expect(later.tag).not.toBe(again.tag)
  })
})

describe('each event once', () => {
  it('a tag is shown the first time only, and the memory is bounded', () => {
    const shown = new Shown(2)
    expect(shown.first('a')).toBe(true)
    expect(shown.first('a')).toBe(false)
    expect(shown.first('b')).toBe(true)
    expect(shown.first('c')).toBe(true) // 'a' is forgotten: the memory holds two
    expect(shown.first('b')).toBe(false)
    expect(shown.first('a')).toBe(true)
  })
})
