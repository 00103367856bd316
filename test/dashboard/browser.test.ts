/**
 * The dashboard in real headless Chromium (test/support/browser.ts), each
 * test against a real API on loopback over a real SQLite file, the page
 * reading and acting only through that API. One browser for the file, a
 * fresh context (so fresh sessionStorage) per test. Every wait is for
 * something the page shows, with a generous limit, never a sleep; each
 * test leaves a screenshot in test-artifacts/dashboard/.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { Runner } from 'jobtable'
import { bearerTokens, createApi, listen, type ApiOptions, type Listening } from 'jobtable/http'
import { sqliteBackend } from '../support/backends.js'
import { browserSkipReason, launchBrowser, PATIENCE_MS, screenshot, waitForContains, waitForText } from '../support/browser.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track } from '../support/wait.js'

const TOKEN_A = 'token-for-household-a-0001'
const DESKTOP = { width: 1280, height: 900 }
const PHONE = { width: 375, height: 740 }

if (browserSkipReason !== undefined) {
  describe('the dashboard in a browser', () => it.skip(`skipped: ${browserSkipReason}`, () => {}))
} else {
  describe('the dashboard in a browser', () => {
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

    /** A runner on a fresh SQLite file whose kinds `register` adds, and its API with the dashboard on a loopback port. */
    async function serve<K>(register: (runner: Runner) => K, options: Omit<ApiOptions, 'runner' | 'dashboard'> = {}) {
      const store = await sqliteBackend.store()
      const runner = new Runner({ driver: store.driver(), workers: 4, logger: captureLogs() })
      const kinds = register(runner)
      const api = createApi({ runner, dashboard: true, ...options })
      const server: { listening: Listening } = { listening: await listen(api, { port: 0 }) }
      cleanups.push(async () => {
        await server.listening.close()
        await runner.close()
        await store.drop()
      })
      return { runner, kinds, api, server, url: server.listening.url }
    }

    /**
     * Opens the page in a fresh context at `url`. `problems` collects what
     * must never happen: an uncaught error in the page, or anything its
     * Content-Security-Policy refused.
     */
    async function open(url: string, viewport = DESKTOP): Promise<{ page: Page; context: BrowserContext; problems: string[] }> {
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
      return { page, context, problems }
    }

    /** Runs `body`, then saves a screenshot named `name` whether it passed or not. */
    async function shot(page: Page, name: string, body: () => Promise<void>): Promise<void> {
      try {
        await body()
      } finally {
        await screenshot(page, name).catch(() => undefined)
      }
    }

    /** The jobs the list shows, as [id, status] pairs, in order. */
    async function listed(page: Page): Promise<[string, string][]> {
      return page.$$eval('#jobs tbody tr', (rows) => rows.map((r) => [(r as HTMLElement).dataset.id!, (r as HTMLElement).dataset.status!] as [string, string]))
    }

    /** Waits until the list shows exactly `n` rows, each passing `ok` (by status). */
    async function waitForRows(page: Page, n: number, status?: string): Promise<void> {
      await page.waitForFunction(
        ([count, s]) => {
          const rows = Array.from(document.querySelectorAll<HTMLElement>('#jobs tbody tr'))
          return rows.length === count && rows.every((r) => s === undefined || r.dataset.status === s)
        },
        [n, status] as const,
        { timeout: PATIENCE_MS, polling: 'raf' },
      )
    }

    it('a job enqueued goes from queued to running to succeeded on the page, each partial result appearing as it is published', async () => {
      const gates = [gate(), gate(), gate(), gate()]
      const { runner, kinds, url } = await serve((r) =>
        r.register('meal_plan', {
          payload: echoPayload,
          result: (plan: { days: { day: number; dinner: string }[] }) => plan,
          handler: async ({ n }, job) => {
            const plan = { days: [] as { day: number; dinner: string }[] }
            await gates[0]!.promise
            for (let day = 1; day <= n; day++) {
              plan.days.push({ day, dinner: ['lentil soup', 'risotto', 'tacos'][day - 1]! })
              await job.publish(plan)
              await gates[day]!.promise
            }
            return plan
          },
        }),
      )
      // The runner is not started yet: the job waits, queued.
      const id = await kinds.enqueue({ n: 3 })
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'job-lifecycle', async () => {
        await page.locator(`button[data-job="${id}"]`).click()
        await waitForText(page, '#d-status', 'queued')
        await waitForText(page, '#d-result', 'none yet')
        await runner.start()
        await waitForText(page, '#d-status', 'running')
        await waitForText(page, '#d-attempt', '1 of 1')
        for (let day = 1; day <= 3; day++) {
          gates[day - 1]!.open()
          await waitForContains(page, '#d-result', `"day": ${day}`)
          // Each partial result in turn: the next day is not there until its gate opens.
          expect(await page.locator('#d-result').textContent()).not.toContain(`"day": ${day + 1}`)
          await waitForText(page, '#d-status', 'running')
        }
        gates[3]!.open()
        await waitForText(page, '#d-status', 'succeeded')
        expect(JSON.parse((await page.locator('#d-result').textContent())!)).toEqual({
          days: [
            { day: 1, dinner: 'lentil soup' },
            { day: 2, dinner: 'risotto' },
            { day: 3, dinner: 'tacos' },
          ],
        })
        const log = await page.locator('#d-log li').allTextContents()
        expect(log.map((line) => line.split(' · ')[1])).toEqual(['queued', 'running, attempt 1', 'result updated', 'result updated', 'result updated', 'succeeded'])
        expect(await page.locator('#cancel').isDisabled()).toBe(true)
        expect(await page.locator('#retry').isDisabled()).toBe(true)
        await page.locator('#refresh').click()
        await page.waitForFunction((job) => document.querySelector<HTMLElement>(`#jobs tr[data-id="${job}"]`)?.dataset.status === 'succeeded', id)
      })
      expect(problems).toEqual([])
    })

    it('cancels a running job with its button: the page says the cancellation was requested, then shows it cancelled', async () => {
      const { runner, kinds, url } = await serve((r) =>
        r.register('meal_plan', {
          payload: echoPayload,
          handler: async (_p, job) => {
            await job.publish({ thinking: true })
            await aborted(job.signal)
          },
        }),
      )
      await runner.start()
      const id = await kinds.enqueue({ n: 1 })
      // A link to one job opens it.
      const { page, problems } = await open(`${url}/#job=${id}`)
      await shot(page, 'cancel', async () => {
        await waitForText(page, '#d-status', 'running')
        expect(await page.locator('#retry').isDisabled()).toBe(true)
        await page.locator('#cancel').click()
        await waitForContains(page, '#action-result', 'Cancellation requested')
        await waitForText(page, '#d-status', 'cancelled')
        expect((await runner.get(id)).status).toBe('cancelled')
        expect(await page.locator('#cancel').isDisabled()).toBe(true)
        expect(await page.locator('#retry').isEnabled()).toBe(true)
      })
      expect(problems).toEqual([])
    })

    it('filters by status and kind (from the menus and from the counts), pages with the cursor, and works by keyboard', async () => {
      const { runner, kinds, url } = await serve((r) => ({
        plan: r.register('meal_plan', { payload: echoPayload, handler: () => undefined }),
        recipe: r.register('import_recipe', { payload: echoPayload, failures: ['no_recipe_found'], handler: (_p, job) => job.fail('no_recipe_found') }),
      }))
      const done = track(runner)
      const ran = [...(await kinds.plan.enqueueMany(Array.from({ length: 22 }, (_, n) => ({ n })))), ...(await kinds.recipe.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }]))]
      const scheduled = await kinds.plan.enqueue({ n: 99 }, { delayMs: 3_600_000 })
      await runner.start()
      await done.ends(ran)
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'filters', async () => {
        await waitForRows(page, 20)
        const count = (kind: string, status: string) => page.locator(`#counts tbody tr:has(th:text-is("${kind}")) td[data-status="${status}"]`).textContent()
        expect(await count('meal_plan', 'succeeded')).toBe('22')
        expect(await count('meal_plan', 'scheduled')).toBe('1')
        expect(await count('import_recipe', 'failed')).toBe('3')
        expect(await count('import_recipe', 'succeeded')).toBe('0')

        // Paging: 26 jobs, 20 a page, newest first.
        const first = await listed(page)
        expect(first[0]![0]).toBe(scheduled)
        await page.locator('#older').click()
        await waitForRows(page, 6)
        await waitForText(page, '#page-label', 'Page 2')
        expect(await page.locator('#older').isDisabled()).toBe(true)
        const second = await listed(page)
        expect(new Set([...first, ...second].map(([id]) => id)).size).toBe(26)
        await page.locator('#newer').click()
        await waitForRows(page, 20)
        expect(await listed(page)).toEqual(first)

        await page.locator('#filter-status').selectOption('failed')
        await waitForRows(page, 3, 'failed')
        await page.locator('#filter-kind').selectOption('meal_plan')
        await waitForRows(page, 0)
        expect(await page.locator('#jobs-empty').isVisible()).toBe(true)
        await page.locator('#filter-kind').selectOption('import_recipe')
        await waitForRows(page, 3, 'failed')
        await page.locator('#clear-filters').click()
        await waitForRows(page, 20)

        // A count is a filter: the one scheduled meal plan.
        await page.locator('#counts tbody tr:has(th:text-is("meal_plan")) td[data-status="scheduled"] button').click()
        await waitForRows(page, 1, 'scheduled')
        expect(await page.locator('#filter-status').inputValue()).toBe('scheduled')
        expect(await page.locator('#filter-kind').inputValue()).toBe('meal_plan')

        // By keyboard: Enter on the job opens it (focus on its heading), Escape closes it and gives the focus back.
        await page.locator(`button[data-job="${scheduled}"]`).focus()
        await page.keyboard.press('Enter')
        await waitForText(page, '#d-status', 'scheduled')
        expect(await page.evaluate(() => document.activeElement?.id)).toBe('detail-title')
        await page.keyboard.press('Tab')
        expect(await page.evaluate(() => document.activeElement?.id)).toBe('d-result')
        await page.keyboard.press('Escape')
        await page.waitForFunction(() => document.getElementById('detail')!.hidden)
        expect(await page.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.job)).toBe(scheduled)
      })
      expect(problems).toEqual([])
    })

    it('an unauthorized caller sees "not authorized" and no data at all; with a valid token the data appears, kept for the tab', async () => {
      const { runner, kinds, url } = await serve((r) => r.register('meal_plan', { payload: echoPayload, handler: () => undefined }), {
        authorize: bearerTokens({ [TOKEN_A]: 'household-a' }),
      })
      const done = track(runner)
      const id = await kinds.enqueue({ n: 1 }, { scope: 'household-a' })
      await runner.start()
      await done.ends([id])
      const { page, problems } = await open(`${url}/#job=${id}`)
      await shot(page, 'unauthorized', async () => {
        await waitForText(page, '#problem-title', 'Not authorized')
        await waitForContains(page, '#problem-text', 'needs a bearer token')
        expect(await page.locator('#data').isHidden()).toBe(true)
        expect(await page.locator('#token').isVisible()).toBe(true)
        const body = await page.locator('body').innerText()
        expect(body).not.toContain(id)
        expect(body).not.toContain('meal_plan')
        expect(await page.locator('#jobs tbody tr').count()).toBe(0)

        await page.locator('#token').fill('not-a-token-of-this-api-000')
        await page.keyboard.press('Enter')
        await waitForContains(page, '#problem-text', 'did not accept')
        expect(await page.locator('#data').isHidden()).toBe(true)
        expect(await page.locator('body').innerText()).not.toContain('meal_plan')
      })
      await shot(page, 'authorized', async () => {
        await page.locator('#token').fill(TOKEN_A)
        await page.locator('#token-form button').click()
        await waitForRows(page, 1, 'succeeded')
        await waitForText(page, '#d-status', 'succeeded')
        expect(await page.locator('#problem').isHidden()).toBe(true)
        // Pausing is for operators: this API has none, so the section says so and shows nothing else.
        await waitForContains(page, '#paused-note', 'for operators')
        expect(await page.locator('#paused-body').isHidden()).toBe(true)
        // Kept in sessionStorage: a reload of the tab needs no new token; forgetting it locks the page again.
        await page.reload()
        await waitForRows(page, 1, 'succeeded')
        await page.locator('#forget-token').click()
        await waitForText(page, '#problem-title', 'Not authorized')
        expect(await page.locator('#data').isHidden()).toBe(true)
        // Not only hidden: what the token showed is gone from the page.
        expect(await page.locator('#jobs tbody tr, #counts tbody tr').count()).toBe(0)
        expect(await page.content()).not.toContain(id)
      })
      expect(problems).toEqual([])
    })

    it('retries a failed job with "Retry now": it is queued again and runs to success on its second attempt', async () => {
      let attempts = 0
      const { runner, kinds, url } = await serve((r) =>
        r.register('import_recipe', {
          payload: echoPayload,
          failures: ['no_recipe_found'],
          result: (recipe: { title: string }) => recipe,
          handler: (_p, job) => (++attempts === 1 ? job.fail('no_recipe_found') : { title: 'Soup' }),
        }),
      )
      const done = track(runner)
      const id = await kinds.enqueue({ n: 1 })
      await runner.start()
      await done.ends([id])
      const { page, problems } = await open(`${url}/#job=${id}`)
      await shot(page, 'retry', async () => {
        await waitForText(page, '#d-status', 'failed')
        await waitForText(page, '#d-error', 'no_recipe_found')
        await waitForText(page, '#d-next', 'not again, unless retried')
        expect(await page.locator('#cancel').isDisabled()).toBe(true)
        await page.locator('#retry').click()
        await waitForContains(page, '#action-result', 'Queued again')
        await waitForText(page, '#d-status', 'succeeded')
        await waitForText(page, '#d-attempt', '2 of 2')
        await waitForText(page, '#d-error', '—')
        expect(JSON.parse((await page.locator('#d-result').textContent())!)).toEqual({ title: 'Soup' })
        expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2 })
      })
      expect(problems).toEqual([])
    })

    it('says clearly when the API is unreachable, keeps the last data marked stale, and recovers when it is back', async () => {
      const { runner, kinds, api, server, url } = await serve((r) => r.register('meal_plan', { payload: echoPayload, handler: () => undefined }))
      const done = track(runner)
      const id = await kinds.enqueue({ n: 1 })
      await runner.start()
      await done.ends([id])
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'unreachable', async () => {
        await waitForRows(page, 1, 'succeeded')
        await page.waitForFunction(() => document.getElementById('connection')!.dataset.state === 'ok')
        await server.listening.close()
        await page.locator('#refresh').click()
        await waitForText(page, '#problem-title', 'API unreachable')
        await waitForText(page, '#connection', 'Unreachable')
        expect(await page.locator('#data').getAttribute('class')).toContain('stale')
        expect(await listed(page)).toEqual([[id, 'succeeded']])
      })
      server.listening = await listen(api, { port: Number(new URL(url).port) })
      await page.locator('#refresh').click()
      await page.waitForFunction(() => document.getElementById('connection')!.dataset.state === 'ok')
      expect(await page.locator('#problem').isHidden()).toBe(true)
      expect(await page.locator('#data').getAttribute('class')).not.toContain('stale')
      expect(problems).toEqual([])
    })

    it('on a phone: fits 375 px, and pauses and resumes a kind by keyboard, its queued job waiting meanwhile', async () => {
      const { runner, kinds, url } = await serve((r) => r.register('import_recipe', { payload: echoPayload, handler: () => undefined }))
      await runner.start()
      const { page, problems } = await open(`${url}/`, PHONE)
      await shot(page, 'phone-pause', async () => {
        await waitForText(page, '#paused-empty', 'No kind is paused.')
        await page.locator('#pause-kind').focus()
        await page.keyboard.type('import_recipe')
        await page.keyboard.press('Enter')
        await waitForContains(page, '#pause-result', 'Paused import_recipe')
        await waitForContains(page, '#paused-list', 'import_recipe')
        expect((await runner.paused()).map((p) => p.kind)).toEqual(['import_recipe'])
        const id = await kinds.enqueue({ n: 1 })
        await page.locator('#refresh').click()
        await waitForRows(page, 1, 'queued')
        await page.locator(`button[data-job="${id}"]`).focus()
        await page.keyboard.press('Enter')
        await waitForText(page, '#d-next', 'once its kind is resumed (paused)')
        expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width)
        await screenshot(page, 'phone-paused')
        await page.locator('button[aria-label="Resume import_recipe"]').focus()
        await page.keyboard.press('Enter')
        await waitForContains(page, '#pause-result', 'Resumed import_recipe')
        await waitForText(page, '#d-status', 'succeeded')
        expect(await runner.paused()).toEqual([])
        expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width)
      })
      expect(problems).toEqual([])
    })
  })
}
