import type { Job } from '../index.js'

/** The statuses after which a job never changes again. */
export const TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'failed'])

/**
 * Exactly the fields the API shows of a job, in a fixed order: a job as
 * the reference design's GET /api/v1/jobs/{id} returns it, and nothing a
 * later runner version might add.
 */
export function jobBody(job: Job): Job {
  return { id: job.id, kind: job.kind, status: job.status, result: job.result, error: job.error }
}

/** A job id as the runner makes them: a UUID v4, in any letter case. */
const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i

/** The canonical (lower-case) form of a job id, or undefined for a string that is not one. */
export function parseJobId(text: string): string | undefined {
  return JOB_ID.test(text) ? text.toLowerCase() : undefined
}
