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

  it('refuses a limit that is not a positive integer', () => {
    for (const concurrency of [0, -1, 1.5, '2']) {
      expect(() => defineKind('k', { payload, concurrency: concurrency as number })).toThrow(RegistrationError)
    }
    expect(() => defineKind('k', { payload, scopeConcurrency: 0 })).toThrow(RegistrationError)
  })
})
