import { expect, it } from 'vitest'
import { z } from 'zod'
import { InvalidArgumentError, JobNotRunningError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { endsOf, ledger } from '../support/attempts.js'
import { aborted, gate, until } from '../support/wait.js'

/** Far from the real time; the deadlines themselves run on real timers, whatever the clock says. */
const T0 = 1_000_000
const HOUR = 3_600_000

/**
 * What a handler does, by `job.attempt` (1-based; the last mode repeats):
 * `fail` waits for its signal and then fails with a declared code,
 * `return` waits for its signal and then returns a result, `publish`
 * publishes, waits for its signal, and publishes again (keeping what that
 * second publish threw), `hold` waits for the test's gate whatever its
 * signal does, and `quick` returns at once.
 */
const modePayload = z.strictObject({ modes: z.array(z.enum(['fail', 'return', 'publish', 'hold', 'quick'])), key: z.string().optional() })

describeEachBackend('timeouts', (backend) => {
  const h = harness(backend)

  /** A runner with `workers` and `timeoutGraceMs`, and `kind(name, options)` to register moded kinds before `start()`. */
  const setup = (runnerOptions: { workers: number; timeoutGraceMs?: number }) => {
    const clock = { now: T0 }
    // A short stop timeout: a test that fails while a handler is held does not hold the harness's close for 20 s.
    const runner = h.runner({ ...runnerOptions, clock: () => clock.now, stopTimeoutMs: 200 })
    const starts = ledger()
    const ends = endsOf(runner)
    const release = gate()
    /** Per job id: whether its handler returned, whether its signal had aborted when it did, and what a publish after the deadline threw. */
    const seen = new Map<string, { returned: boolean; abortedAtEnd?: boolean; latePublish?: unknown }>()
    const kind = (name: string, options: { timeoutMs?: number; retry?: { maxAttempts: number; codes: ('timeout' | 'provider_unavailable')[] } } = {}) =>
      runner.register(name, {
        payload: modePayload,
        failures: ['provider_unavailable'],
        result: (r: { attempt: number }) => r,
        ...options,
        handler: async ({ modes }, job) => {
          starts.start(job.id, job.attempt)
          const record: { returned: boolean; abortedAtEnd?: boolean; latePublish?: unknown } = { returned: false }
          seen.set(job.id, record)
          const mode = modes[Math.min(job.attempt, modes.length) - 1]!
          try {
            switch (mode) {
              case 'quick':
                return { attempt: job.attempt }
              case 'hold':
                await release.promise
                // Well past any deadline it had: a publish now must be refused.
                record.latePublish = await job.publish({ attempt: -1 }).then(
                  () => 'applied',
                  (err: unknown) => err,
                )
                return { attempt: job.attempt }
              case 'fail':
                await aborted(job.signal)
                return job.fail('provider_unavailable')
              case 'return':
                await aborted(job.signal)
                return { attempt: job.attempt }
              case 'publish':
                await job.publish({ attempt: job.attempt })
                await aborted(job.signal)
                record.latePublish = await job.publish({ attempt: 99 }).then(
                  () => 'applied',
                  (err: unknown) => err,
                )
                return { attempt: job.attempt }
            }
          } finally {
            record.abortedAtEnd = job.signal.aborted
            record.returned = true
          }
        },
      })
    return { clock, runner, kind, starts, ends, release, seen }
  }

  it('a kind\'s timeoutMs: at the deadline the job\'s signal aborts and it fails with timeout, not the declared code its handler then throws nor the result it then returns', async () => {
    const s = setup({ workers: 2 })
    const slow = s.kind('slow', { timeoutMs: 50 })
    await s.runner.start()
    const failing = await slow.enqueue({ modes: ['fail'] })
    const returning = await slow.enqueue({ modes: ['return'] })
    await s.ends.nth(failing, 1)
    await s.ends.nth(returning, 1)
    expect(await s.runner.get(failing)).toMatchObject({ status: 'failed', error: 'timeout', attempt: 1, maxAttempts: 1 })
    expect(await s.runner.get(returning)).toMatchObject({ status: 'failed', error: 'timeout', result: null, attempt: 1, maxAttempts: 1 })
    expect(s.ends.of(failing)).toEqual([{ status: 'failed', error: 'timeout' }])
    expect(s.seen.get(failing)).toMatchObject({ returned: true, abortedAtEnd: true })
    expect(s.starts.starts(failing)).toBe(1)
    expect(s.starts.starts(returning)).toBe(1)
  })

  it('a handler that ignores its signal and never returns: with timeoutGraceMs 50 its job is recorded failed/timeout while it still runs, and on 1 worker the job queued behind it does not start until it returns', async () => {
    const s = setup({ workers: 1, timeoutGraceMs: 50 })
    const stuck = s.kind('stuck', { timeoutMs: 50 })
    await s.runner.start()
    const first = await stuck.enqueue({ modes: ['hold'] })
    await until(s.runner, first, (j) => j.status === 'running')
    const second = await stuck.enqueue({ modes: ['quick'] })

    await s.ends.nth(first, 1)
    expect(await s.runner.get(first)).toMatchObject({ status: 'failed', error: 'timeout', attempt: 1 })
    expect(s.seen.get(first)).toMatchObject({ returned: false })
    // However often the runner is woken, the slot the stuck handler holds stays taken.
    for (let i = 0; i < 20; i++) {
      s.runner.wake()
      await s.runner.get(second)
    }
    expect(s.starts.starts(second)).toBe(0)
    expect(s.seen.get(first)).toMatchObject({ returned: false })

    s.release.open()
    await s.ends.nth(second, 1)
    expect(await s.runner.get(second)).toMatchObject({ status: 'succeeded', result: { attempt: 1 }, attempt: 1 })
    // What the stuck handler did after it was recorded changes nothing.
    expect(s.seen.get(first)).toMatchObject({ returned: true })
    expect(s.seen.get(first)!.latePublish).toBeInstanceOf(JobNotRunningError)
    expect(await s.runner.get(first)).toMatchObject({ status: 'failed', error: 'timeout', result: null, attempt: 1 })
    expect(s.starts.starts(first)).toBe(1)
    expect(s.starts.starts(second)).toBe(1)
  })

  it('the final write of a job timed out while its handler still runs claims nothing for that taken slot: the job behind it stays queued (attempt 0), and an idle runner beside it runs it', async () => {
    const s = setup({ workers: 1, timeoutGraceMs: 50 })
    const stuck = s.kind('stuck', { timeoutMs: 50 })
    // On the same clock: a runner on the real one would find the first job finished in 1970, and prune it at its start.
    const beside = h.runner({ workers: 1, clock: () => s.clock.now })
    beside.register('stuck', {
      payload: modePayload,
      timeoutMs: 50,
      result: (r: { attempt: number }) => r,
      handler: (_p, job) => {
        s.starts.start(job.id, job.attempt)
        return { attempt: job.attempt }
      },
    })
    const besideEnds = endsOf(beside)
    await s.runner.start()
    const first = await stuck.enqueue({ modes: ['hold'] })
    await until(s.runner, first, (j) => j.status === 'running')
    const second = await stuck.enqueue({ modes: ['quick'] })

    await s.ends.nth(first, 1)
    expect(await s.runner.get(first)).toMatchObject({ status: 'failed', error: 'timeout' })
    expect(s.seen.get(first)).toMatchObject({ returned: false })
    // Not claimed by the stuck runner, which could not start it: still anyone's to take.
    expect(await s.runner.get(second)).toMatchObject({ status: 'queued', attempt: 0 })

    await beside.start()
    beside.wake()
    await besideEnds.nth(second, 1)
    expect(await s.runner.get(second)).toMatchObject({ status: 'succeeded', attempt: 1 })
    expect(s.seen.get(first)).toMatchObject({ returned: false })
    s.release.open()
    await until(s.runner, first, () => s.seen.get(first)!.returned)
    expect(s.starts.starts(second)).toBe(1)
    expect(s.ends.of(second)).toEqual([])
  })

  it('a per-job timeoutMs on a kind without one times the job out the same way; the kind\'s other jobs have no deadline', async () => {
    const s = setup({ workers: 2 })
    const plain = s.kind('plain')
    await s.runner.start()
    const untimed = await plain.enqueue({ modes: ['hold'] })
    await until(s.runner, untimed, (j) => j.status === 'running')
    const timed = await plain.enqueue({ modes: ['return'] }, { timeoutMs: 50 })
    await s.ends.nth(timed, 1)
    expect(await s.runner.get(timed)).toMatchObject({ status: 'failed', error: 'timeout', attempt: 1 })
    // Started before the timed job, still running after its deadline, its signal untouched.
    expect(s.seen.get(untimed)).toMatchObject({ returned: false })
    expect(await s.runner.get(untimed)).toMatchObject({ status: 'running' })
    s.release.open()
    await s.ends.nth(untimed, 1)
    expect(await s.runner.get(untimed)).toMatchObject({ status: 'succeeded', result: { attempt: 1 } })
    expect(s.seen.get(untimed)).toMatchObject({ abortedAtEnd: false, latePublish: 'applied' })
  })

  it('a per-job timeoutMs overrides the kind\'s: a job given a long one outlives the kind\'s 50 ms deadline that times out its neighbour', async () => {
    const s = setup({ workers: 2 })
    const slow = s.kind('slow', { timeoutMs: 50 })
    await s.runner.start()
    const patient = await slow.enqueue({ modes: ['hold'] }, { timeoutMs: HOUR })
    await until(s.runner, patient, (j) => j.status === 'running')
    const neighbour = await slow.enqueue({ modes: ['return'] })
    await s.ends.nth(neighbour, 1)
    expect(await s.runner.get(neighbour)).toMatchObject({ status: 'failed', error: 'timeout' })
    expect(s.seen.get(patient)).toMatchObject({ returned: false })
    s.release.open()
    await s.ends.nth(patient, 1)
    expect(await s.runner.get(patient)).toMatchObject({ status: 'succeeded', result: { attempt: 1 } })
    expect(s.seen.get(patient)).toMatchObject({ abortedAtEnd: false, latePublish: 'applied' })
  })

  it('refuses a per-job timeoutMs that is not an integer > 0, storing nothing', async () => {
    const s = setup({ workers: 1 })
    const plain = s.kind('plain')
    for (const timeoutMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '50']) {
      await expect(plain.enqueue({ modes: ['quick'] }, { timeoutMs: timeoutMs as number }), String(timeoutMs)).rejects.toBeInstanceOf(InvalidArgumentError)
    }
    expect((await s.runner.list()).jobs).toEqual([])
  })

  it('timeout is retried when the kind lists it in retry.codes, and the deadline holds at every attempt; a kind retrying other codes fails it at once', async () => {
    const s = setup({ workers: 2 })
    const retried = s.kind('retried', { timeoutMs: 50, retry: { maxAttempts: 2, codes: ['timeout'] } })
    const other = s.kind('other', { timeoutMs: 50, retry: { maxAttempts: 2, codes: ['provider_unavailable'] } })
    const perJob = s.kind('per_job', { retry: { maxAttempts: 2, codes: ['timeout'] } })
    await s.runner.start()
    const recovers = await retried.enqueue({ modes: ['return', 'quick'] })
    const notRetried = await other.enqueue({ modes: ['return', 'quick'] })
    const twice = await perJob.enqueue({ modes: ['return'] }, { timeoutMs: 50 })

    await s.ends.nth(notRetried, 1)
    expect(await s.runner.get(notRetried)).toMatchObject({ status: 'failed', error: 'timeout', attempt: 1, maxAttempts: 2 })

    for (const id of [recovers, twice]) {
      await s.ends.nth(id, 1)
      const job = await s.runner.get(id)
      expect(job).toMatchObject({ status: 'scheduled', error: null, attempt: 1, maxAttempts: 2 })
      expect(job.runAt).toBeGreaterThanOrEqual(s.clock.now + 500)
      expect(job.runAt).toBeLessThanOrEqual(s.clock.now + 1000)
    }
    s.clock.now += HOUR
    s.runner.wake()
    await s.ends.nth(recovers, 2)
    await s.ends.nth(twice, 2)
    expect(await s.runner.get(recovers)).toMatchObject({ status: 'succeeded', result: { attempt: 2 }, attempt: 2 })
    // Its own timeoutMs was kept for the second attempt: it timed out again, its last attempt.
    expect(await s.runner.get(twice)).toMatchObject({ status: 'failed', error: 'timeout', attempt: 2 })
    expect(s.starts.attempts(twice)).toEqual([1, 2])
    expect(s.starts.attempts(notRetried)).toEqual([1])
  })

  it('a publish after the deadline is refused (JobNotRunningError) and changes nothing: the job keeps the partial result published before it', async () => {
    const s = setup({ workers: 1 })
    const slow = s.kind('slow', { timeoutMs: 50 })
    await s.runner.start()
    const id = await slow.enqueue({ modes: ['publish'] })
    await s.ends.nth(id, 1)
    expect(s.seen.get(id)!.latePublish).toBeInstanceOf(JobNotRunningError)
    expect(await s.runner.get(id)).toMatchObject({ status: 'failed', error: 'timeout', result: { attempt: 1 } })
  })
})
