import { expect, it } from 'vitest'
import { z } from 'zod'
import type { JobContext } from 'jobtable'
import { bearerTokens } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { track } from '../support/wait.js'
import { servers } from './client.js'

/**
 * The operator routes of rate limits, cooldowns and activity over real
 * HTTP on loopback: `GET /api/v1/rate-limits`, `GET /api/v1/cooldowns`,
 * `DELETE /api/v1/cooldowns/{key}` and `GET /api/v1/activity`. Every
 * answer is checked against the OpenAPI document by the client. Time is
 * the runner's injected clock, frozen at T0: every claim, cooldown and
 * finish is recorded at a time the test knows, and nothing waits on one.
 */

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'
/** Behind real time, and past 1e11 so an epoch number reads as a time. */
const T0 = Date.UTC(2020, 0, 1, 12, 30, 15)
const MINUTE = 60_000
const payload = z.strictObject({ n: z.number().int(), limited: z.boolean() })
type Ctx = JobContext<unknown>

describeEachBackend('HTTP: rate limits, cooldowns and activity', (backend) => {
  const h = harness(backend)
  const s = servers()

  /** A runner on a frozen clock: a shared-key kind, a per-scope kind and an unlimited one; a job with `limited` ends with job.rateLimited(30 s). */
  async function setup(options: { auth: boolean }) {
    const runner = h.runner({ workers: 2, clock: () => T0, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const handler = (p: { limited: boolean }, job: Ctx) => (p.limited ? job.rateLimited(30_000) : undefined)
    const plan = runner.register('plan_week', { payload, rateLimit: { limit: 3, periodMs: MINUTE, key: 'provider:models' }, handler })
    const recipe = runner.register('import_recipe', { payload, rateLimit: { limit: 5, periodMs: 60 * MINUTE, key: 'scope' }, handler })
    const echo = runner.register('echo', { payload, handler: () => undefined })
    const done = track(runner)
    await runner.start()
    const api = await s.serve(runner, options.auth ? { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops' }), operatorScope: 'ops' } : {})
    return { runner, api, done, plan, recipe, echo }
  }

  it('lists each rate limit with its use and cooldown, lists the cooldowns, and clears one by its percent-encoded key (a per-scope key with a slash too)', async () => {
    const { api, runner, done, plan, recipe } = await setup({ auth: false })
    const ids = [
      await plan.enqueue({ n: 1, limited: false }),
      await plan.enqueue({ n: 2, limited: true }),
      await recipe.enqueue({ n: 3, limited: false }, { scope: 'h/1' }),
      await recipe.enqueue({ n: 4, limited: false }, { scope: 'h/1' }),
      await recipe.enqueue({ n: 5, limited: true }, { scope: 'h/1' }),
      await recipe.enqueue({ n: 6, limited: false }, { scope: 'h2' }),
    ]
    runner.wake()
    await done.ends(ids)
    expect((await runner.get(ids[1]!)).status).toBe('scheduled')

    const limits = await api.get('/api/v1/rate-limits')
    expect(limits.status).toBe(200)
    const byKey = new Map((limits.json.rateLimits as { key: string }[]).map((l) => [l.key, l]))
    expect([...byKey.keys()].sort()).toEqual(['import_recipe@*', 'provider:models'])
    expect(byKey.get('provider:models')).toEqual({
      key: 'provider:models',
      kinds: ['plan_week'],
      limit: 3,
      periodMs: MINUTE,
      perScope: false,
      used: 2,
      resetAt: T0 + MINUTE,
      cooldownUntil: T0 + 30_000,
    })
    const perScope = byKey.get('import_recipe@*') as unknown as { scopes: { scope: string }[] }
    expect({ ...perScope, scopes: [...perScope.scopes].sort((a, b) => a.scope.localeCompare(b.scope)) }).toMatchObject({
      kinds: ['import_recipe'],
      limit: 5,
      periodMs: 60 * MINUTE,
      perScope: true,
      used: 3, // the busiest scope's
      resetAt: T0 + 60 * MINUTE,
      scopes: [
        { scope: 'h/1', used: 3, resetAt: T0 + 60 * MINUTE },
        { scope: 'h2', used: 1, resetAt: T0 + 60 * MINUTE },
      ],
    })

    const cooldowns = await api.get('/api/v1/cooldowns')
    expect(cooldowns.status).toBe(200)
    expect([...cooldowns.json.cooldowns].sort((a: { key: string }, b: { key: string }) => a.key.localeCompare(b.key))).toEqual([
      { key: 'import_recipe@h/1', until: T0 + 30_000 },
      { key: 'provider:models', until: T0 + 30_000 },
    ])

    const cleared = await api.call('DELETE', '/api/v1/cooldowns/provider%3Amodels')
    expect([cleared.status, cleared.text, cleared.headers.get('cache-control')]).toEqual([204, '', 'no-store'])
    expect((await api.call('DELETE', `/api/v1/cooldowns/${encodeURIComponent('import_recipe@h/1')}`)).status).toBe(204)
    expect(await runner.cooldowns()).toEqual([])
    expect((await api.get('/api/v1/cooldowns')).json).toEqual({ cooldowns: [] })
    expect((await api.get('/api/v1/rate-limits')).json.rateLimits.every((l: { cooldownUntil: unknown }) => l.cooldownUntil === null)).toBe(true)
  })

  it('refuses a key that is not one: 404 cooldown_not_found for none recorded, 400 invalid_key for one too long, with a NUL or a malformed escape; wrong methods 405', async () => {
    const { api } = await setup({ auth: false })
    const missing = await api.call('DELETE', '/api/v1/cooldowns/no-such-key')
    expect([missing.status, missing.json.code]).toEqual([404, 'cooldown_not_found'])
    for (const key of ['x'.repeat(1025), '%00', 'a%ZZ', '%E0%A4%A']) {
      const a = await api.call('DELETE', `/api/v1/cooldowns/${key}`)
      expect([a.status, a.json.code], key).toEqual([400, 'invalid_key'])
    }
    expect((await api.call('DELETE', `/api/v1/cooldowns/${'x'.repeat(1024)}`)).json.code).toBe('cooldown_not_found')
    expect((await api.call('DELETE', '/api/v1/cooldowns/')).json.code).toBe('route_not_found')
    for (const [method, path, allow] of [
      ['POST', '/api/v1/rate-limits', 'GET, HEAD'],
      ['DELETE', '/api/v1/cooldowns', 'GET, HEAD'],
      ['GET', '/api/v1/cooldowns/provider', 'DELETE'],
      ['POST', '/api/v1/cooldowns/provider', 'DELETE'],
      ['POST', '/api/v1/activity', 'GET, HEAD'],
    ] as const) {
      const a = await api.call(method, path)
      expect([a.status, a.json.code, a.headers.get('allow')], `${method} ${path}`).toEqual([405, 'method_not_allowed', allow])
    }
    for (const path of ['/api/v1/rate-limits?x=1', '/api/v1/cooldowns?key=a']) expect((await api.get(path)).json.code, path).toBe('invalid_argument')
  })

  it('activity: jobs finished per minute by status over the window, and queued now by kind; minutes 1 to 1440, default 60', async () => {
    const { api, runner, done, echo } = await setup({ auth: false })
    const ok = await echo.enqueueMany([0, 1, 2].map((n) => ({ n, limited: false })))
    const cancelled = await echo.enqueue({ n: 3, limited: false }, { delayMs: MINUTE })
    await runner.cancel(cancelled)
    runner.wake()
    await done.ends(ok)
    await runner.pause('echo')
    await echo.enqueueMany([4, 5].map((n) => ({ n, limited: false })))

    const activity = await api.get('/api/v1/activity?minutes=5')
    expect(activity.status).toBe(200)
    const { since, minutes, finished, queued } = activity.json
    expect(minutes).toBe(5)
    expect(since % MINUTE).toBe(0)
    expect(since).toBeLessThanOrEqual(T0)
    expect(since).toBeGreaterThan(T0 - 6 * MINUTE)
    const thisMinute = T0 - (T0 % MINUTE)
    expect([...finished].sort((a: { status: string }, b: { status: string }) => a.status.localeCompare(b.status))).toEqual([
      { minute: thisMinute, status: 'cancelled', count: 1 },
      { minute: thisMinute, status: 'succeeded', count: 3 },
    ])
    expect(queued).toEqual([{ kind: 'echo', count: 2 }])
    expect((await api.get('/api/v1/activity')).json.minutes).toBe(60)
    for (const q of ['minutes=0', 'minutes=1441', 'minutes=abc', 'minutes=1.5', 'minutes=5&minutes=6', 'scope=h1']) {
      const a = await api.get(`/api/v1/activity?${q}`)
      expect([a.status, a.json.code], q).toEqual([400, 'invalid_argument'])
    }
  })

  it('with authorization, only the operator scope may read them or clear a cooldown; a household gets 403 and clears nothing', async () => {
    const { api, runner, done, plan } = await setup({ auth: true })
    const id = await plan.enqueue({ n: 1, limited: true })
    runner.wake()
    await done.ends([id])
    expect(await runner.cooldowns()).toEqual([{ key: 'provider:models', until: T0 + 30_000 }])
    const routes = [
      ['GET', '/api/v1/rate-limits'],
      ['GET', '/api/v1/cooldowns'],
      ['GET', '/api/v1/activity'],
      ['DELETE', '/api/v1/cooldowns/provider%3Amodels'],
    ] as const
    for (const [method, path] of routes) {
      expect((await api.call(method, path, { token: TOKEN_A })).json.code, path).toBe('forbidden')
      expect((await api.call(method, path)).status, path).toBe(401)
    }
    expect(await runner.cooldowns()).toEqual([{ key: 'provider:models', until: T0 + 30_000 }])
    expect((await api.call('GET', '/api/v1/cooldowns', { token: TOKEN_OPS })).json).toEqual({ cooldowns: [{ key: 'provider:models', until: T0 + 30_000 }] })
    expect((await api.call('GET', '/api/v1/rate-limits', { token: TOKEN_OPS })).json.rateLimits).toHaveLength(2)
    expect((await api.call('GET', '/api/v1/activity', { token: TOKEN_OPS })).status).toBe(200)
    expect((await api.call('DELETE', '/api/v1/cooldowns/provider%3Amodels', { token: TOKEN_OPS })).status).toBe(204)
    expect(await runner.cooldowns()).toEqual([])
  })
})
