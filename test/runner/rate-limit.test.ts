/**
 * The runner's side of rate limits, cooldowns and fair claims, on SQLite:
 * `job.rateLimited` (its forms, its refusals, the cooldown it records),
 * `runner.cooldowns`, `clearCooldown`, `rateLimits`, `activity`, the
 * positions every enqueue path asks for a fair kind's jobs, the worker
 * pool looking again for held jobs without the fallback poll, and the
 * test kit treating held jobs as no work. Time is an injected clock;
 * what a window let start is read from the clock each handler saw.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, InvalidArgumentError, JobRateLimited, Runner, type Driver, type NewJob } from 'jobtable'
import { sqlite, type SqliteDatabase, type SqliteDriver } from 'jobtable/sqlite'
import { createTestKit, type TestKit, type TestKitOptions } from 'jobtable/testing'
import { sqliteBackend, type Store } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track } from '../support/wait.js'

/** 10:00:30 UTC: a minute and a half into the hour, so minutes are told apart. */
const T0 = Date.UTC(2030, 0, 1, 10, 0, 30)
const MINUTE = 60_000
const payload = z.strictObject({ n: z.number().int(), key: z.string().optional() })

const kits: TestKit<unknown, Driver>[] = []
const stores: Store[] = []
const dirs: string[] = []
afterEach(async () => {
  for (const kit of kits.splice(0)) await kit.close()
  for (const store of stores.splice(0)) await store.drop()
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

async function kitOf<K>(options: TestKitOptions<K, SqliteDriver>): Promise<TestKit<Awaited<K>, SqliteDriver>> {
  const kit = await createTestKit<K, SqliteDriver>({ clock: T0, ...options })
  kits.push(kit as unknown as TestKit<unknown, Driver>)
  return kit
}

describe('job.rateLimited', () => {
  it('sends the job back due at the time given (a Date, epoch ms, or a delay from now), gives its attempt back, and records the cooldown', async () => {
    const times: (Date | number)[] = [new Date(T0 + 90_000), T0 + 120_000, 45_000, 0]
    const kit = await kitOf({
      register: (runner) => runner.register('plan', { payload, handler: ({ n, key }, job) => (job.attempt === 1 ? job.rateLimited(times[n]!, { key: key! }) : 'done') }),
    })
    const ids = await Promise.all(['k0', 'k1', 'k2', 'k3'].map((key, n) => kit.kinds.enqueue({ n, key })))
    const started = await kit.drain()
    // The delay of 0 came back due at once, and ran again within the drain.
    expect(started.map((j) => j.id)).toEqual(ids)
    expect(started[3]).toMatchObject({ status: 'succeeded', attempt: 2, maxAttempts: 2 })
    const jobs = await Promise.all(ids.slice(0, 3).map((id) => kit.job(id)))
    expect(jobs.map((j) => [j.status, j.runAt, j.attempt, j.maxAttempts])).toEqual([
      ['scheduled', T0 + 90_000, 1, 2],
      ['scheduled', T0 + 120_000, 1, 2],
      ['scheduled', T0 + 45_000, 1, 2],
    ])
    // A cooldown ending now is not in force: only the three to come are listed, by key.
    expect(await kit.runner.cooldowns()).toEqual([
      { key: 'k0', until: T0 + 90_000 },
      { key: 'k1', until: T0 + 120_000 },
      { key: 'k2', until: T0 + 45_000 },
    ])
  })

  it("defaults the key to the job's bucket: the kind's name, its shared key, or <kind>@<scope>", async () => {
    const handler = (_p: unknown, job: { rateLimited(ms: number): never }) => job.rateLimited(MINUTE)
    const kit = await kitOf({
      register: (runner) => ({
        mail: runner.register('mail', { payload, handler }),
        plan: runner.register('plan', { payload, handler, rateLimit: { limit: 10, periodMs: MINUTE } }),
        summary: runner.register('summary', { payload, handler, rateLimit: { limit: 10, periodMs: MINUTE, key: 'provider:openai' } }),
        digest: runner.register('digest', { payload, handler, rateLimit: { limit: 10, periodMs: MINUTE, key: 'scope' } }),
      }),
    })
    const { mail, plan, summary, digest } = kit.kinds
    await Promise.all([mail.enqueue({ n: 0 }), plan.enqueue({ n: 0 }), summary.enqueue({ n: 0 }), digest.enqueue({ n: 0 }, { scope: 'h1' }), digest.enqueue({ n: 1 })])
    expect(await kit.drain()).toHaveLength(5)
    expect(await kit.runner.cooldowns()).toEqual(['digest@', 'digest@h1', 'mail', 'plan', 'provider:openai'].map((key) => ({ key, until: T0 + MINUTE })))
  })

  it('holds the other jobs of its key until the end: a drain ends without them, and moving the clock past it runs them', async () => {
    const kit = await kitOf({
      register: (runner) =>
        runner.register('mail', {
          payload,
          // The first job is told by its provider to wait a minute, once.
          handler: ({ n }, job) => (n === 0 && job.attempt === 1 ? job.rateLimited(MINUTE) : n),
        }),
    })
    const [a, b] = [await kit.kinds.enqueue({ n: 0 }), await kit.kinds.enqueue({ n: 1 })]
    // No DrainTimeoutError: a held job is not work to wait for.
    expect((await kit.drain()).map((j) => j.id)).toEqual([a])
    expect((await kit.job(b)).status).toBe('queued')
    kit.clock.advance(MINUTE - 1)
    expect(await kit.drain()).toEqual([])
    kit.clock.advance(1)
    expect((await kit.drain()).map((j) => [j.id, j.status]).sort()).toEqual([[a, 'succeeded'], [b, 'succeeded']].sort())
  })

  it('fails the job internal_error for a bad time, key or option, with a fixed reason and never the value, recording nothing', async () => {
    const logger = captureLogs()
    const bad: [unknown, unknown][] = [
      [Number.NaN, undefined],
      [-1, undefined],
      [Number.POSITIVE_INFINITY, undefined],
      [new Date('not a date'), undefined],
      ['5000', undefined],
      [null, undefined],
      [8.64e15 + 1, undefined],
      [1_000, { key: '' }],
      [1_000, { key: 'Q'.repeat(1025) }],
      [1_000, { key: 5 }],
      [1_000, { key: 'a\u0000b' }],
      [1_000, { token: 'T0KEN-VALUE' }],
      [1_000, 'key'],
      [1_000, null],
    ]
    const kit = await kitOf({
      runner: { logger },
      register: (runner) => runner.register('plan', { payload, handler: ({ n }, job) => job.rateLimited(bad[n]![0] as number, bad[n]![1] as never) }),
    })
    const ids = await Promise.all(bad.map((_, n) => kit.kinds.enqueue({ n })))
    await kit.drain()
    for (const id of ids) {
      expect(await kit.job(id)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 1 })
      expect(kit.thrown(id)[0]).toBeInstanceOf(JobRateLimited)
    }
    const reasons = logger.lines.filter((l) => l.message === 'job failed').map((l) => l.fields['reason'])
    expect(reasons).toEqual([
      ...Array(7).fill('rateLimited without a valid time'),
      ...Array(4).fill('rateLimited with an invalid key'),
      ...Array(3).fill('rateLimited with unknown options'),
    ])
    expect(logger.text()).not.toMatch(/QQQQ|T0KEN|not a date/)
    expect(await kit.runner.cooldowns()).toEqual([])
  })

  it('records the cooldown with a cancel that came meanwhile, and this runner looks again at its end without a poll or a wake', async () => {
    const store = await sqliteBackend.store()
    stores.push(store)
    let now = T0
    const runner = new Runner({ driver: store.driver(), workers: 1, clock: () => now, logger: captureLogs() })
    const first = gate()
    const kind = runner.register('call', {
      payload,
      handler: async ({ n }, job) => {
        if (n !== 0) return n
        first.open()
        await aborted(job.signal)
        return job.rateLimited(100)
      },
    })
    const done = track(runner)
    try {
      const a = await kind.enqueue({ n: 0 })
      await runner.start()
      await first.promise
      const b = await kind.enqueue({ n: 1 })
      expect(await runner.cancel(a)).toBe('requested')
      await done.ends([a])
      expect((await runner.get(a)).status).toBe('cancelled')
      expect(await runner.cooldowns()).toEqual([{ key: 'call', until: T0 + 100 }])
      expect((await runner.get(b)).status).toBe('queued')
      // Nothing is due and the fallback poll is an hour away: only the cooldown's own timer finds b.
      now += 100
      await done.ends([b])
      expect((await runner.get(b)).status).toBe('succeeded')
      expect(await runner.cooldowns()).toEqual([])
    } finally {
      done.stop()
      await runner.close()
    }
  })
})

describe('runner.clearCooldown and runner.cooldowns', () => {
  it('ends a cooldown at once, true only when one was recorded; the jobs it held run', async () => {
    const kit = await kitOf({
      register: (runner) => runner.register('mail', { payload, handler: ({ n }, job) => (n === 0 && job.attempt === 1 ? job.rateLimited(MINUTE) : n) }),
    })
    const a = await kit.kinds.enqueue({ n: 0 })
    await kit.drain()
    const b = await kit.kinds.enqueue({ n: 1 })
    expect(await kit.drain()).toEqual([])
    expect(await kit.runner.cooldowns()).toEqual([{ key: 'mail', until: T0 + MINUTE }])
    expect(await kit.runner.clearCooldown('mail')).toBe(true)
    expect(await kit.runner.clearCooldown('mail')).toBe(false)
    expect(await kit.runner.clearCooldown('k'.repeat(1024))).toBe(false)
    expect(await kit.runner.cooldowns()).toEqual([])
    expect((await kit.drain()).map((j) => [j.id, j.status])).toEqual([[b, 'succeeded']])
    // The snoozed job itself still waits for its due time.
    expect((await kit.job(a)).status).toBe('scheduled')
  })

  it('refuses a key that is not a non-empty string of at most 1024 characters', async () => {
    const kit = await kitOf({})
    for (const key of ['', 'k'.repeat(1025), 5, null, undefined, 'a\u0000b']) {
      await expect(kit.runner.clearCooldown(key as string), String(key)).rejects.toThrow(InvalidArgumentError)
    }
    await expect(kit.runner.clearCooldown('')).rejects.toThrow(/clearCooldown: key must be a non-empty string of at most 1024 characters/)
  })
})

describe('runner.rateLimits', () => {
  it('reports each bucket of the kinds registered here (handled or not): use in the window, reset, the scopes of a per-scope limit, cooldowns', async () => {
    const seen: number[] = []
    const kit = await kitOf({
      register: (runner) => {
        const handler = ({ n }: { n: number }, job: { readonly attempt: number; rateLimited(ms: number): never }) => {
          seen.push(n)
          return n === 13 && job.attempt === 1 ? job.rateLimited(30_000) : n
        }
        // A kind this runner only enqueues is reported too.
        runner.register(defineKind('report', { payload, rateLimit: { limit: 5, periodMs: 1_000 } }))
        return {
          plan: runner.register('plan', { payload, handler, rateLimit: { limit: 2, periodMs: MINUTE } }),
          summary: runner.register('summary', { payload, handler, rateLimit: { limit: 3, periodMs: 10_000, key: 'provider:openai' } }),
          image: runner.register('image', { payload, handler, rateLimit: { limit: 3, periodMs: 10_000, key: 'provider:openai' } }),
          digest: runner.register('digest', { payload, handler, rateLimit: { limit: 1, periodMs: MINUTE, key: 'scope' } }),
          mail: runner.register('mail', { payload, handler }),
        }
      },
    })
    const { plan, summary, image, digest, mail } = kit.kinds
    await plan.enqueueMany([{ n: 0 }, { n: 1 }, { n: 2 }])
    await summary.enqueueMany([{ n: 10 }, { n: 11 }])
    await image.enqueueMany([{ n: 12 }, { n: 13 }])
    await digest.enqueueMany([{ n: 20 }, { n: 21 }], { scope: 'h1' })
    await digest.enqueue({ n: 22 }, { scope: 'h2' })
    await mail.enqueue({ n: 30 })
    // Each window lets its limit start; the rest stay queued, and the drain ends without them.
    await kit.drain()
    expect(seen.sort((x, y) => x - y)).toEqual([0, 1, 10, 11, 12, 20, 22, 30])
    expect(await kit.runner.rateLimits()).toEqual([
      {
        key: 'digest@*',
        kinds: ['digest'],
        limit: 1,
        periodMs: MINUTE,
        perScope: true,
        used: 1,
        resetAt: T0 + MINUTE,
        scopes: [
          { scope: 'h1', used: 1, resetAt: T0 + MINUTE },
          { scope: 'h2', used: 1, resetAt: T0 + MINUTE },
        ],
        cooldownUntil: null,
      },
      { key: 'plan', kinds: ['plan'], limit: 2, periodMs: MINUTE, perScope: false, used: 2, resetAt: T0 + MINUTE, cooldownUntil: null },
      { key: 'provider:openai', kinds: ['image', 'summary'], limit: 3, periodMs: 10_000, perScope: false, used: 3, resetAt: T0 + 10_000, cooldownUntil: null },
      { key: 'report', kinds: ['report'], limit: 5, periodMs: 1_000, perScope: false, used: 0, resetAt: null, cooldownUntil: null },
    ])
    // Past the shared window: the fourth provider job starts, and its provider says to wait 30 s.
    kit.clock.advance(10_001)
    await kit.drain()
    expect(seen).toContain(13)
    const provider = (await kit.runner.rateLimits()).find((s) => s.key === 'provider:openai')
    expect(provider).toEqual({ key: 'provider:openai', kinds: ['image', 'summary'], limit: 3, periodMs: 10_000, perScope: false, used: 1, resetAt: T0 + 20_001, cooldownUntil: T0 + 40_001 })
    expect(seen).not.toContain(2)
    expect(seen).not.toContain(21)
    // Past the minute (and the provider's 30 s): the held plan, h1's second digest, and the rate-limited job again.
    kit.clock.set(T0 + MINUTE + 1)
    await kit.drain()
    expect(seen.filter((n) => n === 2 || n === 21 || n === 13).sort((x, y) => x - y)).toEqual([2, 13, 13, 21])
    expect(await kit.jobs({ status: ['queued', 'scheduled', 'running'] })).toEqual([])
  })

  it('is empty for a runner without rate limits', async () => {
    const kit = await kitOf({ register: (runner) => runner.register('mail', { payload, handler: () => 1 }) })
    expect(await kit.runner.rateLimits()).toEqual([])
  })

  it('a drain with advance moves the clock to each window that lets a held job start: no window ever has more than its limit', async () => {
    const starts: number[] = []
    const kit = await kitOf({
      register: (runner) =>
        runner.register('plan', {
          payload,
          rateLimit: { limit: 2, periodMs: MINUTE },
          handler: () => {
            starts.push(kit.clock.now())
          },
        }),
    })
    await kit.kinds.enqueueMany([0, 1, 2, 3, 4].map((n) => ({ n })))
    expect(await kit.drain({ advance: true })).toHaveLength(5)
    // A claim counts in the window (now - periodMs, now]: the third starts as the first two leave it, a period later.
    expect(starts).toEqual([T0, T0, T0 + MINUTE, T0 + MINUTE, T0 + 2 * MINUTE])
  })
})

describe('runner.activity', () => {
  it('counts jobs finished per minute by status from the start of the minute `minutes` ago, and queued now by kind, for a scope or all', async () => {
    const kit = await kitOf({
      register: (runner) => ({
        mail: runner.register('mail', { payload, failures: ['bounced'], handler: ({ n }, job) => (n === 1 ? job.fail('bounced') : n) }),
        // A producer-only kind: queued, never run here.
        report: runner.register(defineKind('report', { payload })),
      }),
    })
    const { mail, report } = kit.kinds
    await mail.enqueue({ n: 0 }, { scope: 'h1' })
    await mail.enqueue({ n: 1 }, { scope: 'h2' })
    await kit.drain()
    kit.clock.advance(MINUTE)
    await mail.enqueue({ n: 2 }, { scope: 'h1' })
    await kit.drain()
    await kit.runner.cancel(await mail.enqueue({ n: 3 }))
    await mail.enqueue({ n: 4 }, { scope: 'h1' })
    await mail.enqueue({ n: 5 })
    await report.enqueue({ n: 6 })
    const m0 = T0 - 30_000
    const m1 = m0 + MINUTE
    expect(await kit.runner.activity()).toEqual({
      since: m1 - 60 * MINUTE,
      minutes: 60,
      finished: [
        { minute: m0, status: 'succeeded', count: 1 },
        { minute: m0, status: 'failed', count: 1 },
        { minute: m1, status: 'succeeded', count: 1 },
        { minute: m1, status: 'cancelled', count: 1 },
      ],
      queued: [
        { kind: 'mail', count: 2 },
        { kind: 'report', count: 1 },
      ],
    })
    expect(await kit.runner.activity({ minutes: 1, scope: 'h1' })).toEqual({
      since: m0,
      minutes: 1,
      finished: [
        { minute: m0, status: 'succeeded', count: 1 },
        { minute: m1, status: 'succeeded', count: 1 },
      ],
      queued: [{ kind: 'mail', count: 1 }],
    })
    expect(await kit.runner.activity({ scope: null })).toMatchObject({
      finished: [{ minute: m1, status: 'cancelled', count: 1 }],
      queued: [
        { kind: 'mail', count: 1 },
        { kind: 'report', count: 1 },
      ],
    })
    // An hour on, the first minute has left a window of one minute.
    kit.clock.advance(60 * MINUTE)
    expect(await kit.runner.activity({ minutes: 1 })).toMatchObject({ since: m1 + 59 * MINUTE, finished: [] })
  })

  it('refuses minutes outside 1 to 1440, a scope that is not a string or null, and unknown options', async () => {
    const kit = await kitOf({})
    for (const minutes of [0, 1441, 1.5, '60', Number.NaN, null]) {
      await expect(kit.runner.activity({ minutes: minutes as number }), String(minutes)).rejects.toThrow(/activity: minutes must be an integer from 1 to 1440/)
    }
    await expect(kit.runner.activity({ scope: 5 as never })).rejects.toThrow(/activity: scope must be a string or null/)
    await expect(kit.runner.activity({ hours: 1 } as never)).rejects.toThrow(/activity: unknown option "hours"/)
    await expect(kit.runner.activity({ minutes: 1440 })).resolves.toMatchObject({ minutes: 1440 })
  })
})

describe('fair kinds', () => {
  it('every enqueue path asks a position for a fair kind’s jobs, and none for another kind’s', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-fair-'))
    dirs.push(dir)
    const fair = new Map<string, boolean | undefined>()
    const record = (jobs: readonly NewJob[]) => {
      for (const job of jobs) fair.set(`${job.kind}:${JSON.parse(job.payload).n}`, job.fair)
    }
    const real = sqlite({ path: join(dir, 'jobs.db'), pollIntervalMs: 3_600_000 })
    const driver = new Proxy(real, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target) as unknown
        if (typeof value !== 'function') return value
        const fn = (value as (...args: unknown[]) => unknown).bind(target)
        if (prop === 'jobInsertMany' || prop === 'jobInsertTx' || prop === 'scheduleAdvance') {
          return (params: { jobs: readonly NewJob[] }) => {
            record(params.jobs)
            return fn(params)
          }
        }
        return fn
      },
    })
    const kit = await kitOf({
      driver,
      register: (runner) => ({
        lane: runner.register('lane', { payload, fairness: 'scope', handler: () => 1 }),
        plain: runner.register('plain', { payload, handler: () => 1 }),
      }),
    })
    const { lane, plain } = kit.kinds
    kit.runner.schedule('tick', lane, { cron: '* * * * *', payload: { n: 7 } })
    await lane.enqueue({ n: 1 }, { scope: 'h1' })
    await lane.enqueueMany([{ n: 2 }])
    lane.enqueueTx(kit.database as SqliteDatabase, { n: 3 })
    lane.enqueueManyTx(kit.database as SqliteDatabase, [{ n: 4 }])
    await kit.runner.enqueue('lane', { n: 5 })
    await kit.runner.enqueueMany([lane.job({ n: 6 }), plain.job({ n: 1 })])
    await plain.enqueue({ n: 2 })
    await kit.drain()
    kit.clock.advance(MINUTE)
    await kit.drain()
    expect(Object.fromEntries(fair)).toEqual({
      'lane:1': true,
      'lane:2': true,
      'lane:3': true,
      'lane:4': true,
      'lane:5': true,
      'lane:6': true,
      'lane:7': true,
      'plain:1': false,
      'plain:2': false,
    })
  })
})

describe('the worker pool looks again for jobs a rate limit held', () => {
  it('starts a held job once its window reopens, without a poll, a wake or a write', async () => {
    const store = await sqliteBackend.store()
    stores.push(store)
    let now = T0
    const runner = new Runner({ driver: store.driver(), workers: 2, clock: () => now, logger: captureLogs() })
    const kind = runner.register('call', { payload, rateLimit: { limit: 2, periodMs: 50 }, handler: ({ n }) => n })
    const done = track(runner)
    try {
      const ids = await kind.enqueueMany([{ n: 0 }, { n: 1 }, { n: 2 }])
      await runner.start()
      await done.ends(ids.slice(0, 2))
      expect((await runner.get(ids[2]!)).status).toBe('queued')
      // The fallback poll is an hour away and nothing is scheduled: only the pool's look again finds it.
      now += 51
      await done.ends(ids)
      expect(done.started.slice(0, 2).sort()).toEqual(ids.slice(0, 2).sort())
      expect(done.started[2]).toBe(ids[2])
    } finally {
      done.stop()
      await runner.close()
    }
  })
})
