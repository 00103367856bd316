import diagnostics from 'node:diagnostics_channel'
import { errorCode, isTransient } from './backoff.js'

/*
 * The runner's telemetry: node:diagnostics_channel messages, silent (and
 * free: every publisher checks hasSubscribers first) until something
 * subscribes. No message carries a payload, a result, a scope or the text
 * of an error: only ids, kinds, statuses, codes and counts.
 */

/** Published after an enqueue stored jobs: `{ runnerId, kind, count }` (JobEnqueueMessage). */
export const jobEnqueueChannel = diagnostics.channel('jobtable:job:enqueue')
/** Published when a handler starts: `{ runnerId, jobId, kind, waitMs }` (JobStartMessage). */
export const jobStartChannel = diagnostics.channel('jobtable:job:start')
/**
 * Published when a job's final write has landed or been given up:
 * `{ runnerId, jobId, kind, status, error, code, durationMs }` (JobEndMessage).
 */
export const jobEndChannel = diagnostics.channel('jobtable:job:end')
/** Published when a handler's partial result has been stored: `{ runnerId, jobId, kind }` (JobPublishMessage). */
export const jobPublishChannel = diagnostics.channel('jobtable:job:publish')
/** Published when a claim fails: `{ runnerId, error, transient }` (ClaimErrorMessage). */
export const claimErrorChannel = diagnostics.channel('jobtable:claim:error')
/**
 * Published when any other database operation the runner makes for itself
 * fails (a final write, a start, a heartbeat, a maintenance pass), each
 * of which it tries again: `{ runnerId, operation, error, transient }`
 * (DatabaseErrorMessage).
 */
export const databaseErrorChannel = diagnostics.channel('jobtable:database:error')

/** What `jobtable:job:enqueue` carries: `count` jobs of `kind` stored by one enqueue call (a transactional one when it was made, even if that transaction later rolls back). */
export interface JobEnqueueMessage {
  readonly runnerId: string
  readonly kind: string
  readonly count: number
}

/** What `jobtable:job:start` carries. */
export interface JobStartMessage {
  readonly runnerId: string
  readonly jobId: string
  readonly kind: string
  /** How long the job waited to start since it became claimable (enqueued, or due), in ms by the runner's clock; 0 at least. */
  readonly waitMs: number
}

/**
 * How a job's attempt ended, as `jobtable:job:end` reports it: `retry`
 * and `snoozed` put the job back in the queue for another attempt.
 */
export type EndStatus = 'succeeded' | 'failed' | 'cancelled' | 'retry' | 'snoozed'

/** What `jobtable:job:end` carries. */
export interface JobEndMessage {
  readonly runnerId: string
  readonly jobId: string
  readonly kind: string
  readonly status: EndStatus
  /** The error stored with a failed job (its failure code); null otherwise. */
  readonly error: string | null
  /** The failure code behind a `failed` or `retry` end (a declared code, internal_error or timeout); null otherwise. */
  readonly code: string | null
  /** From the handler's start to its end (its return, throw, or deadline), in ms by the runner's clock. */
  readonly durationMs: number
}

/** What `jobtable:job:publish` carries. */
export interface JobPublishMessage {
  readonly runnerId: string
  readonly jobId: string
  readonly kind: string
}

/** What `jobtable:claim:error` carries. */
export interface ClaimErrorMessage {
  readonly runnerId: string
  /** The database's error code (SQLITE_BUSY, a SQLSTATE), never its message. */
  readonly error: string
  readonly transient: boolean
}

/** The operations `jobtable:database:error` names (claims have a channel of their own). */
export type DatabaseOperation = 'finish' | 'start' | 'heartbeat' | 'maintenance'

/** What `jobtable:database:error` carries. */
export interface DatabaseErrorMessage {
  readonly runnerId: string
  readonly operation: DatabaseOperation
  /** The database's error code, never its message. */
  readonly error: string
  readonly transient: boolean
}

/** Publishes a failed database operation of a runner, by its code only. */
export function publishDatabaseError(runnerId: string, operation: DatabaseOperation, err: unknown): void {
  if (!databaseErrorChannel.hasSubscribers) return
  const message: DatabaseErrorMessage = { runnerId, operation, error: errorCode(err), transient: isTransient(err) }
  databaseErrorChannel.publish(message)
}

/** Publishes that `count` jobs of `kind` were stored for a runner, when anything listens. */
export function publishEnqueued(runnerId: string, kind: string, count: number): void {
  if (count === 0 || !jobEnqueueChannel.hasSubscribers) return
  const message: JobEnqueueMessage = { runnerId, kind, count }
  jobEnqueueChannel.publish(message)
}
