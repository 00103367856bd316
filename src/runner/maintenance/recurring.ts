import type { Driver, NewJob } from '../../driver.js'
import { JobtableError } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { CATCH_UP_MAX, type Schedule, SKIP_LATE_MS } from '../../schedule.js'
import { errorCode, isTransient } from '../backoff.js'

/** The longest the service sleeps between passes, whatever the next tick: a clock moved by hand or by NTP is caught up with this often. */
const SLEEP_MAX_MS = 60_000

/**
 * Enqueues the ticks of the runner's recurring schedules. Each pass reads
 * every schedule's last recorded tick and, for each tick due since, asks
 * the driver to move the schedule forward to it with its job in the same
 * transaction (scheduleAdvance): the database lets exactly one process
 * move a schedule to a tick, so every tick is enqueued once however many
 * processes declare the schedule, with no leader. A schedule seen for the
 * first time is recorded at its latest tick without a job: it starts
 * with the next one. Ticks missed while nothing ran follow the
 * schedule's `missed` policy. A schedule removed from the code is no
 * longer read: it stops.
 *
 * It sleeps until the nearest next tick by the runner's clock, at most
 * SLEEP_MAX_MS; `tick()` (which `runner.wake()` calls) makes a pass now,
 * so a test that moves an injected clock sees the due ticks enqueued.
 */
export class RecurringJobs {
  readonly #driver: Driver
  readonly #schedules: readonly Schedule[]
  readonly #names: readonly string[]
  readonly #prepare: (schedule: Schedule, tick: number) => Promise<NewJob>
  readonly #logger: Logger
  readonly #clock: () => number
  readonly #stored: () => void
  readonly #failed: ((err: unknown) => void) | undefined
  readonly #enqueued: ((kind: string, count: number) => void) | undefined
  readonly #pollMs: number
  #timer: NodeJS.Timeout | undefined
  #pass: Promise<void> | undefined
  #again = false
  #stopped = false
  /** The clock's reading when the timer was last set, and whether this pass is that timer's. */
  #armedAt: number | undefined
  #fired = false

  /**
   * `prepare` makes a tick's job (validating its payload); `stored` is
   * called after a pass stored any, `enqueued` with the kind and count of
   * the jobs each tick stored (never for a tick that stored none: passed
   * over, or its unique key held by a live job), `failed` with a failed
   * pass's error (the runner publishes both, see channels.ts).
   */
  constructor(options: {
    driver: Driver
    schedules: readonly Schedule[]
    prepare: (schedule: Schedule, tick: number) => Promise<NewJob>
    logger: Logger
    clock: () => number
    stored: () => void
    failed?: (err: unknown) => void
    enqueued?: (kind: string, count: number) => void
  }) {
    this.#driver = options.driver
    this.#schedules = options.schedules
    this.#names = options.schedules.map((s) => s.name)
    this.#prepare = options.prepare
    this.#logger = options.logger
    this.#clock = options.clock
    this.#stored = options.stored
    this.#failed = options.failed
    this.#enqueued = options.enqueued
    this.#pollMs = options.driver.capabilities.pollMs
  }

  start(): void {
    if (this.#schedules.length > 0) void this.tick()
  }

  /** Makes a pass now, or one more after the pass under way. Never rejects. */
  tick(): Promise<void> {
    if (this.#stopped || this.#schedules.length === 0) return Promise.resolve()
    if (this.#pass !== undefined) {
      this.#again = true
      return this.#pass
    }
    clearTimeout(this.#timer)
    this.#pass = this.#run()
    return this.#pass
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    await this.#pass
  }

  async #run(): Promise<void> {
    let delay: number
    try {
      do {
        this.#again = false
        this.#again = (await this.#once()) || this.#again
      } while (this.#again && !this.#stopped)
      delay = this.#untilNextTick()
    } catch (err) {
      this.#failed?.(err)
      this.#logger.error({ error: errorCode(err) }, 'enqueueing recurring jobs failed; retrying at the next poll')
      delay = this.#pollMs
    }
    // Cleared in the same synchronous step as the last look at #again: a tick() after it starts a pass of its own.
    this.#pass = undefined
    this.#fired = false
    if (this.#stopped) return
    this.#armedAt = this.#clock()
    this.#timer = setTimeout(() => {
      this.#fired = true
      void this.tick()
    }, delay)
    this.#timer.unref()
  }

  /** One pass over every schedule; true when a schedule has missed ticks left to enqueue (`missed: 'all'`). */
  async #once(): Promise<boolean> {
    const now = this.#clock()
    const recorded = new Map((await this.#driver.schedulesRead({ names: this.#names })).map((r) => [r.name, r.lastTickAt]))
    let stored = 0
    let more = false
    for (const schedule of this.#schedules) {
      const latest = schedule.latest(now)
      if (latest === null) continue
      const last = recorded.get(schedule.name)
      if (last === undefined) {
        await this.#driver.scheduleAdvance({ name: schedule.name, tickAt: latest, jobs: [], now })
        continue
      }
      if (latest <= last) continue
      switch (schedule.missed) {
        case 'last':
          stored += await this.#enqueue(schedule, latest, now)
          break
        case 'skip':
          if (now - latest <= SKIP_LATE_MS) stored += await this.#enqueue(schedule, latest, now)
          else await this.#driver.scheduleAdvance({ name: schedule.name, tickAt: latest, jobs: [], now })
          break
        case 'all': {
          let tick = schedule.next(last)
          for (let n = 0; tick !== null && tick <= latest && n < CATCH_UP_MAX; n++) {
            stored += await this.#enqueue(schedule, tick, now)
            tick = schedule.next(tick)
          }
          if (tick !== null && tick <= latest) more = true
          break
        }
      }
    }
    if (stored > 0) this.#stored()
    return more
  }

  /**
   * Moves `schedule` to `tick` with its job; 1 when this process stored
   * it, 0 when another process moved the schedule first or a live job
   * holds the job's unique key. A payload its kind refuses (or a payload
   * function that throws) is logged by its code only and the tick passed
   * over: tried again, it would be refused again at every pass.
   */
  async #enqueue(schedule: Schedule, tick: number, now: number): Promise<number> {
    let job: NewJob | undefined
    try {
      job = await this.#prepare(schedule, tick)
    } catch (err) {
      if (isTransient(err)) throw err
      // jobtable's own code (invalid_payload), never the message: it may quote what the application's function returned.
      const code = err instanceof JobtableError ? err.code : 'unexpected'
      this.#logger.error({ schedule: schedule.name, kind: schedule.kind, error: code }, 'a recurring job could not be made; its tick is passed over')
    }
    const { stored } = await this.#driver.scheduleAdvance({ name: schedule.name, tickAt: tick, jobs: job === undefined ? [] : [job], now })
    if (stored > 0) this.#enqueued?.(schedule.kind, stored)
    return stored
  }

  /** How long to sleep: until the nearest next tick (one ms past it), at most SLEEP_MAX_MS; the poll interval when the clock does not move (held by a test). */
  #untilNextTick(): number {
    const now = this.#clock()
    if (this.#fired && this.#armedAt === now) return this.#pollMs
    let next: number | null = null
    for (const s of this.#schedules) {
      const t = s.next(now)
      if (t !== null && (next === null || t < next)) next = t
    }
    if (next === null) return SLEEP_MAX_MS
    return Math.min(Math.max(next - now + 1, 1), SLEEP_MAX_MS)
  }
}
