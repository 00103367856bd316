import type { Cooldown, JobFinish } from '../driver.js'
import type { Outcome } from '../kind.js'

/*
 * What one run of a job writes when it ends: the single owner of that
 * rule. A pure function of what the handler did, what was asked of the run
 * meanwhile, and the kind's retry settings, so it can be read in one place
 * and tested exhaustively as a table (test/runner/outcome.test.ts).
 */

/** What was asked of a run while its handler ran. */
export interface RunAsked {
  /** Its cancellation was requested (the database holds the request; its signal was aborted). */
  readonly cancelled: boolean
  /** The runner is stopping (every signal was aborted). */
  readonly stopping: boolean
  /** stop() gave up waiting for it: the runner may be gone by the time it ends. */
  readonly abandoned: boolean
}

/** What the kind and the claim say about another attempt. */
export interface RunPolicy {
  readonly attempt: number
  readonly maxAttempts: number
  /** The kind's retry settings (a RegisteredKind). */
  readonly kind: {
    /** Whether the kind retries a failure with this code. */
    retries(code: string): boolean
    /** The delay before the attempt after `attempt`, in ms. */
    backoffMs(attempt: number): number
  }
  /** The runner's clock when the run ended. */
  readonly now: number
}

/**
 * The end of a run, named. `interrupted` writes nothing: the job stays
 * running under its claim, and recovery (the next start, or another
 * runner's sweep) records it interrupted, or queues it again when its kind
 * is idempotent.
 */
export type RunEnd =
  | { readonly type: 'succeeded'; readonly result: string }
  | { readonly type: 'failed'; readonly code: string; readonly reason: string }
  | { readonly type: 'cancelled'; readonly result: string | null; readonly cooldown?: Cooldown }
  | { readonly type: 'retry'; readonly code: string; readonly reason: string; readonly runAt: number }
  | { readonly type: 'snoozed'; readonly runAt: number; readonly cooldown?: Cooldown }
  | { readonly type: 'interrupted'; readonly why: 'abandoned' | 'stopping' }

/**
 * Decides a run's end, in this order:
 * 1. abandoned by stop(): nothing is written (interrupted);
 * 2. cancelled: `cancelled`, keeping a result the handler returned, and
 *    a cooldown it recorded (a provider's reset holds for the other jobs
 *    of its key whatever becomes of this one);
 * 3. returned: `succeeded`;
 * 4. snoozed: back to the queue after the delay, the attempt given back;
 *    rate limited (`job.rateLimited`): the same, due at the cooldown's
 *    end, recording the cooldown;
 * 5. failed (a declared code, internal_error, timeout) while the runner
 *    stops: nothing is written (the failure is most likely the stop's own
 *    abort, which must not use up the job);
 * 6. failed with a code the kind retries and an attempt left: `retry`
 *    after the backoff;
 * 7. otherwise `failed` with its code.
 */
export function decideEnd(outcome: Outcome, asked: RunAsked, policy: RunPolicy): RunEnd {
  if (asked.abandoned) return { type: 'interrupted', why: 'abandoned' }
  if (asked.cancelled) {
    if ('rateLimited' in outcome) return { type: 'cancelled', result: null, cooldown: outcome.rateLimited }
    return { type: 'cancelled', result: 'result' in outcome ? outcome.result : null }
  }
  if ('result' in outcome) return { type: 'succeeded', result: outcome.result }
  if ('snoozeMs' in outcome) return { type: 'snoozed', runAt: policy.now + outcome.snoozeMs }
  if ('rateLimited' in outcome) return { type: 'snoozed', runAt: outcome.rateLimited.until, cooldown: outcome.rateLimited }
  if (asked.stopping) return { type: 'interrupted', why: 'stopping' }
  const { code, reason } = outcome
  if (policy.kind.retries(code) && policy.attempt < policy.maxAttempts) {
    return { type: 'retry', code, reason, runAt: policy.now + policy.kind.backoffMs(policy.attempt) }
  }
  return { type: 'failed', code, reason }
}

/** The final write of an end that writes one, for the run of `id` under claim `attempt`; undefined for `interrupted`. */
export function finishOf(end: RunEnd, id: string, attempt: number): JobFinish | undefined {
  switch (end.type) {
    case 'succeeded':
      return { id, attempt, status: 'succeeded', result: end.result, error: null, runAt: null }
    case 'failed':
      return { id, attempt, status: 'failed', result: null, error: end.code, runAt: null }
    case 'cancelled':
      if (end.cooldown !== undefined) return { id, attempt, status: 'cancelled', result: end.result, error: null, runAt: null, cooldown: end.cooldown }
      return { id, attempt, status: 'cancelled', result: end.result, error: null, runAt: null }
    case 'retry':
      return { id, attempt, status: 'retry', result: null, error: null, runAt: end.runAt }
    case 'snoozed':
      if (end.cooldown !== undefined) return { id, attempt, status: 'snoozed', result: null, error: null, runAt: end.runAt, cooldown: end.cooldown }
      return { id, attempt, status: 'snoozed', result: null, error: null, runAt: end.runAt }
    case 'interrupted':
      return undefined
  }
}
