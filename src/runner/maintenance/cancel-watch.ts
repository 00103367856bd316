import type { Driver } from '../../driver.js'
import type { Logger } from '../../logger.js'
import { Periodic } from './periodic.js'

/**
 * Finds the cancellations requested of jobs this runner is running (by a
 * process anywhere) and aborts their signals: at every notification of
 * one (PostgreSQL's channel), and every poll interval while any job runs
 * here. An idle runner makes no query for it.
 */
export class CancelWatch extends Periodic {
  protected readonly what = 'read cancellation requests'
  readonly #driver: Driver
  readonly #runnerId: string
  readonly #running: () => number
  readonly #cancel: (ids: readonly string[]) => void

  constructor(driver: Driver, runnerId: string, logger: Logger, running: () => number, cancel: (ids: readonly string[]) => void, failed?: (err: unknown) => void) {
    super(driver.capabilities.pollMs, logger, failed)
    this.#driver = driver
    this.#runnerId = runnerId
    this.#running = running
    this.#cancel = cancel
  }

  protected async pass(): Promise<void> {
    if (this.#running() === 0) return
    const ids = await this.#driver.jobCancelRequested({ runnerId: this.#runnerId })
    if (ids.length > 0) this.#cancel(ids)
  }
}
