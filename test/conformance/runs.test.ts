import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, CODE_TIMEOUT, defineKind, JobFailure, type Driver } from 'jobtable'
import { describeEachBackend, postgresBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { FaultyDriver } from '../support/faults.js'
import { aborted, gate, track, until } from '../support/wait.js'

/*
 * A run is one execution of one attempt of one job (src/runner/run.ts).
 * These are the defects found where runs meet the lifecycle features:
 * two attempts of one job alive in one process, a limit while a handler
 * lingers past its deadline, a claim made for an idle worker while one
 * lingers, and a stale claim started after the database gave it up.
 */

const T0 = 1_000_000
const payload = z.strictObject({ n: z.number().int() })

/** Resolves once the log has a line whose message contains `text`. */
async function logged(logs: ReturnType<typeof captureLogs>, text: string): Promise<void> {
  while (!logs.lines.some((l) => l.message.includes(text))) await new Promise((r) => setTimeout(r, 5))
}

/** A few turns of the event loop: what a resolved claim starts has started by then. */
async function turns(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r))
}

/** Starts and ends of handlers, with the most that executed at once. */
function executing() {
  let now = 0
  let most = 0
  const starts: string[] = []
  return {
    starts,
    enter(key: string) {
      starts.push(key)
      most = Math.max(most, ++now)
    },
    leave() {
      now--
    },
    get most() {
      return most
    },
  }
}

describeEachBackend('runs', (backend) => {
  const h = harness(backend)

  it('two attempts of one job in one runner keep their own runs: the second is counted, cancellable, waited for by stop, and its success recorded', async () => {
    const logs = captureLogs()
    const runner = h.runner({ workers: 2, timeoutGraceMs: 0, clock: () => T0, logger: logs, stopTimeoutMs: 5_000 })
    const first = gate()
    const second = gate()
    const secondSignal = gate<AbortSignal>()
    const kind = runner.register('plan.lingering', {
      payload,
      timeoutMs: 30,
      retry: { maxAttempts: 2, codes: ['timeout'], backoff: { baseMs: 0, maxMs: 0 } },
      result: (r: { attempt: number }) => r,
      handler: async (_p, job) => {
        if (job.attempt === 1) {
          // Ignores its deadline: it lingers until the test lets it go.
          await first.promise
          return { attempt: 1 }
        }
        secondSignal.open(job.signal)
        await second.promise
        return { attempt: 2 }
      },
    })
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    const signal = await secondSignal.promise
    // Attempt 1 returns while attempt 2 runs: attempt 2 must stay this runner's.
    first.open()
    await logged(logs, 'job passed its deadline')
    await turns()
    expect(runner.workerCounts().busy).toBe(1)
    expect((await runner.get(id)).status).toBe('running')
    second.open()
    await until(runner, id, (j) => j.status === 'succeeded')
    expect((await runner.get(id)).result).toEqual({ attempt: 2 })
    expect(signal.aborted).toBe(false)
  })

  it('cancel reaches the second attempt while the first lingers', async () => {
    const runner = h.runner({ workers: 2, timeoutGraceMs: 0, clock: () => T0, stopTimeoutMs: 5_000 })
    const first = gate()
    const secondStarted = gate<AbortSignal>()
    const kind = runner.register('plan.lingering', {
      payload,
      timeoutMs: 30,
      retry: { maxAttempts: 2, codes: ['timeout'], backoff: { baseMs: 0, maxMs: 0 } },
      handler: async (_p, job) => {
        if (job.attempt === 1) return first.promise
        secondStarted.open(job.signal)
        await aborted(job.signal)
      },
    })
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    const signal = await secondStarted.promise
    first.open()
    await turns()
    expect(await runner.cancel(id)).toBe('requested')
    expect(signal.aborted).toBe(true)
    await until(runner, id, (j) => j.status === 'cancelled')
  })

  it('concurrency 1: a handler lingering past its deadline keeps the kind’s one slot until it returns, across runners', async () => {
    const logs = captureLogs()
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 2, timeoutGraceMs: 0, clock: () => T0, logger: logs, stopTimeoutMs: 5_000 })
    const other = h.runner({ workers: 2, clock: () => T0 })
    const lingering = gate()
    const exec = executing()
    const definition = {
      payload,
      concurrency: 1,
      timeoutMs: 30,
      handler: async ({ n }: { n: number }) => {
        exec.enter(`job ${n}`)
        try {
          if (n === 1) await lingering.promise
        } finally {
          exec.leave()
        }
      },
    }
    const kind = runner.register('provider.call', definition)
    other.register('provider.call', definition)
    await runner.start()
    const a = await kind.enqueue({ n: 1 })
    await logged(logs, 'job passed its deadline')
    const b = await kind.enqueue({ n: 2 })
    await other.start()
    // Every claim that could take b has been made and answered.
    const claims = faulty.record('jobClaim')
    runner.wake()
    other.wake()
    while (!claims.some((c) => c.result !== undefined)) await turns(1)
    await turns()
    expect(exec.starts).toEqual(['job 1'])
    expect((await runner.get(a)).status).toBe('running')
    lingering.open()
    await until(runner, b, (j) => j.status === 'succeeded')
    const ended = await runner.get(a)
    expect(ended).toMatchObject({ status: 'failed', error: CODE_TIMEOUT })
    expect(exec.most).toBe(1)
  })

  it('a job claimed with a lingering handler’s final write, for a worker already idle, starts without waiting for a poll', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 2, timeoutGraceMs: 0, clock: () => T0, stopTimeoutMs: 5_000 })
    // Another process's enqueue: no wake reaches this runner's SQLite driver (it polls hourly here).
    const producer = h.runner({ clock: () => T0 })
    const lingering = gate()
    const write = gate()
    const seen = track(runner)
    const definition = {
      payload,
      timeoutMs: 30,
      handler: async ({ n }: { n: number }) => {
        if (n === 1) await lingering.promise
      },
    }
    const kind = runner.register('import.page', definition)
    const enqueue = producer.register(defineKind('import.page', { payload }))
    // The lingering job's timeout write waits until the second job is queued: the write's claim finds it.
    const held = faulty.holdNext('jobFinishMany', write.promise)
    await runner.start()
    const a = await kind.enqueue({ n: 1 })
    await held
    const b = await enqueue.enqueue({ n: 2 })
    write.open()
    await until(runner, a, (j) => j.status === 'failed')
    await seen.ends([b])
    expect((await runner.get(b)).status).toBe('succeeded')
    lingering.open()
    seen.stop()
  })

  it('onHandlerError sees what a handler threw, in its process, with the code the job got; nothing stores the text', async () => {
    const seen: { error: unknown; job: unknown }[] = []
    const runner = h.runner({ clock: () => T0, onHandlerError: (error, job) => seen.push({ error, job }) })
    const kind = runner.register('mail.send', {
      payload,
      failures: ['mailbox_full'],
      handler: async ({ n }, job) => {
        if (n === 1) throw new TypeError('token sk-secret-1 in https://provider.example/x')
        if (n === 2) return job.fail('mailbox_full')
        throw 'a string'
      },
    })
    await runner.start()
    const ids = [await kind.enqueue({ n: 1 }), await kind.enqueue({ n: 2 }), await kind.enqueue({ n: 3 })]
    for (const id of ids) await until(runner, id, (j) => j.status === 'failed')
    expect(seen.map((s) => s.job)).toEqual(
      expect.arrayContaining([
        { id: ids[0], kind: 'mail.send', attempt: 1, code: 'internal_error' },
        { id: ids[1], kind: 'mail.send', attempt: 1, code: 'mailbox_full' },
        { id: ids[2], kind: 'mail.send', attempt: 1, code: 'internal_error' },
      ]),
    )
    expect(seen).toHaveLength(3)
    expect(seen.find((s) => (s.job as { id: string }).id === ids[0])!.error).toBeInstanceOf(TypeError)
    expect(seen.find((s) => (s.job as { id: string }).id === ids[1])!.error).toBeInstanceOf(JobFailure)
    expect(seen.find((s) => (s.job as { id: string }).id === ids[2])!.error).toBe('a string')
    expect((await runner.get(ids[0]!)).error).toBe('internal_error')
    expect((await runner.get(ids[1]!)).error).toBe('mailbox_full')
    expect(await h.store.dump()).not.toContain('sk-secret-1')
  })

  it('a throwing onHandlerError is ignored, and a non-function is refused', async () => {
    expect(() => h.runner({ onHandlerError: 'log' as never })).toThrow(/onHandlerError must be a function/)
    const logs = captureLogs()
    const runner = h.runner({ clock: () => T0, logger: logs, onHandlerError: () => {
      throw new Error('hook broke with sk-secret-2')
    } })
    const kind = runner.register('mail.send', { payload, handler: async () => {
      throw new Error('boom')
    } })
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await until(runner, id, (j) => j.status === 'failed')
    expect(logs.text()).not.toContain('sk-secret-2')
    expect(logs.lines.some((l) => l.message.includes('onHandlerError threw'))).toBe(true)
  })
})

describe.skipIf(postgresBackend().skip !== undefined)('postgres: a stale claim', () => {
  const h = harness(postgresBackend({ leaseMs: 300 }))

  /**
   * The claim commits, then its answer is held while the worker's
   * heartbeats fail (a process stalled past its lease); another runner's
   * sweep fails the job as interrupted. When the answer arrives, the
   * worker must not start the handler: the database gave the job up.
   */
  it('a claim answered after the lease lapsed and the sweep failed its job never starts its handler; retry now runs it once', async () => {
    const real = h.store.driver()
    let stalled = false
    const answer = gate()
    const claimed = gate()
    const driver = new Proxy(real, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (prop === 'jobClaim') {
          return async (params: Parameters<Driver['jobClaim']>[0]) => {
            const jobs = await real.jobClaim(params)
            if (jobs.length > 0 && !stalled) {
              stalled = true
              claimed.open()
              await answer.promise
            }
            return jobs
          }
        }
        if (prop === 'runnerHeartbeat' && stalled) return async () => Promise.reject(Object.assign(new Error('stalled'), { code: 'ECONNRESET' }))
        return typeof value === 'function' ? value.bind(target) : value
      },
    }) as Driver
    const starts: number[] = []
    const definition = { payload, handler: async (_p: { n: number }, job: { attempt: number }) => void starts.push(job.attempt) }
    const logs = captureLogs()
    const worker = h.runner({ driver, workers: 1, logger: logs })
    const sweeper = h.runner({ driver: h.store.driver({ sweepIntervalMs: 20 }), workers: 1 })
    const kind = worker.register('stale.job', definition)
    sweeper.register('other.kind', definition)
    await worker.start()
    const id = await kind.enqueue({ n: 1 })
    await claimed.promise
    await sweeper.start()
    await until(sweeper, id, (j) => j.status === 'failed')
    expect((await sweeper.get(id)).error).toBe(CODE_INTERRUPTED)
    stalled = false
    answer.open()
    await logged(logs, 'claim lost before its handler started')
    await turns()
    expect(starts).toEqual([])
    expect((await worker.get(id)).status).toBe('failed')
    // Once registered again (a job it claimed before would be swept as a gone runner's), it runs the retried job.
    await logged(logs, 'registering again')
    await worker.retry(id)
    await until(worker, id, (j) => j.status === 'succeeded')
    expect(starts).toEqual([2])
  })

  /**
   * A runner whose heartbeats fail past its lease is swept as gone; a job
   * it claimed then would be failed as interrupted while its handler runs.
   * It claims nothing until a heartbeat lands again.
   */
  it('a runner whose lease went stale claims nothing until a heartbeat lands: its job runs once, after, and succeeds', async () => {
    const real = h.store.driver()
    let stalled = false
    const driver = new Proxy(real, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (prop === 'runnerHeartbeat' && stalled) return async () => Promise.reject(Object.assign(new Error('stalled'), { code: 'ECONNRESET' }))
        return typeof value === 'function' ? value.bind(target) : value
      },
    }) as Driver
    const startedWhileStalled: boolean[] = []
    const logs = captureLogs()
    const worker = h.runner({ driver, workers: 1, logger: logs })
    const sweeperDriver = h.store.driver({ sweepIntervalMs: 20 }) as Driver & { schema: string }
    let sweeps = 0
    const counted = new Proxy(sweeperDriver, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (prop === 'jobFailInterrupted') return async (params: Parameters<Driver["jobFailInterrupted"]>[0]) => {
          const swept = await target.jobFailInterrupted(params)
          sweeps++
          return swept
        }
        return typeof value === 'function' ? value.bind(target) : value
      },
    }) as Driver
    const sweeper = h.runner({ driver: counted, workers: 1 })
    const kind = worker.register('lease.job', { payload, handler: async () => void startedWhileStalled.push(stalled) })
    sweeper.register('other.kind', { payload, handler: async () => undefined })
    await worker.start()
    await sweeper.start()
    stalled = true
    // The sweep has taken the worker for gone: its registration is deleted.
    const registered = async () => (await h.store.sql!(`SELECT 1 FROM "${sweeperDriver.schema}".runners WHERE id = $1`, [worker.id])).length > 0
    while (await registered()) await new Promise((r) => setTimeout(r, 10))
    const id = await kind.enqueue({ n: 1 })
    // Two sweeps after the enqueue (and its notification to the worker): a job the worker had claimed would be failed by now.
    const after = sweeps
    while (sweeps < after + 2) await new Promise((r) => setTimeout(r, 5))
    expect((await worker.get(id)).status).toBe('queued')
    stalled = false
    await until(worker, id, (j) => j.status !== 'queued' && j.status !== 'running')
    expect(await worker.get(id)).toMatchObject({ status: 'succeeded', attempt: 1 })
    expect(startedWhileStalled).toEqual([false])
  })
})
