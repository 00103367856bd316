import { randomUUID } from 'node:crypto'
import type Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { DatabaseError, type Driver, type NewJob } from 'jobtable'
import type { PostgresDriver } from 'jobtable/postgres'
import type { SqliteDriver } from 'jobtable/sqlite'
import { postgresBackend, sqliteBackend, type Backend, type Store } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

/**
 * A cancelled job is never queued again (README, "Cancellation"). A job
 * whose cancellation was requested while a claim held it, before any
 * handler started it, used to go back to the queue through the writes
 * that give an unstarted claim back, and the next runner ran it:
 *
 * - jobRelease, at stop(), of the jobs a claim returned once stopping;
 * - jobRequeueLost, before the next claim, of the jobs a claim whose
 *   answer was lost had marked running;
 * - jobFailInterrupted, for an idempotent kind's job its gone runner left
 *   running (checked here too; it already ended cancelled).
 *
 * Each now ends such a job `cancelled`, finished at that write, as a
 * cancel of a queued job leaves it.
 */

/** Quiet backends: no notification or poll reaches a runner within a test, so each path runs only when the test makes it. */
const quiet: Backend[] = [sqliteBackend, postgresBackend({ listen: false, pollIntervalMs: 3_600_000 })]

/** finished_at of a job, read beside the driver: jobGet does not return it. */
async function finishedAt(store: Store, driver: Driver, id: string): Promise<number | null> {
  if (store.sql !== undefined) {
    const [row] = await store.sql(`SELECT finished_at::float8 AS f FROM "${(driver as PostgresDriver).schema}".jobs WHERE id = $1`, [id])
    return (row?.['f'] as number | null | undefined) ?? null
  }
  const row = ((driver as SqliteDriver).database as Database.Database).prepare('SELECT finished_at AS f FROM jobtable_jobs WHERE id = ?').get(id) as { f: number | null } | undefined
  return row?.f ?? null
}

function job(kind: string, options: Partial<NewJob> = {}): NewJob {
  return { id: randomUUID(), kind, payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false, ...options }
}

const T0 = 1_000_000

/**
 * Wraps a driver so that the next jobClaim, once armed, commits and then
 * waits (`hold`) or fails as if its answer were lost (`lose`) before
 * answering; everything else passes through. `requeued` records each
 * jobRequeueLost call's answer.
 */
function steerable(real: Driver) {
  let next: { mode: 'hold' | 'lose'; committed: () => void; until: Promise<void> } | undefined
  const requeued: number[] = []
  let requeuedNow: (() => void) | undefined
  const driver = new Proxy(real, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (typeof value !== 'function') return value
      if (prop === 'jobClaim') {
        return async (params: Parameters<Driver['jobClaim']>[0]) => {
          const armed = next
          if (armed === undefined) return target.jobClaim(params)
          next = undefined
          const jobs = await target.jobClaim(params)
          armed.committed()
          await armed.until
          // As a dropped connection answers a statement that committed.
          if (armed.mode === 'lose') throw new DatabaseError('claim jobs', 'ECONNRESET', true)
          return jobs
        }
      }
      if (prop === 'jobRequeueLost') {
        return async (params: Parameters<Driver['jobRequeueLost']>[0]) => {
          const n = await target.jobRequeueLost(params)
          requeued.push(n)
          requeuedNow?.()
          return n
        }
      }
      return (value as (...a: unknown[]) => unknown).bind(target)
    },
  })
  return {
    driver,
    requeued,
    /** Arms the next claim; resolves once it has committed. The claim answers once `until` resolves. */
    arm(mode: 'hold' | 'lose', until: Promise<void>): Promise<void> {
      return new Promise<void>((committed) => (next = { mode, committed, until }))
    },
    /** Resolves once jobRequeueLost has been answered at least n times. */
    async requeues(n: number): Promise<void> {
      while (requeued.length < n) await new Promise<void>((resolve) => (requeuedNow = resolve))
    },
  }
}

describe.each(quiet)('$name: a job whose cancellation was requested before any handler started it is never queued again', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  const h = harness(backend)

  /** A runner of kind `work` recording every handler start by job id. */
  const worker = (driver: Driver | undefined, starts: string[]) => {
    const runner = h.runner({ workers: 1, ...(driver ? { driver } : {}) })
    const kind = runner.register('work', { payload: echoPayload, handler: (_p, job) => void starts.push(job.id) })
    return { runner, kind }
  }

  it('runner: a job claimed as stop() began, cancelled ("requested") before it started, ends cancelled, and the next runner never starts it', async () => {
    const real = h.store.driver()
    const steer = steerable(real)
    const starts: string[] = []
    const first = worker(steer.driver, starts)
    const victim = await first.kind.enqueue({ n: 1 })
    const answer = gate()
    const committed = steer.arm('hold', answer.promise)
    await first.runner.start()
    await committed
    // Claimed in the database, not started: the claim's answer has not reached the runner.
    expect((await first.runner.get(victim)).status).toBe('running')
    expect(await first.runner.cancel(victim)).toBe('requested')
    const stopped = first.runner.stop()
    // The claim answers after stop() began: its job is given back unstarted (jobRelease).
    answer.open()
    await stopped
    expect(starts).toEqual([])
    expect(await first.runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
    expect(await finishedAt(h.store, real, victim)).not.toBeNull()

    const next = worker(undefined, starts)
    const done = track(next.runner)
    await next.runner.start()
    // Enqueued after the victim: with one worker, the victim (older) would start first were it queued.
    const sentinel = await next.kind.enqueue({ n: 2 })
    await done.ends([sentinel])
    done.stop()
    expect(starts).toEqual([sentinel])
    expect(await next.runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
  })

  it('runner: a job a lost claim took, cancelled ("requested") before the recovery, ends cancelled at the recovery and never starts', async () => {
    const steer = steerable(h.store.driver())
    const starts: string[] = []
    const { runner, kind } = worker(steer.driver, starts)
    const done = track(runner)
    const victim = await kind.enqueue({ n: 1 })
    const answer = gate()
    const committed = steer.arm('lose', answer.promise)
    await runner.start()
    await committed
    expect(await runner.cancel(victim)).toBe('requested')
    // The claim's answer is lost: the runner puts back what it may have taken before its next claim (jobRequeueLost).
    answer.open()
    await steer.requeues(1)
    expect(await runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
    const sentinel = await kind.enqueue({ n: 2 })
    await done.ends([sentinel])
    done.stop()
    expect(starts).toEqual([sentinel])
    expect(await runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
  })

  it('driver: jobRelease and jobRequeueLost end a job whose cancellation was requested cancelled (finished now, its attempt given back), and queue the others', async () => {
    const driver = h.store.driver()
    for (const give of ['release', 'requeueLost'] as const) {
      const runnerId = `runner-${give}`
      const [cancelled, plain] = [job('work'), job('work')]
      await driver.jobInsertMany({ jobs: [cancelled, plain], now: T0 })
      const claimed = await driver.jobClaim({ limit: 2, runnerId, kinds: ['work'], now: T0 + 1 })
      expect(claimed.map((c) => c.id).sort(), give).toEqual([cancelled.id, plain.id].sort())
      expect(await driver.jobRequestCancel({ id: cancelled.id, now: T0 + 2 }), give).toBe(true)
      if (give === 'release') {
        await driver.jobRelease({ jobs: claimed.map((c) => ({ id: c.id, attempt: c.attempt })), now: T0 + 3 })
      } else {
        expect(await driver.jobRequeueLost({ runnerId, keep: [], now: T0 + 3 }), give).toBe(2)
      }
      expect(await driver.jobGet({ id: cancelled.id }), give).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
      expect(await finishedAt(h.store, driver, cancelled.id), give).toBe(T0 + 3)
      expect(await driver.jobGet({ id: plain.id }), give).toMatchObject({ status: 'queued', attempt: 0 })
      expect(await finishedAt(h.store, driver, plain.id), give).toBeNull()
      // A claim takes the queued one only, and neither cancel statement changes the cancelled one.
      const again = await driver.jobClaim({ limit: 2, runnerId, kinds: ['work'], now: T0 + 4 })
      expect(again.map((c) => c.id), give).toEqual([plain.id])
      await driver.jobFinishMany({ finishes: [{ id: plain.id, attempt: 1, status: 'succeeded', result: null, error: null, runAt: null }], now: T0 + 5 })
      expect(await driver.jobCancelWaiting({ id: cancelled.id, now: T0 + 6 }), give).toBe(false)
      expect(await driver.jobRequestCancel({ id: cancelled.id, now: T0 + 6 }), give).toBe(false)
    }
  })

  it('driver: jobFailInterrupted ends a job of an idempotent kind whose cancellation was requested cancelled, not queued again, and requeues the others', async () => {
    const driver = h.store.driver()
    const [cancelled, plain] = [job('work', { requeueInterrupted: true, maxAttempts: 3 }), job('work', { requeueInterrupted: true, maxAttempts: 3 })]
    await driver.jobInsertMany({ jobs: [cancelled, plain], now: T0 })
    await driver.runnerRegister({ runnerId: 'gone', kinds: ['work'], now: T0 })
    expect(await driver.jobClaim({ limit: 2, runnerId: 'gone', kinds: ['work'], now: T0 + 1 })).toHaveLength(2)
    expect(await driver.jobRequestCancel({ id: cancelled.id, now: T0 + 2 })).toBe(true)
    // The runner stops leaving its jobs running: proven gone, its jobs are the sweep's.
    await driver.runnerUnregister({ runnerId: 'gone' })
    expect(await driver.jobFailInterrupted({ runnerId: 'sweeper', error: 'interrupted', now: T0 + 3 })).toEqual({ failed: 1, requeued: 1 })
    expect(await driver.jobGet({ id: cancelled.id })).toMatchObject({ status: 'cancelled', error: null })
    expect(await finishedAt(h.store, driver, cancelled.id)).toBe(T0 + 3)
    expect(await driver.jobGet({ id: plain.id })).toMatchObject({ status: 'queued', error: null })
  })
})
