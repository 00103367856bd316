import { randomUUID } from 'node:crypto'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import type { Cooldown, Driver, JobCount, JobRow, WakeReason } from '../driver.js'
import { ConfigError, InvalidArgumentError, InvalidCursorError, JobNotFoundError, RegistrationError, RunnerStateError, UnknownKindError } from '../errors.js'
import { JOB_STATUSES, type Job, type JobStatus, type JsonValue } from '../job.js'
import { type Handler, type HandlerErrorHook, isCooldownKey, isKindDefinition, type KindDef, type KindDefinition, MAX_COOLDOWN_KEY, RegisteredKind, splitDefinition } from '../kind.js'
import { defaultLogger, type Logger } from '../logger.js'
import { optionsObject } from '../options.js'
import { encodePayload } from '../payload.js'
import { Schedule, type ScheduleDefinition, type ScheduleInfo } from '../schedule.js'
import { errorCode } from './backoff.js'
import { ClaimGate } from './claim-gate.js'
import type { JobSpec } from './batch.js'
import { publishDatabaseError } from './channels.js'
import { type EnqueueOptions, Enqueuer, type Kind, placementOf, type TxOf, type TxResult, type UniqueEnqueue } from './enqueue.js'
import { cancelJob, retryJobNow } from './job-commands.js'
import { Liveness, retryTransient } from './liveness.js'
import { Maintenance } from './maintenance/index.js'
import { pruneJobs } from './maintenance/retention.js'
import { type PruneOptions, pruneRules, type RetentionConfig, retentionConfig, type RetentionOptions } from './retention-rules.js'
import { WorkerPool } from './worker-pool.js'
import { type Activity, type ActivityOptions, checkClaimRules, readActivity, readRateLimits, type RateLimitState } from './rate-limits.js'

export type { JobSpec } from './batch.js'
export type { Activity, ActivityOptions, RateLimitState } from './rate-limits.js'
export type { EnqueueOptions, Kind, TxOf, TxResult, UniqueEnqueue } from './enqueue.js'
export type { KindRetention, PruneOptions, RetentionAge, RetentionByStatus, RetentionOptions } from './retention-rules.js'
export {
  claimErrorChannel,
  databaseErrorChannel,
  jobEndChannel,
  jobEnqueueChannel,
  jobPublishChannel,
  jobStartChannel,
  type ClaimErrorMessage,
  type DatabaseErrorMessage,
  type DatabaseOperation,
  type EndStatus,
  type JobEndMessage,
  type JobEnqueueMessage,
  type JobPublishMessage,
  type JobStartMessage,
} from './channels.js'

/** Options of a Runner. Each default is given beside its field; unknown keys are refused (ConfigError). */
export interface RunnerOptions<D extends Driver> {
  /** The database: `sqlite({ path })` from `jobtable/sqlite`. Required. */
  readonly driver: D
  /** How many jobs run at once in this process: an integer >= 1. Default 10. */
  readonly workers?: number
  /** Where log lines go; pino satisfies the interface. Default: pino at level info on standard output. */
  readonly logger?: Logger
  /** The current time in milliseconds, passed to every query. Default Date.now; tests replace it. */
  readonly clock?: () => number
  /**
   * How long `stop()` waits for running handlers (and their final writes)
   * before it resolves without them; their jobs stay running for the next
   * start, or another runner's sweep, to fail as interrupted. Default
   * 20000 ms: inside the 30 s a container orchestrator gives before it
   * kills. `stop({ timeoutMs })` overrides it.
   */
  readonly stopTimeoutMs?: number
  /**
   * How long a queued job whose kind no live runner handles waits before
   * this runner's maintenance fails it with `unknown_kind`. Until then it
   * stays queued (a rolling deploy: the workers with the new kind are on
   * their way) and the runner warns once per kind. Default 3600000 ms
   * (one hour), long enough for a slow deploy.
   */
  readonly unknownKindGraceMs?: number
  /**
   * Called once when the runner stops by itself because claiming failed
   * with a database error that can never succeed (the same error `wait()`
   * rejects with). It is also logged at error. Default: none.
   */
  readonly onFatal?: (error: unknown) => void
  /**
   * How long after a job's deadline (`timeoutMs`) its handler is waited
   * for before the job is recorded as `timeout` anyway. Its worker slot
   * stays taken until the handler returns. Default 1000 ms.
   */
  readonly timeoutGraceMs?: number
  /**
   * How long terminal jobs (succeeded, failed, cancelled) are kept once
   * finished: the started runner deletes older ones at start and every
   * minute, in batches that never hold up claims. Per status and per kind
   * if asked: `{ maxAgeMs, byStatus: { failed }, byKind: { 'mail.send':
   * { maxAgeMs } } }` (see RetentionOptions). `false`: this process never
   * prunes. Default: 7 days for every terminal job. A setting of the
   * whole deployment: every started runner on the database prunes by its
   * own, so the shortest age among them holds.
   */
  readonly retention?: RetentionOptions | false
  /**
   * Called in the handler's process with what a handler threw, whenever it
   * was not a declared failure (`job.fail`) or a snooze: the one place the
   * application sees a handler's own error (to log it, or send it to
   * Sentry). jobtable never stores, returns or logs it: the job fails with
   * `internal_error`. A hook that throws is ignored (logged without its
   * text). Default: none.
   */
  readonly onHandlerError?: HandlerErrorHook
}

const RUNNER_KEYS = ['driver', 'workers', 'logger', 'clock', 'stopTimeoutMs', 'unknownKindGraceMs', 'onFatal', 'timeoutGraceMs', 'retention', 'onHandlerError'] as const

/** Options of `runner.stop`. */
export interface StopOptions {
  /** How long to wait for running handlers; default the runner's `stopTimeoutMs`. */
  readonly timeoutMs?: number
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

const LIST_KEYS = ['scope', 'status', 'kind', 'limit', 'cursor'] as const

/** A page of jobs, newest first; `nextCursor` is null on the last page. */
export interface JobPage {
  readonly jobs: Job[]
  readonly nextCursor: string | null
}

/** Messages published on diagnostics channels; none carries a payload, a result or an error's text. */
export interface JobEvent {
  readonly runnerId: string
  readonly jobId: string
  readonly kind: string
}

type State = 'new' | 'started' | 'stopping' | 'stopped'

/**
 * Knows the job kinds, enqueues and reads jobs, and, once started, runs
 * the jobs of the kinds it has handlers for on a fixed pool of workers.
 *
 * A producer (a web process that only enqueues) registers kind
 * definitions without handlers and never starts; a worker registers them
 * with handlers and starts. Several runners on one database each claim
 * only their own kinds, so processes of different versions share it.
 * `stop()` aborts every job's signal and waits, up to its timeout, for the
 * handlers and their final writes; `close()` also closes the driver;
 * `await using` closes it. A started runner keeps its process alive until
 * it has stopped.
 */
export class Runner<D extends Driver = Driver> {
  /** This runner's per-boot identity, recorded on each job it claims. */
  readonly id: string = randomUUID()
  readonly #driver: D
  readonly #logger: Logger
  readonly #workers: number
  readonly #clock: () => number
  readonly #stopTimeoutMs: number
  readonly #unknownKindGraceMs: number
  readonly #onFatal: ((error: unknown) => void) | undefined
  readonly #timeoutGraceMs: number
  readonly #onHandlerError: HandlerErrorHook | undefined
  /** What this runner's maintenance prunes, and how often; null for `retention: false`. */
  readonly #retention: RetentionConfig | null
  readonly #kinds = new Map<string, RegisteredKind>()
  readonly #schedules = new Map<string, Schedule>()
  /** Checks of schedules' payloads that validate asynchronously: start() awaits them. */
  readonly #scheduleChecks: Promise<unknown>[] = []
  readonly #enqueuer: Enqueuer
  readonly #gate: ClaimGate
  #pool: WorkerPool | undefined
  #liveness: Liveness | undefined
  #maintenance: Maintenance | undefined
  #state: State = 'new'
  #fatal: unknown
  #starting: Promise<void> | undefined
  #stopped: Promise<void> | undefined
  #unwake: (() => void) | undefined
  /** Resolved once a started runner has stopped: what wait() waits for. */
  readonly #ended = deferred()
  /** Holds the process open while the runner is started: every other timer of the runner is unref'd. */
  #keepAlive: NodeJS.Timeout | undefined

  constructor(options: RunnerOptions<D>) {
    if (options === null || typeof options !== 'object') throw new ConfigError('options are required')
    optionsObject(options, RUNNER_KEYS, 'Runner options')
    const { driver, workers = 10, logger, clock = Date.now, stopTimeoutMs = 20_000, unknownKindGraceMs = 3_600_000, onFatal, timeoutGraceMs = 1_000, retention, onHandlerError } = options
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
    checkMs('stopTimeoutMs', stopTimeoutMs)
    checkMs('unknownKindGraceMs', unknownKindGraceMs)
    checkMs('timeoutGraceMs', timeoutGraceMs)
    if (onFatal !== undefined && typeof onFatal !== 'function') throw new ConfigError('onFatal must be a function')
    if (onHandlerError !== undefined && typeof onHandlerError !== 'function') throw new ConfigError('onHandlerError must be a function (error, job) => void')
    this.#onHandlerError = onHandlerError
    this.#retention = retentionConfig(retention)
    this.#driver = driver
    this.#workers = workers
    this.#logger = logger ?? defaultLogger()
    this.#clock = clock
    this.#stopTimeoutMs = stopTimeoutMs
    this.#unknownKindGraceMs = unknownKindGraceMs
    this.#onFatal = onFatal
    this.#timeoutGraceMs = timeoutGraceMs
    this.#gate = new ClaimGate(driver, this.id, clock)
    this.#enqueuer = new Enqueuer(driver, this.id, clock, () => this.#pool?.wake(), (due) => this.#maintenance?.scheduler.noteDue(due), () => this.wake())
  }

  /** The driver this runner uses. */
  get driver(): D {
    return this.#driver
  }

  /**
   * Makes a kind known to this runner and returns the typed handle that
   * enqueues its jobs. With a handler, this runner is one of the kind's
   * workers: once started, it claims and runs its jobs. Without one (a
   * producer), it only enqueues, validates and reads them. The one-step
   * form `register(name, { payload, handler, ... })` defines and handles
   * at once. One registration per kind, before start.
   */
  register<S extends StandardSchemaV1, R, Code extends string>(
    kind: KindDef<S, R, Code>,
    handler?: Handler<S, R, Code>,
  ): Kind<StandardSchemaV1.InferInput<S>, D>
  register<S extends StandardSchemaV1, R, const Code extends string = never>(
    kind: string,
    definition: KindDefinition<S, R, Code>,
  ): Kind<StandardSchemaV1.InferInput<S>, D>
  register(kind: string | KindDef, definitionOrHandler?: unknown): Kind<unknown, D> {
    let registered: RegisteredKind
    if (isKindDefinition(kind)) {
      registered = new RegisteredKind(kind, definitionOrHandler as Handler<StandardSchemaV1, unknown, string> | undefined)
    } else {
      const [definition, handler] = splitDefinition(kind, definitionOrHandler as KindDefinition<StandardSchemaV1, unknown, string>)
      registered = new RegisteredKind(definition, handler)
    }
    const name = registered.name
    if (this.#state !== 'new') throw new RunnerStateError(`register ${JSON.stringify(name)}: the runner has already started`)
    if (this.#kinds.has(name)) throw new RegistrationError(name, 'kind already registered')
    checkClaimRules(registered, this.#kinds)
    this.#kinds.set(name, registered)
    return this.#enqueuer.handle(registered)
  }

  /**
   * Declares a recurring job: once this runner has started, each tick of
   * `definition.cron` (in its `timezone`, default UTC) enqueues one job of
   * `kind` with the definition's payload. Every process that declares a
   * schedule of this `name` shares it: each tick is enqueued exactly once
   * across all of them, by the database, with no leader. A new schedule
   * starts with its next tick; ticks missed while no process ran follow
   * `missed` (default `last`: the latest of them, once). Removing the
   * declaration stops it. The kind must be registered here (with or
   * without a handler); the definition and a payload that is not a
   * function are checked now (ConfigError, InvalidPayloadError). Before
   * start.
   */
  schedule<S extends StandardSchemaV1, R, Code extends string>(name: string, kind: KindDef<S, R, Code>, definition: ScheduleDefinition<StandardSchemaV1.InferInput<S>>): void
  schedule<In>(name: string, kind: Kind<In, D>, definition: ScheduleDefinition<In>): void
  schedule(name: string, kind: string, definition: ScheduleDefinition): void
  schedule(name: string, kind: string | { readonly name: string }, definition: ScheduleDefinition): void {
    const kindName = typeof kind === 'string' ? kind : kind?.name
    if (this.#state !== 'new') throw new RunnerStateError(`schedule ${JSON.stringify(name)}: the runner has already started`)
    const registered = typeof kindName === 'string' ? this.#kinds.get(kindName) : undefined
    if (registered === undefined) throw new UnknownKindError(String(kindName))
    const schedule = new Schedule(name, registered.name, definition)
    if (this.#schedules.has(schedule.name)) throw new ConfigError(`schedule ${JSON.stringify(name)} is already declared`)
    try {
      placementOf(schedule.options, this.#clock)
    } catch (err) {
      throw new ConfigError(`schedule ${JSON.stringify(name)}: ${err instanceof Error ? err.message : 'invalid options'}`)
    }
    if (typeof schedule.payload !== 'function') {
      const checked = encodePayload(registered.name, registered.schema, schedule.payload)
      if (typeof checked !== 'string') this.#scheduleChecks.push(checked)
    }
    this.#schedules.set(schedule.name, schedule)
  }

  /**
   * Stores a queued job of a kind known only at run time, with its payload
   * as parsed JSON. The kind must be registered here, with or without a
   * handler: rejects with UnknownKindError or InvalidPayloadError, storing
   * nothing.
   */
  async enqueue(kind: string, payload: unknown, options?: EnqueueOptions): Promise<string> {
    const registered = this.#kinds.get(kind)
    if (registered === undefined) throw new UnknownKindError(kind)
    return this.#enqueuer.enqueue(registered, payload, options)
  }

  /** As enqueue, saying whether the job was stored or a live job already held its `uniqueKey` (see EnqueueOptions). */
  async enqueueUnique(kind: string, payload: unknown, options?: EnqueueOptions): Promise<UniqueEnqueue> {
    const registered = this.#kinds.get(kind)
    if (registered === undefined) throw new UnknownKindError(kind)
    return this.#enqueuer.enqueueUnique(registered, payload, options)
  }

  /**
   * Stores a batch of jobs in one transaction: each made by
   * `kind.job(payload, options)` of a handle this runner's `register`
   * returned, of any kinds, each with its own options. Every job's
   * options and payload are checked before any is stored: the first bad
   * one (by index) rejects the whole call, naming its index, and nothing
   * is stored (a spec made by another runner's handle is refused too).
   * Resolves, per spec in order, to its id and whether it was stored:
   * `created: false` where a live job held its kind, scope and
   * `uniqueKey`, or an earlier spec of the batch did (the id is that
   * job's). An empty batch resolves to [] without a transaction. No limit
   * on its length: it is one transaction, which on SQLite holds the write
   * lock for its whole length.
   */
  async enqueueMany(specs: readonly JobSpec[]): Promise<UniqueEnqueue[]> {
    return this.#enqueuer.enqueueMany(specs)
  }

  /**
   * As enqueueMany, through the caller's own transaction (see a handle's
   * `enqueueTx`): synchronous on SQLite, a promise on PostgreSQL. Call
   * `wake()` once it has committed.
   */
  enqueueManyTx(tx: TxOf<D>, specs: readonly JobSpec[]): TxResult<D, UniqueEnqueue[]> {
    return this.#enqueuer.enqueueManyTx(tx, specs) as TxResult<D, UniqueEnqueue[]>
  }

  /** What a known kind allows, with the failure codes it declared, or undefined for a kind not registered here. */
  kind(name: string): { readonly name: string; readonly enqueueOverHttp: boolean; readonly handled: boolean; readonly failures: readonly string[] } | undefined {
    const registered = this.#kinds.get(name)
    return registered && { name, enqueueOverHttp: registered.enqueueOverHttp, handled: registered.handler !== undefined, failures: registered.failures }
  }

  /**
   * How many of this runner's workers run a handler now (`busy`, a
   * handler past its deadline that has not returned included: it keeps
   * its worker) and how many wait for work (`idle`). Both are 0 before
   * start(); once stopping, `idle` is 0 (a stopping runner takes no work)
   * and `busy` counts the handlers it still waits for.
   */
  workerCounts(): { readonly busy: number; readonly idle: number } {
    const busy = this.#pool?.running ?? 0
    return { busy, idle: this.#state === 'started' && this.#pool !== undefined ? Math.max(0, this.#workers - busy) : 0 }
  }

  /** Every kind registered here, in registration order, with its payload schema. */
  kinds(): { readonly name: string; readonly enqueueOverHttp: boolean; readonly handled: boolean; readonly payload: StandardSchemaV1 }[] {
    return [...this.#kinds.values()].map((k) => ({ name: k.name, enqueueOverHttp: k.enqueueOverHttp, handled: k.handler !== undefined, payload: k.schema }))
  }

  /**
   * The recurring schedules this runner declared (`schedule()`), in
   * declaration order, each with its name, kind, cron pattern, time zone
   * and missed-tick policy, the last tick the database recorded for it
   * (null before any started runner recorded one), and its next tick after
   * now by the runner's clock, computed by the code that enqueues the
   * ticks (so with the same daylight-saving rules). It lists what this
   * runner declared, not what the database knows: the database stores
   * only each schedule's name and last tick, so a schedule only other
   * processes declare is not listed, nor is one removed from the code.
   * Never a schedule's payload or enqueue options: a payload may hold
   * private data. Reads the database once; the runner need not be
   * started.
   */
  async schedules(): Promise<ScheduleInfo[]> {
    const declared = [...this.#schedules.values()]
    if (declared.length === 0) return []
    const recorded = new Map((await this.#driver.schedulesRead({ names: declared.map((s) => s.name) })).map((r) => [r.name, r.lastTickAt]))
    const now = this.#clock()
    return declared.map((s) => ({
      name: s.name,
      kind: s.kind,
      cron: s.cron,
      timezone: s.timezone,
      missed: s.missed,
      lastTickAt: recorded.get(s.name) ?? null,
      nextTickAt: s.next(now),
    }))
  }

  /**
   * Tells an idle worker to look for a queued job: call it after
   * committing a transactional enqueue, or after moving an injected clock.
   * The promise (which never rejects, and need not be awaited) resolves
   * once the scheduler has promoted the jobs due by the clock and the
   * recurring schedules have enqueued the ticks it has reached.
   */
  wake(): Promise<void> {
    this.#pool?.wake()
    const maintenance = this.#maintenance
    if (maintenance === undefined) return Promise.resolve()
    // A transactional enqueue of a scheduled job, or a clock moved on (a test's): promote what is due, read the
    // next due time, and enqueue the recurring ticks the clock has reached.
    return Promise.all([maintenance.scheduler.tick(), maintenance.recurring.tick()]).then(() => undefined)
  }

  /**
   * Registers this runner as live with the kinds it has handlers for,
   * fails with `interrupted by restart` every job left running by a
   * runner the driver proves gone (a previous process, never a live one
   * beside it), logging how many, then starts the workers and the
   * maintenance and logs one info line, `runner started`, with the kinds
   * it handles and its worker count. A second start is refused.
   */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new RunnerStateError('the runner has already started')
    this.#state = 'started'
    this.#keepAlive = setInterval(() => undefined, 2 ** 31 - 1)
    this.#starting = this.#begin()
    return this.#starting
  }

  async #begin(): Promise<void> {
    try {
      await Promise.all(this.#scheduleChecks)
    } catch (err) {
      this.#state = 'new'
      clearInterval(this.#keepAlive)
      throw err
    }
    const handled = new Map([...this.#kinds].filter(([, k]) => k.handler !== undefined))
    const liveness = new Liveness(this.#driver, this.id, [...handled.keys()], this.#logger, this.#clock)
    const maintenance = new Maintenance({
      driver: this.#driver,
      runnerId: this.id,
      gate: this.#gate,
      unknownKindGraceMs: this.#unknownKindGraceMs,
      retention: this.#retention,
      logger: this.#logger,
      clock: this.#clock,
      wake: () => this.#pool?.wake(),
      polled: this.#woken,
      running: () => this.#pool?.running ?? 0,
      cancel: (ids) => this.#pool?.cancel(ids),
      schedules: [...this.#schedules.values()],
      prepare: (schedule, tick) => this.#enqueuer.prepare(this.#kinds.get(schedule.kind)!, schedule.payloadAt(tick), schedule.options, tick),
    })
    try {
      await liveness.start()
      try {
        // Fails only the jobs of runners proven gone (logged with their count).
        await retryTransient(() => maintenance.sweepNow(), (err) => publishDatabaseError(this.id, 'start', err))
      } catch (err) {
        await liveness.stop()
        throw err
      }
    } catch (err) {
      if (this.#state === 'started') {
        // Nothing ran: start may be tried again.
        this.#state = 'new'
        clearInterval(this.#keepAlive)
      }
      throw err
    }
    this.#liveness = liveness
    this.#maintenance = maintenance
    // A stop() that came while starting waits for this, then undoes the registration: start nothing.
    if (this.#state !== 'started') return
    this.#pool = new WorkerPool({
      driver: this.#driver,
      runnerId: this.id,
      workers: this.#workers,
      kinds: handled,
      gate: this.#gate,
      logger: this.#logger,
      clock: this.#clock,
      onFatal: (err) => this.#fail(err),
      timeoutGraceMs: this.#timeoutGraceMs,
      scheduled: (due) => this.#maintenance?.scheduler.noteDue(due),
      onHandlerError: this.#onHandlerError,
      // A claim that waited longer than a heartbeat for its start may have outlived the runner's lease: its run checks the job is still its own first.
      confirmAfterMs: this.#driver.capabilities.liveness.heartbeatMs,
      mayClaim: () => liveness.fresh,
      pollMs: this.#driver.capabilities.pollMs,
    })
    liveness.onRenewed = () => this.#pool?.wake()
    maintenance.start()
    this.#unwake = this.#driver.onWake?.(this.#woken)
    this.#pool.start()
    // Names and a count only: what this process works on, for whoever reads its logs.
    this.#logger.info({ kinds: [...handled.keys()], workers: this.#workers }, 'runner started')
  }

  /** What a notification (the driver's onWake) or the fallback poll (WakePoll) says: the workers, the scheduler or the cancellation watch look. */
  readonly #woken = (what: WakeReason): void => {
    // A published result concerns event streams, not the workers.
    if (what === 'change') return
    if (what === 'cancel') {
      void this.#maintenance?.cancels.tick()
      return
    }
    this.#pool?.wake()
    this.#maintenance?.scheduler.wake()
  }

  /** A claim failed with an error that can never succeed: stop, loudly. */
  #fail(err: unknown): void {
    this.#fatal = err
    this.#logger.error({ error: errorCode(err) }, 'claim jobs failed with an error that cannot succeed; the runner stops')
    try {
      this.#onFatal?.(err)
    } catch {
      // The application's callback failing must not keep the runner from stopping.
    }
    void this.stop()
  }

  /**
   * Stops the runner: stops claiming, aborts every job's signal, puts back
   * the claimed jobs no handler has seen, and resolves once every handler
   * has ended and its final write has landed or been given up, or once
   * `timeoutMs` (default the runner's `stopTimeoutMs`) has passed. Then it
   * logs how many handlers were still running: their jobs stay running
   * for the next start, or another runner's sweep, to fail as interrupted,
   * and nothing they end with is recorded. Idempotent: a second call
   * returns the first call's promise.
   */
  stop(options?: StopOptions): Promise<void> {
    const { timeoutMs = this.#stopTimeoutMs } = optionsObject(options, ['timeoutMs'], 'stop', 'argument')
    if (!Number.isInteger(timeoutMs) || timeoutMs < 0) throw new InvalidArgumentError('stop: timeoutMs must be an integer >= 0')
    this.#stopped ??= this.#stop(timeoutMs)
    return this.#stopped
  }

  async #stop(timeoutMs: number): Promise<void> {
    if (this.#state === 'new') {
      this.#state = 'stopped'
      this.#ended.resolve()
      return
    }
    this.#state = 'stopping'
    await this.#starting?.catch(() => undefined)
    const abandoned = (await this.#pool?.stop(timeoutMs)) ?? 0
    if (abandoned > 0) {
      this.#logger.warn({ running: abandoned, timeout_ms: timeoutMs }, 'stop timed out with handlers still running; their jobs fail as interrupted at the next start')
    }
    this.#unwake?.()
    await this.#maintenance?.stop()
    await this.#liveness?.stop()
    clearInterval(this.#keepAlive)
    this.#state = 'stopped'
    this.#ended.resolve()
  }

  /**
   * Resolves when the runner has stopped (at once for one never started);
   * rejects with the database error when it stopped because claiming
   * failed with an error that can never succeed.
   */
  async wait(): Promise<void> {
    if (this.#state !== 'new') await this.#ended.promise
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
   * Pauses a kind in every process on the database, until `resume`, and
   * across restarts: its queued and scheduled jobs stay where they are,
   * running ones finish, and no claim takes another. The kind need not be
   * registered here (an operator's process may know none). Resolves true
   * when it was not paused before.
   */
  async pause(kind: string): Promise<boolean> {
    return this.#driver.kindPause({ kind: kindName(kind, 'pause'), now: this.#clock() })
  }

  /** Lets the kind's jobs be claimed again: at once here, within the poll interval elsewhere (on PostgreSQL, at once through its channel). True when it was paused. */
  async resume(kind: string): Promise<boolean> {
    const resumed = await this.#driver.kindResume({ kind: kindName(kind, 'resume') })
    if (resumed) this.wake()
    return resumed
  }

  /** The paused kinds, by name, with when each was paused (epoch ms, the clock of the runner that paused it). */
  async paused(): Promise<{ kind: string; pausedAt: number }[]> {
    return this.#driver.kindsPaused()
  }

  /**
   * The cooldowns in force now (by the runner's clock), sorted by key,
   * each with its end (epoch ms): those `job.rateLimited` recorded, in
   * any process on the database. No job of a cooling key starts before
   * its end.
   */
  async cooldowns(): Promise<Cooldown[]> {
    const cooldowns = await this.#driver.cooldownList({ now: this.#clock() })
    return cooldowns.map((c) => ({ key: c.key, until: Number(c.until) })).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  }

  /**
   * Ends the cooldown of `key` now, in every process: its jobs may start
   * at once (here at once; elsewhere within their poll interval, or at
   * once where the driver tells them). True when one was recorded.
   * `key`: a non-empty string of at most 1024 characters.
   */
  async clearCooldown(key: string): Promise<boolean> {
    if (!isCooldownKey(key)) throw new InvalidArgumentError(`clearCooldown: key must be a non-empty string of at most ${MAX_COOLDOWN_KEY} characters`)
    const cleared = await this.#driver.cooldownClear({ key })
    if (cleared) this.#pool?.wake()
    return cleared
  }

  /**
   * The state of every rate limit of the kinds registered here (with a
   * handler or not), one entry per bucket, sorted by key: its use in the
   * window now (by the runner's clock), when room comes back, and a
   * cooldown in force on it. A per-scope limit is one entry, `<kind>@*`,
   * reporting its busiest scope, with each scope that has claims in the
   * window.
   */
  async rateLimits(): Promise<RateLimitState[]> {
    return readRateLimits(this.#driver, [...this.#kinds.values()], this.#clock())
  }

  /**
   * What the dashboard's chart of the last `minutes` (1 to 1440, default
   * 60) shows: the jobs that finished in each minute since the start of
   * the minute `minutes` ago, by status, and the jobs queued now, by kind.
   * With `scope` (null: jobs enqueued without one), only that scope's
   * jobs. Read from the jobs table.
   */
  async activity(options?: ActivityOptions): Promise<Activity> {
    return readActivity(this.#driver, options, this.#clock())
  }

  /**
   * Deletes terminal jobs now, in the batches the runner's maintenance
   * uses, and resolves to how many: without options, those the runner's
   * `retention` makes due (rejecting with InvalidArgumentError under
   * `retention: false`); with `{ olderThanMs, statuses?, kinds? }`, those
   * that finished more than `olderThanMs` ago, by the runner's clock. A
   * job that is not terminal is never deleted. The runner need not be
   * started; nothing else need be registered.
   */
  async prune(options?: PruneOptions): Promise<number> {
    const rules = options === undefined ? this.#retention?.rules : pruneRules(options)
    if (rules === undefined) throw new InvalidArgumentError('prune: this runner has retention: false; pass { olderThanMs } to say what to delete')
    return pruneJobs(this.#driver, rules, this.#clock)
  }

  /**
   * Cancels a job: a queued or scheduled one becomes `cancelled` at once
   * ('cancelled'); a running one has its signal aborted in whichever
   * process runs it (at once here and, on PostgreSQL, through its
   * notification channel; within the driver's poll interval otherwise),
   * and ends `cancelled` when its handler returns, whatever it returns
   * ('requested'); a finished one is left as it is ('terminal'). With
   * `scope`, a job of another scope is not found: rejects with
   * JobNotFoundError, as for a missing one.
   */
  async cancel(id: string, options?: { scope?: string | null }): Promise<'cancelled' | 'requested' | 'terminal'> {
    const { scope } = optionsObject(options, ['scope'], 'cancel', 'argument')
    const result = typeof id === 'string' ? await cancelJob(this.#driver, { id, scope, now: this.#clock() }) : 'missing'
    if (result === 'missing') throw new JobNotFoundError()
    if (result === 'requested') this.#pool?.cancel([id])
    return result
  }

  /**
   * Runs a job again now, as an operator's "retry now" button does: a
   * `scheduled` job (waiting for its due time, or for its next attempt
   * after a failure or a snooze) becomes due now; a `failed` or
   * `cancelled` one is queued now for one more attempt (its attempt count
   * kept, so `maxAttempts` grows to allow it, its error cleared, its last
   * partial result kept until the handler publishes another). Either way
   * it is `queued` ('queued'), and a worker of its kind takes it in its
   * turn. A queued, running or succeeded job is left as it is
   * ('not_retryable'), and so is a failed or cancelled job whose unique
   * key another live job now holds ('unique_key_held'). With `scope`, a
   * job of another scope is not found: rejects with JobNotFoundError, as
   * for a missing one.
   */
  async retry(id: string, options?: { scope?: string | null }): Promise<'queued' | 'not_retryable' | 'unique_key_held'> {
    const { scope } = optionsObject(options, ['scope'], 'retry', 'argument')
    const result = typeof id === 'string' ? await retryJobNow(this.#driver, { id, scope, now: this.#clock() }) : 'missing'
    if (result === 'missing') throw new JobNotFoundError()
    if (result === 'queued') this.#pool?.wake()
    return result
  }

  /**
   * Counts jobs by kind and status, sorted by kind (in code-unit order)
   * and then by status in lifecycle order; a pair with no job is left
   * out. With `scope` (null: jobs enqueued without one), only that
   * scope's jobs; default every scope.
   *
   * A count reads every job it counts, so how fresh it is depends on the
   * size of what it counts. A scope (or, without one, a database) of at
   * most 10,000 jobs is counted exactly at each call, in a few
   * milliseconds. On SQLite a bigger one is answered from a snapshot of
   * its exact counts that may be up to 30 s old: jobs enqueued, finished
   * or deleted since that snapshot are not in it, and a job that changed
   * status meanwhile is counted in its old one. A snapshot younger than
   * 5 s is answered as it is; an older one is answered while the next is
   * taken; a call finding none younger than 30 s waits for a new one,
   * which a worker thread counts with a read-only connection of its own
   * (a database in memory: on the event loop), so the process's event
   * loop never waits for the count. On PostgreSQL every call counts
   * exactly, on the server (about 0.2-0.3 s for 1,000,000 jobs).
   */
  async counts(options?: { scope?: string | null }): Promise<JobCount[]> {
    const { scope } = optionsObject(options, ['scope'], 'counts', 'argument')
    if (scope !== undefined && scope !== null && typeof scope !== 'string') throw new InvalidArgumentError('counts: scope must be a string or null')
    const rows = await this.#driver.jobCounts({ scope })
    return rows
      .map((r) => ({ kind: r.kind, status: r.status, count: Number(r.count) }))
      .sort((a, b) => (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : JOB_STATUSES.indexOf(a.status) - JOB_STATUSES.indexOf(b.status)))
  }

  /**
   * Returns the job with `id` through the reading connection, or rejects
   * with JobNotFoundError. With `scope` given, a job of another scope is
   * not found either, exactly as a missing one.
   */
  async get(id: string, options?: { scope?: string | null }): Promise<Job> {
    const { scope } = optionsObject(options, ['scope'], 'get', 'argument')
    const row = typeof id === 'string' ? await this.#driver.jobGet({ id, scope }) : undefined
    if (row === undefined) throw new JobNotFoundError()
    return toJob(row)
  }

  /** Returns a page of jobs, newest first; rejects with InvalidCursorError for a cursor it did not make. */
  async list(options?: ListOptions): Promise<JobPage> {
    const { scope, status, kind, limit = 50, cursor } = optionsObject(options, LIST_KEYS, 'list', 'argument')
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new InvalidArgumentError('limit must be an integer from 1 to 1000')
    if (status !== undefined && !JOB_STATUSES.includes(status)) throw new InvalidArgumentError('status must be one of ' + JOB_STATUSES.join(', '))
    const beforeId = cursor === undefined ? undefined : decodeCursor(cursor)
    const rows = await this.#driver.jobList({ scope, status, kind, limit: limit + 1, beforeId })
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return { jobs: page.map(toJob), nextCursor: rows.length > limit && last ? encodeCursor(last.id) : null }
  }
}

/** A promise with its resolve function outside (Promise.withResolvers is Node 22). */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

function checkMs(name: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new ConfigError(`${name} must be an integer >= 0 (milliseconds)`)
}

/** A stored row as a Job is read: its result parsed, the reference design's fields and the lifecycle's. */
export function toJob(row: JobRow): Job {
  return {
    id: row.id,
    kind: row.kind,
    status: row.status,
    result: row.result === null ? null : (JSON.parse(row.result) as JsonValue),
    error: row.error,
    attempt: row.attempt,
    maxAttempts: row.maxAttempts,
    priority: row.priority,
    runAt: row.runAt,
  }
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

/** A kind name as pause and resume take it: a non-empty string of at most 256 characters. */
function kindName(kind: unknown, operation: string): string {
  if (typeof kind !== 'string' || kind.length === 0 || kind.length > 256) throw new InvalidArgumentError(`${operation}: kind must be a non-empty string of at most 256 characters`)
  return kind
}
