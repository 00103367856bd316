import { DatabaseError } from '../errors.js'
import { RETRY_MAX_MS, RETRY_MIN_MS } from '../job.js'

/** The delays between retries of a failing database write: RETRY_MIN_MS doubling to RETRY_MAX_MS. */
export class Backoff {
  #next = RETRY_MIN_MS

  /** The delay before the next retry; each call doubles the one after. */
  next(): number {
    const delay = this.#next
    this.#next = Math.min(2 * delay, RETRY_MAX_MS)
    return delay
  }

  reset(): void {
    this.#next = RETRY_MIN_MS
  }
}

/** Resolves after ms, or as soon as signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** Whether trying a failed database operation again can succeed. Anything not a transient DatabaseError is permanent. */
export function isTransient(err: unknown): boolean {
  return err instanceof DatabaseError && err.transient
}

/** The database error code to log for a failure; never the message, which may quote values. */
export function errorCode(err: unknown): string {
  return err instanceof DatabaseError ? err.dbCode : 'unexpected'
}
