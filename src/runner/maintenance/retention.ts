import type { Driver } from '../../driver.js'
import type { Logger } from '../../logger.js'
import { retryTransient } from '../liveness.js'
import type { PruneRules } from '../retention-rules.js'
import { Periodic } from './periodic.js'

/**
 * The most terminal jobs one prune statement deletes. SQLite has one
 * writer, so a claim waits for the prune statement in progress: the batch
 * bounds that wait. 1,000 rows take about 5 ms there (166k rows/s),
 * against 0.65 ms for 100 (123k rows/s) and 53 ms for 10,000 (185k
 * rows/s); on PostgreSQL, where a claim never waits for a prune, 100-row
 * statements delete a quarter as fast (21k against 93k rows/s), being
 * round trips and commits (BENCHMARKS.md, "Retention").
 */
export const PRUNE_BATCH = 1_000

/**
 * Deletes the terminal jobs `rules` make due by `clock`, kind by kind,
 * PRUNE_BATCH rows a statement, until a statement comes back short; the
 * event loop turns between statements, so claims, final writes and
 * timers are never held up for more than one. A transient error (another
 * process busy on a SQLite file, a dropped connection) is tried again
 * with backoff. Returns how many it deleted, early once `stopped()`
 * says so.
 */
export async function pruneJobs(driver: Driver, rules: PruneRules, clock: () => number, stopped: () => boolean = () => false): Promise<number> {
  const kinds = rules.kinds ?? (await retryTransient(() => driver.kindsFinished()))
  let deleted = 0
  for (const kind of kinds) {
    for (const { statuses, maxAgeMs } of rules.groups(kind)) {
      for (;;) {
        if (stopped()) return deleted
        const n = await retryTransient(() => driver.jobPrune({ kind, statuses, finishedBefore: clock() - maxAgeMs, limit: PRUNE_BATCH }))
        deleted += n
        await turn()
        if (n < PRUNE_BATCH) break
      }
    }
  }
  return deleted
}

/** Resolves after the event loop has turned once (timers and I/O included, not only microtasks). */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

/**
 * Retention: deletes terminal jobs once they are older than the runner's
 * rules allow (see RetentionOptions), at start and then every interval,
 * logging how many at info. Every started runner on a database prunes; a
 * job two of them reach at once is deleted by one, and neither fails.
 * `stop()` ends a pass under way after its current statement.
 */
export class Retention extends Periodic {
  protected readonly what = 'prune terminal jobs'
  readonly #driver: Driver
  readonly #rules: PruneRules
  readonly #clock: () => number
  #stopped = false

  constructor(driver: Driver, rules: PruneRules, intervalMs: number, logger: Logger, clock: () => number) {
    super(intervalMs, logger)
    this.#driver = driver
    this.#rules = rules
    this.#clock = clock
  }

  /** Starts the timer and prunes at once: a process that never lives a whole interval still prunes. */
  override start(): void {
    super.start()
    void this.tick()
  }

  protected async pass(): Promise<void> {
    const count = await pruneJobs(this.#driver, this.#rules, this.#clock, () => this.#stopped)
    if (count > 0) this.logger.info({ count }, 'deleted terminal jobs past their retention')
  }

  override async stop(): Promise<void> {
    this.#stopped = true
    await super.stop()
  }
}
