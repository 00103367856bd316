import type { ClaimedJob, ClaimParams, DriverHotPath, JobFinish } from '../driver.js'
import { CODE_INTERNAL, finalWriteSignal } from '../job.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import { Batcher } from './batcher.js'
import { publishDatabaseError } from './channels.js'

/**
 * The claim a batch of final writes carries, when the worker pool wants one.
 * The completer knows nothing of workers: it asks, carries the claim in
 * its transaction and hands back the answer.
 */
export interface Piggyback {
  /**
   * Called as a batch goes out, with how many of the pool's jobs it
   * finishes: the claim to make in the same transaction, or undefined
   * for none.
   */
  request(finishing: number): ClaimParams | undefined
  /** The answer to the claim made with a batch finishing `finishing` jobs. */
  take(jobs: ClaimedJob[], finishing: number): void
  /** That claim failed: it may have committed with its answer lost. */
  missed(finishing: number): void
}

/** How a final write ended: applied, refused by the fence (the job is not ours any more), or given up (left running). */
export type FinishOutcome = 'applied' | 'fenced' | 'given_up'

interface Finishing {
  readonly finish: JobFinish
  readonly kind: string
  /**
   * Whether its worker is free once it lands. Not for a job recorded as
   * timed out while its handler still runs: that slot stays taken, so a
   * claim made for it would hold a job no handler can start (running in
   * the database, out of reach of idle runners) until the handler returns.
   */
  readonly frees: boolean
  outcome: FinishOutcome
}

/**
 * Makes the final writes of finished jobs, group-committed: the jobs that
 * finish in one turn of the event loop are written in one transaction, and
 * each worker waits for the write holding its own job before it moves on.
 *
 * A transient database error is retried with backoff until the write
 * lands; each attempt is bounded by FINAL_WRITE_TIMEOUT_MS. Once the runner
 * is stopping, a failed attempt is not retried: the job stays running, so
 * the next start fails it as interrupted. A permanent error is not retried
 * at all: a batch is split to find the job the database refuses, a success
 * it refuses becomes an `internal_error` failure, and a failure it refuses
 * is left running.
 */
export class Completer {
  readonly #driver: DriverHotPath
  readonly #runnerId: string
  readonly #logger: Logger
  readonly #clock: () => number
  readonly #stopping: AbortSignal
  readonly #batcher: Batcher<Finishing>
  readonly #piggyback: Piggyback | undefined
  /** What the claim loop waits for: the next final write to land or fail (see nextClaim). */
  #landing: Promise<void> | undefined
  #landed: (() => void) | undefined
  /** A failed write waits for its backoff: the claim loop claims meanwhile. */
  #retrying = false

  /** `runnerId` names the runner in the database errors it publishes (see channels.ts). */
  constructor(driver: DriverHotPath, runnerId: string, logger: Logger, clock: () => number, stopping: AbortSignal, piggyback?: Piggyback) {
    this.#driver = driver
    this.#runnerId = runnerId
    this.#logger = logger
    this.#clock = clock
    this.#stopping = stopping
    this.#piggyback = driver.jobFinishManyAndClaim === undefined ? undefined : piggyback
    this.#batcher = new Batcher((batch) => this.#write(batch))
  }

  /** Resolves once the job's final write has landed or been given up, saying which (never rejects). */
  async finish(finish: JobFinish, kind: string, frees = true): Promise<FinishOutcome> {
    const item: Finishing = { finish, kind, frees, outcome: 'given_up' }
    await this.#batcher.add(item)
    return item.outcome
  }

  /** Resolves when every final write so far has landed or been given up. */
  idle(): Promise<void> {
    return this.#batcher.idle()
  }

  /**
   * While final writes wait or are being written, resolves when the next
   * one lands or fails, or when they run out; undefined otherwise, and
   * while a failed write waits to be tried again. That write claims for
   * every idle worker too, so the claim loop waits for it rather than
   * claiming beside it: two claims at once would each take part of the
   * same few new jobs, each a statement of its own.
   */
  nextClaim(): Promise<void> | undefined {
    if (!this.#batcher.busy || this.#retrying || this.#stopping.aborted || this.#piggyback === undefined) return undefined
    this.#landing ??= new Promise<void>((resolve) => (this.#landed = resolve))
    // Or when the writes run out: the last may have landed already.
    return Promise.race([this.#landing, this.#batcher.idle()])
  }

  async #write(batch: Finishing[]): Promise<void> {
    const backoff = new Backoff()
    for (;;) {
      try {
        const applied = await this.#finishAndClaim(batch)
        batch.forEach((b, i) => {
          b.outcome = applied[i] ? 'applied' : 'fenced'
          if (!applied[i]) this.#logger.error(fields(b), 'record job outcome: the job is not running under this claim')
        })
        return
      } catch (err) {
        publishDatabaseError(this.#runnerId, 'finish', err)
        if (!isTransient(err)) return this.#writeRefused(batch, err)
        if (this.#stopping.aborted) {
          for (const b of batch) {
            this.#logger.error({ ...fields(b), error: errorCode(err) }, 'record job outcome failed during shutdown; it fails at the next start')
          }
          return
        }
        const delay = backoff.next()
        this.#logger.error({ jobs: batch.length, error: errorCode(err), retry_in_ms: delay }, 'record job outcome failed; retrying')
        this.#retrying = true
        await sleep(delay, this.#stopping)
        this.#retrying = false
      }
    }
  }

  /**
   * Writes a batch; where the driver can, claims in the same transaction
   * the next jobs for the workers the batch frees and for the idle ones
   * (one transaction per batch instead of two: about a fifth more jobs per
   * second on SQLite in bench/). Not once stopping: a stopping runner
   * claims nothing.
   */
  async #finishAndClaim(batch: Finishing[]): Promise<boolean[]> {
    const finishes = batch.map((b) => b.finish)
    const now = this.#clock()
    // The bound of this attempt, made only if the driver reads it: one that
    // cannot cancel a statement (SQLite) never does, and each signal costs a timer.
    let signal: AbortSignal | undefined
    const bound = () => (signal ??= finalWriteSignal())
    // Claims for the workers this batch frees (and the idle ones), not for a slot a timed-out handler still holds.
    let freed = 0
    for (const b of batch) if (b.frees) freed++
    const claim = this.#stopping.aborted ? undefined : this.#piggyback?.request(freed)
    if (claim === undefined) {
      try {
        return await this.#driver.jobFinishMany({
          finishes,
          now,
          get signal() {
            return bound()
          },
        })
      } finally {
        this.#landedNow()
      }
    }
    try {
      const { applied, claimed } = await this.#driver.jobFinishManyAndClaim!({
        finishes,
        now,
        claim,
        get signal() {
          return bound()
        },
      })
      this.#piggyback!.take(claimed, freed)
      return applied
    } catch (err) {
      this.#piggyback!.missed(freed)
      throw err
    } finally {
      this.#landedNow()
    }
  }

  /** Tells the claim loop waiting in nextClaim that a write landed or failed. */
  #landedNow(): void {
    const landed = this.#landed
    this.#landing = this.#landed = undefined
    landed?.()
  }

  async #writeRefused(batch: Finishing[], err: unknown): Promise<void> {
    if (batch.length > 1) {
      for (const b of batch) await this.#write([b])
      return
    }
    const [b] = batch as [Finishing]
    if (b.finish.status === 'succeeded') {
      this.#logger.error({ ...fields(b), error: errorCode(err) }, 'job result could not be stored; failing the job')
      const failed: Finishing = { kind: b.kind, frees: b.frees, finish: { ...b.finish, status: 'failed', result: null, error: CODE_INTERNAL }, outcome: 'given_up' }
      await this.#write([failed])
      b.outcome = failed.outcome
      return
    }
    this.#logger.error({ ...fields(b), error: errorCode(err) }, 'record job failure refused by the database; it fails at the next start')
  }
}

function fields(b: Finishing): object {
  return { job_id: b.finish.id, kind: b.kind }
}
