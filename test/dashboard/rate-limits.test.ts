/**
 * The dashboard's "Rate limits" card and "Last hour" chart in real
 * headless Chromium (test/support/browser.ts), against a real API on
 * loopback over a real SQLite file, as test/dashboard/browser.test.ts
 * does. Time is the runner's injected clock: the jobs finish at chosen
 * minutes and the rate windows are read at a chosen instant, so what the
 * page must show is known exactly. Every wait is for something the page
 * shows or a job event, never a sleep; each test leaves a screenshot in
 * test-artifacts/dashboard/. The README's screenshot (docs/dashboard.png)
 * is taken here, with JOBTABLE_UPDATE_SCREENSHOT=1.
 */
import { copyFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { z } from 'zod'
import { Runner } from 'jobtable'
import { bearerTokens, createApi, listen, type ApiOptions } from 'jobtable/http'
import { sqliteBackend } from '../support/backends.js'
import { browserSkipReason, launchBrowser, PATIENCE_MS, screenshot, waitForContains, waitForText } from '../support/browser.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track } from '../support/wait.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'
const DESKTOP = { width: 1280, height: 900 }
const PHONE = { width: 375, height: 740 }
const MIN = 60_000
/** Sunday 6 December 2026, 15:00:20 UTC: the instant the page is read at. */
const T0 = Date.UTC(2026, 11, 6, 15, 0, 20)
const minuteOf = (ms: number) => Math.floor(ms / MIN) * MIN
/** In payloads and results only: the page must never show either. */
const PAYLOAD_MARKER = 'payload-marker-3f9c'
const RESULT_MARKER = 'result-marker-7d21'

if (browserSkipReason !== undefined) {
  describe('the dashboard’s rate limits and last hour in a browser', () => it.skip(`skipped: ${browserSkipReason}`, () => {}))
} else {
  describe('the dashboard’s rate limits and last hour in a browser', () => {
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

    /** A runner on a fresh SQLite file, its clock `clock`, with the kinds `register` adds, and its API with the dashboard. */
    async function serve<K>(clock: () => number, register: (runner: Runner) => K, options: Omit<ApiOptions, 'runner' | 'dashboard'> = {}) {
      const store = await sqliteBackend.store()
      const runner = new Runner({ driver: store.driver(), workers: 4, logger: captureLogs(), clock, stopTimeoutMs: 2_000 })
      const kinds = register(runner)
      const listening = await listen(createApi({ runner, dashboard: true, ...options }), { port: 0 })
      cleanups.push(async () => {
        await listening.close()
        await runner.close()
        await store.drop()
      })
      return { runner, kinds, url: listening.url }
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

    /** The kinds of the card's test: a shared provider key, a per-scope limit, and a kind without one. */
    function registerScene(runner: Runner) {
      return {
        model: runner.register('call_model', {
          payload: z.strictObject({ prompt: z.string(), n: z.number().int() }),
          result: (r: { text: string }) => r,
          rateLimit: { limit: 3, periodMs: 3_600_000, key: 'provider:model' },
          // The provider answers 429 with its reset: 15:15:20.
          handler: ({ n }, job) => (n === 99 ? job.rateLimited(new Date(T0 + 15 * MIN)) : { text: RESULT_MARKER }),
        }),
        plan: runner.register('plan_week', {
          payload: echoPayload,
          rateLimit: { limit: 2, periodMs: MIN, key: 'scope' },
          // The household's own provider account is spent until 15:05:20: the key is the job's bucket, plan_week@<scope>.
          handler: ({ n }, job) => (n === 7 ? job.rateLimited(new Date(T0 + 5 * MIN)) : undefined),
        }),
        digest: runner.register('send_digest', {
          payload: echoPayload,
          failures: ['no_address'],
          handler: ({ n }, job) => (n < 0 ? job.fail('no_address') : undefined),
        }),
      }
    }

    /**
     * The scene, on a clock the test moves: at 14:10:20 two model calls
     * and three digests finish (one failing); at 14:40:20 a model call is
     * rate-limited by its provider until 15:15:20 (the key's third claim
     * of the hour) and a scheduled digest is cancelled; at 14:59:50 three
     * week plans of household-a and one of household-b are enqueued, two
     * a minute per household, so one of household-a's waits, and
     * household-b's is rate-limited until 15:05:20; then two more model
     * calls wait on the spent, cooling key. Read at 15:00:20.
     */
    async function scene(options: Omit<ApiOptions, 'runner' | 'dashboard'> = {}) {
      let now = T0 - 50 * MIN
      const served = await serve(() => now, registerScene, options)
      const { runner, kinds } = served
      const done = track(runner)
      cleanups.push(async () => done.stop())
      const first = [
        await kinds.model.enqueue({ prompt: PAYLOAD_MARKER, n: 1 }),
        await kinds.model.enqueue({ prompt: PAYLOAD_MARKER, n: 2 }),
        await kinds.digest.enqueue({ n: 1 }),
        await kinds.digest.enqueue({ n: 2 }),
        await kinds.digest.enqueue({ n: -1 }),
      ]
      await runner.start()
      await done.ends(first)

      now = T0 - 20 * MIN
      await done.ends([await kinds.model.enqueue({ prompt: PAYLOAD_MARKER, n: 99 })])
      expect(await runner.cancel(await kinds.digest.enqueue({ n: 3 }, { delayMs: 3_600_000 }))).toBe('cancelled')

      now = T0 - 30_000
      for (const scope of ['household-a', 'household-a', 'household-a']) await kinds.plan.enqueue({ n: 1 }, { scope })
      await kinds.plan.enqueue({ n: 7 }, { scope: 'household-b' })
      // Two of household-a's and household-b's one: nine starts in all.
      await done.starts(9)
      await done.ends(done.started)
      await kinds.model.enqueue({ prompt: PAYLOAD_MARKER, n: 3 })
      await kinds.model.enqueue({ prompt: PAYLOAD_MARKER, n: 4 })
      now = T0
      return served
    }

    /** The chart's bars: each minute's data, its parts by status, and its title. */
    async function bars(page: Page) {
      return page.$$eval('#finished-chart g.minute', (gs) =>
        gs.map((g) => ({
          minute: Number((g as SVGGElement).dataset.minute),
          total: Number((g as SVGGElement).dataset.total),
          parts: Array.from(g.querySelectorAll('rect')).map((r) => [r.dataset.status, Number(r.dataset.count)]),
          title: g.querySelector('title')?.textContent,
        })),
      )
    }

    it('an operator sees each key’s use of its limit, its reset and its cooldown, clears the cooldown, and reads the last hour by minute and status', async () => {
      const { runner, url } = await scene()
      // What the runner says is what the page must show.
      expect(await runner.cooldowns()).toEqual([
        { key: 'plan_week@household-b', until: T0 + 5 * MIN },
        { key: 'provider:model', until: T0 + 15 * MIN },
      ])
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'rate-limits', async () => {
        const model = page.locator('#rate-limits-list > li[data-key="provider:model"]')
        await model.waitFor()
        const used = model.locator('[data-field="used"]')
        expect([await used.getAttribute('data-used'), await used.getAttribute('data-limit'), await used.textContent()]).toEqual(['3', '3', '3/3 per 1 h'])
        expect(await model.locator('.rl-name').textContent()).toBe('provider:modelshared by call_model')
        // The oldest claim (14:10:20) leaves the hour's window at 15:10:20; the provider's reset is 15:15:20.
        expect(await model.locator('[data-field="reset"]').getAttribute('data-at')).toBe(String(T0 + 10 * MIN))
        expect(await model.locator('[data-field="reset"]').getAttribute('title')).toBe(new Date(T0 + 10 * MIN).toISOString())
        const cooldown = model.locator('[data-field="cooldown"]')
        expect([await cooldown.getAttribute('data-at'), await cooldown.getAttribute('title')]).toEqual([String(T0 + 15 * MIN), new Date(T0 + 15 * MIN).toISOString()])
        // Its time of day when it falls today where the browser is, else its date and time.
        const shown = await page.evaluate((t) => {
          const at = new Date(t)
          return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' })
        }, T0 + 15 * MIN)
        expect(await cooldown.textContent()).toBe(shown)

        // The per-scope limit: one item, its busiest scope's use, its scopes busiest first, and its scope cooling down.
        const plan = page.locator('#rate-limits-list > li[data-key="plan_week@*"]')
        expect(await plan.locator('.rl-name').textContent()).toBe('plan_week@*each scope of plan_week')
        expect(await plan.locator('[data-field="used"]').first().textContent()).toBe('2/2 per 1 min')
        expect(await plan.locator('.scopes li').evaluateAll((lis) => lis.map((li) => [(li as HTMLElement).dataset.scope, li.textContent]))).toEqual([
          ['household-a', 'household-a 2/2'],
          ['household-b', 'household-b 1/2'],
        ])
        expect(await plan.locator('[data-field="reset"]').getAttribute('title')).toBe(new Date(T0 + 30_000).toISOString())
        const cooling = plan.locator('.scope-cooldowns li[data-key="plan_week@household-b"]')
        expect(await cooling.locator('[data-field="cooldown"]').getAttribute('data-at')).toBe(String(T0 + 5 * MIN))
        expect(await cooling.locator('.rl-scope').textContent()).toBe('household-b')
        expect(await plan.locator('.rl-head button').count()).toBe(0)
        // Two keys, and no item of its own for the scope's cooldown.
        expect(await page.locator('#rate-limits-list > li').evaluateAll((lis) => lis.map((li) => (li as HTMLElement).dataset.key))).toEqual(['plan_week@*', 'provider:model'])

        // The last hour: a bar for each minute with finished jobs, stacked by status.
        await page.waitForFunction(() => document.querySelectorAll('#finished-chart g.minute').length > 0, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
        expect(await bars(page)).toEqual([
          { minute: minuteOf(T0 - 50 * MIN), total: 5, parts: [['succeeded', 4], ['failed', 1]], title: '02:10 PM: 4 succeeded, 1 failed' },
          { minute: minuteOf(T0 - 20 * MIN), total: 1, parts: [['cancelled', 1]], title: '02:40 PM: 1 cancelled' },
          { minute: minuteOf(T0 - 30_000), total: 2, parts: [['succeeded', 2]], title: '02:59 PM: 2 succeeded' },
        ])
        expect(await page.locator('#finished-summary').textContent()).toContain(': 6 succeeded, 1 failed, 1 cancelled.')
        // Its grid counts up to 5; its times fall on round minutes of the window, from 14:00 (or just after) to 15:00.
        expect(await page.locator('#finished-chart text.axis:not(.time)').allTextContents()).toEqual(['0', '5'])
        const times = await page.locator('#finished-chart text.time').evaluateAll((ts) => ts.map((t) => ({ minute: Number((t as SVGTextElement).dataset.minute), text: t.textContent })))
        expect(times.length).toBeGreaterThanOrEqual(4)
        for (const { minute, text } of times) {
          expect([minute % (5 * MIN), minute >= minuteOf(T0) - 60 * MIN && minute <= minuteOf(T0) + MIN]).toEqual([0, true])
          expect(text).toBe(await page.evaluate((t) => new Date(t).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' }), minute))
        }
        expect(times.map((t) => t.text)).toContain('03:00 PM')
        // Queued now: the two model calls held back, and household-a's third plan (household-b's waits, scheduled, for its reset).
        expect(
          await page.$$eval('#queued-chart g.kind', (gs) => gs.map((g) => [(g as SVGGElement).dataset.kind, Number((g as SVGGElement).dataset.count), g.querySelector('text.label')?.textContent])),
        ).toEqual([
          ['call_model', 2, 'call_model'],
          ['plan_week', 1, 'plan_week'],
        ])
        expect(await page.locator('#queued-summary').textContent()).toBe('3 queued, of 2 kinds.')
        const content = await page.content()
        expect(content).not.toContain(PAYLOAD_MARKER)
        expect(content).not.toContain(RESULT_MARKER)

        // Clear: the cooldown is gone for every runner, and the item says so; the other one is kept.
        await model.locator('button[data-clear="provider:model"]').click()
        await waitForText(page, '#cooldown-result', 'Cleared the cooldown of provider:model.')
        expect(await runner.cooldowns()).toEqual([{ key: 'plan_week@household-b', until: T0 + 5 * MIN }])
        await waitForText(page, '#rate-limits-list > li[data-key="provider:model"] [data-field="cooldown"]', 'none')
        expect(await model.locator('button').count()).toBe(0)
        // A scope's cooldown is cleared by its own button.
        await cooling.locator('button[data-clear="plan_week@household-b"]').click()
        await waitForText(page, '#cooldown-result', 'Cleared the cooldown of plan_week@household-b.')
        expect(await runner.cooldowns()).toEqual([])
        await page.waitForFunction(() => document.querySelector('#rate-limits-list .scope-cooldowns') === null, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
        // Clearing a cooldown does not make room: the key's three claims are still in its hour.
        expect(await used.getAttribute('data-used')).toBe('3')
      })
      // On a phone the charts are drawn again at its width, and nothing is wider than it.
      await page.setViewportSize(PHONE)
      await page.waitForFunction((w) => Number(document.getElementById('finished-chart')?.getAttribute('width')) <= w, PHONE.width, { timeout: PATIENCE_MS, polling: 'raf' })
      await screenshot(page, 'phone-rate-limits')
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width)
      expect((await bars(page)).map((b) => b.total)).toEqual([5, 1, 2])
      expect(problems).toEqual([])
    })

    it('a cooldown on a key no rate limit names is listed on its own; clearing one another operator already cleared says so', async () => {
      let now = T0
      const { runner, kinds, url } = await serve(
        () => now,
        (r) => ({
          digest: r.register('send_digest', {
            payload: echoPayload,
            handler: (_p, job) => job.rateLimited(10 * MIN, { key: 'mail:relay' }),
          }),
        }),
      )
      const done = track(runner)
      cleanups.push(async () => done.stop())
      await runner.start()
      await done.ends([await kinds.digest.enqueue({ n: 1 })])
      now = T0 + MIN
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'cooldown-alone', async () => {
        const row = page.locator('#rate-limits-list > li[data-key="mail:relay"]')
        await row.waitFor()
        expect(await row.locator('.rl-name').textContent()).toBe('mail:relayno rate limit')
        expect(await row.locator('[data-field="cooldown"]').getAttribute('title')).toBe(new Date(T0 + 10 * MIN).toISOString())
        // Another operator clears it first: this page's button then finds none, and says so.
        expect(await runner.clearCooldown('mail:relay')).toBe(true)
        await row.locator('button').click()
        await waitForContains(page, '#cooldown-result', 'no cooldown recorded')
        await waitForText(page, '#rate-limits-empty', 'No kind has a rate limit, and no key is cooling down.')
        expect(await page.locator('#rate-limits-list > li').count()).toBe(0)
      })
      expect(problems).toEqual([])
    })

    it('a caller who is not an operator is told both are for operators and sees none of them; an operator’s token shows them', async () => {
      const { url } = await scene({ authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops' }), operatorScope: 'ops' })
      const { page, problems } = await open(`${url}/`)
      await shot(page, 'rate-limits-forbidden', async () => {
        await page.locator('#token').fill(TOKEN_A)
        await page.locator('#token-form button').click()
        await waitForContains(page, '#rate-limits-note', 'for operators')
        await waitForContains(page, '#activity-note', 'for operators')
        expect(await page.locator('#rate-limits-body').isHidden()).toBe(true)
        expect(await page.locator('#activity-body').isHidden()).toBe(true)
        const body = await page.locator('body').innerText()
        for (const text of ['provider:model', 'plan_week@*', 'Finished per minute']) expect(body).not.toContain(text)
        expect(await page.locator('#rate-limits-list *, #finished-chart *, #queued-chart *').count()).toBe(0)
      })
      await page.locator('#forget-token').click()
      await waitForText(page, '#problem-title', 'Not authorized')
      await page.locator('#token').fill(TOKEN_OPS)
      await page.locator('#token-form button').click()
      await page.locator('#rate-limits-list > li[data-key="provider:model"]').waitFor()
      await page.waitForFunction(() => document.querySelectorAll('#finished-chart g.minute').length === 3, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
      expect(await page.locator('#rate-limits-note').isHidden()).toBe(true)
      expect(problems).toEqual([])
    })

    it("the README's screenshot: the last hour's jobs, a provider's shared limit, a household cooling down, a paused kind, and a meal plan running with its first days published", async () => {
      // The runner's clock runs with the real one, moved back to play the last hour, then brought to now.
      let shift = -55 * MIN
      const hold = gate()
      const { runner, kinds, url } = await serve(
        () => Date.now() + shift,
        (r) => ({
          mealPlan: r.register('meal_plan', {
            payload: z.strictObject({ household: z.string(), days: z.number().int().min(1).max(14) }),
            result: (plan: { days: { day: number; dinner: string }[] }) => plan,
            failures: ['provider_unavailable'],
            rateLimit: { limit: 60, periodMs: MIN, key: 'provider:model' },
            handler: async ({ days }, job) => {
              const dinners = ['lentil soup', 'risotto', 'tacos', 'curry', 'pasta', 'stir fry', 'pizza']
              const plan = { days: [] as { day: number; dinner: string }[] }
              for (let day = 1; day <= days; day++) {
                plan.days.push({ day, dinner: dinners[(day - 1) % dinners.length]! })
                await job.publish(plan)
                // The long plan stops to think after its third day, until the test ends.
                if (days === 14 && day === 3) await Promise.race([hold.promise, aborted(job.signal)])
                if (job.signal.aborted) throw new Error('stopped')
              }
              return plan
            },
          }),
          importRecipe: r.register('import_recipe', {
            payload: z.strictObject({ url: z.string() }),
            result: (recipe: { title: string }) => recipe,
            failures: ['no_recipe_found'],
            rateLimit: { limit: 30, periodMs: 3_600_000, key: 'scope' },
            handler: ({ url: at }, job) => {
              const path = new URL(at).pathname
              if (path === '/') return job.fail('no_recipe_found')
              // The recipe site asks this household to slow down for 5 minutes.
              if (path === '/slow-down') return job.rateLimited(5 * MIN)
              return { title: 'Soup' }
            },
          }),
          digest: r.register('send_digest', { payload: echoPayload, handler: () => undefined }),
        }),
      )
      cleanups.push(async () => hold.open())
      const done = track(runner)
      cleanups.push(async () => done.stop())
      await runner.start()
      const households = ['h1', 'h2', 'h3', 'h4']
      for (let m = 55; m >= 1; m -= 3) {
        shift = -m * MIN
        const ids: string[] = []
        const plans = 2 + ((m * 7) % 5)
        for (let i = 0; i < plans; i++) ids.push(await kinds.mealPlan.enqueue({ household: households[(m + i) % 4]!, days: 1 + (i % 2) }))
        for (let i = 0; i < 2; i++) {
          const scope = households[(m + i) % 4]!
          ids.push(await kinds.importRecipe.enqueue({ url: m % 6 === i ? 'https://recipes.example/' : 'https://recipes.example/soup' }, { scope }))
        }
        for (let i = 0; i < m % 4; i++) ids.push(await kinds.digest.enqueue({ n: i }))
        if (m % 12 === 1) await runner.cancel(await kinds.digest.enqueue({ n: 0 }, { delayMs: 3_600_000 }))
        await done.ends(ids)
      }
      shift = 0
      await done.ends([await kinds.importRecipe.enqueue({ url: 'https://recipes.example/slow-down' }, { scope: 'h3' })])
      for (let i = 0; i < 3; i++) await kinds.importRecipe.enqueue({ url: 'https://recipes.example/soup' }, { scope: 'h3' })
      await runner.pause('send_digest')
      for (let i = 0; i < 12; i++) await kinds.digest.enqueue({ n: i })
      const running = await kinds.mealPlan.enqueue({ household: 'h2', days: 14 })
      const { page, problems } = await open(`${url}/#job=${running}`)
      await waitForContains(page, '#d-result', '"day": 3')
      await page.locator('#refresh').click()
      await page.waitForFunction((job) => document.querySelector<HTMLElement>(`#jobs tr[data-id="${job}"]`)?.dataset.status === 'running', running)
      await page.locator('#rate-limits-list li[data-key="import_recipe@h3"]').waitFor()
      await page.waitForFunction(() => document.querySelectorAll('#finished-chart g.minute').length >= 18, undefined, { timeout: PATIENCE_MS, polling: 'raf' })
      await page.locator('#detail-title').blur()
      await page.mouse.move(0, DESKTOP.height - 1)
      const path = await screenshot(page, 'readme')
      // Committed as docs/dashboard.png only when asked: JOBTABLE_UPDATE_SCREENSHOT=1 npx vitest run test/dashboard/rate-limits.test.ts
      if (process.env['JOBTABLE_UPDATE_SCREENSHOT'] === '1') copyFileSync(path, join(process.cwd(), 'docs', 'dashboard.png'))
      expect(problems).toEqual([])
    })
  })
}
