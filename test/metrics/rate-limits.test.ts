/**
 * The rate-limit series of /metrics, read at each scrape over real HTTP
 * on loopback: `jobtable_rate_limit{key}`, `jobtable_rate_limit_used{key}`
 * and `jobtable_cooldown_until_seconds{key}`. A per-scope limit is one
 * series (`<kind>@*`), never one per scope, and no label names a scope.
 * Time is the runner's injected clock, frozen at T0.
 */
import { afterEach, expect, it } from 'vitest'
import { z } from 'zod'
import { DatabaseError, Runner, type Driver, type JobContext } from 'jobtable'
import { createApi, listen } from 'jobtable/http'
import { createMetrics } from 'jobtable/metrics'
import { describeEachBackend } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { samplesOf } from '../support/prometheus.js'
import { track } from '../support/wait.js'
import { checkMetrics, promtoolSkipReason } from './promtool.js'

const T0 = Date.UTC(2020, 0, 1, 12, 0)
const MINUTE = 60_000
const payload = z.strictObject({ key: z.string().nullable() })
type Ctx = JobContext<unknown>

/** The driver, with its cooldown read failing (a busy database) while `failing` is set. */
function failable(real: Driver): { driver: Driver; failing: { on: boolean } } {
  const failing = { on: false }
  const driver = new Proxy(real, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (prop === 'cooldownList' && typeof value === 'function') {
        return (...args: unknown[]) => (failing.on ? Promise.reject(new DatabaseError('cooldownList', 'SQLITE_BUSY', true)) : (value as (...a: unknown[]) => unknown).apply(target, args))
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    },
  })
  return { driver, failing }
}

describeEachBackend('metrics: rate limits and cooldowns', (backend) => {
  let cleanups: (() => unknown)[] = []
  afterEach(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup()
    cleanups = []
  })

  it('reports each limit and its claims in the window (a per-scope one as <kind>@*, its busiest scope), each cooldown in force by a bounded key, and a failed read as a database error', async () => {
    const store = await backend.store()
    cleanups.push(() => store.drop())
    const { driver, failing } = failable(store.driver({ pollIntervalMs: 3_600_000 }))
    const runner = new Runner({ driver, workers: 2, clock: () => T0, logger: captureLogs() })
    cleanups.push(() => runner.close())
    // A job with a key ends with job.rateLimited(30 s, { key }); with key '' it takes its default key. Each such job
    // comes after the others of its bucket: claims take the oldest first, so its cooldown holds back none of them.
    const handler = (p: { key: string | null }, job: Ctx) => (p.key === null ? undefined : job.rateLimited(30_000, p.key === '' ? undefined : { key: p.key }))
    const plan = runner.register('plan_week', { payload, rateLimit: { limit: 3, periodMs: MINUTE, key: 'provider:models' }, handler })
    const recipe = runner.register('import_recipe', { payload, rateLimit: { limit: 5, periodMs: 60 * MINUTE, key: 'scope' }, handler })
    const mail = runner.register('send_mail', { payload, handler })
    const metrics = createMetrics({ runner })
    cleanups.push(() => metrics.close())
    const listening = await listen(createApi({ runner, metrics: metrics.registry }), { port: 0 })
    cleanups.push(() => listening.close())
    const scrape = async () => {
      const answer = await fetch(`${listening.url}/metrics`)
      expect(answer.status).toBe(200)
      return answer.text()
    }

    // Before any claim: the limits, nothing used, no cooldown.
    let m = samplesOf(await scrape())
    expect(m.all('jobtable_rate_limit').map((s) => [s.labels.key, s.value]).sort()).toEqual([
      ['import_recipe@*', 5],
      ['provider:models', 3],
    ])
    expect(m.all('jobtable_rate_limit_used').map((s) => [s.labels.key, s.value]).sort()).toEqual([
      ['import_recipe@*', 0],
      ['provider:models', 0],
    ])
    expect(m.all('jobtable_cooldown_until_seconds')).toEqual([])

    const done = track(runner)
    await runner.start()
    const ids = [
      await plan.enqueue({ key: null }),
      await plan.enqueue({ key: '' }), // cools provider:models
      await recipe.enqueue({ key: null }, { scope: 'household-1' }),
      await recipe.enqueue({ key: null }, { scope: 'household-1' }),
      await recipe.enqueue({ key: '' }, { scope: 'household-1' }), // cools import_recipe@household-1
      await recipe.enqueue({ key: null }, { scope: 'household-2' }),
      await mail.enqueue({ key: 'mailer@household-2' }), // a key of the handler's own
      await mail.enqueue({ key: '' }), // cools send_mail, a kind without a rate limit
    ]
    runner.wake()
    await done.ends(ids)
    done.stop()

    const text = await scrape()
    m = samplesOf(text)
    expect(m.value('jobtable_rate_limit_used', { key: 'provider:models' })).toBe(2)
    expect(m.value('jobtable_rate_limit_used', { key: 'import_recipe@*' })).toBe(3)
    const end = (T0 + 30_000) / 1000
    expect(m.all('jobtable_cooldown_until_seconds').map((s) => [s.labels.key, s.value]).sort()).toEqual([
      ['import_recipe@*', end],
      ['other', end],
      ['provider:models', end],
      ['send_mail', end],
    ])
    // Bounded: one series per limit or kind, whatever the scopes; no label names one.
    expect(text).not.toContain('household')
    if (promtoolSkipReason === undefined) expect(await checkMetrics(text)).toEqual({ code: 0, output: '' })

    // A failed read: the series go missing rather than stale, and the failure is counted in the same scrape.
    failing.on = true
    m = samplesOf(await scrape())
    expect(m.all('jobtable_rate_limit')).toEqual([])
    expect(m.all('jobtable_cooldown_until_seconds')).toEqual([])
    expect(m.value('jobtable_database_errors_total', { operation: 'rate_limits', code: 'SQLITE_BUSY', transient: 'true' })).toBe(1)
    failing.on = false

    // A cleared cooldown leaves its series.
    expect(await runner.clearCooldown('provider:models')).toBe(true)
    m = samplesOf(await scrape())
    expect(m.all('jobtable_cooldown_until_seconds').map((s) => s.labels.key).sort()).toEqual(['import_recipe@*', 'other', 'send_mail'])
    expect(m.value('jobtable_rate_limit', { key: 'provider:models' })).toBe(3)
  })

  it('a custom prefix names the three series too, and close() removes them from the registry', async () => {
    const store = await backend.store()
    cleanups.push(() => store.drop())
    const runner = new Runner({ driver: store.driver(), clock: () => T0, logger: captureLogs() })
    cleanups.push(() => runner.close())
    runner.register('plan_week', { payload, rateLimit: { limit: 3, periodMs: MINUTE }, handler: () => undefined })
    const metrics = createMetrics({ runner, prefix: 'app_jobs_' })
    const m = samplesOf(await metrics.registry.metrics())
    expect(m.value('app_jobs_rate_limit', { key: 'plan_week' })).toBe(3)
    expect(m.value('app_jobs_rate_limit_used', { key: 'plan_week' })).toBe(0)
    metrics.close()
    const left = metrics.registry.getMetricsAsArray().map((metric) => metric.name)
    expect(left.filter((name) => /rate_limit|cooldown/.test(name))).toEqual([])
  })
})
