import type { Driver, WakeReason } from '../../driver.js'
import type { Logger } from '../../logger.js'
import { publishDatabaseError, publishEnqueued } from '../channels.js'
import type { ClaimGate } from '../claim-gate.js'
import { InterruptedSweep } from './interrupted.js'
import { CancelWatch } from './cancel-watch.js'
import { LostClaimRecovery } from './lost-claims.js'
import type { RetentionConfig } from '../retention-rules.js'
import { Retention } from './retention.js'
import { Scheduler } from './scheduler.js'
import { RecurringJobs } from './recurring.js'
import type { NewJob } from '../../driver.js'
import type { Schedule } from '../../schedule.js'
import { UnservedKinds } from './unserved-kinds.js'
import { WakePoll } from './wake-poll.js'

/**
 * The runner's chores around the claim, independent of the driver: one
 * small service each (the interrupted sweep, lost-claim recovery, the
 * check for kinds no runner handles, the scheduler of due jobs, the
 * cancellation watch, retention, the recurring jobs' ticks, the fallback
 * poll for other processes' writes), each with its own timer.
 */
export class Maintenance {
  readonly #interrupted: InterruptedSweep
  /** Makes scheduled jobs queued when due; the runner tells it of due times and wakes. */
  readonly scheduler: Scheduler
  /** Aborts the jobs running here whose cancellation was requested; ticked on a cancel notification. */
  readonly cancels: CancelWatch
  /** Enqueues the recurring schedules' ticks; ticked when the clock may have moved. */
  readonly recurring: RecurringJobs
  readonly #services: { start(): void; stop(): Promise<void> }[]

  constructor(options: {
    driver: Driver
    runnerId: string
    gate: ClaimGate
    unknownKindGraceMs: number
    /** What retention deletes and how often; null when this process never prunes. */
    retention: RetentionConfig | null
    logger: Logger
    clock: () => number
    /** Called when jobs became queued: a worker should look. */
    wake: () => void
    /** Called by the fallback poll (WakePoll) as a notification of the driver's onWake would be. */
    polled: (what: WakeReason) => void
    /** How many jobs run here, and how to abort some of them. */
    running: () => number
    cancel: (ids: readonly string[]) => void
    /** The recurring schedules declared on the runner, and how to make a tick's job. */
    schedules: readonly Schedule[]
    prepare: (schedule: Schedule, tick: number) => Promise<NewJob>
  }) {
    const { driver, runnerId, gate, unknownKindGraceMs, retention, logger, clock, wake, polled, running, cancel, schedules, prepare } = options
    // Every chore's failed pass is published as a database error of the runner's maintenance.
    const failed = (err: unknown) => publishDatabaseError(runnerId, 'maintenance', err)
    this.#interrupted = new InterruptedSweep(driver, runnerId, logger, clock, failed)
    this.scheduler = new Scheduler(driver, logger, clock, wake, failed)
    this.cancels = new CancelWatch(driver, runnerId, logger, running, cancel, failed)
    this.recurring = new RecurringJobs({ driver, schedules, prepare, logger, clock, stored: wake, failed, enqueued: (kind, count) => publishEnqueued(runnerId, kind, count) })
    this.#services = [
      this.#interrupted,
      new LostClaimRecovery(gate, driver.capabilities.liveness.sweepMs, logger, failed),
      new UnservedKinds(driver, unknownKindGraceMs, logger, clock, failed),
      this.scheduler,
      this.cancels,
      this.recurring,
      new WakePoll(driver, logger, polled),
    ]
    if (retention !== null) this.#services.push(new Retention(driver, retention.rules, retention.intervalMs, logger, clock))
  }

  /** The first sweep, before any claim: its error fails start(). */
  sweepNow(): Promise<void> {
    return this.#interrupted.pass()
  }

  start(): void {
    for (const s of this.#services) s.start()
  }

  async stop(): Promise<void> {
    await Promise.all(this.#services.map((s) => s.stop()))
  }
}
