import { afterEach, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, defineKind, type JobContext, type KindDef, type Runner } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { endsOf, ledger } from '../support/attempts.js'
import { captureLogs } from '../support/logs.js'
import { gate, track } from '../support/wait.js'

const payload = z.strictObject({ n: z.number().int() })
const result = (r: { attempt: number }) => r
// Kind definitions as an application shares them between the processes of one deployment and the next.
const idempotent = defineKind('idem', { payload, result, idempotent: true })
const idempotentOnce = defineKind('idem_once', { payload, result, idempotent: true, retry: { maxAttempts: 1 } })
const plain = defineKind('plain', { payload, result })
// Retries are for failures a handler reports, not for crashes: attempts left do not queue a non-idempotent job again.
const plainRetrying = defineKind('plain_retrying', { payload, result, retry: { maxAttempts: 3 } })

describeEachBackend('idempotent kinds after a crash', (backend) => {
  const h = harness(backend)
  const starts = ledger()
  /** Released after each test: the handlers that ignored their stop, so nothing is left pending. */
  let stuckRelease = gate()
  afterEach(() => {
    stuckRelease.open()
    stuckRelease = gate()
  })

  const stuckHandler = async (_p: unknown, job: JobContext<{ attempt: number }>) => {
    starts.start(job.id, job.attempt)
    await stuckRelease.promise // ignores its signal
    return { attempt: job.attempt }
  }
  const quickHandler = (_p: unknown, job: JobContext<{ attempt: number }>) => {
    starts.start(job.id, job.attempt)
    return { attempt: job.attempt }
  }

  /**
   * A runner whose handler of `kind` ignores its signal runs the job
   * (enqueued first when `id` is not given), then stops with a stop
   * timeout: the job is left running under it, as a crashed process leaves it.
   */
  const crashWhileRunning = async (kind: KindDef<typeof payload, { attempt: number }, never>, id?: string): Promise<string> => {
    const runner = h.runner({ workers: 1 })
    const handle = runner.register(kind, stuckHandler)
    const done = track(runner)
    id ??= await handle.enqueue({ n: 1 })
    const before = starts.starts(id)
    await runner.start()
    await done.starts(1)
    expect(starts.starts(id)).toBe(before + 1)
    await runner.stop({ timeoutMs: 50 })
    expect(await runner.get(id)).toMatchObject({ status: 'running', attempt: before + 1 })
    return id
  }

  /** Starts a runner with no handler for the kinds: its start sweeps, and it claims nothing of them. */
  const sweepOnly = async (...kinds: KindDef<typeof payload, { attempt: number }, never>[]): Promise<{ runner: Runner; logs: ReturnType<typeof captureLogs> }> => {
    const logs = captureLogs()
    const runner = h.runner({ logger: logs })
    for (const kind of kinds) runner.register(kind)
    await runner.start()
    return { runner, logs }
  }

  it('an idempotent kind\'s job left running by a runner that stopped with a stop timeout is queued again (not failed) at the next start, and runs on the new runner as attempt 2', async () => {
    const id = await crashWhileRunning(idempotent)
    const { runner: web, logs } = await sweepOnly(idempotent)
    expect(await web.get(id)).toMatchObject({ status: 'queued', error: null, attempt: 1, maxAttempts: 3 })
    expect(logs.lines.find((l) => l.level === 'warn' && l.message.includes('queued again'))?.fields).toEqual({ count: 1 })
    expect(logs.lines.filter((l) => l.message.includes('failed jobs interrupted'))).toEqual([])

    const worker = h.runner({ workers: 1 })
    worker.register(idempotent, quickHandler)
    const ends = endsOf(worker)
    await worker.start()
    await ends.nth(id, 1)
    expect(await worker.get(id)).toMatchObject({ status: 'succeeded', error: null, result: { attempt: 2 }, attempt: 2, maxAttempts: 3 })
    expect(starts.attempts(id)).toEqual([1, 2])
  })

  it('the same on a worker\'s own start: a new runner with the handler sweeps, queues the job again and runs it as attempt 2', async () => {
    const id = await crashWhileRunning(idempotent)
    const worker = h.runner({ workers: 1 })
    worker.register(idempotent, quickHandler)
    const ends = endsOf(worker)
    await worker.start()
    await ends.nth(id, 1)
    expect(await worker.get(id)).toMatchObject({ status: 'succeeded', result: { attempt: 2 }, attempt: 2 })
    expect(ends.of(id)).toEqual([{ status: 'succeeded', error: null }])
    expect(starts.attempts(id)).toEqual([1, 2])
  })

  it('a non-idempotent kind\'s job in the same situation fails as interrupted by restart, and never runs again, even with retry attempts left', async () => {
    const id = await crashWhileRunning(plain)
    const retrying = await crashWhileRunning(plainRetrying)
    const worker = h.runner({ workers: 1 })
    const handle = worker.register(plain, quickHandler)
    worker.register(plainRetrying, quickHandler)
    const ends = endsOf(worker)
    await worker.start()
    expect(await worker.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED, attempt: 1, maxAttempts: 1 })
    expect(await worker.get(retrying)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED, attempt: 1, maxAttempts: 3 })
    // A job claimed after the sweep: the interrupted ones were not claimable.
    const sentinel = await handle.enqueue({ n: 2 })
    await ends.nth(sentinel, 1)
    expect(starts.attempts(id)).toEqual([1])
    expect(starts.attempts(retrying)).toEqual([1])
    expect(ends.of(id)).toEqual([])
    expect(ends.of(retrying)).toEqual([])
  })

  it('an idempotent kind\'s job that has used all its attempts (retry: { maxAttempts: 1 }) fails as interrupted by restart', async () => {
    const id = await crashWhileRunning(idempotentOnce)
    const { runner: web } = await sweepOnly(idempotentOnce)
    expect(await web.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED, attempt: 1, maxAttempts: 1 })
    const worker = h.runner({ workers: 1 })
    const handle = worker.register(idempotentOnce, quickHandler)
    const ends = endsOf(worker)
    await worker.start()
    await ends.nth(await handle.enqueue({ n: 2 }), 1)
    expect(starts.attempts(id)).toEqual([1])
  })

  it('an idempotent kind without retry has 3 attempts: queued again after the first and second crash, failed as interrupted after the third', async () => {
    const id = await crashWhileRunning(idempotent)
    await crashWhileRunning(idempotent, id)
    await crashWhileRunning(idempotent, id)
    expect(starts.attempts(id)).toEqual([1, 2, 3])
    const { runner: web } = await sweepOnly(idempotent)
    expect(await web.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED, attempt: 3, maxAttempts: 3 })
  })
})
