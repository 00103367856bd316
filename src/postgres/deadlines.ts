/**
 * What `abortable` listens to: an AbortSignal, or a Deadline. Both abort
 * once; listeners added after that are not called.
 */
export interface AbortLike {
  readonly aborted: boolean
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

/** One statement's bound: aborts when the Deadlines sweep finds it past due. */
export class Deadline implements AbortLike {
  readonly due: number
  #aborted = false
  #listeners: (() => void)[] = []

  constructor(due: number) {
    this.due = due
  }

  get aborted(): boolean {
    return this.#aborted
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    this.#listeners.push(listener)
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const i = this.#listeners.indexOf(listener)
    if (i >= 0) this.#listeners.splice(i, 1)
  }

  abort(): void {
    if (this.#aborted) return
    this.#aborted = true
    for (const listener of this.#listeners.splice(0)) listener()
  }
}

/**
 * Bounds every statement a driver sends with one timer for all of them,
 * rather than a timer and an AbortSignal each: those cost about 15 µs a
 * job on PostgreSQL mixed in bench/ (an AbortSignal.timeout per statement
 * and its listeners). Written by hand, since no library keeps a set of
 * deadlines this cheaply. A statement is aborted between its deadline and
 * one tick later (a quarter of the bound, at most a second); the timer
 * runs only while statements are in flight, and never keeps the process
 * alive.
 */
export class Deadlines {
  readonly #boundMs: number
  readonly #tickMs: number
  readonly #open = new Set<Deadline>()
  #timer: NodeJS.Timeout | undefined
  #idleTicks = 0

  constructor(boundMs: number) {
    this.#boundMs = boundMs
    this.#tickMs = Math.max(5, Math.min(1_000, Math.floor(boundMs / 4)))
  }

  /** A new deadline `boundMs` from now; call `done` with it when its statement ends. */
  start(): Deadline {
    const deadline = new Deadline(performance.now() + this.#boundMs)
    this.#open.add(deadline)
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#sweep(), this.#tickMs)
      this.#timer.unref()
    }
    return deadline
  }

  done(deadline: Deadline): void {
    this.#open.delete(deadline)
  }

  #sweep(): void {
    if (this.#open.size === 0) {
      // Stopped after a tick with nothing open, not at every statement's end: starting a timer per statement is the cost avoided.
      if (++this.#idleTicks > 1) this.stop()
      return
    }
    this.#idleTicks = 0
    const now = performance.now()
    for (const deadline of this.#open) {
      if (deadline.due > now) continue
      this.#open.delete(deadline)
      deadline.abort()
    }
  }

  /** Stops the timer; deadlines still open then are not aborted. */
  stop(): void {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#idleTicks = 0
  }
}
