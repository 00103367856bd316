import { afterEach, expect, it, vi } from 'vitest'
import { z } from 'zod'
import { defineKind, JobFailure, JobNotRunningError, RegistrationError, type Job, type JobContext } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { endsOf, ledger } from '../support/attempts.js'
import { gate } from '../support/wait.js'

/** Far from the real time, so a due time taken from Date.now() instead of the runner's clock shows. */
const T0 = 1_000_000
const HOUR = 3_600_000

/**
 * What the handler does at each attempt, by `job.attempt` (1-based): a
 * declared code fails with it, `throw` throws a plain Error (internal_error),
 * `undeclared` fails with a code the kind did not declare, `snooze` snoozes
 * 5 s, and `ok` (or no step) returns `{ attempt }`.
 */
const scriptPayload = z.strictObject({ steps: z.array(z.enum(['ok', 'provider_unavailable', 'bad_input', 'throw', 'undeclared', 'snooze'])) })
type Step = z.infer<typeof scriptPayload>['steps'][number]
const FAILURES = ['provider_unavailable', 'bad_input'] as const
type RetryCode = (typeof FAILURES)[number] | 'internal_error' | 'timeout'
interface Retry {
  maxAttempts: number
  codes?: RetryCode[]
  backoff?: { baseMs?: number; maxMs?: number }
}

/** The retry of the brief: 3 attempts, provider_unavailable only, 1 s doubling to at most 60 s. */
const RETRY: Retry = { maxAttempts: 3, codes: ['provider_unavailable'], backoff: { baseMs: 1000, maxMs: 60_000 } }

describeEachBackend('retries, snooze, and fencing across attempts', (backend) => {
  const h = harness(backend)

  afterEach(() => {
    vi.restoreAllMocks()
  })

  /**
   * A runner on the test clock with one worker, a `sentinel` kind, and
   * `kind(name, retry?)` to register scripted kinds before `start()`.
   * `hold`, when set, is awaited by the handler after it publishes at the
   * attempt `holdAt`.
   */
  const setup = () => {
    const clock = { now: T0 }
    const runner = h.runner({ workers: 1, clock: () => clock.now })
    const starts = ledger()
    const ends = endsOf(runner)
    const contexts = new Map<string, JobContext<{ attempt: number }>[]>()
    const pause: { at: number; published: ReturnType<typeof gate<void>>; release: ReturnType<typeof gate<void>> } = { at: 0, published: gate(), release: gate() }
    const kind = (name: string, retry?: Retry) =>
      runner.register(name, {
        payload: scriptPayload,
        failures: FAILURES,
        result: (r: { attempt: number }) => r,
        ...(retry === undefined ? {} : { retry }),
        handler: async ({ steps }, job) => {
          starts.start(job.id, job.attempt)
          contexts.set(job.id, [...(contexts.get(job.id) ?? []), job])
          await job.publish({ attempt: job.attempt })
          if (pause.at === job.attempt) {
            pause.published.open()
            await pause.release.promise
          }
          const step: Step = steps[job.attempt - 1] ?? 'ok'
          switch (step) {
            case 'ok':
              return { attempt: job.attempt }
            case 'throw':
              throw new Error('provider said: token sk-secret is invalid')
            case 'undeclared':
              throw new JobFailure<string>('not_declared')
            case 'snooze':
              return job.snooze(5_000)
            default:
              return job.fail(step)
          }
        },
      })
    const sentinels = runner.register('sentinel', { payload: z.strictObject({}), handler: () => undefined })
    /**
     * Proves the job is not claimable now, without a clock: wakes the
     * runner many times, then runs a sentinel enqueued after it on the
     * single worker. A queued job keeps its place (insertion order), so a
     * claimable one would have started again before the sentinel ended.
     */
    const notRunAgain = async (id: string) => {
      const before = starts.starts(id)
      for (let i = 0; i < 10; i++) {
        runner.wake()
        await runner.get(id)
      }
      const sentinel = await sentinels.enqueue({})
      await ends.nth(sentinel, 1)
      expect(starts.starts(id)).toBe(before)
      return runner.get(id)
    }
    /** Moves the clock to the job's due time and wakes the runner, as a test of a later time does. */
    const reach = async (id: string) => {
      const job = await runner.get(id)
      expect(job.status).toBe('scheduled')
      clock.now = job.runAt!
      runner.wake()
    }
    return { clock, runner, kind, starts, ends, contexts, pause, notRunAgain, reach }
  }

  it('without retry, a failing job has one attempt: maxAttempts 1, failed at once with its code, and never run again', async () => {
    const s = setup()
    const plain = s.kind('plain')
    const declared = await plain.enqueue({ steps: ['provider_unavailable'] })
    const thrown = await plain.enqueue({ steps: ['throw'] })
    expect(await s.runner.get(declared)).toMatchObject({ status: 'queued', attempt: 0, maxAttempts: 1 })
    await s.runner.start()
    await s.ends.nth(declared, 1)
    await s.ends.nth(thrown, 1)
    expect(await s.runner.get(declared)).toMatchObject({ status: 'failed', error: 'provider_unavailable', attempt: 1, maxAttempts: 1 })
    expect(await s.runner.get(thrown)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 1, maxAttempts: 1 })
    expect(s.ends.of(declared)).toEqual([{ status: 'failed', error: 'provider_unavailable' }])
    s.clock.now = T0 + HOUR
    await s.notRunAgain(declared)
    expect(s.starts.starts(declared)).toBe(1)
    expect(s.starts.starts(thrown)).toBe(1)
  })

  it('retry: a provider_unavailable failure goes back scheduled (attempt 1, maxAttempts 3, runAt within the first backoff, error null), is not run before runAt, and runs as attempt 2 once the clock passes it and the runner wakes', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    const id = await flaky.enqueue({ steps: ['provider_unavailable', 'provider_unavailable', 'ok'] })
    expect(await s.runner.get(id)).toMatchObject({ status: 'queued', attempt: 0, maxAttempts: 3 })
    await s.runner.start()
    await s.ends.nth(id, 1)
    const first = await s.runner.get(id)
    // The last partial result is kept; nothing of the failure is shown while it waits.
    expect(first).toEqual({ id, kind: 'flaky', status: 'scheduled', result: { attempt: 1 }, error: null, attempt: 1, maxAttempts: 3, priority: 0, runAt: expect.any(Number) })
    expect(first.runAt).toBeGreaterThanOrEqual(T0 + 500)
    expect(first.runAt).toBeLessThanOrEqual(T0 + 1000)
    expect(s.ends.of(id)).toEqual([{ status: 'retry', error: null }])

    // However often it wakes, nothing runs it before its due time.
    expect(await s.notRunAgain(id)).toMatchObject({ status: 'scheduled', attempt: 1 })
    s.clock.now = first.runAt! - 1
    expect(await s.notRunAgain(id)).toMatchObject({ status: 'scheduled', attempt: 1 })

    await s.reach(id)
    await s.ends.nth(id, 2)
    expect(s.starts.attempts(id)).toEqual([1, 2])
    const second = await s.runner.get(id)
    expect(second).toMatchObject({ status: 'scheduled', attempt: 2, maxAttempts: 3, error: null })
    // The second backoff is measured from the clock at the second failure: 1 s to 2 s.
    expect(second.runAt! - s.clock.now).toBeGreaterThanOrEqual(1000)
    expect(second.runAt! - s.clock.now).toBeLessThanOrEqual(2000)

    await s.reach(id)
    await s.ends.nth(id, 3)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', result: { attempt: 3 }, error: null, attempt: 3, maxAttempts: 3 })
    expect(s.starts.attempts(id)).toEqual([1, 2, 3])
  })

  it('after its last attempt fails, a retried job is failed with that code, and a later clock and wake run nothing more', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    await s.runner.start()
    const id = await flaky.enqueue({ steps: ['provider_unavailable', 'provider_unavailable', 'provider_unavailable', 'ok'] })
    for (let n = 1; n <= 2; n++) {
      await s.ends.nth(id, n)
      expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', attempt: n, error: null })
      await s.reach(id)
    }
    await s.ends.nth(id, 3)
    expect(await s.runner.get(id)).toMatchObject({ status: 'failed', error: 'provider_unavailable', attempt: 3, maxAttempts: 3 })
    expect(s.ends.of(id).map((e) => e.status)).toEqual(['retry', 'retry', 'failed'])
    s.clock.now += HOUR
    expect(await s.notRunAgain(id)).toMatchObject({ status: 'failed', attempt: 3 })
    expect(s.starts.attempts(id)).toEqual([1, 2, 3])
  })

  it('a code not in retry.codes (bad_input) fails at once, with attempts left, on the first attempt or a later one', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    await s.runner.start()
    const first = await flaky.enqueue({ steps: ['bad_input'] })
    await s.ends.nth(first, 1)
    expect(await s.runner.get(first)).toMatchObject({ status: 'failed', error: 'bad_input', attempt: 1, maxAttempts: 3 })

    const later = await flaky.enqueue({ steps: ['provider_unavailable', 'bad_input'] })
    await s.ends.nth(later, 1)
    await s.reach(later)
    await s.ends.nth(later, 2)
    expect(await s.runner.get(later)).toMatchObject({ status: 'failed', error: 'bad_input', attempt: 2, maxAttempts: 3 })
    s.clock.now += HOUR
    await s.notRunAgain(first)
    expect(s.starts.starts(first)).toBe(1)
    expect(s.starts.starts(later)).toBe(2)
  })

  it('internal_error (a plain throw, an undeclared code) is retried only when retry.codes lists internal_error', async () => {
    const s = setup()
    const declaredOnly = s.kind('declared_only', RETRY)
    const withInternal = s.kind('with_internal', { ...RETRY, codes: ['provider_unavailable', 'internal_error'] })
    await s.runner.start()
    const thrown = await declaredOnly.enqueue({ steps: ['throw', 'ok'] })
    const undeclared = await declaredOnly.enqueue({ steps: ['undeclared', 'ok'] })
    await s.ends.nth(thrown, 1)
    await s.ends.nth(undeclared, 1)
    expect(await s.runner.get(thrown)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 1, maxAttempts: 3 })
    expect(await s.runner.get(undeclared)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 1, maxAttempts: 3 })

    const retried = await withInternal.enqueue({ steps: ['throw', 'undeclared', 'ok'] })
    await s.ends.nth(retried, 1)
    expect(await s.runner.get(retried)).toMatchObject({ status: 'scheduled', attempt: 1, error: null })
    await s.reach(retried)
    await s.ends.nth(retried, 2)
    expect(await s.runner.get(retried)).toMatchObject({ status: 'scheduled', attempt: 2, error: null })
    await s.reach(retried)
    await s.ends.nth(retried, 3)
    expect(await s.runner.get(retried)).toMatchObject({ status: 'succeeded', attempt: 3, result: { attempt: 3 } })
    expect(s.starts.starts(thrown)).toBe(1)
    expect(s.starts.starts(undeclared)).toBe(1)
  })

  /** Fails a job of `kind` at every attempt but the last, returning each wait: the due time less the clock at the failure. */
  const waits = async (s: ReturnType<typeof setup>, kind: ReturnType<ReturnType<typeof setup>['kind']>, failures: number) => {
    const id = await kind.enqueue({ steps: Array.from({ length: failures }, () => 'provider_unavailable' as const) })
    const delays: number[] = []
    for (let n = 1; n <= failures; n++) {
      await s.ends.nth(id, n)
      const job = await s.runner.get(id)
      expect(job).toMatchObject({ status: 'scheduled', attempt: n })
      delays.push(job.runAt! - s.clock.now)
      await s.reach(id)
    }
    await s.ends.nth(id, failures + 1)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: failures + 1 })
    return delays
  }

  it('backoff: attempt n waits between base·2^(n-1)/2 and base·2^(n-1), capped at maxMs; without backoff, base 1 s', async () => {
    const s = setup()
    const capped = s.kind('capped', { maxAttempts: 6, codes: ['provider_unavailable'], backoff: { baseMs: 1000, maxMs: 5000 } })
    const defaults = s.kind('defaults', { maxAttempts: 3, codes: ['provider_unavailable'] })
    await s.runner.start()
    const full = [1000, 2000, 4000, 5000, 5000] // 8000 and 16000 capped at 5000
    const delays = await waits(s, capped, 5)
    delays.forEach((d, i) => {
      expect(d, `attempt ${i + 1}`).toBeGreaterThanOrEqual(full[i]! / 2)
      expect(d, `attempt ${i + 1}`).toBeLessThanOrEqual(full[i]!)
    })
    const [d1, d2] = await waits(s, defaults, 2)
    expect(d1).toBeGreaterThanOrEqual(500)
    expect(d1).toBeLessThanOrEqual(1000)
    expect(d2).toBeGreaterThanOrEqual(1000)
    expect(d2).toBeLessThanOrEqual(2000)
  })

  it('backoff jitter takes off a random half at most: with the random source at 0 each wait is exactly half, near 1 exactly the full delay', async () => {
    const s = setup()
    const capped = s.kind('capped', { maxAttempts: 6, codes: ['provider_unavailable'], backoff: { baseMs: 1000, maxMs: 5000 } })
    await s.runner.start()
    const random = vi.spyOn(Math, 'random').mockReturnValue(0)
    expect(await waits(s, capped, 5)).toEqual([500, 1000, 2000, 2500, 2500])
    random.mockReturnValue(1 - 1e-12)
    expect(await waits(s, capped, 5)).toEqual([1000, 2000, 4000, 5000, 5000])
  })

  it('registration refuses a retry code neither declared nor internal_error/timeout, maxAttempts outside 1..1000, and unknown keys in retry or backoff, naming them', () => {
    const s = setup()
    const payload = z.strictObject({})
    const handler = () => undefined
    const attempt = (name: string, options: object) => {
      const errors: unknown[] = []
      for (const define of [
        () => defineKind(name, { payload, failures: ['provider_unavailable'], ...options } as never),
        () => s.runner.register(name, { payload, failures: ['provider_unavailable'], handler, ...options } as never),
      ]) {
        try {
          define()
          errors.push(undefined)
        } catch (err) {
          errors.push(err)
        }
      }
      return errors
    }
    const refused = (name: string, options: object, pattern: RegExp) => {
      for (const err of attempt(name, options)) {
        expect(err, name).toBeInstanceOf(RegistrationError)
        expect((err as RegistrationError).code, name).toBe('invalid_registration')
        expect((err as Error).message, name).toMatch(pattern)
      }
    }
    refused('undeclared_code', { retry: { maxAttempts: 3, codes: ['nope'] } }, /"nope"/)
    refused('reserved_unknown_kind', { retry: { maxAttempts: 3, codes: ['unknown_kind'] } }, /"unknown_kind"/)
    refused('zero', { retry: { maxAttempts: 0 } }, /maxAttempts/)
    refused('too_many', { retry: { maxAttempts: 1001 } }, /maxAttempts/)
    refused('fraction', { retry: { maxAttempts: 2.5 } }, /maxAttempts/)
    refused('missing', { retry: { codes: ['provider_unavailable'] } }, /maxAttempts/)
    refused('retry_key', { retry: { maxAttempts: 3, attempts: 3 } }, /unknown retry option "attempts"/)
    refused('backoff_key', { retry: { maxAttempts: 3, backoff: { baseMs: 100, factor: 2 } } }, /unknown retry\.backoff option "factor"/)
    refused('negative_base', { retry: { maxAttempts: 3, backoff: { baseMs: -1 } } }, /baseMs/)

    // The bounds and the two runner codes are accepted without declaring them.
    for (const [name, options] of [
      ['one', { retry: { maxAttempts: 1 } }],
      ['thousand', { retry: { maxAttempts: 1000 } }],
      ['runner_codes', { retry: { maxAttempts: 3, codes: ['internal_error', 'timeout', 'provider_unavailable'] } }],
    ] as const) {
      expect(attempt(name, options), name).toEqual([undefined, undefined])
    }
  })

  it('snooze on a kind without retry: back to scheduled at clock()+5000 with the attempt given back (maxAttempts 2, attempt 1), and it runs and succeeds once the clock passes', async () => {
    const s = setup()
    const plain = s.kind('plain')
    await s.runner.start()
    const id = await plain.enqueue({ steps: ['snooze', 'ok'] })
    await s.ends.nth(id, 1)
    expect(await s.runner.get(id)).toEqual({
      id,
      kind: 'plain',
      status: 'scheduled',
      result: { attempt: 1 },
      error: null,
      attempt: 1,
      maxAttempts: 2,
      priority: 0,
      runAt: T0 + 5000,
    } satisfies Job)
    expect(s.ends.of(id)).toEqual([{ status: 'snoozed', error: null }])
    s.clock.now = T0 + 4999
    expect(await s.notRunAgain(id)).toMatchObject({ status: 'scheduled', attempt: 1 })
    s.clock.now = T0 + 5000
    s.runner.wake()
    await s.ends.nth(id, 2)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', error: null, result: { attempt: 2 }, attempt: 2, maxAttempts: 2, runAt: T0 + 5000 })
    expect(s.starts.attempts(id)).toEqual([1, 2])
  })

  it('a snooze gives its attempt back on a retrying kind: snoozed once, the job still has all three failures it may retry (4 starts, maxAttempts 4)', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    await s.runner.start()
    const id = await flaky.enqueue({ steps: ['snooze', 'provider_unavailable', 'provider_unavailable', 'provider_unavailable', 'ok'] })
    await s.ends.nth(id, 1)
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', attempt: 1, maxAttempts: 4, runAt: T0 + 5000 })
    for (let n = 2; n <= 3; n++) {
      await s.reach(id)
      await s.ends.nth(id, n)
      expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', attempt: n, maxAttempts: 4 })
    }
    await s.reach(id)
    await s.ends.nth(id, 4)
    expect(await s.runner.get(id)).toMatchObject({ status: 'failed', error: 'provider_unavailable', attempt: 4, maxAttempts: 4 })
    expect(s.starts.attempts(id)).toEqual([1, 2, 3, 4])
  })

  it('fenced across attempts: a stale attempt\'s publish after its job went back to the queue is refused (JobNotRunningError) and changes nothing, nor once the next attempt runs', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    await s.runner.start()
    const id = await flaky.enqueue({ steps: ['provider_unavailable', 'ok'] })
    await s.ends.nth(id, 1)
    const [stale] = s.contexts.get(id)!
    expect(stale!.attempt).toBe(1)
    await expect(stale!.publish({ attempt: 99 })).rejects.toBeInstanceOf(JobNotRunningError)
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', attempt: 1, result: { attempt: 1 } })

    // Attempt 2 publishes, then waits: the stale publish lands while the job runs again.
    s.pause.at = 2
    await s.reach(id)
    await s.pause.published.promise
    await expect(stale!.publish({ attempt: 99 })).rejects.toBeInstanceOf(JobNotRunningError)
    expect(await s.runner.get(id)).toMatchObject({ status: 'running', attempt: 2, result: { attempt: 2 } })
    s.pause.release.open()
    await s.ends.nth(id, 2)
    await expect(stale!.publish({ attempt: 99 })).rejects.toBeInstanceOf(JobNotRunningError)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, result: { attempt: 2 }, error: null })
  })

  it('fenced in the database: attempt 1\'s publish, retry and final write through another connection are refused while attempt 2 runs', async () => {
    const s = setup()
    const flaky = s.kind('flaky', RETRY)
    await s.runner.start()
    const id = await flaky.enqueue({ steps: ['provider_unavailable', 'ok'] })
    await s.ends.nth(id, 1)
    s.pause.at = 2
    await s.reach(id)
    await s.pause.published.promise
    // As a process whose claim was taken over would write.
    const other = h.store.driver()
    const now = s.clock.now
    expect(await other.jobPublish({ id, attempt: 1, result: '{"attempt":99}', now })).toBe(false)
    const finish = { id, attempt: 1, result: null, error: null, runAt: null, grant: 0 as const }
    expect(await other.jobFinishMany({ finishes: [{ ...finish, status: 'retry', runAt: now + HOUR }], now })).toEqual([false])
    expect(await other.jobFinishMany({ finishes: [{ ...finish, status: 'failed', error: 'bad_input' }], now })).toEqual([false])
    expect(await other.jobFinishMany({ finishes: [{ ...finish, status: 'succeeded', result: '{"attempt":99}' }], now })).toEqual([false])
    expect(await s.runner.get(id)).toMatchObject({ status: 'running', attempt: 2, result: { attempt: 2 }, error: null, maxAttempts: 3 })
    s.pause.release.open()
    await s.ends.nth(id, 2)
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 2, result: { attempt: 2 }, error: null })
  })
})
