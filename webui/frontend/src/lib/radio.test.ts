import { describe, expect, it } from 'vitest'
import { bands, channels, COUNTRY_CODES, countries, keptChannel, onSave, WORLD, type Choices } from './radio'

// What the controller sends (radio_settings.CHANNELS, WORLD_CHANNELS, RESTARTING_FIELDS).
const CHOICES: Choices = {
  channels: { '2.4': [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], '5': [36, 40, 44, 48, 149, 153, 157, 161, 165] },
  world_channels: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
  restarts: ['ssid', 'country', 'band', 'channel'],
}

describe('the radio settings form', () => {
  it('offers every ISO 3166-1 country once, by name', () => {
    expect(COUNTRY_CODES).toHaveLength(249)
    expect(new Set(COUNTRY_CODES).size).toBe(249)
    const named = countries('en')
    expect(named.find((c) => c.code === 'GB')?.name).toBe('United Kingdom')
    expect(named.map((c) => c.name)).toEqual([...named.map((c) => c.name)].sort((a, b) => a.localeCompare(b)))
  })

  it('offers 5 GHz and channels 12 and 13 only once a country is chosen', () => {
    expect(bands(CHOICES, WORLD)).toEqual(['2.4'])
    expect(bands(CHOICES, 'GB')).toEqual(['2.4', '5'])
    expect(channels(CHOICES, WORLD, '2.4')).toEqual(CHOICES.world_channels)
    expect(channels(CHOICES, 'GB', '2.4')).toContain(13)
    expect(channels(CHOICES, 'GB', '5')[0]).toBe(36)
  })

  it('keeps the channel while it is offered, else takes a sensible one', () => {
    expect(keptChannel(CHOICES, 'GB', '2.4', 13)).toBe(13)
    expect(keptChannel(CHOICES, WORLD, '2.4', 13)).toBe(6)
    expect(keptChannel(CHOICES, 'GB', '5', 11)).toBe(36)
    expect(keptChannel(CHOICES, 'GB', '2.4', 36)).toBe(6)
  })

  it('says before saving whether the radio restarts, from the settings the controller names', () => {
    const saved = { ssid: 'Home', passphrase: 'correct horse battery', country: 'GB', band: '2.4', channel: 6 }
    expect(onSave(CHOICES, saved, { ...saved })).toBe('nothing')
    expect(onSave(CHOICES, saved, { ...saved, passphrase: 'a new guest passphrase' })).toBe('new-guest-passphrase')
    expect(onSave(CHOICES, saved, { ...saved, channel: 11 })).toBe('restart')
    expect(onSave(CHOICES, saved, { ...saved, passphrase: 'a new guest passphrase', ssid: 'Home 2' })).toBe('restart')
    // The controller's word, not the form's: a radio that restarts for a new passphrase too is said to.
    const restartsForAll = { ...CHOICES, restarts: [...CHOICES.restarts, 'passphrase'] }
    expect(onSave(restartsForAll, saved, { ...saved, passphrase: 'a new guest passphrase' })).toBe('restart')
  })
})
