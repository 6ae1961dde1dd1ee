// One EventSource per page: the device list and the router's health, pushed by the backend.
import { reactive } from 'vue'
import type { Device } from './lib/board'
import type { Health } from './api'
import { notify } from './notifications'

export const live = reactive({
  devices: [] as Device[],
  health: { controller: null, hwdb: null } as Health,
  connected: false,
  // qos-overload (owners and members) and mac-clone (everyone: the Guest Board shows it) Events rows;
  // new-device, newcomer-storm and allowance (owners and members: system notifications).
  alerts: [] as { time: number; kind: string; mac?: string; message: string }[],
  appsChanged: 0,
})

let source: EventSource | null = null

export function connect(onSignedOut: () => void) {
  disconnect()
  const es = new EventSource('/api/events')
  source = es
  es.onopen = () => (live.connected = true)
  es.onerror = () => {
    live.connected = false
    // CLOSED means the server refused the stream (signed out); otherwise the browser retries.
    if (es.readyState === EventSource.CLOSED) {
      fetch('/api/session').then((r) => r.json()).then((s) => {
        if (!s.user) onSignedOut()
        else setTimeout(() => source === es && connect(onSignedOut), 2000)
      }, () => setTimeout(() => source === es && connect(onSignedOut), 2000))
    }
  }
  es.addEventListener('devices', (e) => (live.devices = JSON.parse((e as MessageEvent).data)))
  es.addEventListener('health', (e) => (live.health = JSON.parse((e as MessageEvent).data)))
  es.addEventListener('alert', (e) => {
    const alert = JSON.parse((e as MessageEvent).data)
    live.alerts.push(alert)
    notify(alert)
  })
  es.addEventListener('apps', () => live.appsChanged++)
}

export function disconnect() {
  source?.close()
  source = null
  live.connected = false
}

export function replaceDevice(d: Device) {
  const i = live.devices.findIndex((x) => x.mac === d.mac)
  if (i >= 0) live.devices[i] = { ...live.devices[i], ...d }
  else live.devices.push(d)
}
