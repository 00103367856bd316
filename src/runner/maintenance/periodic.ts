import type { Logger } from '../../logger.js'
import { errorCode } from '../backoff.js'

/**
 * One maintenance chore run every `intervalMs`: never two passes at once
 * (a slow pass makes the next tick wait, not stack), never throwing from
 * a timer (a failed pass is logged by its database error code and tried
 * again at the next tick), and never keeping the process alive by itself.
 */
export abstract class Periodic {
  readonly #intervalMs: number
  protected readonly logger: Logger
  readonly #failed: ((err: unknown) => void) | undefined
  #timer: NodeJS.Timeout | undefined
  #pass: Promise<void> | undefined

  /** `failed` is told of each failed pass's error (the runner publishes it, see channels.ts). */
  constructor(intervalMs: number, logger: Logger, failed?: (err: unknown) => void) {
    this.#intervalMs = intervalMs
    this.logger = logger
    this.#failed = failed
  }

  /** What this chore is, for the log line of a failed pass. */
  protected abstract readonly what: string

  /** One pass; may throw a database error. */
  protected abstract pass(): Promise<void>

  start(): void {
    this.#timer ??= setInterval(() => void this.tick(), this.#intervalMs)
    this.#timer.unref()
  }

  /** Runs a pass now, or waits for the one under way. Never rejects. */
  tick(): Promise<void> {
    this.#pass ??= this.pass()
      .catch((err: unknown) => {
        this.#failed?.(err)
        this.logger.error({ error: errorCode(err) }, `${this.what} failed; retrying at the next pass`)
      })
      .finally(() => (this.#pass = undefined))
    return this.#pass
  }

  /** Stops the timer and waits for a pass under way. */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#pass
  }
}
