import type { Driver } from '../../driver.js'
import { CODE_UNKNOWN_KIND } from '../../job.js'
import type { Logger } from '../../logger.js'
import { Periodic } from './periodic.js'

/**
 * Watches for queued jobs whose kind no live runner has a handler for. A
 * rolling deploy makes them for a while (a new kind enqueued before its
 * workers are up), so they stay queued: this chore warns once per kind,
 * and fails a job with `unknown_kind` only once it has waited longer than
 * `graceMs` and this runner has itself been watching for that long (so a
 * cluster starting after a long outage does not fail at once what its
 * other workers, a moment behind, would run).
 */
export class UnservedKinds extends Periodic {
  protected readonly what = 'check for kinds no runner handles'
  readonly #driver: Driver
  readonly #graceMs: number
  readonly #clock: () => number
  readonly #since: number
  readonly #warned = new Set<string>()

  constructor(driver: Driver, graceMs: number, logger: Logger, clock: () => number, failed?: (err: unknown) => void) {
    // Often enough to fail a job soon after its grace, rarely enough that a
    // big backlog's scan costs nothing: at most once a minute by default.
    super(Math.max(driver.capabilities.liveness.sweepMs, Math.min(graceMs, 60_000)), logger, failed)
    this.#driver = driver
    this.#graceMs = graceMs
    this.#clock = clock
    this.#since = clock()
  }

  protected async pass(): Promise<void> {
    const kinds = await this.#driver.queueUnservedKinds({ now: this.#clock() })
    for (const kind of kinds) {
      if (this.#warned.has(kind)) continue
      this.#warned.add(kind)
      this.logger.warn(
        { kind, grace_ms: this.#graceMs },
        'queued jobs of a kind no live runner handles: they wait for one, and fail as unknown_kind after the grace',
      )
    }
    if (kinds.length === 0) return
    const now = this.#clock()
    if (now - this.#since < this.#graceMs) return
    const failed = await this.#driver.jobFailUnserved({ createdBefore: now - this.#graceMs, error: CODE_UNKNOWN_KIND, now })
    if (failed > 0) this.logger.warn({ count: failed, code: CODE_UNKNOWN_KIND }, 'failed queued jobs no live runner handles after the grace')
  }
}
