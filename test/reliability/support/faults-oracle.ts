import { RETRY_MAX_MS, RETRY_MIN_MS } from 'jobtable'
import type { LogLine } from '../../support/logs.js'
import type { LifecycleRun } from './faults-lifecycle.js'

/** How each lifecycle job must end, faults or not: every injected error is transient, so everything is retried until it lands. */
const EXPECTED: Record<string, { status: string; starts: number }> = {
  flaky: { status: 'succeeded', starts: 2 },
  waits: { status: 'cancelled', starts: 1 },
}

/** The log lines of the runner's retried operations, each with the delay it chose. */
const RETRIED = ['claim jobs failed; retrying', 'record job outcome failed; retrying']

/**
 * Whether `delays` are sequences that each start at RETRY_MIN_MS and
 * double, capped at RETRY_MAX_MS, interleaved as concurrent retries (two
 * batches of final writes) log them.
 */
export function followsBackoff(delays: readonly number[]): boolean {
  const open: number[] = []
  for (const delay of delays) {
    if (delay === RETRY_MIN_MS) {
      open.push(delay)
      continue
    }
    const i = open.findIndex((last) => Math.min(2 * last, RETRY_MAX_MS) === delay)
    if (i < 0) return false
    open[i] = delay
  }
  return true
}

/** The delays the runner chose for one retried operation, as it logged them. */
export function retryDelays(logs: readonly LogLine[], message: string): number[] {
  return logs.filter((l) => l.message === message).map((l) => l.fields['retry_in_ms'] as number)
}

/**
 * Every promise a lifecycle run broke, in words (none: an empty list).
 * `lost`: the fault let calls commit and lost their answers, so an
 * enqueue that threw may have stored its job.
 */
export function brokenPromises(run: LifecycleRun, lost: boolean): string[] {
  const broken: string[] = []
  if (run.startError !== undefined) broken.push(`start failed: ${run.startError}`)
  if (run.terminalAt === undefined) broken.push(`stuck: ${run.jobs.filter((j) => !['succeeded', 'failed', 'cancelled'].includes(j.status)).map((j) => `${j.kind} ${j.status}`).join(', ')}`)
  const stored = new Map(run.jobs.map((j) => [j.id, j]))
  for (const e of run.enqueues) {
    if (e.id !== undefined && !stored.has(e.id)) broken.push(`enqueue of ${e.kind} returned an id that does not exist`)
    if (e.thrown !== undefined && e.thrown === 'unexpected') broken.push(`enqueue of ${e.kind} threw something other than a DatabaseError`)
  }
  const returned = new Set(run.enqueues.flatMap((e) => (e.id === undefined ? [] : [e.id])))
  for (const job of run.jobs) {
    if (returned.has(job.id)) continue
    // An enqueue whose commit landed but whose answer was lost threw, and its job exists: the one case of a job nobody was told of.
    const threw = run.enqueues.some((e) => e.kind === job.kind && e.thrown !== undefined)
    if (!(lost && threw)) broken.push(`a ${job.kind} job exists that no enqueue stored`)
  }
  for (const job of run.jobs) {
    const attempts = run.starts.get(job.id) ?? []
    if (new Set(attempts).size !== attempts.length) broken.push(`${job.kind} started twice under one claim (attempts ${attempts.join(',')})`)
    const expected = EXPECTED[job.kind]!
    if (attempts.length > expected.starts) broken.push(`${job.kind} started ${attempts.length} times, at most ${expected.starts} allowed`)
    if (job.status !== expected.status || attempts.length !== expected.starts) {
      broken.push(`${job.kind} ended ${job.status}${job.error === null ? '' : ` (${job.error})`} after ${attempts.length} starts, not ${expected.status} after ${expected.starts}`)
    }
  }
  for (const message of RETRIED) {
    const delays = retryDelays(run.logs, message)
    if (!followsBackoff(delays)) broken.push(`"${message}" delays ${delays.join(',')} do not double from ${RETRY_MIN_MS} ms to ${RETRY_MAX_MS} ms`)
  }
  if (run.logs.some((l) => JSON.stringify(l).includes('injected'))) broken.push('a log line quotes the database error text')
  return broken
}
