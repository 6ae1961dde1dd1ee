// The router's own radio settings form: which countries, bands and channels it offers. The
// controller decides what it takes (homework_controller/radio/radio_settings.py) and sends its channels
// with the settings; this only keeps the form from offering what it would refuse.

export const WORLD = '00'

/** ISO 3166-1 alpha-2: every code a household may choose as its regulatory domain. */
export const COUNTRY_CODES = (
  'AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ ' +
  'CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO ' +
  'FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE ' +
  'JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO ' +
  'MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW ' +
  'PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM ' +
  'TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW'
).split(' ')

export interface Choices { channels: Record<string, number[]>; world_channels: number[]; restarts: string[] }

/** The countries by name in the page's language (the code where the browser has no name for it). */
export function countries(locale?: string): { code: string; name: string }[] {
  let names: Intl.DisplayNames | null = null
  try {
    names = new Intl.DisplayNames(locale ? [locale] : undefined, { type: 'region' })
  } catch {
    names = null
  }
  return COUNTRY_CODES.map((code) => ({ code, name: names?.of(code) ?? code }))
    .sort((a, b) => a.name.localeCompare(b.name))
}

/** The bands a country allows: in the world domain no 5 GHz channel may start a network. */
export function bands(choices: Choices, country: string): string[] {
  return country === WORLD ? ['2.4'] : Object.keys(choices.channels).sort((a, b) => Number(a) - Number(b))
}

/** The channels of a band, in the world domain only those it allows. */
export function channels(choices: Choices, country: string, band: string): number[] {
  const all = choices.channels[band] ?? []
  return country === WORLD ? all.filter((c) => choices.world_channels.includes(c)) : all
}

/** The channel to keep when the band or country changes: the same one if it is still offered,
 * else 6 at 2.4 GHz (clear of most neighbours' 1 and 11) or the band's first. */
export function keptChannel(choices: Choices, country: string, band: string, channel: number): number {
  const offered = channels(choices, country, band)
  if (offered.includes(channel)) return channel
  return offered.includes(6) ? 6 : offered[0]
}

/** What saving the form will do to the radio, said before the owner saves: the controller names the
 * settings whose change restarts it (`restarts`); a new guest passphrase alone it takes while it runs. */
export type OnSave = 'nothing' | 'restart' | 'new-guest-passphrase'

export function onSave(choices: Choices, saved: Record<string, unknown>, form: Record<string, unknown>): OnSave {
  const differs = (field: string) => saved[field] !== form[field]
  if (choices.restarts.some(differs)) return 'restart'
  return differs('passphrase') ? 'new-guest-passphrase' : 'nothing'
}
