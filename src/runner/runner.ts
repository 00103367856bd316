import { randomUUID } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import type { ClaimedJob, Driver, JobRow, NewJob } from '../driver.js'
import {
  ConfigError,
  InvalidArgumentError,
  InvalidCursorError,
  JobFailure,
  JobNotFoundError,
  JobNotRunningError,
  RegistrationError,
  RunnerStateError,
  UnknownKindError,
} from '../errors.js'
import {
  CODE_INTERNAL,
  CODE_UNKNOWN_KIND,
  JOB_STATUSES,
  finalWriteSignal,
  type Job,
  type JobStatus,
  type JsonValue,
} from '../job.js'
import { type JobContext, type KindDefinition, RegisteredKind } from '../kind.js'
import { defaultLogger, type Logger } from '../logger.js'
import { newJobId } from '../id.js'
import { encodePayload, encodePayloadSync } from '../payload.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import { Batcher, type ItemErrors } from './batcher.js'
import { Finisher } from './finisher.js'
import { Liveness } from './liveness.js'

/** The handle of a user's own transaction for a driver `D`. */
export type TxOf<D> = D extends Driver<infer Tx, boolean> ? Tx : never
/** What a transactional enqueue returns on driver `D`: the value itself where the driver writes synchronously. */
export type TxResult<D, T> = D extends Driver<unknown, true> ? T : Promise<T>

/** Options of a Runner. Each default is given beside its field. */
export interface RunnerOptions<D extends Driver> {
  /** The database: `sqlite({ path })` from `jobtable/sqlite`. Required. */
  readonly driver: D
  /** How many jobs run at once in this process: an integer >= 1. Default 10. */
  readonly workers?: number
  /** Where log lines go; pino satisfies the interface. Default: pino at level info on standard output. */
  readonly logger?: Logger
  /** The current time in milliseconds, passed to every query. Default Date.now; tests replace it. */
  readonly clock?: () => number
}

/** Options of one enqueue. */
export interface EnqueueOptions {
  /**
   * The owner scope of the job (a household, a tenant): the HTTP API lets
   * a caller read, list and stream only jobs of its own scope. Default:
   * none (null).
   */
  readonly scope?: string
}

/** Options of `runner.list`. */
export interface ListOptions {
  /** Only jobs of this scope (null: jobs enqueued without one). Default: every scope. */
  readonly scope?: string | null
  readonly status?: JobStatus
  readonly kind?: string
  /** Page size, 1 to 1000. Default 50. */
  readonly limit?: number
  /** The `nextCursor` of the previous page. */
  readonly cursor?: string
}

/** A page of jobs, newest first; `nextCursor` is null on the last page. */
export interface JobPage {
  readonly jobs: Job[]
  readonly nextCursor: string | null
}

/** Enqueues jobs of one registered kind; `In` is its payload schema's input type. */
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

/** Messages published on diagnostics channels; none carries a payload, a result or an error's text. */
export interface JobEvent {
  readonly runnerId: string
  readonly jobId: string
  readonly kind: string
}
/** Published when a handler starts: `{ runnerId, jobId, kind }`. */
export const jobStartChannel = diagnostics.channel('jobtable:job:start')
/** Published when a job's final write has landed or been given up: `{ runnerId, jobId, kind, status, error }`. */
export const jobEndChannel = diagnostics.channel('jobtable:job:end')
/** Published when a claim fails: `{ runnerId, error, transient }`. */
export const claimErrorChannel = diagnostics.channel('jobtable:claim:error')

type State = 'new' | 'started' | 'stopping' | 'stopped'

/**
 * Owns the job kinds and a fixed pool of workers that claim queued jobs
 * oldest first and run them. Register every kind, then `start()`; `stop()`
 * aborts every handler's signal, waits for the workers and their final
 * writes; `close()` also closes the driver. `await using` closes it.
 */
export class Runner<D extends Driver = Driver> {
  /** This runner's per-boot identity, recorded on each job it claims. */
  readonly id: string = randomUUID()
  readonly #driver: D
  readonly #logger: Logger
  readonly #workers: number
  readonly #clock: () => number
  readonly #kinds = new Map<string, RegisteredKind>()
  readonly #stopping = new AbortController()
  readonly #finisher: Finisher
  readonly #inserter: Batcher<NewJob>
  #state: State = 'new'
  #idleWorkers: number
  /** Set when a claim may find work: a wake, a worker freed, a retry due. */
  #kicked = true
  #kick: (() => void) | undefined
  #loop: Promise<void> | undefined
  readonly #running = new Set<Promise<void>>()
  /** Jobs claimed together with final writes, for the workers those writes free; started before any new claim. */
  #prefetched: ClaimedJob[] = []
  /** How many workers about to be freed had a claim made for them with their final write, so need no claim of their own. */
  #lookedAfter = 0
  /** How many idle workers the claim loop's claim in flight is for. */
  #loopClaimFor = 0
  #fatal: unknown
  #stopped: Promise<void> | undefined
  #starting: Promise<void> | undefined
  readonly #liveness: Liveness
  #unwake: (() => void) | undefined

  constructor(options: RunnerOptions<D>) {
    if (options === null || typeof options !== 'object') throw new ConfigError('options are required')
    const { driver, workers = 10, logger, clock = Date.now } = options
    if (driver === null || typeof driver !== 'object' || typeof driver.jobClaim !== 'function') {
      throw new ConfigError('a driver is required, e.g. sqlite({ path }) from jobtable/sqlite')
    }
    if (typeof workers !== 'number' || !Number.isInteger(workers) || workers < 1) {
      throw new ConfigError(`workers must be an integer >= 1, got ${typeof workers === 'number' ? workers : typeof workers}`)
    }
    if (logger !== undefined && (logger === null || typeof logger.error !== 'function')) {
      throw new ConfigError('logger must have debug, info, warn and error methods (pino does)')
    }
    if (typeof clock !== 'function') throw new ConfigError('clock must be a function returning milliseconds')
    this.#driver = driver
    this.#workers = workers
    this.#idleWorkers = workers
    this.#logger = logger ?? defaultLogger()
    this.#clock = clock
    this.#finisher = new Finisher(driver, this.#logger, clock, this.#stopping.signal, {
      runnerId: this.id,
      idle: () => {
        const idle = Math.max(0, this.#idleWorkers - this.#prefetched.length - this.#loopClaimFor)
        // This claim looks for work for every idle worker: the wakes so far are answered.
        if (idle > 0) this.#kicked = false
        return idle
      },
      take: (jobs, freed) => {
        this.#prefetched.push(...jobs)
        this.#lookedAfter += freed
      },
      missed: () => this.wake(),
    })
    this.#inserter = new Batcher((jobs) => this.#insertBatch(jobs))
    this.#liveness = new Liveness(driver, this.id, this.#logger, clock)
  }

  /** The driver this runner uses. */
  get driver(): D {
    return this.#driver
  }

  /**
   * Makes `definition` the handler of `kind` and returns the typed handle
   * that enqueues its jobs. One registration per kind, before start.
   */
  register<S extends StandardSchemaV1, R, const Code extends string = never>(
    kind: string,
    definition: KindDefinition<S, R, Code>,
  ): Kind<StandardSchemaV1.InferInput<S>, D> {
    const registered = new RegisteredKind(kind, definition as unknown as KindDefinition<StandardSchemaV1, unknown, string>)
    if (this.#state !== 'new') throw new RunnerStateError(`register ${JSON.stringify(kind)}: the runner has already started`)
    if (this.#kinds.has(kind)) throw new RegistrationError(kind, 'kind already registered')
    this.#kinds.set(kind, registered)
    return this.#handle(registered)
  }

  /**
   * Stores a queued job of a kind known only at run time, with its payload
   * as parsed JSON. Rejects with UnknownKindError or InvalidPayloadError,
   * storing nothing.
   */
  async enqueue(kind: string, payload: unknown, options?: EnqueueOptions): Promise<string> {
    const registered = this.#kinds.get(kind)
    if (registered === undefined) throw new UnknownKindError(kind)
    const scope = scopeOf(options)
    return this.#insert(kind, await encodePayload(kind, registered.schema, payload), scope)
  }

  /** What a registered kind allows, or undefined for a kind not registered here. */
  kind(name: string): { readonly name: string; readonly enqueueOverHttp: boolean } | undefined {
    const registered = this.#kinds.get(name)
    return registered && { name, enqueueOverHttp: registered.enqueueOverHttp }
  }

  /** Tells an idle worker to look for a queued job: call it after committing a transactional enqueue. */
  wake(): void {
    this.#kicked = true
    this.#kick?.()
  }

  /**
   * Registers this runner as live, fails with `interrupted by restart`
   * every job left running by a runner the driver proves gone (a previous
   * process, never a live one beside it), logging how many, then starts
   * the workers. A second start is refused.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new RunnerStateError('the runner has already started')
    this.#state = 'started'
    this.#starting = this.#begin()
    return this.#starting
  }

  async #begin(): Promise<void> {
    try {
      // Registers this runner and fails only the jobs of runners proven gone (logged with their count).
      await this.#liveness.start()
    } catch (err) {
      if (!this.#stopping.signal.aborted) this.#state = 'new' // nothing ran: start may be tried again
      throw err
    }
    // A stop() that came while starting waits for this, then undoes the registration: start nothing.
    if (this.#stopping.signal.aborted) return
    this.#unwake = this.#driver.onWake?.(() => this.wake())
    this.#loop = this.#claimLoop()
  }

  /**
   * Stops the workers: aborts every handler's signal, stops claiming, and
   * resolves once every worker has stopped and its final write has landed
   * or been given up. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopped ??= this.#stop()
    return this.#stopped
  }

  /**
   * Resolves when the workers have stopped; rejects with the database error
   * when they stopped because claiming failed with an error that can never
   * succeed.
   */
  async wait(): Promise<void> {
    await this.#loop
    await Promise.all(this.#running)
    if (this.#fatal !== undefined) throw this.#fatal
  }

  /** Stops the runner, then closes the driver. */
  async close(): Promise<void> {
    await this.stop()
    await this.#driver.close()
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }

  /**
   * Returns the job with `id` through the reading connection, or rejects
   * with JobNotFoundError. With `scope` given, a job of another scope is
   * not found either, exactly as a missing one.
   */
  async get(id: string, options: { scope?: string | null } = {}): Promise<Job> {
    const row = typeof id === 'string' ? await this.#driver.jobGet({ id, scope: options.scope }) : undefined
    if (row === undefined) throw new JobNotFoundError()
    return toJob(row)
  }

  /** Returns a page of jobs, newest first; rejects with InvalidCursorError for a cursor it did not make. */
  async list(options: ListOptions = {}): Promise<JobPage> {
    const { scope, status, kind, limit = 50, cursor } = options
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidArgumentError('limit must be an integer from 1 to 1000')
    if (status !== undefined && !JOB_STATUSES.includes(status)) throw new InvalidArgumentError('status must be one of ' + JOB_STATUSES.join(', '))
    const beforeId = cursor === undefined ? undefined : decodeCursor(cursor)
    const rows = await this.#driver.jobList({ scope, status, kind, limit: limit + 1, beforeId })
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return { jobs: page.map(toJob), nextCursor: rows.length > limit && last ? encodeCursor(last.id) : null }
  }

  #handle<In>(registered: RegisteredKind): Kind<In, D> {
    const { name, schema } = registered
    const driver = this.#driver
    return {
      name,
      enqueue: async (payload, options) => {
        const scope = scopeOf(options)
        return this.#insert(name, await encodePayload(name, schema, payload), scope)
      },
      enqueueMany: async (payloads, options) => {
        const scope = scopeOf(options)
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
        await this.#driver.jobInsertMany({ jobs, now: this.#clock() })
        this.wake()
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
      wake: () => this.wake(),
    }
  }

  async #insert(kind: string, payload: string, scope: string | null): Promise<string> {
    const id = newJobId()
    await this.#inserter.add({ id, kind, payload, scope })
    this.wake()
    return id
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

  async #stop(): Promise<void> {
    if (this.#state === 'new') {
      this.#state = 'stopped'
      return
    }
    this.#state = 'stopping'
    this.#stopping.abort()
    this.#kick?.()
    await this.#starting?.catch(() => undefined)
    await this.#loop
    // Jobs claimed with the last final writes are not started with a
    // signal already aborted: they go back to the queue, for the next start.
    for (;;) {
      await this.#release(this.#prefetched.splice(0))
      if (this.#running.size === 0) break
      await Promise.all(this.#running)
    }
    await this.#finisher.idle()
    await this.#release(this.#prefetched.splice(0))
    this.#unwake?.()
    await this.#liveness.stop()
    this.#state = 'stopped'
  }

  /**
   * Puts claimed jobs that no handler has seen back in the queue (a write
   * fenced on their claim). Should it fail, they stay running under this
   * runner, and the next start fails them as interrupted.
   */
  async #release(jobs: ClaimedJob[]): Promise<void> {
    if (jobs.length === 0) return
    try {
      await this.#driver.jobRelease({ jobs: jobs.map(({ id, attempt }) => ({ id, attempt })), now: this.#clock() })
    } catch (err) {
      this.#logger.error({ jobs: jobs.length, error: errorCode(err) }, 'release unstarted jobs failed; they fail at the next start')
    }
  }

  /**
   * Claims queued jobs for every idle worker in one statement and starts
   * them, then sleeps until a wake, a freed worker or a due retry. An idle
   * runner makes no queries. While final writes are on their way, it leaves
   * the claim to them: each claims for the workers it frees and for the
   * idle ones (Finisher.nextClaim). A transient claim error is retried with
   * backoff, so a job queued during an outage runs when it clears without
   * a new wake; a permanent one stops the runner (see wait()).
   */
  async #claimLoop(): Promise<void> {
    const backoff = new Backoff()
    while (!this.#stopping.signal.aborted) {
      if (this.#prefetched.length > 0 && this.#idleWorkers > 0) {
        for (const job of this.#prefetched.splice(0, this.#idleWorkers)) this.#start(job)
        continue
      }
      if (!this.#kicked || this.#idleWorkers === 0) {
        await new Promise<void>((resolve) => (this.#kick = resolve))
        this.#kick = undefined
        continue
      }
      const finishing = this.#finisher.nextClaim()
      if (finishing !== undefined) {
        // The final writes about to land claim for the idle workers too: start what they find, then look again.
        await finishing
        continue
      }
      this.#kicked = false
      let jobs: ClaimedJob[]
      this.#loopClaimFor = this.#idleWorkers
      try {
        jobs = await this.#driver.jobClaim({ limit: this.#idleWorkers, runnerId: this.id, now: this.#clock() })
        backoff.reset()
      } catch (err) {
        this.#loopClaimFor = 0
        if (this.#stopping.signal.aborted) break
        const transient = isTransient(err)
        if (claimErrorChannel.hasSubscribers) claimErrorChannel.publish({ runnerId: this.id, error: errorCode(err), transient })
        if (!transient) {
          this.#logger.error({ error: errorCode(err) }, 'claim jobs failed with an error that cannot succeed; the runner stops')
          this.#fatal = err
          void this.stop()
          break
        }
        const delay = backoff.next()
        this.#logger.error({ error: errorCode(err), retry_in_ms: delay }, 'claim jobs failed; retrying')
        await sleep(delay, this.#stopping.signal)
        this.#kicked = true
        continue
      }
      this.#loopClaimFor = 0
      // A stop that came during the claim: these jobs were never started.
      if (this.#stopping.signal.aborted) {
        await this.#release(jobs)
        break
      }
      for (const job of jobs) this.#start(job)
    }
  }

  /** Starts a claimed job on an idle worker; when it ends, the worker looks for work again. */
  #start(job: ClaimedJob): void {
    this.#idleWorkers--
    const run = this.#run(job)
      .catch(() => {
        // #run handles every outcome itself; reaching here is a jobtable bug, and its text may quote job data.
        this.#logger.error({ job_id: job.id, kind: job.kind, code: CODE_INTERNAL }, 'unexpected error running a job')
        return this.#finish(job, null, CODE_INTERNAL)
      })
      .finally(() => {
        this.#running.delete(run)
        this.#idleWorkers++
        if (this.#lookedAfter > 0) {
          // A claim was made with this job's final write: start what it found, claim nothing new.
          this.#lookedAfter--
          this.#kick?.()
        } else {
          this.wake()
        }
      })
    this.#running.add(run)
  }

  /** Runs one claimed job to completion and makes its final write. */
  async #run(job: ClaimedJob): Promise<void> {
    const fields = { job_id: job.id, kind: job.kind }
    const kind = this.#kinds.get(job.kind)
    if (jobStartChannel.hasSubscribers) jobStartChannel.publish({ runnerId: this.id, jobId: job.id, kind: job.kind })
    if (kind === undefined) {
      this.#logger.error({ ...fields, code: CODE_UNKNOWN_KIND }, 'job failed: no handler is registered for its kind')
      return this.#finish(job, null, CODE_UNKNOWN_KIND)
    }
    let settled = false
    // Closures, not methods: a handler may destructure them (`{ publish, fail }`).
    const ctx: JobContext<unknown> = {
      id: job.id,
      kind: job.kind,
      signal: this.#stopping.signal,
      publish: async (partial) => {
        if (settled) throw new JobNotRunningError('publish result')
        const result = kind.project(partial)
        const applied = await this.#driver.jobPublish({ id: job.id, attempt: job.attempt, result, now: this.#clock() })
        if (!applied) throw new JobNotRunningError('publish result')
      },
      fail: (code) => {
        throw new JobFailure<string>(code)
      },
      finalWriteSignal,
    }
    const outcome = await kind.run(job.payload, ctx)
    settled = true
    if ('result' in outcome) {
      this.#logger.debug(fields, 'job succeeded')
      return this.#finish(job, outcome.result, null)
    }
    if (this.#stopping.signal.aborted) {
      this.#logger.warn(fields, 'job interrupted by shutdown; it fails at the next start')
      return
    }
    if (outcome.code === CODE_INTERNAL) this.#logger.error({ ...fields, code: outcome.code, reason: outcome.reason }, 'job failed')
    else this.#logger.info({ ...fields, code: outcome.code, reason: outcome.reason }, 'job failed')
    return this.#finish(job, null, outcome.code)
  }

  async #finish(job: ClaimedJob, result: string | null, error: string | null): Promise<void> {
    const status = error === null ? 'succeeded' : 'failed'
    await this.#finisher.finish({ id: job.id, attempt: job.attempt, status, result, error }, job.kind)
    if (jobEndChannel.hasSubscribers) {
      jobEndChannel.publish({ runnerId: this.id, jobId: job.id, kind: job.kind, status, error })
    }
  }
}

function toJob(row: JobRow): Job {
  return {
    id: row.id,
    kind: row.kind,
    status: row.status,
    result: row.result === null ? null : (JSON.parse(row.result) as JsonValue),
    error: row.error,
  }
}

/** The scope of an enqueue: a non-empty string of at most 256 characters, or null. */
function scopeOf(options: EnqueueOptions | undefined): string | null {
  const scope = options?.scope
  if (scope === undefined) return null
  // Control characters are refused: a NUL cannot be stored in a PostgreSQL text column, and none belongs in an owner's name.
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 256 || /[\u0000-\u001f\u007f]/.test(scope)) {
    throw new InvalidArgumentError('scope must be a non-empty string of at most 256 characters, without control characters')
  }
  return scope
}

/**
 * Cursors are opaque to callers: the last listed job's id, which the
 * caller has seen anyway, base64url-encoded. Not a position in the table:
 * that would tell a caller how many jobs other scopes hold.
 */
function encodeCursor(id: string): string {
  return Buffer.from(`j${id}`).toString('base64url')
}

function decodeCursor(cursor: string): string {
  const text = typeof cursor === 'string' && cursor.length <= 64 ? Buffer.from(cursor, 'base64url').toString() : ''
  // The shape of a UUID only: the id is a lookup key (scopes are enforced in SQL), whatever made it.
  const id = text.slice(1)
  if (text[0] !== 'j' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id)) throw new InvalidCursorError()
  return id
}
