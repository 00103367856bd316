import { JOB_ID } from '../id.js'
import type { Job } from '../index.js'

/** The statuses after which a job never changes again. */
export const TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled'])

/**
 * Exactly the fields the API shows of a job, in a fixed order: the
 * reference design's five (id, kind, status, result, error), then
 * attempt, maxAttempts, priority and runAt, and nothing a later runner version might
 * add without saying so.
 */
export function jobBody(job: Job): Job {
  return {
    id: job.id,
    kind: job.kind,
    status: job.status,
    result: job.result,
    error: job.error,
    attempt: job.attempt,
    maxAttempts: job.maxAttempts,
    priority: job.priority,
    runAt: job.runAt,
  }
}

/** The canonical (lower-case) form of a job id in any letter case, or undefined for a string that is not one. */
export function parseJobId(text: string): string | undefined {
  const id = text.toLowerCase()
  return JOB_ID.test(id) ? id : undefined
}
