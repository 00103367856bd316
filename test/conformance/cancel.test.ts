import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { defineKind, InvalidArgumentError, JobNotFoundError, type Runner } from 'jobtable'
import { postgresBackend, sqliteBackend, type Backend } from '../support/backends.js'
import { afterFirstCall } from '../support/intercept.js'
import { echoPayload, harness } from '../support/harness.js'
import { aborted, gate, track } from '../support/wait.js'

/** Far from the real time, so a due time compared with another clock than the runner's shows. */
const T0 = 1_000_000
const MISSING = '00000000-0000-4000-8000-000000000000'

/**
 * Both backends, made quiet: no poll and no notification reaches a runner
 * within a test (the SQLite stores poll hourly; PostgreSQL here does not
 * listen and polls hourly). A runner then learns of a cancellation only
 * from its own cancel(), and a cancellation requested through another
 * runner reaches only the database: each test exercises the one path it
 * names.
 */
const quiet: Backend[] = [sqliteBackend, postgresBackend({ listen: false, pollIntervalMs: 3_600_000 })]

/** The error fn throws, or the promise it returns rejects with; undefined when it succeeds. */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return undefined
}

describe.each(quiet)('$name: cancellation', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  const h = harness(backend)

  /** Handler starts by job id, recorded first thing in every handler. */
  const ledger = () => {
    const starts = new Map<string, number>()
    return { start: (id: string) => void starts.set(id, (starts.get(id) ?? 0) + 1), of: (id: string) => starts.get(id) ?? 0 }
  }

  it('a queued job: cancel() resolves "cancelled", the job is cancelled at once, and a worker started afterwards never starts it', async () => {
    const runner = h.runner({ workers: 1 })
    const starts = ledger()
    const kind = runner.register('echo', { payload: echoPayload, handler: (_p, job) => void starts.start(job.id) })
    const done = track(runner)
    const victim = await kind.enqueue({ n: 1 })
    // Enqueued after the victim, at the same priority: the single worker would claim the victim first if it were queued.
    const sentinel = await kind.enqueue({ n: 2 })
    expect(await runner.cancel(victim)).toBe('cancelled')
    expect(await runner.get(victim)).toMatchObject({ id: victim, status: 'cancelled', result: null, error: null, attempt: 0 })

    await runner.start()
    await done.ends([sentinel])
    expect(starts.of(sentinel)).toBe(1)
    expect(starts.of(victim)).toBe(0)
    expect(done.started).not.toContain(victim)
    expect(await runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
    done.stop()
  })

  it('a scheduled job: cancel() resolves "cancelled", and once its due time has passed a worker started afterwards never starts it', async () => {
    const clock = { now: T0 }
    const runner = h.runner({ workers: 1, clock: () => clock.now })
    const starts = ledger()
    const kind = runner.register('echo', { payload: echoPayload, handler: (_p, job) => void starts.start(job.id) })
    const done = track(runner)
    // Due before the sentinel and inserted before it: were it still scheduled, it would be promoted and claimed first.
    const victim = await kind.enqueue({ n: 1 }, { runAt: T0 + 1_000 })
    const sentinel = await kind.enqueue({ n: 2 }, { runAt: T0 + 2_000 })
    expect((await runner.get(victim)).status).toBe('scheduled')
    expect(await runner.cancel(victim)).toBe('cancelled')
    expect(await runner.get(victim)).toMatchObject({ status: 'cancelled', result: null, error: null, attempt: 0 })

    clock.now = T0 + 10_000
    await runner.start()
    await done.ends([sentinel])
    expect(starts.of(sentinel)).toBe(1)
    expect(starts.of(victim)).toBe(0)
    expect(await runner.get(victim)).toMatchObject({ status: 'cancelled', error: null, attempt: 0 })
    done.stop()
  })

  /**
   * A started runner whose handler records its start and its signal, waits
   * for the signal to abort, then ends as `end` says: returning a result,
   * failing with a declared code, or throwing.
   */
  const running = (options: { retry?: boolean; idempotent?: boolean; workers?: number } = {}) => {
    const runner = h.runner({ workers: options.workers ?? 2 })
    const starts = ledger()
    const signals = new Map<string, AbortSignal>()
    const ends = ['return', 'declared', 'throw'] as const
    const def = defineKind('planned', {
      payload: echoPayload,
      result: (r: { n: number }) => r,
      failures: ['provider_unavailable'],
      ...(options.retry ? { retry: { maxAttempts: 5, codes: ['provider_unavailable', 'internal_error'], backoff: { baseMs: 1, maxMs: 1 } } } : {}),
      ...(options.idempotent ? { idempotent: true } : {}),
    })
    const kind = runner.register(def, async ({ n }, job) => {
      starts.start(job.id)
      signals.set(job.id, job.signal)
      await job.publish({ n: -n })
      await aborted(job.signal)
      const end = ends[n % 3]!
      if (end === 'declared') return job.fail('provider_unavailable')
      if (end === 'throw') throw new Error('stopping on cancel')
      return { n }
    })
    return { runner, kind, starts, signals, done: track(runner) }
  }

  it('a job running in this process: cancel() resolves "requested" with its signal already aborted, and it ends cancelled (error null) whether its handler then returns a result (kept), fails with a declared code or throws', async () => {
    const r = running({ workers: 3 })
    await r.runner.start()
    // n % 3: 0 returns { n }, 1 fails with a declared code, 2 throws.
    const ids = [await r.kind.enqueue({ n: 3 }), await r.kind.enqueue({ n: 4 }), await r.kind.enqueue({ n: 5 })]
    await r.done.starts(3)
    for (const id of ids) {
      expect((await r.runner.get(id)).status).toBe('running')
      expect(r.signals.get(id)!.aborted).toBe(false)
      expect(await r.runner.cancel(id)).toBe('requested')
      // At once, in this process: no poll or notification reaches this runner here.
      expect(r.signals.get(id)!.aborted).toBe(true)
    }
    await r.done.ends(ids)
    const [returned, declared, threw] = ids as [string, string, string]
    // A returned result is kept as the public result; a failure keeps the last partial one.
    expect(await r.runner.get(returned)).toMatchObject({ status: 'cancelled', error: null, result: { n: 3 }, attempt: 1 })
    expect(await r.runner.get(declared)).toMatchObject({ status: 'cancelled', error: null, result: { n: -4 }, attempt: 1 })
    expect(await r.runner.get(threw)).toMatchObject({ status: 'cancelled', error: null, result: { n: -5 }, attempt: 1 })
    for (const id of ids) expect(r.starts.of(id)).toBe(1)
    r.done.stop()
  })

  it('a handler that first asks for its signal after the cancellation gets it already aborted', async () => {
    const runner = h.runner()
    const release = gate()
    const seen: boolean[] = []
    const kind = runner.register('late', {
      payload: echoPayload,
      handler: async (_p, job) => {
        await release.promise
        seen.push(job.signal.aborted)
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    expect(await runner.cancel(id)).toBe('requested')
    release.open()
    await done.ends([id])
    expect(seen).toEqual([true])
    expect(await runner.get(id)).toMatchObject({ status: 'cancelled', error: null })
    done.stop()
  })

  it('a cancelled job of a kind with retries is not retried, whether its handler then fails with a retried declared code or throws', async () => {
    const r = running({ retry: true })
    await r.runner.start()
    const ids = [await r.kind.enqueue({ n: 1 }), await r.kind.enqueue({ n: 2 })]
    await r.done.starts(2)
    for (const id of ids) expect(await r.runner.cancel(id)).toBe('requested')
    await r.done.ends(ids)
    // Read right after each final write: a retry would have left it scheduled, queued or running again.
    for (const id of ids) {
      expect(await r.runner.get(id)).toMatchObject({ status: 'cancelled', error: null, attempt: 1, maxAttempts: 5 })
      expect(r.starts.of(id)).toBe(1)
    }
    r.done.stop()
  })

  it('a cancellation requested through another runner that never heard of it reaches the final write: the job ends cancelled, its returned result kept, and a retried failure is not retried', async () => {
    const worker = h.runner({ workers: 2 })
    const release = gate()
    const starts = ledger()
    const signals = new Map<string, AbortSignal>()
    const def = defineKind('planned', {
      payload: echoPayload,
      result: (r: { n: number }) => r,
      failures: ['provider_unavailable'],
      retry: { maxAttempts: 5, codes: ['provider_unavailable'], backoff: { baseMs: 1, maxMs: 1 } },
    })
    const kind = worker.register(def, async ({ n }, job) => {
      starts.start(job.id)
      signals.set(job.id, job.signal)
      await release.promise
      if (n === 2) return job.fail('provider_unavailable')
      return { n }
    })
    const done = track(worker)
    await worker.start()
    const [succeeds, fails] = [await kind.enqueue({ n: 1 }), await kind.enqueue({ n: 2 })] as [string, string]
    await done.starts(2)
    // A producer on its own connection, never started: only the database hears of it (this store neither notifies nor polls).
    const producer = h.runner()
    producer.register(def)
    expect(await producer.cancel(succeeds)).toBe('requested')
    expect(await producer.cancel(fails)).toBe('requested')
    expect(signals.get(succeeds)!.aborted).toBe(false)
    release.open()
    await done.ends([succeeds, fails])
    expect(await worker.get(succeeds)).toMatchObject({ status: 'cancelled', error: null, result: { n: 1 }, attempt: 1 })
    expect(await worker.get(fails)).toMatchObject({ status: 'cancelled', error: null, attempt: 1 })
    expect(starts.of(succeeds)).toBe(1)
    expect(starts.of(fails)).toBe(1)
    done.stop()
  })

  it('a cancelled job whose handler ends while its runner stops is recorded cancelled by that stop, not left running', async () => {
    const runner = h.runner()
    const release = gate()
    const kind = runner.register('slow', {
      payload: echoPayload,
      handler: async () => {
        await release.promise
        throw new Error('stopped')
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    expect(await runner.cancel(id)).toBe('requested')
    const stopped = runner.stop()
    release.open()
    await stopped
    expect(await runner.get(id)).toMatchObject({ status: 'cancelled', error: null })
    done.stop()
  })

  it('a cancel-requested job whose handler outlives its runner’s stop: the next start records it cancelled, neither failed as interrupted nor requeued (an idempotent kind)', async () => {
    const hold = gate()
    const starts = ledger()
    const make = () => {
      const runner = h.runner()
      const plain = runner.register('plain', { payload: echoPayload, handler: async (_p, job) => void starts.start(job.id) })
      const idem = runner.register(defineKind('idem', { payload: echoPayload, idempotent: true }), async (_p, job) => void starts.start(job.id))
      return { runner, plain, idem }
    }
    const first = h.runner()
    const held = async (_p: unknown, job: { id: string }) => {
      starts.start(job.id)
      await hold.promise // ignores its signal
    }
    const plain = first.register('plain', { payload: echoPayload, handler: held })
    const idem = first.register(defineKind('idem', { payload: echoPayload, idempotent: true }), held)
    const done = track(first)
    await first.start()
    const ids = [await plain.enqueue({ n: 1 }), await idem.enqueue({ n: 2 })]
    await done.starts(2)
    for (const id of ids) expect(await first.cancel(id)).toBe('requested')
    await first.stop({ timeoutMs: 0 })
    for (const id of ids) expect((await first.get(id)).status).toBe('running')

    const second = make()
    const seen = track(second.runner)
    await second.runner.start()
    for (const id of ids) expect(await second.runner.get(id)).toMatchObject({ status: 'cancelled', error: null, attempt: 1 })
    // Were the idempotent one requeued, the idle second runner would start it before this one.
    const sentinel = await second.idem.enqueue({ n: 3 })
    await seen.ends([sentinel])
    for (const id of ids) expect(starts.of(id)).toBe(1)
    hold.open()
    done.stop()
    seen.stop()
  })

  it('a finished job: cancel() resolves "terminal" and changes nothing (succeeded, failed, cancelled)', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', {
      payload: echoPayload,
      result: (n: number) => ({ n }),
      failures: ['nope'],
      handler: ({ n }, job) => (n === 2 ? job.fail('nope') : n),
    })
    const done = track(runner)
    await runner.start()
    const [succeeded, failed] = [await kind.enqueue({ n: 1 }), await kind.enqueue({ n: 2 })] as [string, string]
    await done.ends([succeeded, failed])
    const cancelled = await kind.enqueue({ n: 3 }, { runAt: Date.now() + 3_600_000 })
    expect(await runner.cancel(cancelled)).toBe('cancelled')
    const before = await Promise.all([succeeded, failed, cancelled].map((id) => runner.get(id)))
    expect(before.map((j) => [j.status, j.error, j.result])).toEqual([
      ['succeeded', null, { n: 1 }],
      ['failed', 'nope', null],
      ['cancelled', null, null],
    ])
    for (const id of [succeeded, failed, cancelled]) expect(await runner.cancel(id)).toBe('terminal')
    expect(await Promise.all([succeeded, failed, cancelled].map((id) => runner.get(id)))).toEqual(before)
    done.stop()
  })

  it('an unknown id, or another scope’s job (queued, running or finished), rejects with JobNotFoundError and changes nothing; the job’s own scope cancels it', async () => {
    const runner = h.runner()
    const release = gate()
    const signals = new Map<string, AbortSignal>()
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async (_p, job) => {
        signals.set(job.id, job.signal)
        await release.promise
      },
    })
    const queued = runner.register(defineKind('unhandled', { payload: echoPayload }))
    const done = track(runner)
    await runner.start()

    expect(await thrown(() => runner.cancel(MISSING))).toBeInstanceOf(JobNotFoundError)
    expect(await thrown(() => runner.cancel('not an id'))).toBeInstanceOf(JobNotFoundError)
    expect(await thrown(() => runner.cancel(42 as unknown as string))).toBeInstanceOf(JobNotFoundError)
    expect(await thrown(() => runner.cancel(MISSING, { delay: 1 } as never))).toBeInstanceOf(InvalidArgumentError)

    // A job no runner here handles stays queued.
    const waiting = await queued.enqueue({ n: 1 }, { scope: 'household-a' })
    for (const scope of ['household-b', null]) {
      expect(await thrown(() => runner.cancel(waiting, { scope }))).toBeInstanceOf(JobNotFoundError)
    }
    expect((await runner.get(waiting)).status).toBe('queued')

    const busy = await kind.enqueue({ n: 2 }, { scope: 'household-a' })
    await done.starts(1)
    expect(await thrown(() => runner.cancel(busy, { scope: 'household-b' }))).toBeInstanceOf(JobNotFoundError)
    expect(signals.get(busy)!.aborted).toBe(false)
    release.open()
    await done.ends([busy])
    // Nothing was requested of it: it succeeded.
    expect((await runner.get(busy)).status).toBe('succeeded')
    // Finished, it is still another scope's: not found, rather than 'terminal'.
    expect(await thrown(() => runner.cancel(busy, { scope: 'household-b' }))).toBeInstanceOf(JobNotFoundError)
    expect(await runner.cancel(busy, { scope: 'household-a' })).toBe('terminal')

    expect(await runner.cancel(waiting, { scope: 'household-a' })).toBe('cancelled')
    expect((await runner.get(waiting)).status).toBe('cancelled')
    done.stop()
  })

  it('list({ status: "cancelled" }) lists exactly the cancelled jobs', async () => {
    const runner: Runner = h.runner()
    const kind = runner.register(defineKind('unhandled', { payload: echoPayload }))
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }])
    const scheduled = await kind.enqueue({ n: 5 }, { delayMs: 3_600_000 })
    for (const id of [ids[1]!, ids[3]!, scheduled]) expect(await runner.cancel(id)).toBe('cancelled')
    const page = await runner.list({ status: 'cancelled' })
    expect(page.jobs.map((j) => j.id).sort()).toEqual([ids[1]!, ids[3]!, scheduled].sort())
    expect(page.jobs.every((j) => j.status === 'cancelled')).toBe(true)
    expect((await runner.list({ status: 'queued' })).jobs.map((j) => j.id).sort()).toEqual([ids[0]!, ids[2]!].sort())
  })

  it('a job that moves between cancel()\'s statements (found running, then sent back to the queue by its retry write) is cancelled, never answered "terminal"', async () => {
    const real = h.store.driver()
    const id = randomUUID()
    await real.jobInsertMany({ jobs: [{ id, kind: 'work', payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 3, timeoutMs: null, requeueInterrupted: false }], now: T0 })
    const [claimed] = await real.jobClaim({ limit: 1, runnerId: 'elsewhere', kinds: ['work'], now: T0 + 1 })
    expect(claimed?.id).toBe(id)
    // The first statement finds the job running, not waiting; before the second, its handler's retry write sends it back, due in an hour.
    const { driver, fired } = afterFirstCall(real, 'jobCancelWaiting', async () => {
      const retry = { id, attempt: claimed!.attempt, status: 'retry', result: null, error: null, runAt: T0 + 3_600_000 } as const
      expect(await real.jobFinishMany({ finishes: [retry], now: T0 + 2 })).toEqual([true])
    })
    const runner = h.runner({ driver, clock: () => T0 + 3 })
    expect(await runner.cancel(id)).toBe('cancelled')
    expect(fired()).toBe(true)
    expect(await runner.get(id)).toMatchObject({ status: 'cancelled', error: null })
  })
})
