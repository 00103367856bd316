import { InvalidArgumentError } from '../errors.js'

/** The range of a Date, in epoch milliseconds: every time the clock reads can be a Date. */
const MAX_TIME = 8.64e15

/**
 * A clock that moves only when told to: the runner of a test kit reads it
 * for every enqueue (`delayMs`), every due time it compares, every retry
 * and snooze it schedules. Moving it on lets scheduled jobs fall due; the
 * next `drain()` runs them.
 *
 * It stands in for the runner's `clock` option only. Timers still count
 * real time: a kind's `timeoutMs`, a handler's own `setTimeout`, the
 * driver's poll. Do not combine the kit with a test framework's fake
 * timers (`vi.useFakeTimers()`): the runner's own timers would stop.
 */
export class TestClock {
  #now: number
  readonly #listeners = new Set<(now: number) => void>()

  /** Starts at `start` (a Date or epoch ms); default the real time now, from then on frozen. */
  constructor(start: Date | number = Date.now()) {
    this.#now = timeOf(start, 'TestClock start')
  }

  /** The current time in epoch milliseconds. */
  now(): number {
    return this.#now
  }

  /** Moves the clock `ms` milliseconds forward (an integer >= 0); returns the new time. */
  advance(ms: number): number {
    if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) throw new InvalidArgumentError('clock.advance: ms must be an integer >= 0')
    return this.#move(timeOf(this.#now + ms, 'clock.advance'))
  }

  /**
   * Sets the clock to `time` (a Date or epoch ms); returns the new time.
   * It may move backwards, as a real clock sometimes does: jobs already
   * promoted stay queued.
   */
  set(time: Date | number): number {
    return this.#move(timeOf(time, 'clock.set'))
  }

  /**
   * Calls `listener` with the new time after every advance or set; returns
   * the function that stops the calls. A test kit listens, to tell its
   * runner's scheduler that jobs may have fallen due.
   */
  onChange(listener: (now: number) => void): () => void {
    if (typeof listener !== 'function') throw new InvalidArgumentError('clock.onChange: listener must be a function')
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  #move(to: number): number {
    this.#now = to
    for (const listener of [...this.#listeners]) listener(to)
    return to
  }
}

/** Makes a TestClock starting at `start` (default the real time now), frozen until moved. */
export function createTestClock(start?: Date | number): TestClock {
  return new TestClock(start)
}

function timeOf(value: unknown, where: string): number {
  const ms = value instanceof Date ? value.getTime() : value
  if (typeof ms !== 'number' || !Number.isFinite(ms) || Math.abs(ms) > MAX_TIME) {
    throw new InvalidArgumentError(`${where}: expected a valid Date or epoch milliseconds within the range of a Date`)
  }
  return Math.round(ms)
}
