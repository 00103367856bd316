/**
 * jobtable/testing's drain, at its edges: what it runs and what it leaves,
 * its bounds, and that nothing runs outside it. Each test runs on the
 * kit's own SQLite database and on PostgreSQL (a driver handed in).
 */
import { existsSync } from 'node:fs'
import { dirname } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner, RunnerStateError, type Driver } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { createTestClock, createTestKit, DrainLimitError, DrainTimeoutError, type TestKit } from 'jobtable/testing'
import { postgresBackend, postgresSkipReason, type Store } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { aborted } from '../support/wait.js'
import { describeKits } from './kits.js'

const n = z.strictObject({ n: z.number().int() })
const HOUR = 3_600_000
/** In the past: PostgreSQL makes a job due on the earlier of the runner's clock and its own, so a test's clock must stay behind the real time. */
const T0 = Date.UTC(2020, 0, 1)

/** A kind `echo` whose handler records each start's n. */
function echo(runner: Runner<Driver>, starts: number[]) {
  return runner.register('echo', {
    payload: n,
    result: (r: number) => r,
    handler: ({ n }) => {
      starts.push(n)
      return n
    },
  })
}

describeKits('testing: drain', ({ kit }) => {
  it('outside a drain no job starts, however often the runner is woken; the next drain runs it', async () => {
    const starts: number[] = []
    const k = await kit({ register: (runner) => echo(runner, starts) })
    await k.kinds.enqueue({ n: 1 })
    await k.drain() // the runner is started from here on
    expect(starts).toEqual([1])

    const id = await k.kinds.enqueue({ n: 2 })
    for (let i = 0; i < 20; i++) {
      k.runner.wake()
      await k.runner.get(id) // a turn of the event loop for the runner to claim in, were it allowed
    }
    expect(starts).toEqual([1])
    expect((await k.job(id)).status).toBe('queued')

    expect((await k.drain()).map((j) => j.id)).toEqual([id])
    expect(starts).toEqual([1, 2])
  })

  it('runs the jobs jobs enqueue, to any depth, and returns each job it started once, in start order, as it ended', async () => {
    const k = await kit({
      register: (runner) => {
        const step = runner.register('step', {
          payload: n,
          result: (r: number) => r,
          handler: async ({ n }) => {
            if (n < 4) await step.enqueue({ n: n + 1 })
            return n * 10
          },
        })
        return step
      },
    })
    await k.kinds.enqueue({ n: 0 })
    const ran = await k.drain()
    expect(ran.map((j) => [j.payload, j.status, j.result])).toEqual([0, 1, 2, 3, 4].map((i) => [{ n: i }, 'succeeded', i * 10]))
    expect(await k.jobs({ status: ['queued', 'running', 'scheduled'] })).toEqual([])
  })

  it('returns only the jobs this drain started; an empty queue drains to []', async () => {
    const k = await kit({ register: (runner) => echo(runner, []) })
    expect(await k.drain()).toEqual([])
    const a = await k.kinds.enqueue({ n: 1 })
    expect((await k.drain()).map((j) => j.id)).toEqual([a])
    const b = await k.kinds.enqueue({ n: 2 })
    expect((await k.drain()).map((j) => j.id)).toEqual([b])
    expect(await k.drain()).toEqual([])
  })

  it('with several workers, runs every job once', async () => {
    const starts: number[] = []
    const k = await kit({ runner: { workers: 4 }, register: (runner) => echo(runner, starts) })
    await k.kinds.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ n: i })))
    const ran = await k.drain()
    expect(ran).toHaveLength(40)
    expect(ran.every((j) => j.status === 'succeeded')).toBe(true)
    expect([...starts].sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i))
  })

  it('a job due later runs only once the clock reaches its due time: not at one millisecond before', async () => {
    const starts: number[] = []
    const k = await kit({ clock: T0, register: (runner) => echo(runner, starts) })
    const id = await k.kinds.enqueue({ n: 1 }, { runAt: T0 + HOUR })
    expect(await k.drain()).toEqual([])
    k.clock.set(new Date(T0 + HOUR - 1))
    expect(await k.drain()).toEqual([])
    expect((await k.job(id)).status).toBe('scheduled')
    k.clock.advance(1)
    expect((await k.drain()).map((j) => [j.id, j.status])).toEqual([[id, 'succeeded']])
    expect(starts).toEqual([1])
  })

  it('advance: moves the clock to each due time of a kind it handles in turn, and stops at the last; a kind it does not handle stays scheduled', async () => {
    const starts: number[] = []
    const k = await kit({
      clock: T0,
      register: (runner) => {
        runner.register(defineKind('elsewhere', { payload: n })) // a producer's registration: no handler here
        return echo(runner, starts)
      },
    })
    await k.kinds.enqueue({ n: 2 }, { runAt: T0 + 2 * HOUR })
    await k.kinds.enqueue({ n: 1 }, { runAt: T0 + HOUR })
    const other = await k.runner.enqueue('elsewhere', { n: 9 }, { runAt: T0 + 10 * HOUR })

    const ran = await k.drain({ advance: true })

    expect(starts).toEqual([1, 2])
    expect(ran.map((j) => j.payload)).toEqual([{ n: 1 }, { n: 2 }])
    expect(k.clock.now()).toBe(T0 + 2 * HOUR)
    expect((await k.job(other)).status).toBe('scheduled')
  })

  it('a snoozed job waits for its delay on the clock; advance runs it again', async () => {
    const k = await kit({
      clock: T0,
      register: (runner) =>
        runner.register('snoozy', {
          payload: n,
          handler: (_p, job) => {
            if (job.attempt === 1) return job.snooze(30_000)
          },
        }),
    })
    const id = await k.kinds.enqueue({ n: 1 })
    expect(await k.drain()).toMatchObject([{ id, status: 'scheduled', runAt: T0 + 30_000 }])
    expect(await k.drain({ advance: true })).toMatchObject([{ id, status: 'succeeded', attempt: 2 }])
  })

  it('queued jobs of a kind with no handler here do not keep the drain from ending', async () => {
    const k = await kit({ register: (runner) => runner.register(defineKind('elsewhere', { payload: n })) })
    const id = await k.kinds.enqueue({ n: 1 })
    expect(await k.drain()).toEqual([])
    expect((await k.job(id)).status).toBe('queued')
  })

  it('queued jobs of a paused kind do not keep the drain from ending: they stay queued, and run once it is resumed', async () => {
    const starts: number[] = []
    const k = await kit({
      register: (runner) => ({ echo: echo(runner, starts), other: runner.register('other', { payload: n, handler: () => undefined }) }),
    })
    const paused = await k.kinds.echo.enqueue({ n: 1 })
    const other = await k.kinds.other.enqueue({ n: 2 })
    expect(await k.runner.pause('echo')).toBe(true)

    // Only the kind that is not paused runs; the drain ends with the paused kind's job still queued.
    expect((await k.drain()).map((j) => j.id)).toEqual([other])
    expect(starts).toEqual([])
    expect((await k.job(paused)).status).toBe('queued')

    expect(await k.runner.resume('echo')).toBe(true)
    expect((await k.drain()).map((j) => [j.id, j.status])).toEqual([[paused, 'succeeded']])
    expect(starts).toEqual([1])
  })

  it('advance: the scheduled jobs of a paused kind do not move the clock', async () => {
    const starts: number[] = []
    const k = await kit({ clock: T0, register: (runner) => echo(runner, starts) })
    const id = await k.kinds.enqueue({ n: 1 }, { runAt: T0 + HOUR })
    await k.runner.pause('echo')
    expect(await k.drain({ advance: true })).toEqual([])
    expect(k.clock.now()).toBe(T0)
    expect((await k.job(id)).status).toBe('scheduled')
    await k.runner.resume('echo')
    expect((await k.drain({ advance: true })).map((j) => j.id)).toEqual([id])
    expect(k.clock.now()).toBe(T0 + HOUR)
  })

  it('a job that enqueues itself each time: DrainLimitError after exactly maxJobs starts, naming the kind, and nothing more starts', async () => {
    let starts = 0
    const k = await kit({
      runner: { workers: 3 },
      register: (runner) => {
        const loop = runner.register('loop', {
          payload: n,
          handler: async ({ n }) => {
            starts++
            await loop.enqueue({ n: n + 1 })
          },
        })
        return loop
      },
    })
    // Five loops at once on three workers: claims for every idle worker must still stop at exactly maxJobs.
    await k.kinds.enqueueMany([0, 0, 0, 0, 0].map((n) => ({ n })))
    const error = await k.drain({ maxJobs: 10 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(DrainLimitError)
    expect((error as DrainLimitError).code).toBe('drain_limit')
    expect((error as DrainLimitError).queued).toEqual({ loop: 5 })
    expect((error as Error).message).toContain('drain started 10 jobs (its maxJobs)')
    expect((error as Error).message).toContain('queued loop ×5')
    expect(starts).toBe(10)
    // The one it left waits: nothing starts it after the drain gave up.
    for (let i = 0; i < 10; i++) {
      k.runner.wake()
      await k.runner.list({ limit: 1 })
    }
    expect(starts).toBe(10)
    expect(await k.jobs({ status: 'queued' })).toHaveLength(5)
  })

  it('a handler that never returns: DrainTimeoutError names the running job, and close() aborts its signal', async () => {
    let signal: AbortSignal | undefined
    const k = await kit({
      register: (runner) =>
        runner.register('stuck', {
          payload: n,
          handler: async (_p, job) => {
            signal = job.signal
            await aborted(job.signal)
          },
        }),
    })
    const id = await k.kinds.enqueue({ n: 1 })
    const error = await k.drain({ timeoutMs: 100 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(DrainTimeoutError)
    expect((error as DrainTimeoutError).running).toEqual([{ id, kind: 'stuck' }])
    expect((error as DrainTimeoutError).scheduledDue).toBe(0)
    expect((error as Error).message).toContain(`running stuck ${id}`)
    expect(signal?.aborted).toBe(false)
    await k.close()
    expect(signal?.aborted).toBe(true)
  })

  it('a second drain while one runs is refused; so is a drain after close', async () => {
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    const k = await kit({ register: (runner) => runner.register('held', { payload: n, handler: () => held }) })
    await k.kinds.enqueue({ n: 1 })
    const first = k.drain()
    await expect(k.drain()).rejects.toThrow(/a drain is already running/)
    release()
    expect(await first).toHaveLength(1)
    await k.close()
    await expect(k.drain()).rejects.toBeInstanceOf(RunnerStateError)
  })

  it('kinds may be registered on kit.runner until the first drain, not after', async () => {
    const starts: number[] = []
    const k = await kit({})
    const e = echo(k.runner, starts)
    await e.enqueue({ n: 7 })
    await k.drain()
    expect(starts).toEqual([7])
    expect(() => k.runner.register('late', { payload: n, handler: () => undefined })).toThrow(RunnerStateError)
  })

  it('a runner started by the test itself: drain says the kit starts it', async () => {
    const k = await kit({ register: (runner) => echo(runner, []) })
    await k.runner.start()
    await expect(k.drain()).rejects.toThrow(/the kit starts its runner at the first drain/)
  })

  it('a job cancelled before the drain never starts; the drain ends', async () => {
    const starts: number[] = []
    const k = await kit({ register: (runner) => echo(runner, starts) })
    const id = await k.kinds.enqueue({ n: 1 })
    expect(await k.runner.cancel(id)).toBe('cancelled')
    expect(await k.drain()).toEqual([])
    expect(starts).toEqual([])
    expect((await k.job(id)).status).toBe('cancelled')
  })

  it("a kind's timeoutMs counts real time: a handler past it fails as timeout", async () => {
    const k = await kit({
      register: (runner) =>
        runner.register('slow', {
          payload: n,
          timeoutMs: 20,
          handler: async (_p, job) => {
            await aborted(job.signal)
            throw new Error('aborted')
          },
        }),
    })
    const id = await k.kinds.enqueue({ n: 1 })
    expect(await k.drain()).toMatchObject([{ id, status: 'failed', error: 'timeout' }])
  })

  it('retention is off unless the test turns it on: a drained job stays readable however far the clock moves', async () => {
    const k = await kit({ clock: T0, register: (runner) => echo(runner, []) })
    const id = await k.kinds.enqueue({ n: 1 })
    await k.drain()
    k.clock.advance(365 * 24 * HOUR)
    await k.drain()
    expect((await k.job(id)).status).toBe('succeeded')
    await expect(k.runner.prune()).rejects.toThrow(/retention: false/)
    const on = await kit({ clock: T0, runner: { retention: { maxAgeMs: HOUR } }, register: (runner) => echo(runner, []) })
    await on.kinds.enqueue({ n: 1 })
    await on.drain()
    on.clock.advance(HOUR + 1)
    expect(await on.runner.prune()).toBe(1)
    expect(await on.jobs()).toEqual([])
  })

  it('two kits may share one clock: moving it makes jobs due in both', async () => {
    const clock = createTestClock(T0)
    const [a, b] = [await kit({ clock, register: (r) => echo(r, []) }), await kit({ clock, register: (r) => echo(r, []) })]
    await a.kinds.enqueue({ n: 1 }, { delayMs: 1_000 })
    await b.kinds.enqueue({ n: 2 }, { delayMs: 1_000 })
    clock.advance(1_000)
    expect((await a.drain()).map((j) => j.payload)).toEqual([{ n: 1 }])
    expect((await b.drain()).map((j) => j.payload)).toEqual([{ n: 2 }])
  })
})

describe('testing: drain on the kit\'s own SQLite file', () => {
  const open: TestKit<unknown>[] = []
  afterEach(async () => {
    for (const k of open.splice(0)) await k.close()
  })

  it("storage 'file': the jobs are in a real file another runner can read, and close removes its folder", async () => {
    const k = await createTestKit({ storage: 'file', register: (runner) => echo(runner, []) })
    open.push(k as TestKit<unknown>)
    const id = await k.kinds.enqueue({ n: 3 })
    await k.drain()
    expect(k.path).not.toBeNull()
    const reader = new Runner({ driver: sqlite({ path: k.path! }), logger: captureLogs() })
    try {
      expect(await reader.get(id)).toMatchObject({ status: 'succeeded', result: 3 })
    } finally {
      await reader.close()
    }
    await k.close()
    expect(existsSync(dirname(k.path!))).toBe(false)
  })
  it('a job another runner stored on the file is read with its status, and its payload and scope unknown; the drain runs it', async () => {
    const k = await createTestKit({ storage: 'file', register: (runner) => echo(runner, []) })
    open.push(k as TestKit<unknown>)
    const writer = new Runner({ driver: sqlite({ path: k.path! }), logger: captureLogs() })
    let id: string
    try {
      writer.register(defineKind('echo', { payload: n }))
      id = await writer.enqueue('echo', { n: 5 }, { scope: 's' })
    } finally {
      await writer.close()
    }
    expect(await k.job(id)).toMatchObject({ id, status: 'queued', payload: undefined, scope: undefined })
    await k.assertNotEnqueued('echo', { n: 5 })
    const message = await k.assertEnqueued('echo', { n: 5 }).catch((e: unknown) => (e as Error).message)
    expect(message).toContain(`  - queued ${id}: (payload unknown: stored through another connection)`)
    expect(await k.drain()).toMatchObject([{ id, status: 'succeeded', result: 5 }])
  })
})

describe.skipIf(postgresSkipReason !== undefined)('testing: drain on PostgreSQL, with a clock ahead of the database', () => {
  let store: Store | undefined
  afterEach(async () => {
    await store?.drop()
    store = undefined
  })

  it("a job due by the kit's clock that the database does not make due: the drain waits for it and says why, rather than leaving it scheduled", async () => {
    store = await postgresBackend().store()
    // A clock an hour ahead of the real time: the database compares due times with its own, earlier, clock.
    const ahead = Date.now() + HOUR
    await using k = await createTestKit({ driver: store.driver(), clock: ahead, register: (runner) => echo(runner, []) })
    const id = await k.kinds.enqueue({ n: 1 }, { delayMs: 1_000 })
    k.clock.advance(1_000)
    const error = await k.drain({ timeoutMs: 200 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(DrainTimeoutError)
    expect((error as DrainTimeoutError).scheduledDue).toBe(1)
    expect((error as Error).message).toContain("1 scheduled job is due by the kit's clock, yet the database has not made it due")
    expect((error as Error).message).toContain("start the kit's clock in the past")
    expect((await k.job(id)).status).toBe('scheduled')
  })
})
