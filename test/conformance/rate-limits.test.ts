import { expect, it } from 'vitest'
import { defineKind, type Kind } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload as payload, harness } from '../support/harness.js'
import { overfullWindows, settled as settledOn, startRows, tally } from '../support/rates.js'
import { track } from '../support/wait.js'

/**
 * Rate limits (README, "Rate limits"): at most `limit` starts per
 * `periodMs` in each bucket, counted in the claim over every runner on
 * the database, as a sliding window: a claim at `now` counts the claims
 * after `now - periodMs`. Time is the runners' injected clock only;
 * the oracle is jobs.started_at, the `now` of the claim that started each
 * job, read from the store.
 */

/** Behind real time (PostgreSQL follows a test's clock only while it is behind its own), and past 1e11 so epoch numbers read as times. */
const T0 = Date.UTC(2020, 0, 1)
const range = (n: number) => Array.from({ length: n }, (_, i) => i)

describeEachBackend('rate limits', (backend) => {
  const h = harness(backend)

  /** A runner on the test clock whose driver never polls: only enqueues and wake() make it claim. */
  const setup = (workers: number) => {
    const clock = { now: T0 }
    const runner = h.runner({ workers, clock: () => clock.now, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const done = track(runner)
    return { clock, runner, done }
  }
  type Setup = ReturnType<typeof setup>

  const settled = (s: Setup, free: Kind<{ n: number }>) => settledOn(s.runner, s.done, free)

  /** Moves the clock and wakes the runner (its scheduler and workers look again). */
  const at = async (s: Setup, now: number) => {
    s.clock.now = now
    await s.runner.wake()
  }

  const starts = async (s: Setup, kinds: readonly string[]) => (await startRows(h.store, s.runner.driver, kinds)).filter((r) => r.startedAt !== null)

  it('at most limit starts per window: jobs over the limit stay queued with attempt 0 while another kind runs; a claim counts until periodMs after it', async () => {
    const s = setup(4)
    const rated = s.runner.register('call_model', { payload, rateLimit: { limit: 3, periodMs: 1_000 }, handler: () => undefined })
    const free = s.runner.register('free', { payload, handler: () => undefined })
    const ids = await rated.enqueueMany(range(8).map((n) => ({ n })))
    await s.runner.start()
    await s.done.ends(ids.slice(0, 3))
    await settled(s, free)
    // The first three by insertion order; the rest wait, unclaimed, while the free kind's job ran past them.
    expect(tally((await starts(s, ['call_model'])).map((r) => r.startedAt))).toEqual({ [T0]: 3 })
    for (const id of ids.slice(3)) expect(await s.runner.get(id)).toMatchObject({ status: 'queued', attempt: 0 })
    expect(s.done.started.filter((id) => ids.includes(id)).sort()).toEqual(ids.slice(0, 3).sort())

    // Still inside the window: the claims at T0 count until T0 + periodMs.
    await at(s, T0 + 999)
    await settled(s, free)
    expect(await starts(s, ['call_model'])).toHaveLength(3)
    expect((await s.runner.rateLimits()).find((l) => l.key === 'call_model')).toMatchObject({ used: 3, resetAt: T0 + 1_000 })

    await at(s, T0 + 1_000)
    await s.done.ends(ids.slice(3, 6))
    await settled(s, free)
    await at(s, T0 + 2_000)
    await s.done.ends(ids)
    const rows = await starts(s, ['call_model'])
    expect(tally(rows.map((r) => r.startedAt))).toEqual({ [T0]: 3, [T0 + 1_000]: 3, [T0 + 2_000]: 2 })
    expect(rows.every((r) => r.status === 'succeeded' && r.attempt === 1)).toBe(true)
    expect(overfullWindows(rows.map((r) => r.startedAt!), 3, 1_000)).toEqual([])
  })

  it('two runners on one database share the limit: what one claimed counts in the other', async () => {
    const a = setup(4)
    const b = setup(4)
    const handler = () => undefined
    const rule = { limit: 2, periodMs: 1_000 }
    const rated = a.runner.register('call_model', { payload, rateLimit: rule, handler })
    b.runner.register('call_model', { payload, rateLimit: rule, handler })
    // A sentinel kind each: a runner's sentinel must run on that runner.
    const freeA = a.runner.register('free_a', { payload, handler })
    const freeB = b.runner.register('free_b', { payload, handler })
    await a.runner.start()
    await b.runner.start()
    const ids = await rated.enqueueMany(range(5).map((n) => ({ n })))
    await a.runner.wake()
    await b.runner.wake()
    for (let i = 0; i < 5; i++) {
      await settled(a, freeA)
      await settled(b, freeB)
    }
    const rows = await starts(a, ['call_model'])
    expect(tally(rows.map((r) => r.startedAt))).toEqual({ [T0]: 2 })
    expect(a.done.started.filter((id) => ids.includes(id)).length + b.done.started.filter((id) => ids.includes(id)).length).toBe(2)
  })

  it('a key shared by two kinds is one budget across both; a kind with a key of its own is not held back by it', async () => {
    const s = setup(8)
    const shared = { limit: 4, periodMs: 1_000, key: 'provider:openai' }
    const plan = s.runner.register('plan_meals', { payload, rateLimit: shared, handler: () => undefined })
    const shop = s.runner.register('shop_list', { payload, rateLimit: shared, handler: () => undefined })
    const other = s.runner.register('translate', { payload, rateLimit: { limit: 1, periodMs: 1_000 }, handler: () => undefined })
    const free = s.runner.register('free', { payload, handler: () => undefined })
    const planIds = await plan.enqueueMany(range(3).map((n) => ({ n })))
    const shopIds = await shop.enqueueMany(range(3).map((n) => ({ n })))
    const otherIds = await other.enqueueMany(range(2).map((n) => ({ n })))
    await s.runner.start()
    await s.done.ends([...planIds, shopIds[0]!, otherIds[0]!])
    await settled(s, free)
    const first = await starts(s, ['plan_meals', 'shop_list'])
    expect(first.map((r) => r.id).sort()).toEqual([...planIds, shopIds[0]!].sort())
    expect(await starts(s, ['translate'])).toHaveLength(1)

    const limits = await s.runner.rateLimits()
    expect(limits.find((l) => l.key === 'provider:openai')).toMatchObject({
      kinds: ['plan_meals', 'shop_list'],
      limit: 4,
      periodMs: 1_000,
      perScope: false,
      used: 4,
      resetAt: T0 + 1_000,
      cooldownUntil: null,
    })
    expect(limits.find((l) => l.key === 'translate')).toMatchObject({ kinds: ['translate'], limit: 1, used: 1, resetAt: T0 + 1_000 })
    expect(limits.some((l) => l.key === 'free')).toBe(false)

    await at(s, T0 + 1_000)
    await s.done.ends([...shopIds, ...otherIds])
    const rows = await starts(s, ['plan_meals', 'shop_list'])
    expect(tally(rows.map((r) => r.startedAt))).toEqual({ [T0]: 4, [T0 + 1_000]: 2 })
    expect(overfullWindows(rows.map((r) => r.startedAt!), 4, 1_000)).toEqual([])
  })

  it("key 'scope': each household has its own budget, unscoped jobs one more; one household's spent budget holds back no other", async () => {
    const s = setup(10)
    const imports = s.runner.register('import_recipe', { payload, rateLimit: { limit: 2, periodMs: 1_000, key: 'scope' }, handler: () => undefined })
    const free = s.runner.register('free', { payload, handler: () => undefined })
    const byScope = new Map<string, string | null>()
    for (const scope of ['h1', 'h2', null]) {
      const ids = await imports.enqueueMany(range(3).map((n) => ({ n })), scope === null ? {} : { scope })
      for (const id of ids) byScope.set(id, scope)
    }
    await s.runner.start()
    for (let i = 0; i < 3; i++) await settled(s, free)
    const first = await starts(s, ['import_recipe'])
    const perScope = (rows: { scope: string | null }[]) => tally(rows.map((r) => r.scope ?? '-'))
    expect(perScope(first)).toEqual({ h1: 2, h2: 2, '-': 2 })
    for (const row of first) expect(row.startedAt).toBe(T0)
    for (const [id] of byScope) {
      if (!first.some((r) => r.id === id)) expect(await s.runner.get(id)).toMatchObject({ status: 'queued', attempt: 0 })
    }

    const limit = (await s.runner.rateLimits()).find((l) => l.key === 'import_recipe@*')
    expect(limit).toMatchObject({ kinds: ['import_recipe'], limit: 2, periodMs: 1_000, perScope: true, used: 2, resetAt: T0 + 1_000 })
    expect(limit?.scopes).toEqual(
      expect.arrayContaining([
        { scope: 'h1', used: 2, resetAt: T0 + 1_000 },
        { scope: 'h2', used: 2, resetAt: T0 + 1_000 },
      ]),
    )

    await at(s, T0 + 1_000)
    await s.done.ends([...byScope.keys()])
    const rows = await starts(s, ['import_recipe'])
    expect(perScope(rows.filter((r) => r.startedAt === T0 + 1_000))).toEqual({ h1: 1, h2: 1, '-': 1 })
    for (const scope of ['h1', 'h2', null]) {
      expect(overfullWindows(rows.filter((r) => r.scope === scope).map((r) => r.startedAt!), 2, 1_000)).toEqual([])
    }
  })

  it('a rate limit beside concurrency: both hold, and a job the cap holds back uses no start of the budget', async () => {
    const s = setup(4)
    let release!: () => void
    const hold = new Promise<void>((resolve) => (release = resolve))
    const rated = s.runner.register('call_model', { payload, rateLimit: { limit: 3, periodMs: 1_000 }, concurrency: 1, handler: () => hold })
    const free = s.runner.register('free', { payload, handler: () => undefined })
    const ids = await rated.enqueueMany(range(4).map((n) => ({ n })))
    await s.runner.start()
    await s.done.starts(1)
    await settled(s, free)
    expect(await starts(s, ['call_model'])).toHaveLength(1)
    expect((await s.runner.rateLimits()).find((l) => l.key === 'call_model')).toMatchObject({ used: 1 })
    release()
    // One at a time, each finish making room under the cap: two more in this window, then the budget is spent.
    await s.done.ends(ids.slice(0, 3))
    await settled(s, free)
    expect(tally((await starts(s, ['call_model'])).map((r) => r.startedAt))).toEqual({ [T0]: 3 })
    expect(await s.runner.get(ids[3]!)).toMatchObject({ status: 'queued', attempt: 0 })
    await at(s, T0 + 1_000)
    await s.done.ends(ids)
  })

  it('claims across a rated kind and others keep priority, then insertion order, while the bucket has room', async () => {
    const s = setup(1)
    const order: string[] = []
    const record = (name: string) => (p: { n: number }) => void order.push(`${name}${p.n}`)
    const rated = s.runner.register('call_model', { payload, rateLimit: { limit: 10, periodMs: 1_000 }, handler: record('r') })
    const plain = s.runner.register('plain', { payload, handler: record('p') })
    const ids = [await plain.enqueue({ n: 0 }), await rated.enqueue({ n: 0 }), await plain.enqueue({ n: 5 }, { priority: 5 }), await rated.enqueue({ n: 5 }, { priority: 5 })]
    ids.push(await plain.enqueue({ n: 1 }, { priority: 1 }))
    await s.runner.start()
    await s.done.ends(ids)
    expect(order).toEqual(['p5', 'r5', 'p1', 'p0', 'r0'])
  })

  it('rateLimits() lists every rate-limited kind registered, handled here or not, with nothing used before any claim', async () => {
    const producer = h.runner({ clock: () => T0 })
    producer.register('call_model', { payload, rateLimit: { limit: 3, periodMs: 1_000 }, handler: () => undefined })
    producer.register(defineKind('elsewhere', { payload, rateLimit: { limit: 7, periodMs: 60_000, key: 'scope' } }))
    expect(await producer.rateLimits()).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ key: 'call_model', kinds: ['call_model'], limit: 3, periodMs: 1_000, perScope: false, used: 0, resetAt: null, cooldownUntil: null }),
        expect.objectContaining({ key: 'elsewhere@*', kinds: ['elsewhere'], limit: 7, periodMs: 60_000, perScope: true, used: 0, resetAt: null, cooldownUntil: null }),
      ]),
    )
  })
})
