import { describe, expect, it } from 'vitest'
import { defineKind, type Driver, type Runner } from 'jobtable'
import { postgresBackend, sqliteBackend, type Backend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

/**
 * The real clock, and no poll within a test: the SQLite test store's driver
 * polls once an hour, and this PostgreSQL one neither listens nor polls
 * sooner. A scheduled job can only start here because the runner's own
 * maintenance knows its due time.
 */
const idleBackends: Backend[] = [sqliteBackend, postgresBackend({ pollIntervalMs: 3_600_000, listen: false })]

describe.each(idleBackends)('$name: a scheduled job starts at its due time with no wake and no poll', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  const h = harness(backend)

  /** A started runner whose handler records Date.now() at each start, by job id. */
  const started = async (runner: Runner = h.runner({ workers: 2 })) => {
    const at = new Map<string, number[]>()
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: (_p, job) => void at.set(job.id, [...(at.get(job.id) ?? []), Date.now()]),
    })
    const done = track(runner)
    return { runner, kind, at, done }
  }

  /** The job's due time, checking it is scheduled if it was read before that time. */
  const dueTime = async (runner: Runner, id: string): Promise<number> => {
    const job = await runner.get(id)
    const readBy = Date.now()
    expect(job.runAt).not.toBeNull()
    if (readBy < job.runAt!) expect(job.status).toBe('scheduled')
    return job.runAt!
  }

  it('a held clock with a job due 5 ms ahead on it is not looked at again every 5 ms; once the clock moves, a wake runs the job', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    let now = 1_000_000_000_000
    const runner = h.runner({ driver: faulty.driver, workers: 1, clock: () => now })
    const { kind, done } = await started(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 }, { delayMs: 5 })
    const before = faulty.calls['jobPromoteDue'] ?? 0
    // 200 real ms with the clock held: a timer re-armed for the 5 ms left would fire about 40 times.
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect((faulty.calls['jobPromoteDue'] ?? 0) - before).toBeLessThanOrEqual(2)
    expect((await runner.get(id)).status).toBe('scheduled')
    now += 5
    runner.wake()
    await done.ends([id])
    expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('delayMs 300 enqueued on an idle started runner of this process starts by itself, not before its runAt, once', async () => {
    const s = await started()
    await s.runner.start()
    const before = Date.now()
    const id = await s.kind.enqueue({ n: 1 }, { delayMs: 300 })
    const runAt = await dueTime(s.runner, id)
    expect(runAt).toBeGreaterThanOrEqual(before + 300)
    await s.done.ends([id])
    expect(s.at.get(id)).toHaveLength(1)
    expect(s.at.get(id)![0]).toBeGreaterThanOrEqual(runAt)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1, runAt })
  }, 15_000)

  it('a due time earlier than the one the runner waits for re-arms it: delayMs 300 after an hour-long one starts by itself', async () => {
    const s = await started()
    await s.runner.start()
    const hour = await s.kind.enqueue({ n: 1 }, { delayMs: 3_600_000 })
    const soon = await s.kind.enqueue({ n: 2 }, { delayMs: 300 })
    const runAt = await dueTime(s.runner, soon)
    await s.done.ends([soon])
    expect(s.at.get(soon)![0]).toBeGreaterThanOrEqual(runAt)
    expect(s.at.has(hour)).toBe(false)
    expect((await s.runner.get(hour)).status).toBe('scheduled')
  }, 15_000)

  it('each of several due times in turn: jobs with delayMs 100, 250 and 400 each start by themselves, none before its runAt', async () => {
    const s = await started()
    await s.runner.start()
    // Enqueued latest-due first, in separate transactions.
    const ids = [await s.kind.enqueue({ n: 3 }, { delayMs: 400 }), await s.kind.enqueue({ n: 2 }, { delayMs: 250 }), await s.kind.enqueue({ n: 1 }, { delayMs: 100 })]
    const due = new Map<string, number>()
    for (const id of ids) due.set(id, await dueTime(s.runner, id))
    await s.done.ends(ids)
    for (const id of ids) {
      expect(s.at.get(id)).toHaveLength(1)
      expect(s.at.get(id)![0]).toBeGreaterThanOrEqual(due.get(id)!)
    }
  }, 15_000)

  it('runner.enqueueMany on an idle started runner: its jobs due now start with no wake', async () => {
    const s = await started()
    await s.runner.start()
    const ids = (await s.runner.enqueueMany([s.kind.job({ n: 1 }), s.kind.job({ n: 2 }, { priority: 3 })])).map((r) => r.id)
    await s.done.ends(ids)
    for (const id of ids) expect(s.at.get(id)).toHaveLength(1)
  }, 15_000)

  it('runner.enqueueMany on an idle started runner: the earliest of its due times (300 ms, stored after one an hour away) starts by itself', async () => {
    const s = await started()
    await s.runner.start()
    const [hour, soon] = (await s.runner.enqueueMany([s.kind.job({ n: 1 }, { delayMs: 3_600_000 }), s.kind.job({ n: 2 }, { delayMs: 300 })])).map((r) => r.id) as [string, string]
    const runAt = await dueTime(s.runner, soon)
    await s.done.ends([soon])
    expect(s.at.get(soon)).toHaveLength(1)
    expect(s.at.get(soon)![0]).toBeGreaterThanOrEqual(runAt)
    expect(s.at.has(hour)).toBe(false)
    expect((await s.runner.get(hour)).status).toBe('scheduled')
  }, 15_000)

  it('a job another runner scheduled before this one started: its due time read from the database at start, it starts by itself', async () => {
    const producer = h.runner()
    const kind = producer.register(defineKind('echo', { payload: echoPayload }))
    const id = await kind.enqueue({ n: 1 }, { delayMs: 1_000 })
    const runAt = await dueTime(producer, id)
    const s = await started()
    await s.runner.start()
    await s.done.ends([id])
    expect(s.at.get(id)).toHaveLength(1)
    expect(s.at.get(id)![0]).toBeGreaterThanOrEqual(runAt)
  }, 15_000)

  it('enqueueTx of a job due in 300 ms, committed, then the kind\'s wake() as after any transactional enqueue: it starts by itself at its due time', async () => {
    const s = await started()
    await s.runner.start()
    let pending: unknown
    // Returned so a backend whose enqueueTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => (pending = s.kind.enqueueTx(tx as never, { n: 1 }, { delayMs: 300 })), 'commit')
    const id = (await pending) as string
    s.kind.wake()
    const runAt = await dueTime(s.runner, id)
    await s.done.ends([id])
    expect(s.at.get(id)).toHaveLength(1)
    expect(s.at.get(id)![0]).toBeGreaterThanOrEqual(runAt)
  }, 10_000)

  it('a job scheduled while a pass of the scheduler reads the next due time is not forgotten: it still starts by itself at its due time', async () => {
    // The real driver, with one reply of queueNextDue held after the database answered: a slow reply, as a busy connection gives.
    const real = h.store.driver()
    let replies = 0
    let holdReply: { entered: () => void; until: Promise<void> } | undefined
    const driver = new Proxy(real, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (typeof value !== 'function') return value
        if (prop !== 'queueNextDue') return (...args: unknown[]) => (value as (...a: unknown[]) => unknown).apply(target, args)
        return async (...args: unknown[]) => {
          const answer = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
          const hold = holdReply
          holdReply = undefined
          if (hold !== undefined) {
            hold.entered()
            await hold.until
          }
          replies++
          return answer
        }
      },
    }) as Driver
    const s = await started(h.runner({ driver, workers: 2 }))
    await s.runner.start()
    // The start's own pass has read the next due time (none): nothing else is in flight.
    while (replies === 0) await new Promise((r) => setTimeout(r, 5))
    const release = gate()
    const entered = new Promise<void>((resolve) => (holdReply = { entered: resolve, until: release.promise }))
    // A job due already makes the scheduler pass at once; its read of the next due time finds nothing scheduled.
    const due = await s.kind.enqueue({ n: 1 }, { runAt: Date.now() - 1_000 })
    await entered
    // Scheduled while that answer is on its way back.
    const soon = await s.kind.enqueue({ n: 2 }, { delayMs: 300 })
    const runAt = await dueTime(s.runner, soon)
    release.open()
    await s.done.ends([due, soon])
    expect(s.at.get(soon)).toHaveLength(1)
    expect(s.at.get(soon)![0]).toBeGreaterThanOrEqual(runAt)
  }, 10_000)
})
