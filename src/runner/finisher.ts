import type { ClaimedJob, Driver, JobFinish } from '../driver.js'
import { CODE_INTERNAL, finalWriteSignal } from '../job.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import { Batcher } from './batcher.js'

/** Where jobs claimed with a batch's final writes go. */
export interface ClaimFor {
  readonly runnerId: string
  /** Receives the jobs claimed for `freed` workers about to be freed (fewer jobs when the queue ran short). */
  take(jobs: ClaimedJob[], freed: number): void
}

interface Finishing {
  readonly finish: JobFinish
  readonly kind: string
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
export class Finisher {
  readonly #driver: Driver
  readonly #logger: Logger
  readonly #clock: () => number
  readonly #stopping: AbortSignal
  readonly #batcher: Batcher<Finishing>
  readonly #claimFor: ClaimFor

  constructor(driver: Driver, logger: Logger, clock: () => number, stopping: AbortSignal, claimFor: ClaimFor) {
    this.#driver = driver
    this.#logger = logger
    this.#clock = clock
    this.#stopping = stopping
    this.#claimFor = claimFor
    this.#batcher = new Batcher((batch) => this.#write(batch))
  }

  /** Resolves once the job's final write has landed or been given up (never rejects). */
  finish(finish: JobFinish, kind: string): Promise<void> {
    return this.#batcher.add({ finish, kind })
  }

  /** Resolves when every final write so far has landed or been given up. */
  idle(): Promise<void> {
    return this.#batcher.idle()
  }

  async #write(batch: Finishing[]): Promise<void> {
    const backoff = new Backoff()
    for (;;) {
      try {
        const applied = await this.#finishAndClaim(batch)
        batch.forEach((b, i) => {
          if (!applied[i]) this.#logger.error(fields(b), 'record job outcome: the job is not running under this claim')
        })
        return
      } catch (err) {
        if (!isTransient(err)) return this.#writeRefused(batch, err)
        if (this.#stopping.aborted) {
          for (const b of batch) {
            this.#logger.error({ ...fields(b), error: errorCode(err) }, 'record job outcome failed during shutdown; it fails at the next start')
          }
          return
        }
        const delay = backoff.next()
        this.#logger.error({ jobs: batch.length, error: errorCode(err), retry_in_ms: delay }, 'record job outcome failed; retrying')
        await sleep(delay, this.#stopping)
      }
    }
  }

  /**
   * Writes a batch; where the driver can, claims in the same transaction
   * the next jobs for the workers the batch frees (one transaction per
   * batch instead of two: about a fifth more jobs per second on SQLite in
   * bench/). Not once stopping: a stopping runner claims nothing.
   */
  async #finishAndClaim(batch: Finishing[]): Promise<boolean[]> {
    const limit = batch.length
    let signal: AbortSignal | undefined
    const params = {
      finishes: batch.map((b) => b.finish),
      now: this.#clock(),
      claim: { limit, runnerId: this.#claimFor.runnerId },
      // The bound of this attempt, made only if the driver reads it: one
      // that cannot cancel a statement (SQLite) never does, and each
      // signal costs a timer.
      get signal(): AbortSignal {
        return (signal ??= finalWriteSignal())
      },
    }
    if (this.#driver.jobFinishManyAndClaim === undefined || this.#stopping.aborted) return this.#driver.jobFinishMany(params)
    const { applied, claimed } = await this.#driver.jobFinishManyAndClaim(params)
    this.#claimFor.take(claimed, limit)
    return applied
  }

  async #writeRefused(batch: Finishing[], err: unknown): Promise<void> {
    if (batch.length > 1) {
      for (const b of batch) await this.#write([b])
      return
    }
    const [b] = batch as [Finishing]
    if (b.finish.status === 'succeeded') {
      this.#logger.error({ ...fields(b), error: errorCode(err) }, 'job result could not be stored; failing the job')
      return this.#write([{ kind: b.kind, finish: { ...b.finish, status: 'failed', result: null, error: CODE_INTERNAL } }])
    }
    this.#logger.error({ ...fields(b), error: errorCode(err) }, 'record job failure refused by the database; it fails at the next start')
  }
}

function fields(b: Finishing): object {
  return { job_id: b.finish.id, kind: b.kind }
}
