import { performance } from 'node:perf_hooks'
import type { DriverBase, DriverPresence } from '../driver.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import { publishDatabaseError } from './channels.js'

/** How many times start tries an operation before a transient error fails it (about 1.5 s of backoff). */
const START_ATTEMPTS = 6

/**
 * A runner's presence in the database, so that several processes can share
 * one: it registers the runner with the kinds it has handlers for before
 * the first claim, and renews its lease while it runs (when the driver
 * uses one). A heartbeat never overlaps the one before it: on a slow
 * database the next tick is skipped, not stacked.
 *
 * Timer callbacks never throw: a failed heartbeat is logged with the
 * database error code and tried again at the next tick. A runner whose
 * lease lapsed registers again; the jobs another runner failed meanwhile
 * are lost to it, and its writes to them are refused by the claim fence.
 */
export class Liveness {
  readonly #driver: DriverBase & DriverPresence
  readonly #runnerId: string
  readonly #kinds: readonly string[]
  readonly #logger: Logger
  readonly #clock: () => number
  #timer: NodeJS.Timeout | undefined
  /** The heartbeat in flight, if any: the next tick is skipped while it is set, and stop() waits for it. */
  #beat: Promise<void> | undefined
  /** When (performance.now()) the lease was last taken or renewed; -Infinity when it is known lost. */
  #renewedAt = -Infinity
  /** Told when the lease is held again after it was not fresh, so claims waiting for it go on. */
  onRenewed: () => void = () => undefined

  constructor(driver: DriverBase & DriverPresence, runnerId: string, kinds: readonly string[], logger: Logger, clock: () => number) {
    this.#driver = driver
    this.#runnerId = runnerId
    this.#kinds = kinds
    this.#logger = logger
    this.#clock = clock
  }

  /** Registers the runner and starts the heartbeat. Rejects, registering nothing, when the database refuses. */
  async start(): Promise<void> {
    await retryTransient(() => this.#register(), (err) => publishDatabaseError(this.#runnerId, 'start', err))
    const { heartbeatMs } = this.#driver.capabilities.liveness
    if (heartbeatMs === null) return
    this.#timer = setInterval(() => void this.#heartbeat(), heartbeatMs)
    // The runner's own keep-alive holds the process; liveness never does alone.
    this.#timer.unref()
  }

  /** Stops the heartbeat and unregisters the runner; call once its workers and final writes are done. Never rejects. */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    // A heartbeat in flight must land before the unregister: landing after it, it would find no
    // row, take the lease for lost and register the stopped runner again, and touch a driver
    // the caller may be closing.
    await this.#beat
    try {
      await this.#driver.runnerUnregister({ runnerId: this.#runnerId })
    } catch (err) {
      // Its lease lapses by itself; a driver proving death by a lock releases it on close.
      this.#logger.error({ error: errorCode(err) }, 'unregister runner failed; its registration lapses')
    }
  }

  /**
   * Whether the runner may claim: its lease was renewed within two
   * heartbeats (a lease lasts three), so no other runner's sweep can have
   * taken it for gone. Always true for a driver without a heartbeat. A
   * runner whose heartbeats failed, or whose process was stalled, claims
   * nothing until a heartbeat lands again: a job it claimed then would be
   * swept as a gone runner's while its handler runs.
   */
  get fresh(): boolean {
    const { heartbeatMs } = this.#driver.capabilities.liveness
    return heartbeatMs === null || performance.now() - this.#renewedAt < 2 * heartbeatMs
  }

  async #register(): Promise<void> {
    await this.#driver.runnerRegister({ runnerId: this.#runnerId, kinds: this.#kinds, now: this.#clock() })
    this.#renewed()
  }

  #renewed(): void {
    const wasFresh = this.fresh
    this.#renewedAt = performance.now()
    if (!wasFresh) this.onRenewed()
  }

  #heartbeat(): Promise<void> {
    this.#beat ??= this.#renew().finally(() => (this.#beat = undefined))
    return this.#beat
  }

  async #renew(): Promise<void> {
    try {
      const sent = performance.now()
      const held = await this.#driver.runnerHeartbeat({ runnerId: this.#runnerId, now: this.#clock() })
      if (held) {
        // Renewed as of when it was sent: the lease runs from the database's reading, taken then or after.
        const wasFresh = this.fresh
        this.#renewedAt = Math.max(this.#renewedAt, sent)
        if (!wasFresh && this.fresh) this.onRenewed()
        return
      }
      this.#renewedAt = -Infinity
      this.#logger.warn({}, 'runner lease was lost; its running jobs may have been failed as interrupted; registering again')
      await this.#register()
    } catch (err) {
      publishDatabaseError(this.#runnerId, 'heartbeat', err)
      this.#logger.error({ error: errorCode(err) }, 'renew runner lease failed; retrying at the next heartbeat')
    }
  }
}

/**
 * Runs `op`, retrying a transient database error a few times with
 * backoff: another process busy on a shared SQLite file, or a connection
 * being re-established, should not make a start fail. `failed` is told
 * of every error, the last one included.
 */
export async function retryTransient<T>(op: () => Promise<T>, failed?: (err: unknown) => void): Promise<T> {
  const backoff = new Backoff()
  for (let attempt = 1; ; attempt++) {
    try {
      return await op()
    } catch (err) {
      failed?.(err)
      if (!isTransient(err) || attempt >= START_ATTEMPTS) throw err
      await sleep(backoff.next())
    }
  }
}
