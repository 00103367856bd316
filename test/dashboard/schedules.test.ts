/**
 * The dashboard's schedules panel in real headless Chromium
 * (test/support/browser.ts), against a real API on loopback over a real
 * SQLite file, as test/dashboard/browser.test.ts does: every wait is for
 * something the page shows, never a sleep; each test leaves a screenshot
 * in test-artifacts/dashboard/.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { Runner } from 'jobtable'
import { bearerTokens, createApi, listen, type ApiOptions } from 'jobtable/http'
import { sqliteBackend } from '../support/backends.js'
import { browserSkipReason, launchBrowser, PATIENCE_MS, screenshot, waitForContains, waitForText } from '../support/browser.js'
import { captureLogs } from '../support/logs.js'
import { PAYLOAD_MARKER, registerKinds } from '../http/fixtures/schedule-kinds.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'
const DESKTOP = { width: 1280, height: 900 }
const PHONE = { width: 375, height: 740 }
/** Saturday 28 March 2026, noon UTC: Paris springs forward the next night (see test/http/schedules.test.ts). */
const T0 = Date.UTC(2026, 2, 28, 12, 0)

if (browserSkipReason !== undefined) {
  describe('the dashboard’s schedules in a browser', () => it.skip(`skipped: ${browserSkipReason}`, () => {}))
} else {
  describe('the dashboard’s schedules in a browser', () => {
    let browser: Browser
    let cleanups: (() => Promise<unknown>)[] = []
    beforeAll(async () => {
      browser = await launchBrowser()
    })
    afterAll(async () => {
      await browser?.close()
    })
    afterEach(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined)
      cleanups = []
    })

    /** A runner on the test clock with the fixture's schedules (or none), started so each schedule's tick is recorded, and its API with the dashboard. */
    async function serve(options: Omit<ApiOptions, 'runner' | 'dashboard'> = {}, schedules = true) {
      const store = await sqliteBackend.store()
      const runner = new Runner({ driver: store.driver(), workers: 2, logger: captureLogs(), clock: () => T0 })
      if (schedules) registerKinds(runner)
      await runner.start()
      await runner.wake()
      const listening = await listen(createApi({ runner, dashboard: true, ...options }), { port: 0 })
      cleanups.push(async () => {
        await listening.close()
        await runner.close()
        await store.drop()
      })
      return { runner, url: listening.url }
    }

    /** Opens the page in a fresh context; `problems` collects uncaught page errors and anything the page's policy refused. */
    async function open(url: string, viewport = DESKTOP): Promise<{ page: Page; problems: string[] }> {
      const context = await browser.newContext({ viewport, locale: 'en-US', timezoneId: 'UTC' })
      cleanups.push(() => context.close())
      const page = await context.newPage()
      page.setDefaultTimeout(PATIENCE_MS)
      const problems: string[] = []
      page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
      page.on('console', (message) => {
        if (/Content Security Policy|Refused to/i.test(message.text())) problems.push(`csp: ${message.text()}`)
      })
      await page.goto(url)
      return { page, problems }
    }

    async function shot(page: Page, name: string, body: () => Promise<void>): Promise<void> {
      try {
        await body()
      } finally {
        await screenshot(page, name).catch(() => undefined)
      }
    }

    /** The panel's rows as the page shows them: each cell's text, and each tick's UTC instant (its title). */
    async function rows(page: Page) {
      return page.$$eval('#schedules-table tbody tr', (trs) =>
        trs.map((tr) => {
          const cell = (field: string) => tr.querySelector<HTMLElement>(`[data-field="${field}"]`)!
          return {
            name: tr.querySelector('th')!.textContent,
            kind: cell('kind').textContent,
            cron: cell('cron').textContent,
            timezone: cell('timezone').textContent,
            last: [cell('last').textContent, cell('last').title],
            next: [cell('next').textContent, cell('next').title],
          }
        }),
      )
    }

    it('an operator sees each schedule the server declared: name, kind, pattern, zone, last tick and next tick, never a payload', async () => {
      const { runner, url } = await serve()
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'schedules', async () => {
        await page.waitForFunction(() => document.querySelectorAll('#schedules-table tbody tr').length === 3, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
        expect(await page.locator('#schedules-note').isHidden()).toBe(true)
        // Each time to the minute as this browser writes it (en-US, UTC here), and its instant exactly.
        const local = (ms: number) => page.evaluate((t) => new Date(t).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' }), ms)
        const tick = async (ms: number) => [await local(ms), new Date(ms).toISOString()]
        expect(await rows(page)).toEqual([
          { name: 'nightly-digest', kind: 'send_digest', cron: '0 3 * * *', timezone: 'UTC', last: await tick(Date.UTC(2026, 2, 28, 3, 0)), next: await tick(Date.UTC(2026, 2, 29, 3, 0)) },
          // 02:30 does not exist in Paris on the 29th: the next tick is the gap's end, 03:00 CEST.
          { name: 'paris-plan', kind: 'plan_week', cron: '30 2 * * *', timezone: 'Europe/Paris', last: await tick(Date.UTC(2026, 2, 28, 1, 30)), next: await tick(Date.UTC(2026, 2, 29, 1, 0)) },
          { name: 'hourly-digest', kind: 'send_digest', cron: '@hourly', timezone: 'UTC', last: await tick(Date.UTC(2026, 2, 28, 12, 0)), next: await tick(Date.UTC(2026, 2, 28, 13, 0)) },
        ])
        // What the page shows is what the runner lists.
        const listed = await runner.schedules()
        expect((await rows(page)).map((r) => [r.name, r.last[1], r.next[1]])).toEqual(listed.map((x) => [x.name, new Date(x.lastTickAt!).toISOString(), new Date(x.nextTickAt!).toISOString()]))
        expect(await page.content()).not.toContain(PAYLOAD_MARKER)
        expect(await page.locator('#schedules-title').textContent()).toBe('Schedules')
      })
      expect(problems).toEqual([])
    })

    it('on a phone the panel fits 375 px (the table scrolls within its card)', async () => {
      const { url } = await serve()
      const { page, problems } = await open(`${url}/`, PHONE)
      await shot(page, 'phone-schedules', async () => {
        await page.waitForFunction(() => document.querySelectorAll('#schedules-table tbody tr').length === 3, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
        expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width)
      })
      expect(problems).toEqual([])
    })

    it('a server that declares none says so', async () => {
      const { url } = await serve({}, false)
      const { page, problems } = await open(`${url}/`)
      await waitForText(page, '#schedules-empty', 'This server declares no recurring schedules.')
      expect(await page.locator('#schedules-table').isHidden()).toBe(true)
      expect(problems).toEqual([])
    })

    it('a caller who is not an operator is told the schedules are for operators and sees none of them; an operator’s token shows them', async () => {
      const { url } = await serve({ authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops' }), operatorScope: 'ops' })
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'schedules-forbidden', async () => {
        await page.locator('#token').fill(TOKEN_A)
        await page.locator('#token-form button').click()
        await waitForContains(page, '#schedules-note', 'for operators')
        expect(await page.locator('#schedules-body').isHidden()).toBe(true)
        const body = await page.locator('body').innerText()
        for (const name of ['nightly-digest', 'paris-plan', 'hourly-digest']) expect(body).not.toContain(name)
        expect(await page.locator('#schedules-table tbody tr').count()).toBe(0)
      })
      await page.locator('#forget-token').click()
      await waitForText(page, '#problem-title', 'Not authorized')
      await page.locator('#token').fill(TOKEN_OPS)
      await page.locator('#token-form button').click()
      await page.waitForFunction(() => document.querySelectorAll('#schedules-table tbody tr').length === 3, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
      expect(await page.locator('#schedules-note').isHidden()).toBe(true)
      expect(problems).toEqual([])
    })
  })
}
