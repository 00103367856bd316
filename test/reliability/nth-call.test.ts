import { expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { FULL, bound, size } from './sizes.js'
import { connectionReset, type NativeFault, pgError, sqliteError } from './support/faults-native.js'
import { type LifecycleRun, lifecycle } from './support/faults-lifecycle.js'
import { brokenPromises, retryDelays } from './support/faults-oracle.js'

/** The errors each backend's library raises for a passing fault, by name. */
const ERRORS: Record<string, Record<string, () => Error>> = {
  sqlite: { SQLITE_BUSY: sqliteError('SQLITE_BUSY'), SQLITE_IOERR: sqliteError('SQLITE_IOERR'), SQLITE_FULL: sqliteError('SQLITE_FULL') },
  postgres: { ECONNRESET: connectionReset, '40001': pgError('40001'), '40P01': pgError('40P01'), '57P01': pgError('57P01') },
}
/** The error whose answer a lost commit gives: SQLite's I/O error after the commit, PostgreSQL's connection reset. */
const LOST: Record<string, () => Error> = { sqlite: sqliteError('SQLITE_IOERR'), postgres: connectionReset }

/** The fault clears this long after it begins, in the outage mode. */
const OUTAGE_MS = 1_000
/** Every job is terminal within this of the fault clearing (the figure, asserted under the full size only). */
const TERMINAL_WITHIN_MS = 6_000
/** A 1 s outage allows this many failed claims at most when retries double from 50 ms (at 0, 50, 150, 350, 750 ms, one more for a slow turn). */
const OUTAGE_CLAIMS_MAX = 6

/** The calls the fast size fails, by the method of their first occurrence (a final write may carry the next claim). */
const FAST_POINTS: Record<'once' | 'outage' | 'lost', string[]> = {
  once: ['jobClaim', 'jobFinishMany'],
  outage: ['jobPublish'],
  lost: ['jobInsertMany', 'jobClaim'],
}

/**
 * The call numbers a sweep fails: with `count` 0 (the fast size) the
 * first call of each method FAST_POINTS names, each after the last; otherwise `count` of them
 * spread evenly over 1..total (every one when count >= total).
 */
function callPoints(names: readonly string[], mode: keyof typeof FAST_POINTS, count: number): number[] {
  const total = names.length
  if (count === 0) {
    // Each named method's first call after the one before it: the claim after the first insert takes that job.
    const points: number[] = []
    for (const method of FAST_POINTS[mode]) {
      const at = names.findIndex((n, i) => i >= (points.at(-1) ?? 0) && n.startsWith(method)) + 1
      if (at > 0) points.push(at)
    }
    return points
  }
  if (count >= total) return Array.from({ length: total }, (_, i) => i + 1)
  return Array.from({ length: count }, (_, i) => 1 + Math.round((i * (total - 1)) / Math.max(1, count - 1)))
}

/** Runs `tasks` with at most `width` at once, in order. */
async function pooled<T>(tasks: (() => Promise<T>)[], width: number): Promise<T[]> {
  const results: T[] = new Array<T>(tasks.length)
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]!()
    }
  }))
  return results
}

describeEachBackend('the Nth database call fails', (backend) => {
  const errors = Object.entries(ERRORS[backend.name]!)
  /** The lifecycle without faults: how many driver calls it makes, and which. */
  let clean: Promise<LifecycleRun> | undefined
  const counted = () => (clean ??= lifecycle(backend.name))

  /** Runs the lifecycle once per case, and reports every broken promise with its case, and the slowest recovery. */
  async function sweep(mode: 'once' | 'outage' | 'lost'): Promise<void> {
    const base = await counted()
    expect(brokenPromises(base, false), 'the lifecycle without faults').toEqual([])
    const total = base.names.length
    const points = callPoints(base.names, mode, size(`nth_call_${mode}_points`, 0, 1_000))
    const cases = points.flatMap((at, i) => {
      if (mode === 'lost') return [{ at, name: 'lost answer', fault: { mode: 'lost', error: LOST[backend.name]! } as NativeFault }]
      // Fast: one error per call number, in turn; full: every error at every call number.
      const which = FULL ? errors : [errors[(i + (mode === 'outage' ? 1 : 0)) % errors.length]!]
      return which.map(([name, error]) => ({ at, name, fault: { mode: 'fail', error } as NativeFault }))
    })
    const windowMs = mode === 'outage' ? OUTAGE_MS : 0
    const runs = await pooled(cases.map((c) => () => lifecycle(backend.name, { at: c.at, windowMs, fault: c.fault })), size('nth_call_width', 1, 3))
    const broken: string[] = []
    let slowest = 0
    let raised = 0
    runs.forEach((run, i) => {
      const c = cases[i]!
      const where = `call ${c.at} (${base.names[c.at - 1]}), ${c.name}`
      for (const problem of brokenPromises(run, mode === 'lost')) broken.push(`${where}: ${problem}`)
      if (run.raised > 0) raised++
      if (run.raised > 0 && run.terminalAt !== undefined) {
        // From the last fault raised: the moment the database answers again.
        const recovery = run.terminalAt - run.lastRaisedAt!
        slowest = Math.max(slowest, recovery)
        if (FULL && recovery > TERMINAL_WITHIN_MS) broken.push(`${where}: jobs terminal ${recovery} ms after the fault cleared`)
      }
      const claims = retryDelays(run.logs, 'claim jobs failed; retrying').length
      if (mode === 'outage' && claims > OUTAGE_CLAIMS_MAX) broken.push(`${where}: ${claims} claims failed in a 1 s outage`)
    })
    console.info(`${backend.name} ${mode}: ${cases.length} runs over ${total} calls (${JSON.stringify(base.counts)}), ${raised} raised a fault, slowest recovery ${slowest} ms`)
    expect(broken).toEqual([])
  }

  /** Proves: a transient error on any one call of the lifecycle loses no job, starts none twice, and retries back off from 50 ms doubling. */
  it('fails each call once with each transient error', () => sweep('once'), bound(30_000, 900_000))

  /** Proves: the same through a 1 s outage from each call, and the claims retried through it are few, as doubling delays make them. */
  it('fails every call for 1 s from each call', () => sweep('outage'), bound(30_000, 900_000))

  /**
   * Proves: a call that commits but whose answer is lost (a connection
   * reset after COMMIT) loses no job and starts none twice; an enqueue
   * that threw may have stored its job, which then runs once.
   */
  it('loses the answer of each call after it commits', () => sweep('lost'), bound(30_000, 900_000))
})
