// make -C webui bench: node bench.mjs OUT.json
// Measures in a real browser the time from a device asking to join to its label being
// visible on the Guest Board (p50/p99 over 20 joins), the time from dropping it on
// "Connected" to its connectivity, and the built frontend's gzip size.
// Same hooks as the tests (harness.mjs): without WEBUI_URL it runs against the controller's core
// on its fake switch + real hwdb, and the result says so.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { dragTo, label, launch, signIn, startStack, WALL, webuiDir } from './harness.mjs'

const out = process.argv[2] || join(webuiDir, '..', 'bench', 'results', 'webui.json')
const JOINS = Number(process.env.E2E_BENCH_JOINS || 20)

function pct(values, p) {
  const s = [...values].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]
}

function frontendSize() {
  const dist = join(webuiDir, 'frontend', 'dist')
  const files = []
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      if (statSync(path).isDirectory()) walk(path)
      else files.push(path)
    }
  }
  walk(dist)
  let raw = 0, gz = 0
  for (const f of files) {
    const data = readFileSync(f)
    raw += data.length
    gz += gzipSync(data, { level: 9 }).length
  }
  return { files: files.length, bytes: raw, gzip_bytes: gz }
}

const stack = await startStack()
const browser = await launch()
const result = {
  setup: stack.fake
    ? 'the controller core on its fake switch (tests/stack.py) + real hwdb on loopback: join = a DHCP DISCOVER and REQUEST into the router core, which records a pending device and writes the new-device Event; connectivity = the controller reports the device permitted. Not the emulated home.'
    : `live web UI at ${stack.url}; join and connectivity = E2E_DEVICE_CMD (its start stands in for the DHCPDISCOVER)`,
  frontend: frontendSize(),
}
try {
  const { page } = await signIn(browser, stack.url, WALL)
  await page.waitForSelector('.zone-asking')
  const visible = [], connected = []
  const permits = Number(process.env.E2E_BENCH_PERMITS || (stack.fake ? JOINS : 3))
  for (let i = 0; i < JOINS; i++) {
    const t0 = performance.now()
    const mac = await stack.join(`bench-${i}`)
    await page.waitForSelector(label('asking', mac), { timeout: 30000 })
    visible.push(performance.now() - t0)
    if (i < permits) {
      const t1 = performance.now()
      await dragTo(page, mac, 'inside')
      await stack.check(mac, 'connected')
      connected.push(performance.now() - t1)
    } else {
      await dragTo(page, mac, 'outside')
    }
  }
  const r = (v) => Math.round(v * 10) / 10
  result.join_to_visible_ms = { n: visible.length, p50: r(pct(visible, 50)), p99: r(pct(visible, 99)), max: r(Math.max(...visible)), goal_p99: 1000 }
  result.drop_to_connectivity_ms = { n: connected.length, p50: r(pct(connected, 50)), p99: r(pct(connected, 99)), max: r(Math.max(...connected)) }
} finally {
  await browser.close()
  await stack.stop()
}
writeFileSync(out, JSON.stringify(result, null, 2) + '\n')
console.log(JSON.stringify(result, null, 2))
