import type { Driver, InsertResult, NewJob } from '../driver.js'
import { InvalidArgumentError } from '../errors.js'
import { newJobId } from '../id.js'
import type { RegisteredKind } from '../kind.js'
import { optionsObject } from '../options.js'
import type { ScheduleEnqueueOptions } from '../schedule.js'
import { encodePayload, encodePayloadSync } from '../payload.js'
import { isTransient } from './backoff.js'
import { Batcher, type ItemErrors } from './batcher.js'
import { publishEnqueued } from './channels.js'

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
  /**
   * When the job is due: a Date or epoch milliseconds. Until then it is
   * `scheduled`, and no worker takes it. Default: at once. Not with
   * `delayMs`.
   */
  readonly runAt?: Date | number
  /** Due this many milliseconds after the enqueue (by the runner's clock). Not with `runAt`. */
  readonly delayMs?: number
  /**
   * An integer from -2147483648 to 2147483647; higher runs first, and jobs
   * of one priority run in insertion order. Default 0.
   */
  readonly priority?: number
  /** This job's deadline from each start, in ms, instead of its kind's `timeoutMs`. */
  readonly timeoutMs?: number
  /**
   * While a job of this kind and scope with this key is scheduled, queued
   * or running, no other is stored: the enqueue answers with that job's id
   * (`enqueueUnique` also says which happened). Once that job is terminal
   * the key is free again. A non-empty string of at most 256 characters.
   */
  readonly uniqueKey?: string
}

const ENQUEUE_KEYS = ['scope', 'runAt', 'delayMs', 'priority', 'timeoutMs', 'uniqueKey'] as const

/** What `enqueueUnique` answers: the job's id, and whether this enqueue stored it (false: a live job already held the key). */
export interface UniqueEnqueue {
  readonly id: string
  readonly created: boolean
}

/** The fields of a stored job that an enqueue's options decide. */
interface Placement {
  readonly scope: string | null
  readonly priority: number
  readonly runAt: number | null
  readonly timeoutMs: number | null
  readonly uniqueKey: string | null
}

/** A stored job's fields beside its id and payload: from the enqueue's options, and its kind's lifecycle. */
function fieldsOf(kind: RegisteredKind, placement: Placement): Omit<NewJob, 'id' | 'payload'> {
  return {
    kind: kind.name,
    scope: placement.scope,
    priority: placement.priority,
    runAt: placement.runAt,
    timeoutMs: placement.timeoutMs ?? kind.timeoutMs,
    maxAttempts: kind.maxAttempts,
    requeueInterrupted: kind.idempotent,
    uniqueKey: placement.uniqueKey,
  }
}

/** Enqueues jobs of one kind; `In` is its payload schema's input type. */
export interface Kind<In, D extends Driver = Driver> {
  readonly name: string
  /** Stores a queued job and wakes an idle worker; resolves to its id once it is durable. */
  enqueue(payload: In, options?: EnqueueOptions): Promise<string>
  /**
   * As enqueue with a `uniqueKey`, and says whether this enqueue stored the
   * job (`created`) or a live job of the kind, scope and key already held
   * it (its id, `created: false`).
   */
  enqueueUnique(payload: In, options: EnqueueOptions & { readonly uniqueKey: string }): Promise<UniqueEnqueue>
  /**
   * Stores many queued jobs in one transaction; resolves to their ids in
   * order. With a `uniqueKey`, every payload shares it: the first is
   * stored (unless a live job holds the key) and every id is that job's.
   */
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
  readonly #runnerId: string
  readonly #clock: () => number
  readonly #wake: () => void
  readonly #scheduled: (runAt: number) => void
  readonly #wakeAll: () => void
  readonly #inserter: Batcher<NewJob>
  /** The id of the live job holding a batched job's unique key, when that refused it. */
  readonly #holders = new WeakMap<NewJob, string>()

  /**
   * `wake` after a job is stored; `scheduled` with a job's due time, after
   * a job due later is stored; `wakeAll` for a handle's wake() (after a
   * transactional enqueue: the workers and the scheduler look again).
   * `runnerId` names the runner in what it publishes.
   */
  constructor(driver: Driver, runnerId: string, clock: () => number, wake: () => void, scheduled: (runAt: number) => void, wakeAll: () => void) {
    this.#driver = driver
    this.#runnerId = runnerId
    this.#clock = clock
    this.#wake = wake
    this.#scheduled = scheduled
    this.#wakeAll = wakeAll
    this.#inserter = new Batcher((jobs) => this.#insertBatch(jobs))
  }

  /** Validates and stores one job of `kind`; resolves to its id once durable (the holder's, for a unique key a live job holds). */
  async enqueue(kind: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined): Promise<string> {
    return (await this.enqueueUnique(kind, payload, options)).id
  }

  /** As enqueue, saying whether the job was stored. */
  async enqueueUnique(kind: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined): Promise<UniqueEnqueue> {
    const placement = placementOf(options, this.#clock)
    const job: NewJob = { id: newJobId(), payload: await encodePayload(kind.name, kind.schema, payload), ...fieldsOf(kind, placement) }
    await this.#inserter.add(job)
    const holder = this.#holders.get(job)
    if (holder !== undefined) return { id: holder, created: false }
    this.#stored(placement)
    this.#published(kind.name, 1)
    return { id: job.id, created: true }
  }

  /**
   * Makes, without storing it, the job of a recurring schedule's tick: its
   * payload validated, due at the tick (already past: it is stored
   * queued), with the schedule's enqueue options.
   */
  async prepare(kind: RegisteredKind, payload: unknown, options: ScheduleEnqueueOptions | undefined, tick: number): Promise<NewJob> {
    const placement = { ...placementOf(options, this.#clock), runAt: tick }
    return { id: newJobId(), payload: await encodePayload(kind.name, kind.schema, payload), ...fieldsOf(kind, placement) }
  }

  /** After a store: wake a worker, or tell the scheduler when the job is due. */
  #stored(placement: Placement): void {
    if (placement.runAt !== null) this.#scheduled(placement.runAt)
    this.#wake()
  }

  /** Tells the enqueue channel, when anything listens, that `count` jobs of `kind` were stored. */
  #published(kind: string, count: number): void {
    publishEnqueued(this.#runnerId, kind, count)
  }

  /** The typed handle of a kind. */
  handle<In, D extends Driver>(kind: RegisteredKind): Kind<In, D> {
    const { name, schema } = kind
    const driver = this.#driver
    return {
      name,
      enqueue: (payload, options) => this.enqueue(kind, payload, options),
      enqueueUnique: (payload, options) => {
        if (typeof options?.uniqueKey !== 'string') return Promise.reject(new InvalidArgumentError('enqueueUnique: options.uniqueKey is required'))
        return this.enqueueUnique(kind, payload, options)
      },
      enqueueMany: async (payloads, options) => {
        const placement = placementOf(options, this.#clock)
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
        const fields = fieldsOf(kind, placement)
        const jobs: NewJob[] = texts.map((payload) => ({ id: newJobId(), payload, ...fields }))
        const holders = await driver.jobInsertMany({ jobs, now: this.#clock() })
        this.#stored(placement)
        this.#published(name, storedCount(jobs, holders))
        return idsOf(jobs, holders)
      },
      enqueueTx: ((tx: TxOf<D>, payload: In, options?: EnqueueOptions) => {
        // The transaction may yet roll back: the scheduler learns of the job from the database, or from wake().
        const placement = placementOf(options, this.#clock)
        // Published once inserted: the transaction may yet roll back, which nothing here learns of.
        if (driver.capabilities.txSync) {
          const job: NewJob = { id: newJobId(), payload: encodePayloadSync(name, schema, payload), ...fieldsOf(kind, placement) }
          const holders = driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() }) as InsertResult
          this.#published(name, storedCount([job], holders))
          return idsOf([job], holders)[0]!
        }
        return (async () => {
          const job: NewJob = { id: newJobId(), payload: await encodePayload(name, schema, payload), ...fieldsOf(kind, placement) }
          const holders = await driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() })
          this.#published(name, storedCount([job], holders))
          return idsOf([job], holders)[0]!
        })()
      }) as Kind<In, D>['enqueueTx'],
      wake: () => this.#wakeAll(),
    }
  }

  /**
   * Writes the enqueues of one turn in one transaction. A permanent error
   * may belong to a single job, so the batch is then written job by job:
   * each caller gets its own answer, not a neighbour's refusal.
   */
  async #insertBatch(jobs: NewJob[]): Promise<ItemErrors> {
    try {
      this.#noteHolders(jobs, await this.#driver.jobInsertMany({ jobs, now: this.#clock() }))
      return
    } catch (err) {
      if (jobs.length === 1 || isTransient(err)) throw err
    }
    const errors: unknown[] = []
    for (const job of jobs) {
      errors.push(
        await this.#driver.jobInsertMany({ jobs: [job], now: this.#clock() }).then(
          (holders) => this.#noteHolders([job], holders),
          (err: unknown) => err,
        ),
      )
    }
    return errors
  }

  /** Keeps, for each job a live job's unique key refused, that job's id. */
  #noteHolders(jobs: readonly NewJob[], holders: InsertResult): void {
    if (holders === undefined) return
    holders.forEach((holder, i) => {
      if (holder !== null) this.#holders.set(jobs[i]!, holder)
    })
  }
}

/** How many jobs of a batch were stored: those no live job's unique key refused. */
function storedCount(jobs: readonly NewJob[], holders: InsertResult): number {
  if (holders === undefined) return jobs.length
  let stored = 0
  for (const holder of holders) if (holder === null) stored++
  return stored
}

/** Each job's id, or the id of the live job whose unique key refused it. */
function idsOf(jobs: readonly NewJob[], holders: InsertResult): string[] {
  return jobs.map((job, i) => (holders === undefined ? null : holders[i]) ?? job.id)
}

/** The latest time a Date can hold, in epoch ms (and so the latest due time). */
const MAX_TIME = 8.64e15

const PRIORITY_MIN = -2_147_483_648
const PRIORITY_MAX = 2_147_483_647

/** What an enqueue's options place the job as; refuses unknown options and bad values (InvalidArgumentError). */
export function placementOf(options: EnqueueOptions | undefined, clock: () => number): Placement {
  const { scope, runAt, delayMs, priority = 0, timeoutMs, uniqueKey } = optionsObject(options, ENQUEUE_KEYS, 'enqueue', 'argument')
  if (!Number.isInteger(priority) || priority < PRIORITY_MIN || priority > PRIORITY_MAX) {
    throw new InvalidArgumentError(`priority must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`)
  }
  if (timeoutMs !== undefined && !(Number.isSafeInteger(timeoutMs) && timeoutMs > 0 && timeoutMs <= PRIORITY_MAX)) {
    throw new InvalidArgumentError('timeoutMs must be an integer > 0 (milliseconds)')
  }
  return { scope: scopeOf(scope), priority, runAt: dueOf(runAt, delayMs, clock), timeoutMs: timeoutMs ?? null, uniqueKey: uniqueKeyOf(uniqueKey) }
}

/** The unique key of an enqueue: a non-empty string of at most 256 characters, or null. */
function uniqueKeyOf(key: unknown): string | null {
  if (key === undefined) return null
  if (typeof key !== 'string' || key.length === 0 || key.length > 256 || key.includes('\u0000')) {
    throw new InvalidArgumentError('uniqueKey must be a non-empty string of at most 256 characters, without NUL')
  }
  return key
}

/** The due time of runAt or delayMs, in epoch ms, or null for neither. */
function dueOf(runAt: unknown, delayMs: unknown, clock: () => number): number | null {
  if (runAt !== undefined && delayMs !== undefined) throw new InvalidArgumentError('give runAt or delayMs, not both')
  if (delayMs !== undefined) {
    if (typeof delayMs !== 'number' || !Number.isSafeInteger(delayMs) || delayMs < 0) throw new InvalidArgumentError('delayMs must be an integer >= 0')
    const due = clock() + delayMs
    if (due > MAX_TIME) throw new InvalidArgumentError('delayMs is too long: the due time would be past the last date a Date can hold')
    return due
  }
  if (runAt === undefined) return null
  const ms = runAt instanceof Date ? runAt.getTime() : runAt
  // The range a Date can hold, so every due time reads back as a date and fits both databases' integers.
  if (typeof ms !== 'number' || !Number.isFinite(ms) || Math.abs(ms) > MAX_TIME) {
    throw new InvalidArgumentError('runAt must be a valid Date or epoch milliseconds within the range of a Date')
  }
  return Math.round(ms)
}

/** The scope of an enqueue: a non-empty string of at most 256 characters, or null. */
function scopeOf(scope: unknown): string | null {
  if (scope === undefined) return null
  // Control characters are refused: a NUL cannot be stored in a PostgreSQL text column, and none belongs in an owner's name.
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 256 || /[\u0000-\u001f\u007f]/.test(scope)) {
    throw new InvalidArgumentError('scope must be a non-empty string of at most 256 characters, without control characters')
  }
  return scope
}
