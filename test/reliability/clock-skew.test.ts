import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, defineKind, type Runner } from 'jobtable'
import { postgresBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { FULL, bound, size } from './sizes.js'

/** How far the skewed processes' clocks are from the real time (the database's, on this machine). */
const SKEW_MS = 60_000
/** A short lease, so the jobs below outlive several of them; the sweep runs often, to look at it often. */
const LEASE_MS = 1_500
const POLL_MS = 250
const backend = postgresBackend({ leaseMs: LEASE_MS, sweepIntervalMs: 200, pollIntervalMs: POLL_MS })
/** Slack for a loaded machine on the late side of a due time (asserted under the full size only). */
const LATE_SLACK_MS = 250

const payload = z.strictObject({ n: z.number().int() })
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('postgres: clock skew', () => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  const h = harness(backend)

  /** Starts a runner whose clock is `skewMs` off the real time, with `kinds` registered; returns it and its logs. */
  async function skewed(skewMs: number, kinds: (runner: Runner) => void, workers = 4): Promise<{ runner: Runner; logs: ReturnType<typeof captureLogs> }> {
    const logs = captureLogs()
    const runner = h.runner({ clock: () => Date.now() + skewMs, workers, logger: logs })
    kinds(runner)
    await runner.start()
    return { runner, logs }
  }

  /** Waits until every job in ids is terminal, as the table says. */
  async function terminal(reader: Runner, ids: readonly string[]): Promise<void> {
    for (;;) {
      const jobs = await Promise.all(ids.map((id) => reader.get(id)))
      if (jobs.every((j) => ['succeeded', 'failed', 'cancelled'].includes(j.status))) return
      await sleep(50)
    }
  }

  /**
   * Proves: runners 60 s ahead and 60 s behind, running jobs that outlive
   * several leases, never see each other's lease as lapsed: the leases
   * are on the database's clock, so no job is failed as interrupted.
   */
  it('no live runner looks gone to another', async () => {
    const rounds = size('clock_skew_lease_rounds', 1, 5)
    const ledger = new Map<string, number>()
    const long = (runner: Runner) =>
      runner.register('long', {
        payload,
        handler: async (_p, job) => {
          ledger.set(job.id, (ledger.get(job.id) ?? 0) + 1)
          await sleep(2 * LEASE_MS)
        },
      })
    const ahead = await skewed(SKEW_MS, long)
    const behind = await skewed(-SKEW_MS, long)
    const producer = h.runner()
    const kind = producer.register(defineKind('long', { payload }))
    for (let round = 0; round < rounds; round++) {
      const ids = await Promise.all(Array.from({ length: 8 }, (_, n) => kind.enqueue({ n })))
      await terminal(producer, ids)
      for (const id of ids) {
        expect(await producer.get(id), id).toMatchObject({ status: 'succeeded' })
        expect(ledger.get(id), id).toBe(1)
      }
    }
    for (const { logs } of [ahead, behind]) {
      expect(logs.text()).not.toContain('lease was lost')
      expect(logs.text()).not.toContain(CODE_INTERRUPTED)
    }
  }, bound(30_000, 120_000))

  /**
   * Proves: a job scheduled for a time (by a process on the real clock)
   * starts no earlier than that time, though a runner 60 s ahead is
   * polling for due jobs (a due time is read on the earlier of the
   * runner's clock and the database's), and within the poll interval
   * after it (the lateness asserted under the full size only).
   */
  it('scheduled jobs run at their time, not early by a runner ahead, within the poll interval', async () => {
    const jobs = size('clock_skew_scheduled_jobs', 4, 40)
    const startedAt = new Map<string, number>()
    const at = (runner: Runner) =>
      runner.register('at', {
        payload,
        handler: (_p, job) => void startedAt.set(job.id, Date.now()),
      })
    await skewed(SKEW_MS, at)
    await skewed(-SKEW_MS, at)
    const producer = h.runner()
    const kind = producer.register(defineKind('at', { payload }))
    const due = new Map<string, number>()
    const base = Date.now() + 1_000
    for (let n = 0; n < jobs; n++) {
      const runAt = base + n * 100
      due.set(await kind.enqueue({ n }, { runAt: new Date(runAt) }), runAt)
    }
    await terminal(producer, [...due.keys()])
    const offsets = [...due].map(([id, runAt]) => startedAt.get(id)! - runAt)
    console.info(`clock skew: scheduled jobs started ${Math.min(...offsets)} to ${Math.max(...offsets)} ms after their time (poll ${POLL_MS} ms)`)
    for (const offset of offsets) expect(offset).toBeGreaterThanOrEqual(0)
    if (FULL) for (const offset of offsets) expect(offset).toBeLessThanOrEqual(POLL_MS + LATE_SLACK_MS)
  }, bound(30_000, 120_000))

  /**
   * Proves: a retry runs no earlier than its backoff says, by the clock of
   * the runner that scheduled it, less the lead the fastest clock has over
   * that one: a runner behind sets its retries' due times on its slow
   * clock, so a runner ahead may promote them up to the skew between
   * them sooner (here: at once), never sooner than that. A retry set by
   * the runner ahead waits its backoff whoever promotes it.
   */
  it('no retry runs early by more than the skew allows', async () => {
    const jobs = size('clock_skew_retried_jobs', 4, 40)
    const BACKOFF_MS = 1_000
    const starts = new Map<string, { at: number; skew: number }[]>()
    const retried = (skew: number) => (runner: Runner) =>
      runner.register('retried', {
        payload,
        failures: ['again'],
        retry: { maxAttempts: 2, codes: ['again'], backoff: { baseMs: BACKOFF_MS, maxMs: BACKOFF_MS } },
        handler: async (_p, job) => {
          const seen = starts.get(job.id) ?? []
          starts.set(job.id, [...seen, { at: Date.now(), skew }])
          if (seen.length === 0) {
            // Long enough that both runners take first attempts.
            await sleep(200)
            job.fail('again')
          }
        },
      })
    await skewed(SKEW_MS, retried(SKEW_MS), 2)
    await skewed(-SKEW_MS, retried(-SKEW_MS), 2)
    const producer = h.runner()
    const kind = producer.register(defineKind('retried', { payload, failures: ['again'], retry: { maxAttempts: 2, codes: ['again'] } }))
    const ids = await Promise.all(Array.from({ length: jobs }, (_, n) => kind.enqueue({ n })))
    await terminal(producer, ids)
    const gaps: number[] = []
    let aheadRetries = 0
    for (const id of ids) {
      const [first, second] = starts.get(id)!
      expect(await producer.get(id), id).toMatchObject({ status: 'succeeded' })
      const gap = second!.at - first!.at
      gaps.push(gap)
      // The backoff is at least half its base; the fastest clock (SKEW_MS) leads the failing runner's by this much.
      const lead = Math.max(0, SKEW_MS - first!.skew)
      expect(gap, id).toBeGreaterThanOrEqual(Math.max(0, BACKOFF_MS / 2 - lead))
      if (first!.skew === SKEW_MS) aheadRetries++
    }
    expect(aheadRetries).toBeGreaterThan(0)
    console.info(`clock skew: retry gaps ${Math.min(...gaps)} to ${Math.max(...gaps)} ms (backoff ${BACKOFF_MS / 2} to ${BACKOFF_MS} ms; ${aheadRetries} set by the runner ahead)`)
  }, bound(30_000, 120_000))
})
