import { describe, expect, it } from 'vitest'
import { CODE_INTERNAL, DatabaseError, RETRY_MAX_MS, RETRY_MIN_MS, claimErrorChannel } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver, corrupt } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'

describeEachBackend('database faults', (backend) => {
  const h = harness(backend)

  /** Resolves after the runner has reported n claim errors. */
  function claimErrors(n: number): Promise<{ transient: boolean }[]> {
    const seen: { transient: boolean }[] = []
    return new Promise((resolve) => {
      const on = (m: unknown) => {
        seen.push(m as { transient: boolean })
        if (seen.length >= n) {
          claimErrorChannel.unsubscribe(on)
          resolve(seen)
        }
      }
      claimErrorChannel.subscribe(on)
    })
  }

  it('retries a claim that failed once: the job runs with no new enqueue or wake', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 1 })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    await runner.start()
    faulty.failNth('jobClaim', 1) // the claim the enqueue's wake triggers
    const errors = claimErrors(1)
    const id = await kind.enqueue({ n: 1 })
    expect(await errors).toEqual([expect.objectContaining({ transient: true })])
    await done.ends([id])
    expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('keeps retrying while claims fail, backing off from 50 ms doubling, and runs jobs queued during the outage once it clears', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const logs = captureLogs()
    const runner = h.runner({ driver: faulty.driver, workers: 2, logger: logs })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    // Failing from before the start: the start's own claim may still be on its way to the database when
    // start() returns, and would take the jobs enqueued next.
    const clear = faulty.failUntilCleared('jobClaim')
    const errors = claimErrors(4)
    await runner.start()
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }])
    await errors
    expect(done.started).toEqual([])
    const delays = logs.lines.filter((l) => l.message === 'claim jobs failed; retrying').map((l) => l.fields.retry_in_ms)
    expect(delays.slice(0, 4)).toEqual([RETRY_MIN_MS, 2 * RETRY_MIN_MS, 4 * RETRY_MIN_MS, 8 * RETRY_MIN_MS])
    clear()
    await done.ends(ids)
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('stops claiming on an error that can never succeed, and wait() reports it', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const logs = captureLogs()
    const runner = h.runner({ driver: faulty.driver, logger: logs })
    runner.register('echo', { payload: echoPayload, handler: () => undefined })
    faulty.failUntilCleared('jobClaim', corrupt)
    await runner.start()
    await expect(runner.wait()).rejects.toBeInstanceOf(DatabaseError)
    expect(faulty.calls.jobClaim).toBe(1)
    expect(logs.lines.some((l) => l.level === 'error' && l.fields.error === 'SQLITE_CORRUPT')).toBe(true)
  })

  it('retries a final write until it lands; the handler ran once', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    let starts = 0
    const kind = runner.register('echo', { payload: echoPayload, result: (r: string) => r, handler: () => (starts++, 'done') })
    const done = track(runner)
    await runner.start()
    faulty.failNth('jobFinishMany', 1)
    faulty.failNth('jobFinishMany', 2)
    faulty.failNth('jobFinishMany', 3)
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(faulty.calls.jobFinishMany).toBe(4)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: 'done' })
    expect(starts).toBe(1)
  })

  it('starts another job on an idle worker while a final write waits to be tried again', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 2 })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    await runner.start()
    const clear = faulty.failUntilCleared('jobFinishMany')
    const first = await kind.enqueue({ n: 1 })
    await done.starts(1)
    // The first job's final write now fails and is retried with backoff; the second job needs the other worker.
    const second = await kind.enqueue({ n: 2 })
    await done.starts(2)
    expect(done.started).toEqual([first, second])
    clear()
    await done.ends([first, second])
    for (const id of [first, second]) expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('fails a job with internal_error when the database refuses its result for good', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    const kind = runner.register('echo', { payload: echoPayload, result: (r: string) => r, handler: () => 'refused' })
    const done = track(runner)
    await runner.start()
    faulty.failNth('jobFinishMany', 1, corrupt)
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERNAL })
    expect(faulty.calls.jobFinishMany).toBe(2)
  })

  it('refuses only the enqueue the database refuses for good, not the ones batched with it', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    faulty.failWhen('jobInsertMany', (p: { jobs: { payload: string }[] }) => p.jobs.some((j) => j.payload === '{"n":13}'), corrupt)
    const outcomes = await Promise.allSettled([12, 13, 14].map((n) => kind.enqueue({ n })))
    expect(faulty.calls.jobInsertMany).toBe(4) // the batch of three, then each alone
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((outcomes[1] as PromiseRejectedResult).reason).toBeInstanceOf(DatabaseError)
    expect((await runner.list()).jobs).toHaveLength(2)
  })

  it('fences every write on the claim: a finished job is never finished again nor revived', async () => {
    const driver = h.store.driver()
    const id = crypto.randomUUID()
    await driver.jobInsertMany({ jobs: [{ id, kind: 'echo', payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })
    const [claimed] = await driver.jobClaim({ limit: 10, runnerId: crypto.randomUUID(), kinds: ['echo'], now: 2 })
    expect(claimed).toMatchObject({ id, kind: 'echo' })
    const { attempt } = claimed!
    expect(await driver.jobPublish({ id, attempt: attempt + 1, result: '"stale claim"', now: 3 })).toBe(false)
    expect(await driver.jobPublish({ id, attempt, result: '"partial"', now: 3 })).toBe(true)
    const finish = { id, attempt, status: 'succeeded' as const, result: '"final"', error: null, runAt: null }
    expect(await driver.jobFinishMany({ finishes: [{ ...finish, attempt: attempt - 1 }], now: 4 })).toEqual([false])
    expect(await driver.jobFinishMany({ finishes: [finish], now: 4 })).toEqual([true])
    expect(await driver.jobFinishMany({ finishes: [{ ...finish, status: 'failed', result: null, error: 'late' }], now: 5 })).toEqual([false])
    expect(await driver.jobPublish({ id, attempt, result: '"revived"', now: 6 })).toBe(false)
    expect(await driver.jobClaim({ limit: 10, runnerId: crypto.randomUUID(), kinds: ['echo'], now: 7 })).toEqual([])
    expect(await driver.jobGet({ id })).toMatchObject({ id, kind: 'echo', status: 'succeeded', result: '"final"', error: null })
  })
})

describe('backoff', () => {
  it('doubles from RETRY_MIN_MS and holds at RETRY_MAX_MS', async () => {
    const { Backoff } = await import('../../src/runner/backoff.js')
    const b = new Backoff()
    const delays = Array.from({ length: 10 }, () => b.next())
    expect(delays).toEqual([50, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000])
    expect([RETRY_MIN_MS, RETRY_MAX_MS]).toEqual([50, 5000])
    b.reset()
    expect(b.next()).toBe(50)
  })
})
