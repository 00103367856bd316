import type { Driver } from '../../driver.js'
import type { Logger } from '../../logger.js'
import { errorCode } from '../backoff.js'

/** How many due jobs one statement promotes; a bigger wave takes several, each short. */
const PROMOTE_BATCH = 1_000

/**
 * Makes scheduled jobs queued when they fall due, so a claim finds them.
 * It sleeps until the nearest due time it knows of: one it was told of
 * (a job this process scheduled, `noteDue`) or the earliest read from the
 * database after each pass, which covers jobs other processes scheduled.
 * It reads again at least every `pollMs` (the fallback poll's interval), so
 * a job another process scheduled sooner is promoted within that at
 * worst. It never polls busily: one timer, unref'd.
 *
 * Due times are compared with the runner's clock (on PostgreSQL, with
 * the database's when that is earlier), and the timer's delay is
 * computed from it: a test that moves an injected clock calls
 * `runner.wake()`, which promotes at once when the clock has reached the
 * nearest due time (see `wake`).
 */
export class Scheduler {
  readonly #driver: Driver
  readonly #logger: Logger
  readonly #clock: () => number
  readonly #onPromoted: () => void
  readonly #failed: ((err: unknown) => void) | undefined
  readonly #pollMs: number
  #next: number | null = null
  /** The earliest due time noted during a pass: the pass's read of the database may predate that job's insert. */
  #notedDuringPass: number | null = null
  #timer: NodeJS.Timeout | undefined
  /** The clock's reading and the wait when the timer was last set for a due time, and whether that timer has fired since. */
  #armed: { at: number; wait: number; fired: boolean } | undefined
  #pass: Promise<void> | undefined
  /** Set when the last pass left a job this clock calls due scheduled (see #run). */
  #declined = false
  #again = false
  #stopped = false

  /** `failed` is told of each failed pass's error (the runner publishes it, see channels.ts). */
  constructor(driver: Driver, logger: Logger, clock: () => number, onPromoted: () => void, failed?: (err: unknown) => void) {
    this.#driver = driver
    this.#logger = logger
    this.#clock = clock
    this.#onPromoted = onPromoted
    this.#failed = failed
    this.#pollMs = driver.capabilities.pollMs
  }

  start(): void {
    void this.tick()
  }

  /** A job due at `due` was stored: sleep no later than that. */
  noteDue(due: number): void {
    if (this.#stopped) return
    if (due <= this.#clock()) {
      void this.tick()
      return
    }
    if (this.#pass !== undefined) this.#notedDuringPass = earlier(this.#notedDuringPass, due)
    if (this.#next !== null && this.#next <= due) return
    this.#next = due
    this.#arm()
  }

  /**
   * Another process may have written: promote now if the nearest known
   * due time has come (a timer late). Jobs it scheduled are found by the
   * next read, within `pollMs`.
   */
  wake(): void {
    if (this.#next !== null && this.#next <= this.#clock()) void this.tick()
  }

  /** Promotes what is due and reads the next due time; a call during a pass makes one more pass after it. Never rejects. */
  tick(): Promise<void> {
    if (this.#stopped) return Promise.resolve()
    if (this.#pass !== undefined) {
      this.#again = true
      // The pass after this one starts in the current pass's finally: resolve once that one has ended too.
      return this.#pass.then(() => this.#pass)
    }
    this.#pass = this.#run().finally(() => {
      this.#pass = undefined
      if (this.#again && !this.#stopped) {
        this.#again = false
        void this.tick()
      }
    })
    return this.#pass
  }

  async #run(): Promise<void> {
    this.#notedDuringPass = null
    try {
      let promoted = 0
      let promotedAt: number
      for (;;) {
        promotedAt = this.#clock()
        const n = await this.#driver.jobPromoteDue({ now: promotedAt, limit: PROMOTE_BATCH })
        promoted += n
        if (n < PROMOTE_BATCH) break
        if (n > 0) this.#onPromoted()
      }
      if (promoted > 0) this.#onPromoted()
      const read = await this.#driver.queueNextDue({ now: this.#clock() })
      this.#next = earlier(read, this.#notedDuringPass)
      // A job due by the clock the promotion was sent with, yet left scheduled: the database judged it not
      // due yet (a clock ahead of its own, see the PostgreSQL driver), or another promoter holds it. Look
      // again at the poll, not at once. (A job noted during the pass may postdate the promotion: not so.)
      this.#declined = read !== null && read <= promotedAt
    } catch (err) {
      this.#failed?.(err)
      this.#logger.error({ error: errorCode(err) }, 'promote scheduled jobs failed; retrying at the next pass')
    }
    this.#arm()
  }

  /**
   * Sleeps until the nearest due time known, or the poll interval,
   * whichever is sooner. A clock that did not move on while the last
   * timer for a due time slept (a test's, held still) is not followed
   * with another short sleep, which would fire every few milliseconds
   * until it moves: the poll interval, or a wake after the clock moves,
   * comes first.
   */
  #arm(): void {
    clearTimeout(this.#timer)
    if (this.#stopped) return
    const now = this.#clock()
    let wait = this.#next === null || this.#declined ? this.#pollMs : Math.min(this.#pollMs, Math.max(0, this.#next - now))
    const last = this.#armed
    if (wait > 0 && wait < this.#pollMs && last !== undefined && last.fired && now < last.at + last.wait / 2) wait = this.#pollMs
    const armed = { at: now, wait, fired: false }
    this.#armed = armed
    this.#timer = setTimeout(() => {
      armed.fired = true
      void this.tick()
    }, wait)
    this.#timer.unref()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    await this.#pass
  }
}

function earlier(a: number | null, b: number | null): number | null {
  if (a === null) return b
  return b === null ? a : Math.min(a, b)
}
