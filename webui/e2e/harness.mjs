// Browser-test harness: starts (or finds) a web UI, drives Chromium, and makes devices
// join through injectable hooks, so the same flow runs against the test stack (the controller's
// core on its fake switch, webui/tests/stack.py) and against the live emulated home.
//
// Environment:
//   WEBUI_URL          a running web UI (e.g. http://127.0.0.1:8080); unset = start the test stack
//   E2E_USER, E2E_PASSWORD   the owner's account (created on a fresh install)
//   E2E_SETUP_CODE     the one-time setup code a fresh install asks for (the test stack's is
//                      read from its state directory)
//   E2E_DEVICE_CMD     shell command given an action (join, check, leave, copy, use) and the test's
//                      values as E2E_* variables; prints JSON on its last line (tests/e2e/hooks/device.py)
//   E2E_CONTROLLER_URL the controller's ws.v1 (e.g. http://127.0.0.1:8081): the router's own answers
//   E2E_HWDB_QUERY_CMD shell command run with E2E_QUERY; prints hwdb's JSON reply
//   E2E_HWDB_RESTART_CMD  shell command that restarts hwdb and returns once it answers
//   E2E_AGENT_KEY_FILE, E2E_RADIO_SETTINGS, E2E_UPDATE_DIR   the router's files the web UI reads or
//                      writes: the household's agent key, its radio's settings, the updates spool
//   CHROMIUM           browser binary (default /usr/bin/chromium)
import { execFile, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { chromium } from 'playwright-core'

const run = promisify(execFile)
const here = dirname(fileURLToPath(import.meta.url))
export const webuiDir = join(here, '..')
// The live-home run keeps its screenshots apart, so the README's stay the lived-in test home's.
export const screenshotDir = process.env.E2E_SCREENSHOT_DIR || join(webuiDir, 'docs', 'screenshots')
export const WALL = { width: 1280, height: 800 }
export const PHONE = { width: 390, height: 844 }
export const user = process.env.E2E_USER || 'owner'
export const password = process.env.E2E_PASSWORD || 'e2e owner password'
// Where the first-run setup code comes from: the environment, or the test stack's state dir.
let setupCode = () => process.env.E2E_SETUP_CODE || ''

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function sh(cmd, env = {}) {
  const { stdout } = await run('/bin/sh', ['-c', cmd], { env: { ...process.env, ...env }, maxBuffer: 1 << 24, timeout: 120000 })
  return stdout
}

/** ws.v1 at `base`: its JSON answer, or an error when the router refuses. */
function controllerAt(base) {
  return async (method, path, body) => {
    const r = await fetch(base + path, { method, body: body && JSON.stringify(body) })
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`) // the router refused it
    return r.json()
  }
}

/** The web UI under test and the hooks that act on devices. */
export async function startStack() {
  if (process.env.WEBUI_URL) {
    for (const name of ['E2E_DEVICE_CMD', 'E2E_CONTROLLER_URL']) {
      if (!process.env[name]) throw new Error(`${name} is needed with WEBUI_URL`)
    }
    const device = async (action, env) => {
      const out = (await sh(`${process.env.E2E_DEVICE_CMD} ${action}`, env)).trim().split('\n')
      return JSON.parse(out[out.length - 1])
    }
    const tmp = mkdtempSync(join(tmpdir(), 'webui-e2e-')) // the test's own files (an update bundle)
    return {
      url: process.env.WEBUI_URL,
      fake: false,
      info: { agent_key_file: process.env.E2E_AGENT_KEY_FILE, radio_settings: process.env.E2E_RADIO_SETTINGS,
        update_dir: process.env.E2E_UPDATE_DIR, tmp },
      ctl: controllerAt(process.env.E2E_CONTROLLER_URL),
      // A device that joins for real: its DHCP client (host name: extra.hostname, else its name; extra.vendorClass:
      // option 60); extra: { state, name } as the owner decides and names it over ws.v1.
      async join(name, extra = {}) {
        const env = { E2E_NAME: name, E2E_HOSTNAME: extra.hostname || '', E2E_VENDOR_CLASS: extra.vendorClass || '',
          E2E_STATE: extra.state || '', E2E_LABEL: extra.name || '' }
        return (await device('join', env)).mac.toLowerCase()
      },
      check: (mac, expect) => device('check', { E2E_MAC: mac, E2E_EXPECT: expect }),
      leave: (mac) => device('leave', { E2E_MAC: mac }),
      copy: (mac, hostname) => device('copy', { E2E_MAC: mac, E2E_HOSTNAME: hostname }),
      use: (mac, bytes) => device('use', { E2E_MAC: mac, E2E_BYTES: String(bytes) }),
      hwdb: process.env.E2E_HWDB_QUERY_CMD ? async (q) => JSON.parse(await sh(process.env.E2E_HWDB_QUERY_CMD, { E2E_QUERY: q })) : null,
      restartHwdb: process.env.E2E_HWDB_RESTART_CMD ? () => sh(process.env.E2E_HWDB_RESTART_CMD) : null,
      async stop() {
        rmSync(tmp, { recursive: true, force: true })
      },
    }
  }
  const python = process.env.PYTHON || join(webuiDir, '..', '.venv', 'bin', 'python')
  const port = 18000 + Math.floor(Math.random() * 2000)
  const ready = join('/tmp', `webui-e2e-${process.pid}.json`)
  rmSync(ready, { force: true })
  // The controller's core and its tests' fake switch come from this checkout (as webui/pytest.ini gives pytest).
  const controller = join(webuiDir, '..', 'controller')
  const pythonPath = [controller, join(controller, 'tests'), process.env.PYTHONPATH].filter(Boolean).join(':')
  const proc = spawn(python, [join(webuiDir, 'tests', 'stack.py'), '--webui-port', String(port), '--ready-file', ready],
    { cwd: webuiDir, stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, PYTHONPATH: pythonPath } })
  for (let i = 0; i < 300 && !existsSync(ready); i++) await sleep(50)
  if (!existsSync(ready)) throw new Error('test stack did not start')
  const info = JSON.parse(readFileSync(ready, 'utf8'))
  setupCode = () => readFileSync(info.setup_code_file, 'utf8').trim()
  let n = 0
  const hwdb = async (q) => JSON.parse((await run(info.hwdb_bin, ['query', '--json', '--server', `127.0.0.1:${info.hwdb_port}`, q])).stdout)
  const ctl = controllerAt(info.controller)
  return {
    url: info.webui,
    fake: true,
    info,
    hwdb,
    ctl,
    // The device's DHCP client asks to join (the router writes the new-device Event): host name extra.hostname,
    // else its name; extra.vendorClass: option 60. extra: { state, name } as the owner decides and names it over ws.v1.
    async join(name, { hostname, vendorClass, ...extra } = {}) {
      n++
      const mac = `02:e2:e0:00:${(process.pid % 256).toString(16).padStart(2, '0')}:${n.toString(16).padStart(2, '0')}`
      const options = vendorClass ? { vendor_class_id: vendorClass } : undefined
      await ctl('POST', '/home/join', { mac, hostname: hostname || name, options, ...extra })
      return mac
    },
    async check(mac, expect) {
      const want = expect === 'connected' ? 'permitted' : 'denied'
      for (let i = 0; i < 50; i++) {
        if ((await ctl('GET', `/ws.v1/status/${mac}`)).state === want) return
        await sleep(100)
      }
      throw new Error(`${mac} is not ${want}`)
    },
    leave: (mac) => ctl('POST', '/home/release', { mac }),
    copy: (mac, hostname) => ctl('POST', '/home/copied', { mac, hostname }),
    use: (mac, bytes) => ctl('POST', '/home/moved', { mac, bytes }),
    async restartHwdb() {
      const flag = ready + '.restarted'
      rmSync(flag, { force: true })
      proc.kill('SIGUSR1')
      for (let i = 0; i < 200 && !existsSync(flag); i++) await sleep(50)
      if (!existsSync(flag)) throw new Error('the test stack did not restart hwdb')
    },
    async stop() {
      proc.kill('SIGTERM')
      await new Promise((r) => proc.once('exit', r))
      rmSync(ready, { force: true })
      rmSync(ready + '.restarted', { force: true })
    },
  }
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--disable-quic', '--no-first-run'],
  })
}

/** A signed-in page: creates the owner on a fresh install, else signs in. */
export async function signIn(browser, url, viewport, opts = {}) {
  const context = await browser.newContext({ viewport, hasTouch: !!opts.touch, isMobile: !!opts.mobile,
    deviceScaleFactor: opts.mobile ? 2 : 1 })
  const page = await context.newPage()
  await page.goto(url + '/')
  await page.waitForSelector('form.signin, .topbar')
  if (await page.$('form.signin')) {
    const setup = await page.$('text=Choose the owner')
    if (setup && opts.screenshot) await shot(page, opts.screenshot)
    if (setup) await page.fill('input[name=setup-code]', setupCode())
    await page.fill('input[autocomplete=username]', user)
    const pw = await page.$$('input[type=password]')
    for (const p of pw) await p.fill(password)
    await page.click('button.primary')
  }
  await page.waitForSelector('.topbar')
  return { context, page }
}

export async function shot(page, name) {
  mkdirSync(screenshotDir, { recursive: true })
  await page.screenshot({ path: join(screenshotDir, `${name}.png`) })
}

export const label = (zone, mac) => `.zone-${zone} .label[data-mac="${mac}"]`

/** Where a drag of the device's label starts and ends: the label's middle once Playwright's checks for a press
 * (`check`: a hover's, or a tap's) pass there, so the label is visible, stable over two animation frames and
 * what a press on its middle reaches, and the zone's middle. Read at once, the label's box can be a moment old
 * while a fresh page's board still lays out its first status, and the press then lands beside the label. */
async function dragPoints(page, mac, zone, check) {
  const grip = page.locator(`.label[data-mac="${mac}"]`)
  await check(grip)
  const from = await grip.boundingBox()
  const to = await page.locator(`.zone-${zone}`).boundingBox()
  return [from.x + from.width / 2, from.y + from.height / 2, to.x + to.width / 2, to.y + to.height / 2]
}

/** Drag with real pointer events (mouse): press on the label, move in steps, release over the zone. */
export async function dragTo(page, mac, zone) {
  const [x0, y0, x1, y1] = await dragPoints(page, mac, zone, (grip) => grip.hover({ trial: true }))
  await page.mouse.move(x0, y0)
  await page.mouse.down()
  await page.mouse.move(x1, y1, { steps: 12 })
  await page.mouse.up()
}

/** The same drag with a finger: raw touch events through the DevTools protocol. */
export async function touchDragTo(page, mac, zone) {
  const [x0, y0, x1, y1] = await dragPoints(page, mac, zone, (grip) => grip.tap({ trial: true }))
  const cdp = await page.context().newCDPSession(page)
  const point = (x, y) => [{ x: Math.round(x), y: Math.round(y), id: 1 }]
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: point(x0, y0) })
  for (let i = 1; i <= 12; i++) {
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: point(x0 + ((x1 - x0) * i) / 12, y0 + ((y1 - y0) * i) / 12) })
  }
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] })
  await cdp.detach()
}

export { sleep }
