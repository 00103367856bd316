import { randomUUID } from 'node:crypto'
import { expect, it } from 'vitest'
import { InvalidArgumentError, JobNotFoundError, type RunnerOptions, type Driver } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { endsOf, ledger } from '../support/attempts.js'
import { afterFirstCall } from '../support/intercept.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

/** Far from the real time, so a due time taken from Date.now() instead of the runner's clock shows. */
const T0 = 1_000_000
const HOUR = 3_600_000
const MISSING = '00000000-0000-4000-8000-000000000000'

describeEachBackend('retry now', (backend) => {
  const h = harness(backend)

  /**
   * A runner on a clock held at T0, with one worker and the kind `work`,
   * which publishes `{ attempt }` and then fails with its declared code
   * while `script.fail` is set (after `script.hold`, when set), else
   * returns `{ attempt }`. `retry` gives the kind a retry policy.
   */
  const setup = (options: { retry?: boolean; runner?: Partial<RunnerOptions<Driver>> } = {}) => {
    const clock = { now: T0 }
    const runner = h.runner({ workers: 1, clock: () => clock.now, ...options.runner })
    const starts = ledger()
    const ends = endsOf(runner)
    const script: { fail: boolean; hold: Promise<void> | undefined; started: (() => void) | undefined } = { fail: true, hold: undefined, started: undefined }
    const kind = runner.register('work', {
      payload: echoPayload,
      failures: ['provider_unavailable'],
      result: (r: { attempt: number }) => r,
      ...(options.retry ? { retry: { maxAttempts: 3, codes: ['provider_unavailable'], backoff: { baseMs: HOUR, maxMs: HOUR } } } : {}),
      handler: async (_payload, job) => {
        starts.start(job.id, job.attempt)
        await job.publish({ attempt: job.attempt })
        script.started?.()
        if (script.hold) await script.hold
        if (script.fail) return job.fail('provider_unavailable')
        return { attempt: job.attempt }
      },
    })
    return { clock, runner, kind, starts, ends, script }
  }

  it('a job scheduled for later becomes due now: queued at once with runAt now, and runs on the held clock', async () => {
    const { runner, kind, starts, ends, script } = setup()
    script.fail = false
    const id = await kind.enqueue({ n: 1 }, { runAt: T0 + HOUR })
    await runner.start()
    expect((await runner.get(id)).status).toBe('scheduled')
    expect(await runner.retry(id)).toBe('queued')
    await ends.nth(id, 1)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1, maxAttempts: 1, runAt: T0, error: null, result: { attempt: 1 } })
    expect(starts.attempts(id)).toEqual([1])
  })

  it('a job waiting for its next retry runs that attempt now, its attempts unchanged', async () => {
    const { runner, kind, starts, ends, script } = setup({ retry: true })
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    await ends.nth(id, 1)
    // Sent back for attempt 2, due half an hour to an hour later (the backoff's jitter) on a clock that does not move.
    const waiting = await runner.get(id)
    expect(waiting).toMatchObject({ status: 'scheduled', attempt: 1, maxAttempts: 3 })
    expect(waiting.runAt).toBeGreaterThanOrEqual(T0 + HOUR / 2)
    script.fail = false
    expect(await runner.retry(id)).toBe('queued')
    await ends.nth(id, 2)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, maxAttempts: 3, result: { attempt: 2 } })
    expect(starts.attempts(id)).toEqual([1, 2])
  })

  it('a failed job with no attempt left gets one more: queued, due now, its error cleared, its attempt and last result kept', async () => {
    const { clock, runner, kind, ends } = setup()
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    await ends.nth(id, 1)
    expect(await runner.get(id)).toMatchObject({ status: 'failed', attempt: 1, maxAttempts: 1, error: 'provider_unavailable', result: { attempt: 1 }, runAt: null })
    // Paused, so the job is seen as the retry left it, before any worker takes it.
    await runner.pause('work')
    clock.now = T0 + 5
    expect(await runner.retry(id)).toBe('queued')
    expect(await runner.get(id)).toEqual({
      id,
      kind: 'work',
      status: 'queued',
      result: { attempt: 1 },
      error: null,
      attempt: 1,
      maxAttempts: 2,
      priority: 0,
      runAt: T0 + 5,
    })
    expect(await runner.retry(id)).toBe('not_retryable')
    await runner.resume('work')
    await ends.nth(id, 2)
    expect(await runner.get(id)).toMatchObject({ status: 'failed', attempt: 2, maxAttempts: 2, error: 'provider_unavailable' })
  })

  it('a failed job retried runs again to success: attempt 2 of 2', async () => {
    const { runner, kind, starts, ends, script } = setup()
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    await ends.nth(id, 1)
    script.fail = false
    expect(await runner.retry(id)).toBe('queued')
    await ends.nth(id, 2)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, maxAttempts: 2, error: null, result: { attempt: 2 } })
    expect(starts.attempts(id)).toEqual([1, 2])
  })

  it('a job cancelled before it started is queued again and runs its first attempt', async () => {
    const { runner, kind, starts, ends, script } = setup()
    script.fail = false
    const id = await kind.enqueue({ n: 1 })
    expect(await runner.cancel(id)).toBe('cancelled')
    expect(await runner.retry(id)).toBe('queued')
    expect(await runner.get(id)).toMatchObject({ status: 'queued', attempt: 0, maxAttempts: 1, runAt: T0 })
    await runner.start()
    await ends.nth(id, 1)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1, maxAttempts: 1 })
    expect(starts.attempts(id)).toEqual([1])
  })

  it('a job cancelled while it ran is retried without its cancellation: the new attempt succeeds, not cancelled again', async () => {
    const { runner, kind, ends, script } = setup()
    const release = gate<void>()
    script.hold = release.promise
    script.fail = false
    const started = new Promise<void>((resolve) => (script.started = resolve))
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    await started
    expect(await runner.cancel(id)).toBe('requested')
    release.open()
    await ends.nth(id, 1)
    expect((await runner.get(id)).status).toBe('cancelled')
    script.hold = undefined
    script.started = undefined
    expect(await runner.retry(id)).toBe('queued')
    await ends.nth(id, 2)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, maxAttempts: 2, result: { attempt: 2 } })
  })

  it('a queued, running or succeeded job is not retryable, and is left exactly as it was', async () => {
    const { runner, kind, ends, script } = setup()
    script.fail = false
    const queued = await kind.enqueue({ n: 1 })
    const before = await runner.get(queued)
    expect(await runner.retry(queued)).toBe('not_retryable')
    expect(await runner.get(queued)).toEqual(before)

    const release = gate<void>()
    script.hold = release.promise
    const started = new Promise<void>((resolve) => (script.started = resolve))
    await runner.start()
    await started
    const running = await runner.get(queued)
    expect(running.status).toBe('running')
    expect(await runner.retry(queued)).toBe('not_retryable')
    expect(await runner.get(queued)).toEqual(running)
    release.open()
    await ends.nth(queued, 1)

    const succeeded = await runner.get(queued)
    expect(succeeded.status).toBe('succeeded')
    expect(await runner.retry(queued)).toBe('not_retryable')
    expect(await runner.get(queued)).toEqual(succeeded)
  })

  it("another scope's job, and a missing one, reject with JobNotFoundError and change nothing", async () => {
    const { runner, kind, ends } = setup()
    const id = await kind.enqueue({ n: 1 }, { scope: 'h1' })
    await runner.start()
    await ends.nth(id, 1)
    const failed = await runner.get(id)
    expect(failed.status).toBe('failed')
    await expect(runner.retry(id, { scope: 'h2' })).rejects.toBeInstanceOf(JobNotFoundError)
    await expect(runner.retry(id, { scope: null })).rejects.toBeInstanceOf(JobNotFoundError)
    await expect(runner.retry(MISSING)).rejects.toBeInstanceOf(JobNotFoundError)
    await expect(runner.retry(MISSING, { scope: 'h1' })).rejects.toBeInstanceOf(JobNotFoundError)
    expect(await runner.get(id)).toEqual(failed)
    await expect(runner.retry(id, { scope: 'h1', other: 1 } as never)).rejects.toBeInstanceOf(InvalidArgumentError)
    expect(await runner.get(id)).toEqual(failed)
    expect(await runner.retry(id, { scope: 'h1' })).toBe('queued')
  })

  it("a failed job whose unique key another live job now holds is left failed ('unique_key_held'); once that job ends, it can be retried", async () => {
    const { runner, kind, ends, script } = setup()
    const first = await kind.enqueue({ n: 1 }, { uniqueKey: 'week-49', scope: 'h1' })
    await runner.start()
    await ends.nth(first, 1)
    const failed = await runner.get(first)
    expect(failed.status).toBe('failed')
    // The key is free once the first job failed: a second job takes it, and is held running.
    const release = gate<void>()
    script.hold = release.promise
    const started = new Promise<void>((resolve) => (script.started = resolve))
    const second = await kind.enqueueUnique({ n: 2 }, { uniqueKey: 'week-49', scope: 'h1' })
    expect(second.created).toBe(true)
    await started
    expect(await runner.retry(first, { scope: 'h1' })).toBe('unique_key_held')
    expect(await runner.get(first)).toEqual(failed)
    script.fail = false
    script.hold = undefined
    script.started = undefined
    release.open()
    await ends.nth(second.id, 1)
    expect((await runner.get(second.id)).status).toBe('succeeded')
    expect(await runner.retry(first, { scope: 'h1' })).toBe('queued')
    await ends.nth(first, 2)
    expect(await runner.get(first)).toMatchObject({ status: 'succeeded', attempt: 2 })
  })

  it('two retries of one failed job at once: one queues it, the other finds it not retryable, and it runs once more', async () => {
    const { runner, kind, starts, ends, script } = setup()
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    await ends.nth(id, 1)
    script.fail = false
    const other = h.runner({ driver: h.store.driver() })
    const results = await Promise.all([runner.retry(id), other.retry(id), runner.retry(id), other.retry(id)])
    expect(results.filter((r) => r === 'queued')).toHaveLength(1)
    expect(results.filter((r) => r === 'not_retryable')).toHaveLength(3)
    await ends.nth(id, 2)
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, maxAttempts: 2 })
    expect(starts.attempts(id)).toEqual([1, 2])
  })

  it("a retry made by another process reaches an idle worker: at once on PostgreSQL (its notification), by a wake on SQLite", async () => {
    const worker = h.runner({ workers: 1, driver: h.store.driver({ pollIntervalMs: 3_600_000 }) })
    let fail = true
    const kind = worker.register('work', {
      payload: echoPayload,
      failures: ['provider_unavailable'],
      handler: (_p, job) => (fail ? job.fail('provider_unavailable') : undefined),
    })
    const done = track(worker)
    const id = await kind.enqueue({ n: 1 })
    await worker.start()
    await done.ends([id])
    fail = false
    const ends = endsOf(worker)
    const operator = h.runner({ driver: h.store.driver() })
    expect(await operator.retry(id)).toBe('queued')
    // The worker polls hourly: only the notification the retry sends (or, on SQLite, a wake) reaches it.
    if (!backend.wakesOnCommit) worker.wake()
    await ends.nth(id, 1)
    expect((await worker.get(id)).status).toBe('succeeded')
  })

  it("a job that becomes retryable between retry()'s statements (found running, then failed by its final write) is queued, never answered 'not_retryable'", async () => {
    const real = h.store.driver()
    const id = randomUUID()
    await real.jobInsertMany({ jobs: [{ id, kind: 'work', payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: T0 })
    const [claimed] = await real.jobClaim({ limit: 1, runnerId: 'elsewhere', kinds: ['work'], now: T0 + 1 })
    expect(claimed?.id).toBe(id)
    // The update finds the job running; before the read, its final write fails it.
    const { driver, fired } = afterFirstCall(real, 'jobQueueNow', async (result) => {
      expect(result).toBe('unchanged')
      const failed = { id, attempt: claimed!.attempt, status: 'failed', result: null, error: 'provider_unavailable', runAt: null } as const
      expect(await real.jobFinishMany({ finishes: [failed], now: T0 + 2 })).toEqual([true])
    })
    const runner = h.runner({ driver, clock: () => T0 + 3 })
    expect(await runner.retry(id)).toBe('queued')
    expect(fired()).toBe(true)
    expect(await runner.get(id)).toMatchObject({ status: 'queued', error: null, attempt: 1, maxAttempts: 2, runAt: T0 + 3 })
  })
})
