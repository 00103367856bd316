import { expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, RegistrationError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

const payload = z.strictObject({ n: z.number().int() })

/** Counts the jobs of each group running at once, at every start: the most ever seen is the oracle. */
function runningLedger() {
  const now = new Map<string, number>()
  const most = new Map<string, number>()
  return {
    enter(group: string) {
      const n = (now.get(group) ?? 0) + 1
      now.set(group, n)
      most.set(group, Math.max(most.get(group) ?? 0, n))
    },
    leave(group: string) {
      now.set(group, (now.get(group) ?? 1) - 1)
    },
    most: (group: string) => most.get(group) ?? 0,
  }
}

describeEachBackend('concurrency limits', (backend) => {
  const h = harness(backend)

  it('concurrency: never more jobs of the kind running than its limit, across two runners on one database, and all of them run', async () => {
    const ledger = runningLedger()
    const plan = defineKind('plan_week', { payload, concurrency: 2 })
    const runners = [h.runner({ workers: 4 }), h.runner({ workers: 4 })]
    for (const r of runners) {
      r.register(plan, async () => {
        ledger.enter('plan')
        // Long enough that both runners' claims overlap it: each yields to the event loop a few times.
        for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
        ledger.leave('plan')
      })
    }
    const ids = await h.runner().register(plan).enqueueMany(Array.from({ length: 30 }, (_, n) => ({ n })))
    for (const r of runners) await r.start()
    // Each runner finds what another's finishes free only by its own wakes: keep waking both until all are done.
    for (const id of ids) {
      for (;;) {
        const job = await runners[0]!.get(id)
        if (job.status === 'succeeded') break
        expect(['queued', 'running']).toContain(job.status)
        for (const r of runners) r.wake()
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    }
    expect(ledger.most('plan')).toBeLessThanOrEqual(2)
    expect(ledger.most('plan')).toBe(2)
  })

  it('scopeConcurrency: at most one job per household at a time, while households run side by side', async () => {
    const ledger = runningLedger()
    const plan = defineKind('plan_week', { payload, scopeConcurrency: 1 })
    const runner = h.runner({ workers: 6 })
    const release = gate()
    runner.register(plan, async (_p, job) => {
      const scope = scopes.get(job.id)!
      ledger.enter(scope)
      ledger.enter('all')
      await release.promise
      ledger.leave('all')
      ledger.leave(scope)
    })
    const scopes = new Map<string, string>()
    const handle = h.runner().register(plan)
    const ids: string[] = []
    for (const household of ['h1', 'h2', 'h3']) {
      for (let n = 0; n < 3; n++) {
        const id = await handle.enqueue({ n }, { scope: household })
        scopes.set(id, household)
        ids.push(id)
      }
    }
    const done = track(runner)
    await runner.start()
    // One per household starts: three in all, though six workers are idle.
    await done.starts(3)
    // Give a fourth every chance to start: more wakes, and a read round trip between them.
    for (let i = 0; i < 3; i++) {
      runner.wake()
      await runner.get(ids[0]!)
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(done.started).toHaveLength(3)
    expect(ledger.most('all')).toBe(3)
    release.open()
    await done.ends(ids)
    for (const household of ['h1', 'h2', 'h3']) expect(ledger.most(household)).toBe(1)
  })

  it('a limited kind never starves the others: its jobs over the limit wait while later jobs of another kind run', async () => {
    const runner = h.runner({ workers: 3 })
    const hold = gate()
    const limited = defineKind('limited', { payload, concurrency: 1 })
    const started: string[] = []
    runner.register(limited, async ({ n }) => {
      started.push(`limited-${n}`)
      await hold.promise
    })
    const free = runner.register('free', { payload, handler: ({ n }) => void started.push(`free-${n}`) })
    const producer = h.runner().register(limited)
    const limitedIds = await producer.enqueueMany([0, 1, 2, 3].map((n) => ({ n })))
    const freeIds = await free.enqueueMany([0, 1].map((n) => ({ n })))
    const done = track(runner)
    await runner.start()
    await done.ends(freeIds)
    expect(started.filter((s) => s.startsWith('limited'))).toEqual(['limited-0'])
    expect(started).toEqual(expect.arrayContaining(['free-0', 'free-1']))
    hold.open()
    await done.ends(limitedIds)
    expect(started.filter((s) => s.startsWith('limited'))).toEqual(['limited-0', 'limited-1', 'limited-2', 'limited-3'])
  })

  for (const withLimit of [false, true]) {
    it(`claims across kinds by priority, then insertion order (${withLimit ? 'beside' : 'without'} a limited kind)`, async () => {
      const runner = h.runner({ workers: 1 })
      const started: string[] = []
      const record = (name: string) => (p: { n: number }) => void started.push(`${name}${p.n}`)
      const a = runner.register('a', { payload, handler: record('a') })
      const b = runner.register('b', { payload, handler: record('b') })
      // A limit that never binds here: it only takes the claim through the limited path.
      const c = runner.register('c', { payload, ...(withLimit ? { concurrency: 5 } : {}), handler: record('c') })
      const ids = [
        await a.enqueue({ n: 0 }),
        await b.enqueue({ n: 5 }, { priority: 5 }),
        await c.enqueue({ n: 0 }),
        await a.enqueue({ n: 5 }, { priority: 5 }),
        await b.enqueue({ n: 0 }),
        await c.enqueue({ n: 9 }, { priority: 9 }),
      ]
      const done = track(runner)
      await runner.start()
      await done.ends(ids)
      expect(started).toEqual(['c9', 'b5', 'a5', 'a0', 'c0', 'b0'])
    })
  }

  it('a limited kind is not held back by a backlog of another kind: its older job starts in the first claim', async () => {
    const runner = h.runner({ workers: 3 })
    const hold = gate()
    const limited = defineKind('limited', { payload, concurrency: 1 })
    runner.register(limited, async () => void (await hold.promise))
    const free = runner.register('free', { payload, handler: async () => void (await hold.promise) })
    const limitedIds = await h.runner().register(limited).enqueueMany([0, 1].map((n) => ({ n })))
    const freeIds = await free.enqueueMany([0, 1, 2, 3, 4].map((n) => ({ n })))
    const done = track(runner)
    await runner.start()
    await done.starts(3)
    // Claimed by priority, then insertion order, across kinds: the oldest limited job and the two oldest free ones.
    expect(done.started).toEqual([limitedIds[0], freeIds[0], freeIds[1]])
    hold.open()
    await done.ends([...limitedIds, ...freeIds])
  })

  it('scopeConcurrency: a household with a backlog at the head of the queue does not hold back the next household', async () => {
    const runner = h.runner({ workers: 2 })
    const hold = gate()
    const plan = defineKind('plan_week', { payload, scopeConcurrency: 1 })
    runner.register(plan, async () => void (await hold.promise))
    const handle = h.runner().register(plan)
    const first = await handle.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ n })), { scope: 'h1' })
    const second = await handle.enqueue({ n: 0 }, { scope: 'h2' })
    const done = track(runner)
    await runner.start()
    await done.starts(2)
    expect(done.started).toEqual([first[0], second])
    hold.open()
    await done.ends([...first, second])
  })

  it('scopeConcurrency: a household with more queued jobs than one claim looks at (1,000) does not hold back the next household', async () => {
    const runner = h.runner({ workers: 2 })
    const hold = gate()
    const plan = defineKind('plan_week', { payload, scopeConcurrency: 1 })
    let running = 0
    runner.register(plan, async () => {
      running++
      await hold.promise
    })
    const handle = h.runner().register(plan)
    const first = await handle.enqueueMany(Array.from({ length: 1_100 }, (_, n) => ({ n })), { scope: 'h1' })
    const second = await handle.enqueue({ n: 0 }, { scope: 'h2' })
    const done = track(runner)
    await runner.start()
    await done.starts(2)
    expect(done.started).toEqual([first[0], second])
    expect(running).toBe(2)
    hold.open()
    await done.ends([first[1]!, second])
  })

  it('refuses a limit that is not a positive integer', () => {
    for (const concurrency of [0, -1, 1.5, '2']) {
      expect(() => defineKind('k', { payload, concurrency: concurrency as number })).toThrow(RegistrationError)
    }
    expect(() => defineKind('k', { payload, scopeConcurrency: 0 })).toThrow(RegistrationError)
  })
})
