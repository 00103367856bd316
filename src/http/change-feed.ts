import { jobEndChannel, jobPublishChannel, jobStartChannel, type Runner } from '../index.js'

/**
 * Tells the event streams of one API when to read their job again, with
 * the cheapest signal each source has:
 *
 * - a job run by the API's runner: its start, each published partial
 *   result and its end, at once (the runner's diagnostics channels), so
 *   two results published 10 ms apart are two reads;
 * - another process's writes: on PostgreSQL, a published result's
 *   notification (at once); on a driver with a change token (SQLite's
 *   data_version), one read of the token every `pollMs` for all the
 *   streams together, waking them only when something was committed;
 *   otherwise (PostgreSQL's final writes) every stream every `pollMs`.
 *
 * Listens only while a stream watches.
 */
export class ChangeFeed {
  readonly #runner: Runner
  readonly #pollMs: number
  readonly #watchers = new Map<string, Set<() => void>>()
  #size = 0
  #timer: NodeJS.Timeout | undefined
  #unwake: (() => void) | undefined
  #token: string | undefined
  #reading = false

  constructor(runner: Runner, pollMs: number) {
    this.#runner = runner
    this.#pollMs = pollMs
  }

  /** Calls `wake` whenever job `id` may have changed, until the returned function is called. */
  watch(id: string, wake: () => void): () => void {
    let set = this.#watchers.get(id)
    if (set === undefined) this.#watchers.set(id, (set = new Set()))
    set.add(wake)
    if (++this.#size === 1) this.#start()
    return () => {
      if (!set.delete(wake)) return
      if (set.size === 0) this.#watchers.delete(id)
      if (--this.#size === 0) this.#stop()
    }
  }

  readonly #onJob = (message: unknown): void => {
    const { jobId: id, runnerId } = message as { jobId?: unknown; runnerId?: unknown }
    // The API's own runner: another runner of this process is seen as another process's would be.
    if (typeof id !== 'string' || runnerId !== this.#runner.id) return
    for (const wake of this.#watchers.get(id) ?? []) wake()
  }

  #wakeAll(): void {
    for (const set of this.#watchers.values()) for (const wake of set) wake()
  }

  #start(): void {
    jobStartChannel.subscribe(this.#onJob)
    jobPublishChannel.subscribe(this.#onJob)
    jobEndChannel.subscribe(this.#onJob)
    const driver = this.#runner.driver
    this.#unwake = driver.onWake?.((what) => {
      if (what === 'change') this.#wakeAll()
    })
    this.#token = undefined
    this.#timer = setInterval(() => void this.#poll(), this.#pollMs)
    this.#timer.unref()
  }

  #stop(): void {
    jobStartChannel.unsubscribe(this.#onJob)
    jobPublishChannel.unsubscribe(this.#onJob)
    jobEndChannel.unsubscribe(this.#onJob)
    this.#unwake?.()
    this.#unwake = undefined
    clearInterval(this.#timer)
  }

  async #poll(): Promise<void> {
    const driver = this.#runner.driver
    if (driver.changeToken === undefined) return this.#wakeAll()
    if (this.#reading) return
    this.#reading = true
    try {
      const token = await driver.changeToken()
      if (token === this.#token) return
      this.#token = token
    } catch {
      // A busy store: the streams read it themselves, and say so if they cannot.
    } finally {
      this.#reading = false
    }
    this.#wakeAll()
  }
}
