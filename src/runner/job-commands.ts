import type { CancelResult, DriverAdmin, RetryNowResult } from '../driver.js'
import type { JobStatus } from '../job.js'

/** Which job an operator's command is about: `scope` as in DriverAdmin.jobGet (undefined: any scope). */
export interface JobCommand {
  readonly id: string
  readonly scope?: string | null
  readonly now: number
}

/** The statuses from which a job may still run: neither cancel nor retry now may answer as if it had ended. */
const LIVE: ReadonlySet<JobStatus> = new Set(['queued', 'scheduled', 'running'])

/** The statuses jobQueueNow moves from. */
const RETRYABLE: ReadonlySet<JobStatus> = new Set(['scheduled', 'failed', 'cancelled'])

/**
 * Cancels a job, the one place this rule is written for every driver: a
 * queued or scheduled job becomes `cancelled` at once ('cancelled'); a
 * running one is marked for its runner to abort ('requested'), which the
 * driver may tell every runner of at once; a finished one is left as it
 * is ('terminal'); one not found (or of another scope) is 'missing'.
 *
 * Three single statements, not one transaction (a driver offers no
 * transaction across them): a job may move between them. A running job
 * sent back to the queue by its retry write, or released, after the
 * first statement found it not waiting and before the second found it
 * not running, has not ended, and answering 'terminal' would leave it to
 * run again: when the read finds it still live, the statements run again
 * (test/postgres/cancel-race.test.ts). Each round needs the job to have
 * moved meanwhile, so the loop ends as soon as it holds still.
 */
export async function cancelJob(driver: Pick<DriverAdmin, 'jobCancelWaiting' | 'jobRequestCancel' | 'jobGet'>, command: JobCommand): Promise<CancelResult> {
  for (;;) {
    if (await driver.jobCancelWaiting(command)) return 'cancelled'
    if (await driver.jobRequestCancel(command)) return 'requested'
    const job = await driver.jobGet({ id: command.id, scope: command.scope })
    if (job === undefined) return 'missing'
    if (!LIVE.has(job.status)) return 'terminal'
  }
}

/**
 * Runs a job again now, the one place this rule is written for every
 * driver: a scheduled, failed or cancelled job becomes queued, due now
 * ('queued'; see DriverAdmin.jobQueueNow for what it keeps and clears);
 * a failed or cancelled one whose unique key another live job holds is
 * left as it is ('unique_key_held'); a queued, running or succeeded one
 * is left as it is ('not_retryable'); one not found (or of another
 * scope) is 'missing'.
 *
 * Two single statements, not one transaction: a job that became
 * retryable between them (a running job that failed just then) is tried
 * again rather than answered 'not_retryable'.
 */
export async function retryJobNow(driver: Pick<DriverAdmin, 'jobQueueNow' | 'jobGet'>, command: JobCommand): Promise<RetryNowResult> {
  for (;;) {
    const queued = await driver.jobQueueNow(command)
    if (queued !== 'unchanged') return queued
    const job = await driver.jobGet({ id: command.id, scope: command.scope })
    if (job === undefined) return 'missing'
    if (!RETRYABLE.has(job.status)) return 'not_retryable'
  }
}
