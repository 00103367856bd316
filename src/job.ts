/**
 * The state of a job. A job moves (scheduled →) queued → running →
 * succeeded, failed or cancelled. `scheduled`: enqueued with a due time
 * still to come (or sent back for a retry or a snooze). `cancelled`: by
 * `runner.cancel`, at once when not yet started, or when its handler
 * returned after the request.
 */
export type JobStatus = 'scheduled' | 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled'

/** Every status, in lifecycle order. */
export const JOB_STATUSES: readonly JobStatus[] = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled']

/** The statuses a job ends in: it never changes again, and retention may delete it once it is old enough. */
export type TerminalStatus = Extract<JobStatus, 'succeeded' | 'failed' | 'cancelled'>

/** Every terminal status. */
export const TERMINAL_STATUSES: readonly TerminalStatus[] = ['succeeded', 'failed', 'cancelled']

/** Any value that survives JSON.stringify and JSON.parse unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/**
 * A job as `get()` and `GET /api/v1/jobs/{id}` report it. `result` is the
 * latest partial or final public result, null until the handler publishes
 * one; a failed job keeps the last partial result it published. `error` is
 * set only on a failed job: a code its kind declared or one of the
 * runner's own codes.
 */
export interface Job {
  readonly id: string
  readonly kind: string
  readonly status: JobStatus
  readonly result: JsonValue
  readonly error: string | null
  /** How many times a runner has claimed it: 0 until it first starts. */
  readonly attempt: number
  /** How many attempts it may have: 1 unless its kind retries (a snooze adds one back). */
  readonly maxAttempts: number
  /** Its priority: higher runs first; 0 unless enqueued with one. */
  readonly priority: number
  /** When it is (or was) due, in epoch milliseconds; null when enqueued without a due time. */
  readonly runAt: number | null
}

/**
 * The error of a job a previous process left running. It is fixed
 * framework text, not a snake-case code, so no kind can declare it.
 */
export const CODE_INTERRUPTED = 'interrupted by restart'

/**
 * The error of a job whose handler failed with anything but a JobFailure
 * with a code its kind declared, or whose payload no longer fits its
 * schema, or whose result has no valid public JSON. The underlying error is
 * neither stored nor logged.
 */
export const CODE_INTERNAL = 'internal_error'

/** The error of a job whose kind has no handler in the process that claimed it. */
export const CODE_UNKNOWN_KIND = 'unknown_kind'

/** The form of every failure code a kind may declare: lower-case snake case. */
export const FAILURE_CODE_PATTERN = /^[a-z][a-z0-9_]{0,63}$/

/** The error of a job whose handler passed its deadline (`timeoutMs`), whatever it then threw or returned. */
export const CODE_TIMEOUT = 'timeout'

/** Codes the runner stores itself; a kind cannot declare them. */
export const RESERVED_CODES: ReadonlySet<string> = new Set([CODE_INTERNAL, CODE_UNKNOWN_KIND, CODE_TIMEOUT])

/**
 * A claim or final write that fails with a transient database error is
 * retried after RETRY_MIN_MS, doubling up to RETRY_MAX_MS, so a job queued
 * while the error lasts is claimed without a new wake, and a finished job
 * is never left running.
 */
export const RETRY_MIN_MS = 50
export const RETRY_MAX_MS = 5_000

/**
 * Bounds each attempt at a job's final write, and at a handler's own last
 * write, so a database that stays busy cannot hold a stopping worker, and
 * with it shutdown, open.
 */
export const FINAL_WRITE_TIMEOUT_MS = 5_000

/**
 * The signal for one attempt at a final write: it does not abort when the
 * runner stops, so work that finishes during shutdown is still recorded,
 * but it aborts after FINAL_WRITE_TIMEOUT_MS. A handler makes its own last
 * write, the one recording what the job did, under it, and throws when it
 * aborts so its worker can stop; the next start fails the job as
 * interrupted.
 */
export function finalWriteSignal(): AbortSignal {
  return AbortSignal.timeout(FINAL_WRITE_TIMEOUT_MS)
}
