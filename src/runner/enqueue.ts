import type { Driver, NewJob } from '../driver.js'
import { InvalidArgumentError } from '../errors.js'
import { newJobId } from '../id.js'
import type { RegisteredKind } from '../kind.js'
import { optionsObject } from '../options.js'
import { encodePayload, encodePayloadSync } from '../payload.js'
import { isTransient } from './backoff.js'
import { Batcher, type ItemErrors } from './batcher.js'

/** The handle of a user's own transaction for a driver `D`. */
export type TxOf<D> = D extends Driver<infer Tx, boolean> ? Tx : never
/** What a transactional enqueue returns on driver `D`: the value itself where the driver writes synchronously. */
export type TxResult<D, T> = D extends Driver<unknown, true> ? T : Promise<T>

/** Options of one enqueue. Unknown keys are refused (InvalidArgumentError). */
export interface EnqueueOptions {
  /**
   * The owner scope of the job (a household, a tenant): the HTTP API lets
   * a caller read, list and stream only jobs of its own scope. Default:
   * none (null).
   */
  readonly scope?: string
}

const ENQUEUE_KEYS = ['scope'] as const

/** Enqueues jobs of one kind; `In` is its payload schema's input type. */
export interface Kind<In, D extends Driver = Driver> {
  readonly name: string
  /** Stores a queued job and wakes an idle worker; resolves to its id once it is durable. */
  enqueue(payload: In, options?: EnqueueOptions): Promise<string>
  /** Stores many queued jobs in one transaction; resolves to their ids in order. */
  enqueueMany(payloads: readonly In[], options?: EnqueueOptions): Promise<string[]>
  /**
   * Stores a queued job through the caller's own transaction, so it exists
   * exactly when what else that transaction writes does. Call `wake()` once
   * the transaction has committed so an idle worker takes it at once.
   */
  enqueueTx(tx: TxOf<D>, payload: In, options?: EnqueueOptions): TxResult<D, string>
  /** Tells an idle worker to look for a job, as enqueue does itself. */
  wake(): void
}

/**
 * The producing side of a runner: validates payloads, and writes the
 * enqueues of one turn of the event loop in one transaction. It needs no
 * handler and no started runner, so a web process that only enqueues
 * uses just this part.
 */
export class Enqueuer {
  readonly #driver: Driver
  readonly #clock: () => number
  readonly #wake: () => void
  readonly #inserter: Batcher<NewJob>

  constructor(driver: Driver, clock: () => number, wake: () => void) {
    this.#driver = driver
    this.#clock = clock
    this.#wake = wake
    this.#inserter = new Batcher((jobs) => this.#insertBatch(jobs))
  }

  /** Validates and stores one job of `kind`; resolves to its id once durable. */
  async enqueue(kind: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined): Promise<string> {
    const scope = scopeOf(options)
    const job = { id: newJobId(), kind: kind.name, payload: await encodePayload(kind.name, kind.schema, payload), scope }
    await this.#inserter.add(job)
    this.#wake()
    return job.id
  }

  /** The typed handle of a kind. */
  handle<In, D extends Driver>(kind: RegisteredKind): Kind<In, D> {
    const { name, schema } = kind
    const driver = this.#driver
    return {
      name,
      enqueue: (payload, options) => this.enqueue(kind, payload, options),
      enqueueMany: async (payloads, options) => {
        const scope = scopeOf(options)
        if (!Array.isArray(payloads)) throw new InvalidArgumentError('enqueueMany: payloads must be an array')
        // Awaited only where the schema validates asynchronously: a sync one costs no promise per payload.
        const encoded: (string | Promise<string>)[] = []
        try {
          for (const p of payloads) encoded.push(encodePayload(name, schema, p))
        } catch (err) {
          // Refused before the asynchronous checks already started were awaited: their refusals are not news.
          for (const e of encoded) if (typeof e !== 'string') e.catch(() => undefined)
          throw err
        }
        const texts = encoded.every((e) => typeof e === 'string') ? encoded : await Promise.all(encoded)
        const jobs = texts.map((payload) => ({ id: newJobId(), kind: name, scope, payload }))
        await driver.jobInsertMany({ jobs, now: this.#clock() })
        this.#wake()
        return jobs.map((j) => j.id)
      },
      enqueueTx: ((tx: TxOf<D>, payload: In, options?: EnqueueOptions) => {
        const scope = scopeOf(options)
        if (driver.capabilities.txSync) {
          const job = { id: newJobId(), kind: name, scope, payload: encodePayloadSync(name, schema, payload) }
          driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() })
          return job.id
        }
        return (async () => {
          const job = { id: newJobId(), kind: name, scope, payload: await encodePayload(name, schema, payload) }
          await driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() })
          return job.id
        })()
      }) as Kind<In, D>['enqueueTx'],
      wake: () => this.#wake(),
    }
  }

  /**
   * Writes the enqueues of one turn in one transaction. A permanent error
   * may belong to a single job, so the batch is then written job by job:
   * each caller gets its own answer, not a neighbour's refusal.
   */
  async #insertBatch(jobs: NewJob[]): Promise<ItemErrors> {
    try {
      await this.#driver.jobInsertMany({ jobs, now: this.#clock() })
      return
    } catch (err) {
      if (jobs.length === 1 || isTransient(err)) throw err
    }
    const errors: unknown[] = []
    for (const job of jobs) {
      errors.push(await this.#driver.jobInsertMany({ jobs: [job], now: this.#clock() }).then(() => undefined, (err: unknown) => err))
    }
    return errors
  }
}

/** The scope of an enqueue: a non-empty string of at most 256 characters, or null. Refuses unknown options. */
function scopeOf(options: EnqueueOptions | undefined): string | null {
  const { scope } = optionsObject(options, ENQUEUE_KEYS, 'enqueue', 'argument')
  if (scope === undefined) return null
  // Control characters are refused: a NUL cannot be stored in a PostgreSQL text column, and none belongs in an owner's name.
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 256 || /[\u0000-\u001f\u007f]/.test(scope)) {
    throw new InvalidArgumentError('scope must be a non-empty string of at most 256 characters, without control characters')
  }
  return scope
}
