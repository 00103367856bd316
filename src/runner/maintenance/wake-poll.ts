import type { DriverBase, DriverWakeups, WakeReason } from '../../driver.js'
import type { Logger } from '../../logger.js'
import { Periodic } from './periodic.js'

/**
 * The fallback poll, the same for every driver: every `capabilities.pollMs`
 * it tells the runner that another process may have queued a job or
 * requested a cancellation ('jobs', then 'cancel', as a notification
 * would), so an idle runner finds what no notification told it of (a
 * database that cannot push, a lost notification, PostgreSQL with
 * `listen: false`).
 *
 * On a driver with a change token (SQLite's data_version, which reads no
 * table) a pass reads the token alone and wakes only when it moved since
 * the last pass: an idle runner then makes no other query. The first pass
 * wakes whatever the token says, having none to compare with, so a write
 * committed before the poll started is not missed. A token that cannot
 * be read wakes too: the runner's claim, which reports and backs off from
 * a database error, looks then. Without a token every pass wakes.
 */
export class WakePoll extends Periodic {
  protected readonly what = 'poll for other processes\' writes'
  readonly #driver: DriverBase & DriverWakeups
  readonly #wake: (what: WakeReason) => void
  /** The token read by the last pass; undefined before the first, or after a failed read. */
  #seen: string | undefined

  constructor(driver: DriverBase & DriverWakeups, logger: Logger, wake: (what: WakeReason) => void) {
    super(driver.capabilities.pollMs, logger)
    this.#driver = driver
    this.#wake = wake
  }

  protected async pass(): Promise<void> {
    if (this.#driver.changeToken !== undefined) {
      let token: string | undefined
      try {
        token = await this.#driver.changeToken()
      } catch {
        token = undefined
      }
      const moved = token === undefined || token !== this.#seen
      this.#seen = token
      if (!moved) return
    }
    this.#wake('jobs')
    this.#wake('cancel')
  }
}
