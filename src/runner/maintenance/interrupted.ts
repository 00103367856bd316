import type { Driver } from '../../driver.js'
import { CODE_INTERRUPTED } from '../../job.js'
import type { Logger } from '../../logger.js'
import { Periodic } from './periodic.js'

/**
 * Fails as `interrupted by restart` the running jobs of runners the driver
 * proves gone (a lock released by a dead process, a lapsed lease), once at
 * start and then every sweep interval; a job of an idempotent kind with an
 * attempt left is queued again instead. Jobs of live runners, this one
 * included, are never touched.
 */
export class InterruptedSweep extends Periodic {
  protected readonly what = 'sweep for interrupted jobs'
  readonly #driver: Driver
  readonly #runnerId: string
  readonly #clock: () => number

  constructor(driver: Driver, runnerId: string, logger: Logger, clock: () => number, failed?: (err: unknown) => void) {
    super(driver.capabilities.liveness.sweepMs, logger, failed)
    this.#driver = driver
    this.#runnerId = runnerId
    this.#clock = clock
  }

  /** One sweep, throwing the database's error: start() fails with it. */
  async pass(): Promise<void> {
    const { failed, requeued } = await this.#driver.jobFailInterrupted({ runnerId: this.#runnerId, error: CODE_INTERRUPTED, now: this.#clock() })
    if (failed > 0) this.logger.warn({ count: failed }, 'failed jobs interrupted by restart')
    if (requeued > 0) this.logger.warn({ count: requeued }, 'queued again jobs of idempotent kinds interrupted by restart')
  }
}
