import type { Driver } from '../driver.js'
import { CODE_INTERRUPTED } from '../job.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'

/** How many times start tries to register and sweep before a transient error fails it (about 1.5 s of backoff). */
const START_ATTEMPTS = 6

/**
 * A runner's presence in the database, so that several processes can share
 * one: it registers the runner before the first claim, renews its lease
 * while it runs (when the driver uses one), and sweeps: it fails as
 * `interrupted by restart` the running jobs of runners the driver proves
 * gone, once at start and then every `sweepMs`. Jobs of live runners are
 * never touched, so a starting process no longer fails the work of the
 * processes beside it.
 *
 * Timer callbacks never throw: a failed heartbeat or sweep is logged with
 * the database error code and tried again at the next tick. A runner whose
 * lease lapsed registers again; the jobs another runner failed meanwhile
 * are lost to it, and its writes to them are refused by the claim fence.
 */
export class Liveness {
  readonly #driver: Driver
  readonly #runnerId: string
  readonly #logger: Logger
  readonly #clock: () => number
  #timers: NodeJS.Timeout[] = []
  #sweeping = false

  constructor(driver: Driver, runnerId: string, logger: Logger, clock: () => number) {
    this.#driver = driver
    this.#runnerId = runnerId
    this.#logger = logger
    this.#clock = clock
  }

  /**
   * Registers the runner, fails the jobs gone runners left running and
   * starts the timers. Rejects, registering nothing lasting, when the
   * database refuses; resolves to how many jobs it failed.
   */
  async start(): Promise<number> {
    await this.#retryTransient(() => this.#driver.runnerRegister({ runnerId: this.#runnerId, now: this.#clock() }))
    let failed: number
    try {
      failed = await this.#retryTransient(() => this.#sweepOnce())
    } catch (err) {
      await this.#driver.runnerUnregister({ runnerId: this.#runnerId }).catch(() => undefined)
      throw err
    }
    const { heartbeatMs, sweepMs } = this.#driver.capabilities.liveness
    if (heartbeatMs !== null) this.#every(heartbeatMs, () => this.#heartbeat())
    this.#every(sweepMs, () => this.#sweep())
    return failed
  }

  /** Stops the timers and unregisters the runner; call once its workers and final writes are done. Never rejects. */
  async stop(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer)
    this.#timers = []
    try {
      await this.#driver.runnerUnregister({ runnerId: this.#runnerId })
    } catch (err) {
      // Its lease lapses by itself; a driver proving death by a lock releases it on close.
      this.#logger.error({ error: errorCode(err) }, 'unregister runner failed; its registration lapses')
    }
  }

  /**
   * Runs `op`, retrying a transient database error a few times with
   * backoff: another process busy on a shared SQLite file, or a connection
   * being re-established, should not make a start fail.
   */
  async #retryTransient<T>(op: () => Promise<T>): Promise<T> {
    const backoff = new Backoff()
    for (let attempt = 1; ; attempt++) {
      try {
        return await op()
      } catch (err) {
        if (!isTransient(err) || attempt >= START_ATTEMPTS) throw err
        await sleep(backoff.next())
      }
    }
  }

  #every(ms: number, fn: () => Promise<void>): void {
    const timer = setInterval(() => void fn(), ms)
    // Liveness alone never keeps a process alive.
    timer.unref()
    this.#timers.push(timer)
  }

  async #heartbeat(): Promise<void> {
    try {
      const held = await this.#driver.runnerHeartbeat({ runnerId: this.#runnerId, now: this.#clock() })
      if (held) return
      this.#logger.warn({}, 'runner lease was lost; its running jobs may have been failed as interrupted; registering again')
      await this.#driver.runnerRegister({ runnerId: this.#runnerId, now: this.#clock() })
    } catch (err) {
      this.#logger.error({ error: errorCode(err) }, 'renew runner lease failed; retrying at the next heartbeat')
    }
  }

  async #sweep(): Promise<void> {
    if (this.#sweeping) return
    this.#sweeping = true
    try {
      await this.#sweepOnce()
    } catch (err) {
      this.#logger.error({ error: errorCode(err) }, 'sweep for interrupted jobs failed; retrying at the next sweep')
    } finally {
      this.#sweeping = false
    }
  }

  async #sweepOnce(): Promise<number> {
    const failed = await this.#driver.jobFailInterrupted({ runnerId: this.#runnerId, error: CODE_INTERRUPTED, now: this.#clock() })
    if (failed > 0) this.#logger.warn({ count: failed }, 'failed jobs interrupted by restart')
    return failed
  }
}
