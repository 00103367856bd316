import { z } from 'zod'
import { Runner } from 'jobtable'
import { captureLogs, type LogLine } from '../../support/logs.js'
import { aborted } from '../../support/wait.js'
import { type CallPlan, NthCall } from './faults-nth.js'
import { faultStore, type StoredJob } from './faults-store.js'

/** How often the chores run (the sweep, the SQLite poll, the cancellation watch), so one short lifecycle meets each. */
const CHORE_MS = 100
/** How long a run may take to end every job once its faults are over, before it is called stuck. */
const STUCK_MS = 30_000

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled'])

/** What one lifecycle did, for the oracles. */
export interface LifecycleRun {
  /** Each driver call's method, in order. */
  readonly names: readonly string[]
  readonly counts: Record<string, number>
  /** How many faults were raised, and when the last was (epoch ms). */
  readonly raised: number
  readonly lastRaisedAt: number | undefined
  /** Per enqueue, in order: the id it returned, or the code of what it threw. */
  readonly enqueues: readonly { kind: string; id?: string; thrown?: string }[]
  /** Job id → the attempt numbers its handler started with, in order. */
  readonly starts: ReadonlyMap<string, readonly number[]>
  /** The jobs as the table holds them at the end. */
  readonly jobs: readonly StoredJob[]
  /** When every job was terminal (epoch ms), or undefined when the run got stuck. */
  readonly terminalAt: number | undefined
  readonly startError?: string
  readonly logs: readonly LogLine[]
}

const payload = z.strictObject({ n: z.number().int() })

/**
 * One job lifecycle through every kind of driver call: a runner starts
 * (register, sweep, promotion), a job of `flaky` is enqueued, claimed,
 * publishes, fails with a retryable code, is retried (a scheduled
 * retry, promoted), claimed again and succeeds; a job of `waits` is
 * enqueued, claimed, publishes and is cancelled while it runs; the sweep
 * and the cancellation watch run meanwhile; the runner stops. The test
 * acts as an application would: an enqueue that throws is not retried,
 * a cancel that throws is tried again.
 */
export async function lifecycle(backend: string, plan?: CallPlan): Promise<LifecycleRun> {
  const store = await faultStore(backend, CHORE_MS)
  const nth = new NthCall(store.driver, plan)
  const logs = captureLogs()
  const runner = new Runner({ driver: nth.driver, workers: 2, logger: logs, retention: false, stopTimeoutMs: 5_000 })
  const starts = new Map<string, number[]>()
  const started = (id: string, attempt: number): boolean => {
    const seen = starts.get(id) ?? []
    starts.set(id, [...seen, attempt])
    return seen.length === 0
  }
  const flaky = runner.register('flaky', {
    payload,
    result: (r: { n: number }) => r,
    failures: ['again'],
    retry: { maxAttempts: 2, codes: ['again'], backoff: { baseMs: 100, maxMs: 100 } },
    handler: async ({ n }, job) => {
      const first = started(job.id, job.attempt)
      // A publish that fails is the handler's to handle: this one goes on.
      await job.publish({ n: -1 }).catch(() => undefined)
      if (first) job.fail('again')
      return { n }
    },
  })
  const waits = runner.register('waits', {
    payload,
    handler: async (_payload, job) => {
      started(job.id, job.attempt)
      await job.publish(null).catch(() => undefined)
      await aborted(job.signal)
    },
  })
  const enqueues: { kind: string; id?: string; thrown?: string }[] = []
  let jobs: StoredJob[] = []
  let terminalAt: number | undefined
  let startError: string | undefined
  try {
    await runner.start()
    for (const [name, kind] of [['flaky', flaky], ['waits', waits]] as const) {
      try {
        enqueues.push({ kind: name, id: await kind.enqueue({ n: enqueues.length }) })
      } catch (err) {
        enqueues.push({ kind: name, thrown: (err as { dbCode?: string }).dbCode ?? 'unexpected' })
      }
    }
    const cancelled = new Set<string>()
    for (const until = Date.now() + STUCK_MS; Date.now() < until; ) {
      jobs = await store.jobs()
      if (jobs.every((j) => TERMINAL.has(j.status))) {
        terminalAt = Date.now()
        break
      }
      for (const job of jobs) {
        if (job.kind !== 'waits' || job.status !== 'running' || cancelled.has(job.id) || !starts.has(job.id)) continue
        // An application tries a failed cancel again.
        await runner.cancel(job.id).then(() => cancelled.add(job.id), () => undefined)
      }
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  } catch (err) {
    startError = (err as { dbCode?: string }).dbCode ?? String(err)
  } finally {
    await runner.close().catch(() => undefined)
    jobs = await store.jobs()
    await store.drop()
  }
  return {
    names: [...nth.names],
    counts: nth.counts,
    raised: nth.raised,
    lastRaisedAt: nth.lastRaisedAt,
    enqueues,
    starts,
    jobs,
    terminalAt,
    startError,
    logs: logs.lines,
  }
}
