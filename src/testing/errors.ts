import { JobtableError } from '../errors.js'

/** A job that was running when a drain gave up, by id and kind. */
export interface RunningJob {
  readonly id: string
  readonly kind: string
}

/**
 * A drain started its `maxJobs` jobs and the queue was still not idle:
 * most often a job that enqueues another each time it runs. No further
 * job was started; those already running were waited for.
 */
export class DrainLimitError extends JobtableError {
  /** How many jobs the drain started. */
  readonly started: number
  /** The jobs still queued (and due) when it stopped, counted by kind. */
  readonly queued: Readonly<Record<string, number>>
  constructor(started: number, queued: Readonly<Record<string, number>>, ran: Readonly<Record<string, number>>) {
    super(
      'drain_limit',
      `jobtable/testing: drain started ${started} jobs (its maxJobs) and the queue is still not idle: queued ${counts(queued)}; ` +
        `started by kind ${counts(ran)}. A job that enqueues another each time it runs never lets the queue empty; ` +
        'if the work really is this big, raise maxJobs',
    )
    this.started = started
    this.queued = queued
  }
}

/**
 * A drain did not see the queue idle within its `timeoutMs` (real time):
 * a handler that never returns, or jobs no worker here may take (a
 * concurrency limit held by a job running elsewhere), or scheduled jobs
 * the kit's clock has reached that the database does not make due (on
 * PostgreSQL, a clock moved past the database's own). Jobs still running
 * keep running; `close()` aborts their signals.
 */
export class DrainTimeoutError extends JobtableError {
  /** The jobs running when it gave up. */
  readonly running: readonly RunningJob[]
  /** The jobs queued (and due) when it gave up, counted by kind. */
  readonly queued: Readonly<Record<string, number>>
  /** How many scheduled jobs were due by the kit's clock and still not queued when it gave up. */
  readonly scheduledDue: number
  constructor(timeoutMs: number, running: readonly RunningJob[], queued: Readonly<Record<string, number>>, scheduledDue = 0) {
    const shown = running.slice(0, 10).map((j) => `${j.kind} ${j.id}`)
    if (running.length > shown.length) shown.push(`and ${running.length - shown.length} more`)
    super(
      'drain_timeout',
      `jobtable/testing: drain timed out after ${timeoutMs} ms with the queue not idle: ` +
        `running ${running.length === 0 ? 'none' : shown.join(', ')}; queued ${counts(queued)}` +
        (scheduledDue === 0
          ? ''
          : `; ${scheduledDue} scheduled job${scheduledDue === 1 ? ' is' : 's are'} due by the kit's clock, yet the database has not made ${scheduledDue === 1 ? 'it' : 'them'} due. ` +
            "PostgreSQL compares a due time with the earlier of the runner's clock and its own: start the kit's clock in the past (createTestKit({ clock }))"),
    )
    this.running = running
    this.queued = queued
    this.scheduledDue = scheduledDue
  }
}

function counts(byKind: Readonly<Record<string, number>>): string {
  const entries = Object.entries(byKind)
  return entries.length === 0 ? 'none' : entries.map(([kind, n]) => `${kind} ×${n}`).join(', ')
}
