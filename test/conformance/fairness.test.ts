import { expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload as payload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

/**
 * Fair claims (README, "Fair claims across households"): a kind with
 * `fairness: 'scope'` has its queued jobs claimed in turn across scopes,
 * within each priority, so a household with one job waits about one
 * claim round however long another's backlog is. The oracle is the order
 * in which handlers start: with one worker, one claim per start; with
 * more, which jobs each claim round took (a claim's jobs may start in any
 * order), with handlers the test holds so each round is known.
 */

const range = (n: number) => Array.from({ length: n }, (_, i) => i)

describeEachBackend('fair claims across scopes', (backend) => {
  const h = harness(backend)

  it('A has 200 queued and running, B then enqueues 1: B starts within the first claim round after, among the next `workers` starts', async () => {
    const workers = 3
    const runner = h.runner({ workers, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const hold = gate()
    const imports = runner.register('import_recipe', { payload, fairness: 'scope', handler: async (p) => void (p.n >= 0 ? await hold.promise : undefined) })
    const done = track(runner)
    const backlog = await imports.enqueueMany(range(200).map((n) => ({ n })), { scope: 'A' })
    await runner.start()
    // Every worker holds one of A's jobs; 197 wait.
    await done.starts(workers)
    const b = await imports.enqueue({ n: -1 }, { scope: 'B' })
    const before = done.started.length
    expect(before).toBe(workers)
    hold.open()
    await done.ends([b])
    const after = done.started.slice(before)
    expect(after.indexOf(b)).toBeGreaterThanOrEqual(0)
    expect(after.indexOf(b)).toBeLessThan(workers)
    await done.ends(backlog)
  })

  it('three households queued before any claim are served in turn: each round of three starts takes one job of each, while all three have work', async () => {
    const runner = h.runner({ workers: 1, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const scopeOf = new Map<string, string>()
    const imports = runner.register('import_recipe', { payload, fairness: 'scope', handler: () => undefined })
    for (const [scope, n] of [['A', 20], ['B', 5], ['C', 5]] as const) {
      for (const id of await imports.enqueueMany(range(n).map((i) => ({ n: i })), { scope })) scopeOf.set(id, scope)
    }
    const done = track(runner)
    await runner.start()
    await done.ends([...scopeOf.keys()])
    const order = done.started.map((id) => scopeOf.get(id))
    for (let round = 0; round < 5; round++) expect(order.slice(3 * round, 3 * round + 3).sort()).toEqual(['A', 'B', 'C'])
    expect(order.slice(15)).toEqual(Array.from({ length: 15 }, () => 'A'))
  })

  it('priority comes first: a higher-priority job of the big backlog starts before a smaller household; within a priority, turns', async () => {
    const runner = h.runner({ workers: 1, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const imports = runner.register('import_recipe', { payload, fairness: 'scope', handler: () => undefined })
    const backlog = await imports.enqueueMany(range(10).map((n) => ({ n })), { scope: 'A' })
    const urgent = await imports.enqueue({ n: 99 }, { scope: 'A', priority: 5 })
    const small = await imports.enqueue({ n: 0 }, { scope: 'B' })
    const done = track(runner)
    await runner.start()
    await done.ends([...backlog, urgent, small])
    expect(done.started[0]).toBe(urgent)
    expect(done.started.indexOf(small)).toBeLessThanOrEqual(2)
  })

  it('unscoped jobs are a lane of their own', async () => {
    const runner = h.runner({ workers: 1, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const imports = runner.register('import_recipe', { payload, fairness: 'scope', handler: () => undefined })
    const backlog = await imports.enqueueMany(range(10).map((n) => ({ n })), { scope: 'A' })
    const unscoped = await imports.enqueue({ n: 0 })
    const done = track(runner)
    await runner.start()
    await done.ends([...backlog, unscoped])
    expect(done.started.indexOf(unscoped)).toBeLessThanOrEqual(1)
  })

  it("a job enqueued in the user's own transaction takes its turn as well", async () => {
    const workers = 2
    const runner = h.runner({ workers, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const hold = gate()
    const imports = runner.register('import_recipe', { payload, fairness: 'scope', handler: async (p) => void (p.n >= 0 ? await hold.promise : undefined) })
    const done = track(runner)
    const backlog = await imports.enqueueMany(range(50).map((n) => ({ n })), { scope: 'A' })
    await runner.start()
    await done.starts(workers)
    const enqueued: unknown[] = []
    // Returned, so a backend whose enqueueTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => enqueued[enqueued.push(imports.enqueueTx(tx as never, { n: -1 }, { scope: 'B' })) - 1], 'commit')
    const b = (await enqueued[0]) as string
    const before = done.started.length
    hold.open()
    runner.wake()
    await done.ends([b])
    const position = done.started.slice(before).indexOf(b)
    expect(position).toBeGreaterThanOrEqual(0)
    expect(position).toBeLessThan(workers)
    await done.ends(backlog)
  })

  it('a fair kind with scopeConcurrency keeps both rules: never more than the cap of a household running, and households in turn', async () => {
    const runner = h.runner({ workers: 3, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    const running = new Map<string, number>()
    let most = 0
    const scopeOf = new Map<string, string>()
    const imports = runner.register('import_recipe', {
      payload,
      fairness: 'scope',
      scopeConcurrency: 2,
      handler: async (_p, job) => {
        const scope = scopeOf.get(job.id)!
        running.set(scope, (running.get(scope) ?? 0) + 1)
        most = Math.max(most, running.get(scope)!)
        for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve))
        running.set(scope, running.get(scope)! - 1)
      },
    })
    for (const [scope, n] of [['A', 12], ['B', 2], ['C', 2]] as const) {
      for (const id of await imports.enqueueMany(range(n).map((i) => ({ n: i })), { scope })) scopeOf.set(id, scope)
    }
    const done = track(runner)
    await runner.start()
    await done.ends([...scopeOf.keys()])
    // Three workers, and A alone left at the end: the cap of 2 is what holds A back then.
    expect(most).toBeLessThanOrEqual(2)
    // The first claim (three idle workers) takes one job of each household in turn; oldest first under the cap would take two of A's.
    expect(done.started.slice(0, 3).map((id) => scopeOf.get(id)).sort()).toEqual(['A', 'B', 'C'])
  })
})
