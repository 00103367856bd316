import type { Driver, InsertResult, NewJob } from '../driver.js'
import { InvalidArgumentError } from '../errors.js'
import { newJobId } from '../id.js'
import type { RegisteredKind } from '../kind.js'
import { optionsObject } from '../options.js'
import type { ScheduleEnqueueOptions } from '../schedule.js'
import { encodePayload, encodePayloadSync } from '../payload.js'
import { isTransient } from './backoff.js'
import { encodeBatch, type JobSpec, Spec } from './batch.js'
import { Batcher, type ItemErrors } from './batcher.js'
import { enqueued, enqueueFailed, startEnqueue, type EnqueueTrace } from './tracing.js'
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

/**
 * A stored job's fields beside its id and payload: from the enqueue's
 * options, its kind's lifecycle, and the trace context of the enqueue
 * (see tracing.ts), null outside a trace.
 */
function fieldsOf(kind: RegisteredKind, placement: Placement, traceContext: string | null): Omit<NewJob, 'id' | 'payload'> {
  return {
    kind: kind.name,
    scope: placement.scope,
    priority: placement.priority,
    runAt: placement.runAt,
    timeoutMs: placement.timeoutMs ?? kind.timeoutMs,
    maxAttempts: kind.maxAttempts,
    requeueInterrupted: kind.idempotent,
    uniqueKey: placement.uniqueKey,
    // A fair kind's job gets its place in its scope's lane at the insert (every enqueue path comes here).
    fair: kind.fair,
    traceContext,
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
   * One job of this kind with its own options, for `runner.enqueueMany`
   * or `runner.enqueueManyTx` to store in a batch beside jobs of any kind
   * of this runner. Validates and stores nothing yet: the batch does.
   */
  job(payload: In, options?: EnqueueOptions): JobSpec
  /**
   * As enqueueMany, through the caller's own transaction (see enqueueTx):
   * the jobs exist exactly when what else it writes does. Call `wake()`
   * once it has committed.
   */
  enqueueManyTx(tx: TxOf<D>, payloads: readonly In[], options?: EnqueueOptions): TxResult<D, string[]>
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

  /** As enqueue, saying whether the job was stored; traced as one enqueue (see tracing.ts) inside a trace. */
  enqueueUnique(kind: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined): Promise<UniqueEnqueue> {
    const traced = startEnqueue(kind.name)
    if (traced === undefined) return this.#enqueueUnique(kind, payload, options, null)
    return this.#enqueueUnique(kind, payload, options, traced.carried).then(
      (stored) => {
        enqueued(traced, stored.id, stored.created)
        return stored
      },
      (err: unknown) => failed(traced, err),
    )
  }

  async #enqueueUnique(kind: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined, traceContext: string | null): Promise<UniqueEnqueue> {
    const placement = placementOf(options, this.#clock)
    const job: NewJob = { id: newJobId(), payload: await encodePayload(kind.name, kind.schema, payload), ...fieldsOf(kind, placement, traceContext) }
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
    return { id: newJobId(), payload: await encodePayload(kind.name, kind.schema, payload), ...fieldsOf(kind, placement, null) }
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
      enqueueMany: (payloads, options) => {
        const traced = startEnqueue(name, Array.isArray(payloads) ? payloads.length : undefined)
        if (traced === undefined) return this.#enqueueMany(kind, payloads, options, null)
        return this.#enqueueMany(kind, payloads, options, traced.carried).then(
          (ids) => {
            enqueued(traced)
            return ids
          },
          (err: unknown) => failed(traced, err),
        )
      },
      job: (payload, options) => new Spec(this, kind, payload, options),
      enqueueManyTx: ((tx: TxOf<D>, payloads: readonly In[], options?: EnqueueOptions) => {
        if (driver.capabilities.txSync) {
          const jobs = this.#sharedJobs('enqueueManyTx', kind, placementOf(options, this.#clock), payloads, true) as NewJob[]
          if (jobs.length === 0) return []
          const holders = driver.jobInsertTx({ tx, jobs, now: this.#clock() }) as InsertResult
          this.#published(name, storedCount(jobs, holders))
          return idsOf(jobs, holders)
        }
        return (async () => {
          const jobs = await this.#sharedJobs('enqueueManyTx', kind, placementOf(options, this.#clock), payloads, false)
          if (jobs.length === 0) return []
          const holders = await driver.jobInsertTx({ tx, jobs, now: this.#clock() })
          this.#published(name, storedCount(jobs, holders))
          return idsOf(jobs, holders)
        })()
      }) as Kind<In, D>['enqueueManyTx'],
      enqueueTx: ((tx: TxOf<D>, payload: In, options?: EnqueueOptions) => {
        // The transaction may yet roll back: the scheduler learns of the job from the database, or from wake().
        let placement: Placement
        try {
          placement = placementOf(options, this.#clock)
        } catch (err) {
          // Refused as the backend answers: a throw where enqueueTx returns the id, a rejection where it returns a promise.
          if (driver.capabilities.txSync) throw err
          return Promise.reject(err)
        }
        const traced = startEnqueue(name)
        const make = (text: string): NewJob => ({ id: newJobId(), payload: text, ...fieldsOf(kind, placement, traced?.carried ?? null) })
        // Published once inserted: the transaction may yet roll back, which nothing here learns of.
        const done = (job: NewJob, holders: InsertResult): string => {
          this.#published(name, storedCount([job], holders))
          const id = idsOf([job], holders)[0]!
          if (traced !== undefined) enqueued(traced, id, id === job.id)
          return id
        }
        if (driver.capabilities.txSync) {
          try {
            const job = make(encodePayloadSync(name, schema, payload))
            return done(job, driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() }) as InsertResult)
          } catch (err) {
            if (traced !== undefined) enqueueFailed(traced, err)
            throw err
          }
        }
        const stored = (async () => {
          const job = make(await encodePayload(name, schema, payload))
          return done(job, await driver.jobInsertTx({ tx, jobs: [job], now: this.#clock() }))
        })()
        return traced === undefined ? stored : stored.catch((err: unknown) => failed(traced, err))
      }) as Kind<In, D>['enqueueTx'],
      wake: () => this.#wakeAll(),
    }
  }

  /** Validates and stores many jobs of `kind` in one transaction, each with `traceContext`; resolves to their ids in order. */
  async #enqueueMany(kind: RegisteredKind, payloads: readonly unknown[], options: EnqueueOptions | undefined, traceContext: string | null): Promise<string[]> {
    const placement = placementOf(options, this.#clock)
    // Awaited only where the schema validates asynchronously: a sync one costs no promise per payload.
    const encoded = this.#sharedJobs('enqueueMany', kind, placement, payloads, false, traceContext)
    const jobs = Array.isArray(encoded) ? encoded : await encoded
    if (jobs.length === 0) return []
    const holders = await this.#driver.jobInsertMany({ jobs, now: this.#clock() })
    this.#stored(placement)
    this.#published(kind.name, storedCount(jobs, holders))
    return idsOf(jobs, holders)
  }

  /**
   * Validates a batch of specs (see JobSpec), then stores them in one
   * transaction: per spec, its id and whether it was stored (false where
   * a live job, or an earlier spec of the batch, held its unique key).
   * Then wakes a worker once, and tells the scheduler of the earliest due
   * time stored.
   */
  async enqueueMany(specs: unknown): Promise<UniqueEnqueue[]> {
    const encoded = this.#specJobs('enqueueMany', specs, false)
    const jobs = Array.isArray(encoded) ? encoded : await encoded
    if (jobs.length === 0) return []
    const outcomes = outcomesOf(jobs, await this.#driver.jobInsertMany({ jobs, now: this.#clock() }))
    let due: number | null = null
    let created = false
    outcomes.forEach((outcome, i) => {
      if (!outcome.created) return
      created = true
      const runAt = jobs[i]!.runAt
      if (runAt !== null && (due === null || runAt < due)) due = runAt
    })
    if (due !== null) this.#scheduled(due)
    if (created) this.#wake()
    this.#publishedEach(jobs, outcomes)
    return outcomes
  }

  /** Publishes the enqueues of a batch of specs, per kind: those it stored. */
  #publishedEach(jobs: readonly NewJob[], outcomes: readonly UniqueEnqueue[]): void {
    const byKind = new Map<string, number>()
    outcomes.forEach((outcome, i) => {
      if (outcome.created) byKind.set(jobs[i]!.kind, (byKind.get(jobs[i]!.kind) ?? 0) + 1)
    })
    for (const [kind, count] of byKind) this.#published(kind, count)
  }

  /**
   * As enqueueMany, through the caller's transaction `tx`: synchronous
   * where the driver's transactions are. Neither wakes nor schedules: the
   * transaction may yet roll back (the caller calls wake() after commit).
   */
  enqueueManyTx(tx: unknown, specs: unknown): UniqueEnqueue[] | Promise<UniqueEnqueue[]> {
    const driver = this.#driver
    if (driver.capabilities.txSync) {
      const jobs = this.#specJobs('enqueueManyTx', specs, true) as NewJob[]
      if (jobs.length === 0) return []
      const outcomes = outcomesOf(jobs, driver.jobInsertTx({ tx, jobs, now: this.#clock() }) as InsertResult)
      this.#publishedEach(jobs, outcomes)
      return outcomes
    }
    return (async () => {
      const jobs = await this.#specJobs('enqueueManyTx', specs, false)
      if (jobs.length === 0) return []
      const outcomes = outcomesOf(jobs, await driver.jobInsertTx({ tx, jobs, now: this.#clock() }))
      this.#publishedEach(jobs, outcomes)
      return outcomes
    })()
  }

  /** The jobs of a batch sharing one kind and placement, every payload validated first (`sync`: a schema must not be asynchronous). */
  #sharedJobs(call: string, kind: RegisteredKind, placement: Placement, payloads: unknown, sync: boolean, traceContext: string | null = null): NewJob[] | Promise<NewJob[]> {
    if (!Array.isArray(payloads)) throw new InvalidArgumentError(`${call}: payloads must be an array`)
    const { name, schema } = kind
    const texts = encodeBatch(call, payloads.length, sync ? (i) => encodePayloadSync(name, schema, payloads[i]) : (i) => encodePayload(name, schema, payloads[i]))
    const fields = fieldsOf(kind, placement, traceContext)
    const build = (texts: string[]): NewJob[] => texts.map((payload) => ({ id: newJobId(), payload, ...fields }))
    return Array.isArray(texts) ? build(texts) : texts.then(build)
  }

  /** The jobs of a batch of specs, each one's options and payload validated first (`sync`: a schema must not be asynchronous). */
  #specJobs(call: string, specs: unknown, sync: boolean): NewJob[] | Promise<NewJob[]> {
    if (!Array.isArray(specs)) throw new InvalidArgumentError(`${call}: specs must be an array of jobs made by kind.job(payload, options)`)
    const fields: Omit<NewJob, 'id' | 'payload'>[] = new Array<Omit<NewJob, 'id' | 'payload'>>(specs.length)
    const texts = encodeBatch(call, specs.length, (i) => {
      const spec: unknown = specs[i]
      const where = `${call}: job ${i}`
      if (!(spec instanceof Spec)) throw new InvalidArgumentError(`${where}: not a job made by kind.job(payload, options)`)
      const job = spec.readFor(this)
      // Another runner's kind may be registered here with other settings, or not at all, and its runner may use another database.
      if (job === undefined) throw new InvalidArgumentError(`${where}: made by another runner's handle of ${JSON.stringify(spec.kind)}; use this runner's`)
      const { kind, payload, options } = job
      fields[i] = fieldsOf(kind, placementOf(options, this.#clock, where), null)
      return sync ? encodePayloadSync(kind.name, kind.schema, payload) : encodePayload(kind.name, kind.schema, payload)
    })
    const build = (texts: string[]): NewJob[] => texts.map((payload, i) => ({ id: newJobId(), payload, ...fields[i]! }))
    return Array.isArray(texts) ? build(texts) : texts.then(build)
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

/** Each job's id and that it was stored, or the id of the live job whose unique key refused it. */
function outcomesOf(jobs: readonly NewJob[], holders: InsertResult): UniqueEnqueue[] {
  return jobs.map((job, i) => {
    const holder = holders === undefined ? null : (holders[i] ?? null)
    return holder === null ? { id: job.id, created: true } : { id: holder, created: false }
  })
}

/** Ends an enqueue's span as failed and rethrows what failed it. */
function failed(traced: EnqueueTrace, err: unknown): never {
  enqueueFailed(traced, err)
  throw err
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

/**
 * What an enqueue's options place the job as; refuses unknown options and
 * bad values (InvalidArgumentError). `where` names a job of a batch
 * (`enqueueMany: job 3`) at the head of each message.
 */
export function placementOf(options: EnqueueOptions | undefined, clock: () => number, where?: string): Placement {
  const { scope, runAt, delayMs, priority = 0, timeoutMs, uniqueKey } = optionsObject(options, ENQUEUE_KEYS, where ?? 'enqueue', 'argument')
  if (!Number.isInteger(priority) || priority < PRIORITY_MIN || priority > PRIORITY_MAX) {
    throw refusal(where, `priority must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`)
  }
  if (timeoutMs !== undefined && !(Number.isSafeInteger(timeoutMs) && timeoutMs > 0 && timeoutMs <= PRIORITY_MAX)) {
    throw refusal(where, 'timeoutMs must be an integer > 0 (milliseconds)')
  }
  return { scope: scopeOf(scope, where), priority, runAt: dueOf(runAt, delayMs, clock, where), timeoutMs: timeoutMs ?? null, uniqueKey: uniqueKeyOf(uniqueKey, where) }
}

/** An option refused, the job of a batch it belongs to (`where`) named first when there is one. */
function refusal(where: string | undefined, message: string): InvalidArgumentError {
  return new InvalidArgumentError(where === undefined ? message : `${where}: ${message}`)
}

/** The unique key of an enqueue: a non-empty string of at most 256 characters, or null. */
function uniqueKeyOf(key: unknown, where: string | undefined): string | null {
  if (key === undefined) return null
  if (typeof key !== 'string' || key.length === 0 || key.length > 256 || key.includes('\u0000')) {
    throw refusal(where, 'uniqueKey must be a non-empty string of at most 256 characters, without NUL')
  }
  return key
}

/** The due time of runAt or delayMs, in epoch ms, or null for neither. */
function dueOf(runAt: unknown, delayMs: unknown, clock: () => number, where: string | undefined): number | null {
  if (runAt !== undefined && delayMs !== undefined) throw refusal(where, 'give runAt or delayMs, not both')
  if (delayMs !== undefined) {
    if (typeof delayMs !== 'number' || !Number.isSafeInteger(delayMs) || delayMs < 0) throw refusal(where, 'delayMs must be an integer >= 0')
    const due = clock() + delayMs
    if (due > MAX_TIME) throw refusal(where, 'delayMs is too long: the due time would be past the last date a Date can hold')
    return due
  }
  if (runAt === undefined) return null
  const ms = runAt instanceof Date ? runAt.getTime() : runAt
  // The range a Date can hold, so every due time reads back as a date and fits both databases' integers.
  if (typeof ms !== 'number' || !Number.isFinite(ms) || Math.abs(ms) > MAX_TIME) {
    throw refusal(where, 'runAt must be a valid Date or epoch milliseconds within the range of a Date')
  }
  return Math.round(ms)
}

/** The scope of an enqueue: a non-empty string of at most 256 characters, or null. */
function scopeOf(scope: unknown, where: string | undefined): string | null {
  if (scope === undefined) return null
  // Control characters are refused: a NUL cannot be stored in a PostgreSQL text column, and none belongs in an owner's name.
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 256 || /[\u0000-\u001f\u007f]/.test(scope)) {
    throw refusal(where, 'scope must be a non-empty string of at most 256 characters, without control characters')
  }
  return scope
}
