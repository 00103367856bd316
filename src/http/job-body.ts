import { JOB_ID } from '../id.js'
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

/** The canonical (lower-case) form of a job id in any letter case, or undefined for a string that is not one. */
export function parseJobId(text: string): string | undefined {
  const id = text.toLowerCase()
  return JOB_ID.test(id) ? id : undefined
}
