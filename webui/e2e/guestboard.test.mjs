// The household's flows in a real browser: node --test guestboard.test.mjs
import assert from 'node:assert/strict'
import { after, afterEach, before, test } from 'node:test'
import { dragTo, label, touchDragTo, launch, PHONE, shot, signIn, sleep, startStack, WALL } from './harness.mjs'

let stack, browser, wall

before(async () => {
  stack = await startStack()
  browser = await launch()
})

// The wall panel's state after each test, in /tmp, for diagnosing a failure.
afterEach(async (t) => {
  await wall?.page.screenshot({ path: `/tmp/webui-e2e-${t.name.replace(/\W+/g, '-')}.png` }).catch(() => undefined)
})

after(async () => {
  await browser?.close()
  await stack?.stop()
})

/** Make the fake home look lived-in, so the screenshots show what the labels mean. */
async function furnish() {
  if (!stack.fake) return
  const people = [['Tom\'s laptop', -48, 2, 900000], ['Living-room TV', -60, 1, 300000],
    ['Kitchen radio with a very long name that must not break the layout', -86, 1, 20000], ['Garden camera', -75, 40, 60000]]
  let links = [], flows = []
  for (const [name, rssi, retries, bytes] of people) {
    const d = await stack.ctl('POST', '/fake/join', { mac: `02:aa:00:00:00:${(links.length + 1).toString(16).padStart(2, '0')}`,
      hostname: name.toLowerCase().replace(/[^a-z]+/g, '-'), state: 'permitted', event: false })
    await stack.ctl('POST', `/ws.v1/name/${d.mac}?name=${encodeURIComponent(name)}`)
    links.push(`('${d.mac}', ${rssi}, ${retries}, 100)`)
    flows.push(`(6, '${d.ip}', 40000, '93.184.216.34', 443, 100, ${bytes})`)
  }
  await stack.ctl('POST', '/fake/join', { mac: '02:aa:00:00:00:10', hostname: 'unknown-phone', state: 'denied', event: false })
  links.push(`('02:bb:00:00:00:01', -89, 0, 5)`)
  await stack.hwdb(`insert into Links values ${links.join(', ')}`)
  await stack.hwdb(`insert into Flows values ${flows.join(', ')}`)
  for (const [app, bytes] of [['video', 40e6], ['web', 8e6], ['game', 3e6], ['backup', 20e6]]) {
    await stack.hwdb(`insert into AppTimeseries values ('${app}', ${bytes}, ${Math.round(bytes / 1200)})`)
  }
}

test('wall panel: a joining device appears in the middle and is let in by dragging', async () => {
  await furnish()
  wall = await signIn(browser, stack.url, WALL, { screenshot: 'setup-wallpanel' })
  const { page } = wall
  await page.waitForSelector('.zone-asking')
  const t0 = Date.now()
  const mac = await stack.join('htc-one-x')
  await page.waitForSelector(label('asking', mac), { timeout: stack.fake ? 1000 : 10000 })
  const visibleMs = Date.now() - t0
  console.log(`join-to-visible: ${visibleMs} ms`)
  if (stack.fake) assert.ok(visibleMs < 1000, `label took ${visibleMs} ms`)
  await sleep(1200) // let the link figures arrive, for the picture
  await shot(page, 'guestboard-wallpanel')
  await dragTo(page, mac, 'inside')
  await page.waitForSelector(label('inside', mac), { timeout: 3000 })
  await stack.check(mac, 'connected')
  if (stack.fake) {
    const calls = await stack.ctl('POST', '/fake/calls', {})
    assert.ok(calls.some(([m, arg]) => m === 'permit' && arg === mac), 'permit was called on the controller')
  }
})

test('wall panel: keyboard alternative refuses a device', async () => {
  const { page } = wall
  const mac = await stack.join('strangers-laptop')
  await page.waitForSelector(label('asking', mac), { timeout: stack.fake ? 1000 : 10000 })
  await page.focus(label('asking', mac))
  await page.keyboard.press('ArrowLeft')
  await page.waitForSelector(label('outside', mac), { timeout: 3000 })
  await stack.check(mac, 'refused')
})

test('touch panel: a finger drags a device in', async () => {
  const { context, page } = await signIn(browser, stack.url, WALL, { touch: true })
  const mac = await stack.join('kids-tablet')
  await page.waitForSelector(label('asking', mac), { timeout: stack.fake ? 1000 : 10000 })
  await touchDragTo(page, mac, 'inside')
  await page.waitForSelector(label('inside', mac), { timeout: 3000 })
  await stack.check(mac, 'connected')
  await context.close()
})

test('wall panel: device details, naming', async () => {
  const { page } = wall
  const mac = await stack.join('ipad')
  await page.waitForSelector(label('asking', mac))
  await page.click(label('asking', mac))
  await page.waitForSelector('.panel .device-title')
  await page.fill('.panel input[maxlength="64"]', "Grandma's iPad")
  await page.click('.panel form.row button[type=submit]')
  await page.waitForSelector(".panel .device-title:has-text(\"Grandma's iPad\")")
  await page.waitForSelector('.panel .note')
  await shot(page, 'device-panel-wallpanel')
  await page.keyboard.press('Escape')
  await page.waitForSelector(`.label[data-mac="${mac}"]:has-text("Grandma's iPad")`)
})

test('wall panel: priorities view', async () => {
  const { page } = wall
  await page.click('a[href="#/apps"]')
  await page.waitForSelector('.app')
  await sleep(300)
  await shot(page, 'priorities-wallpanel')
})

test('phone: set an app priority; it survives an hwdb restart', async () => {
  const { context, page } = await signIn(browser, stack.url, PHONE, { touch: true, mobile: true })
  await page.goto(stack.url + '/#/apps')
  await page.waitForSelector('.app')
  const app = stack.fake ? 'video' : (await page.getAttribute('.app', 'data-app'))
  await page.click(`.app[data-app="${app}"] button[data-priority=high]`)
  await page.waitForSelector(`.app[data-app="${app}"] button[data-priority=high][aria-checked=true]`)
  await sleep(200)
  await shot(page, 'priorities-phone')
  if (stack.hwdb) {
    const q = `select app, priority from AppPriority where app = '${app}'`
    const rows = (await stack.hwdb(q)).rows
    assert.equal(rows[rows.length - 1][1], 'high')
    if (stack.restartHwdb) {
      await stack.restartHwdb()
      const after = (await stack.hwdb(q)).rows
      assert.equal(after[after.length - 1][1], 'high', 'AppPriority kept the priority across a restart')
    }
  }
  await page.reload()
  await page.waitForSelector(`.app[data-app="${app}"] button[data-priority=high][aria-checked=true]`, { timeout: 10000 })
  await page.click('a[href="#/board"]')
  await page.waitForSelector('.zone-inside .label')
  await shot(page, 'guestboard-phone')
  await context.close()
})

// Only the fake stack can make the queue overflow on demand.
test('phone: an overloaded high-priority queue is announced', async (t) => {
  if (!stack.fake) return t.skip('needs the fake stack')
  const { context, page } = await signIn(browser, stack.url, PHONE, { touch: true, mobile: true })
  await page.goto(stack.url + '/#/apps')
  await page.waitForSelector('.app')
  await stack.hwdb("insert into Events values ('qos-overload', '', 'high-priority queue dropped 312 packets in 10 s')")
  await page.waitForSelector('[data-test=overload]', { timeout: 3000 })
  await shot(page, 'priorities-alert-phone')
  await context.close()
})
