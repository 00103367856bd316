import { expect, it } from 'vitest'
import type { JobContext } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload as payload, harness } from '../support/harness.js'
import { settled as settledOn, startRows } from '../support/rates.js'
import { gate, track, until as untilJob } from '../support/wait.js'

/**
 * A provider's cooldown (README, "Rate limits"): `job.rateLimited(until)`
 * sends its job back due at `until` without using an attempt, and pauses
 * its key for every runner on the database until then: no claim takes a
 * job whose bucket is the key before it ends. Time is the runners'
 * injected clock; the oracle is the store (statuses, attempts,
 * jobs.started_at), never a wait.
 */

/** Behind real time, and past 1e11 so an epoch number reads as a time, not a delay. */
const T0 = Date.UTC(2020, 0, 1)
const range = (n: number) => Array.from({ length: n }, (_, i) => i)
type Ctx = JobContext<unknown>

describeEachBackend('cooldowns', (backend) => {
  const h = harness(backend)

  let runners = 0
  const setup = (workers = 2) => {
    const clock = { now: T0 }
    const n = ++runners
    const runner = h.runner({ workers, clock: () => clock.now, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const done = track(runner)
    // A sentinel kind of this runner alone, for settled().
    const free = runner.register(`free_${n}`, { payload, handler: () => undefined })
    return { clock, runner, done, free, settled: () => settledOn(runner, done, free) }
  }

  /** A handler whose job `n === 0` ends its first attempt with `job.rateLimited(...args)`; the others return. */
  const limitingFirst =
    (...args: Parameters<Ctx['rateLimited']>) =>
    (p: { n: number }, job: Ctx) => {
      if (p.n === 0 && job.attempt === 1) return job.rateLimited(...args)
      return undefined
    }

  const statusOf = async (s: ReturnType<typeof setup>, ids: readonly string[]) => Promise.all(ids.map(async (id) => (await s.runner.get(id)).status))

  const cases = [
    { form: 'a Date', arg: () => new Date(T0 + 30_000) },
    { form: 'epoch ms', arg: () => T0 + 30_000 },
    { form: 'a delay from the clock', arg: () => 30_000 },
  ]
  for (const { form, arg } of cases) {
    it(`job.rateLimited(${form}): the job goes back due then with its attempt given back, and no job of its key starts before then; all start once the clock reaches it`, async () => {
      const s = setup()
      const until = T0 + 30_000
      const rated = s.runner.register('call_model', { payload, rateLimit: { limit: 100, periodMs: 1_000 }, handler: limitingFirst(arg()) })
      const first = await rated.enqueue({ n: 0 })
      await s.runner.start()
      await s.done.ends([first])
      expect(await s.runner.get(first)).toMatchObject({ status: 'scheduled', runAt: until, attempt: 1, maxAttempts: 2, error: null })
      expect(await s.runner.cooldowns()).toEqual([{ key: 'call_model', until }])
      expect((await s.runner.rateLimits()).find((l) => l.key === 'call_model')).toMatchObject({ cooldownUntil: until })

      const rest = await rated.enqueueMany(range(3).map((n) => ({ n: n + 1 })))
      await s.settled()
      s.clock.now = until - 1
      await s.settled()
      expect(await statusOf(s, rest)).toEqual(['queued', 'queued', 'queued'])
      for (const id of rest) expect((await s.runner.get(id)).attempt).toBe(0)

      s.clock.now = until
      await s.runner.wake()
      await s.done.ends(rest)
      await untilJob(s.runner, first, (j) => j.status === 'succeeded')
      expect(await s.runner.get(first)).toMatchObject({ attempt: 2, maxAttempts: 2 })
      const rows = await startRows(h.store, s.runner.driver, ['call_model'])
      for (const row of rows) expect(row).toMatchObject({ status: 'succeeded', startedAt: until })
      expect(await s.runner.cooldowns()).toEqual([])
    })
  }

  it('a cooldown set through one runner holds in another runner on the same database', async () => {
    const a = setup()
    const b = setup()
    const handler = limitingFirst(10_000)
    const rated = a.runner.register('call_model', { payload, rateLimit: { limit: 100, periodMs: 1_000 }, handler })
    b.runner.register('call_model', { payload, rateLimit: { limit: 100, periodMs: 1_000 }, handler })
    const first = await rated.enqueue({ n: 0 })
    await a.runner.start()
    await a.done.ends([first])
    await b.runner.start()
    expect(await b.runner.cooldowns()).toEqual([{ key: 'call_model', until: T0 + 10_000 }])
    const rest = await rated.enqueueMany(range(3).map((n) => ({ n: n + 1 })))
    for (let i = 0; i < 3; i++) {
      await a.settled()
      await b.settled()
    }
    expect(await statusOf(a, rest)).toEqual(['queued', 'queued', 'queued'])
    b.clock.now = T0 + 10_000
    await b.runner.wake()
    await b.done.ends(rest)
  })

  it('clearCooldown(key) ends it at once: the held jobs start with the clock unchanged; the limited job itself keeps its due time; a second clear answers false', async () => {
    const s = setup()
    const rated = s.runner.register('call_model', { payload, rateLimit: { limit: 100, periodMs: 1_000 }, handler: limitingFirst(60_000) })
    const first = await rated.enqueue({ n: 0 })
    await s.runner.start()
    await s.done.ends([first])
    const rest = await rated.enqueueMany(range(2).map((n) => ({ n: n + 1 })))
    await s.settled()
    expect(await statusOf(s, rest)).toEqual(['queued', 'queued'])

    expect(await s.runner.clearCooldown('call_model')).toBe(true)
    expect(await s.runner.cooldowns()).toEqual([])
    expect((await s.runner.rateLimits()).find((l) => l.key === 'call_model')).toMatchObject({ cooldownUntil: null })
    await s.runner.wake()
    await s.done.ends(rest)
    expect(await s.runner.get(first)).toMatchObject({ status: 'scheduled', runAt: T0 + 60_000 })
    expect(await s.runner.clearCooldown('call_model')).toBe(false)
    expect(await s.runner.clearCooldown('never_set')).toBe(false)
  })

  it('a cooldown from a kind without a rate rule holds that kind only (its key is the kind name); other kinds run meanwhile', async () => {
    const s = setup()
    const a = s.runner.register('plain_a', { payload, handler: limitingFirst(10_000) })
    const b = s.runner.register('plain_b', { payload, handler: () => undefined })
    const first = await a.enqueue({ n: 0 })
    await s.runner.start()
    await s.done.ends([first])
    expect(await s.runner.cooldowns()).toEqual([{ key: 'plain_a', until: T0 + 10_000 }])
    const held = await a.enqueueMany(range(2).map((n) => ({ n: n + 1 })))
    const others = await b.enqueueMany(range(3).map((n) => ({ n })))
    await s.done.ends(others)
    await s.settled()
    expect(await statusOf(s, held)).toEqual(['queued', 'queued'])
    s.clock.now = T0 + 10_000
    await s.runner.wake()
    await s.done.ends(held)
  })

  it("rateLimited with a key: that key's kinds are held (a shared bucket: every kind drawing on it), the calling kind's own key is not", async () => {
    const s = setup(4)
    const probe = s.runner.register('probe', { payload, handler: (p, job) => (p.n === 0 && job.attempt === 1 ? job.rateLimited(5_000, { key: 'provider:openai' }) : undefined) })
    const shared = { limit: 100, periodMs: 1_000, key: 'provider:openai' }
    const plan = s.runner.register('plan_meals', { payload, rateLimit: shared, handler: () => undefined })
    const shop = s.runner.register('shop_list', { payload, rateLimit: shared, handler: () => undefined })
    const first = await probe.enqueue({ n: 0 })
    await s.runner.start()
    await s.done.ends([first])
    expect(await s.runner.cooldowns()).toEqual([{ key: 'provider:openai', until: T0 + 5_000 }])
    expect((await s.runner.rateLimits()).find((l) => l.key === 'provider:openai')).toMatchObject({ kinds: ['plan_meals', 'shop_list'], cooldownUntil: T0 + 5_000 })
    const held = [...(await plan.enqueueMany([{ n: 1 }, { n: 2 }])), ...(await shop.enqueueMany([{ n: 1 }]))]
    const probes = await probe.enqueueMany([{ n: 1 }, { n: 2 }])
    await s.done.ends(probes)
    await s.settled()
    expect(await statusOf(s, held)).toEqual(['queued', 'queued', 'queued'])
    s.clock.now = T0 + 5_000
    await s.runner.wake()
    await s.done.ends(held)
  })

  it("key 'scope': the default cooldown key is the job's household bucket; other households run meanwhile", async () => {
    const s = setup(4)
    const rule = { limit: 100, periodMs: 1_000, key: 'scope' }
    const imports = s.runner.register('import_recipe', { payload, rateLimit: rule, handler: limitingFirst(5_000) })
    const first = await imports.enqueue({ n: 0 }, { scope: 'h1' })
    await s.runner.start()
    await s.done.ends([first])
    expect(await s.runner.cooldowns()).toEqual([{ key: 'import_recipe@h1', until: T0 + 5_000 }])
    const held = await imports.enqueueMany([{ n: 1 }, { n: 2 }], { scope: 'h1' })
    const others = [...(await imports.enqueueMany([{ n: 1 }, { n: 2 }], { scope: 'h2' })), ...(await imports.enqueueMany([{ n: 3 }]))]
    await s.done.ends(others)
    await s.settled()
    expect(await statusOf(s, held)).toEqual(['queued', 'queued'])
    s.clock.now = T0 + 5_000
    await s.runner.wake()
    await s.done.ends(held)
  })

  it('a cooldown is extended by a later end, never shortened by an earlier one', async () => {
    const s = setup(2)
    const go = gate()
    const ends = [T0 + 30_000, T0 + 10_000]
    const rated = s.runner.register('call_model', {
      payload,
      rateLimit: { limit: 100, periodMs: 1_000 },
      handler: async (p, job) => {
        await go.promise
        if (job.attempt === 1) return job.rateLimited(ends[p.n]!)
        return undefined
      },
    })
    const ids = await rated.enqueueMany([{ n: 0 }, { n: 1 }])
    await s.runner.start()
    await s.done.starts(2)
    go.open()
    await s.done.ends(ids)
    expect(await s.runner.cooldowns()).toEqual([{ key: 'call_model', until: T0 + 30_000 }])
    expect(await s.runner.get(ids[1]!)).toMatchObject({ status: 'scheduled', runAt: T0 + 10_000 })
  })

  it('rateLimited with no valid time (NaN, negative, an invalid Date) fails the job internal_error and sets no cooldown', async () => {
    const s = setup(1)
    const bad: unknown[] = [Number.NaN, -1, new Date('not a date')]
    const rated = s.runner.register('call_model', {
      payload,
      rateLimit: { limit: 100, periodMs: 1_000 },
      handler: (p, job) => job.rateLimited(bad[p.n] as number),
    })
    const ids = await rated.enqueueMany(bad.map((_, n) => ({ n })))
    await s.runner.start()
    await s.done.ends(ids)
    for (const id of ids) expect(await s.runner.get(id)).toMatchObject({ status: 'failed', error: 'internal_error' })
    expect(await s.runner.cooldowns()).toEqual([])
  })
})
