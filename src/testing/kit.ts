import { AssertionError } from 'node:assert'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import type { ClaimedJob } from '../driver.js'
import { ConfigError, DatabaseError, InvalidArgumentError, JobFailure, JobNotFoundError, JobSnooze, RunnerStateError } from '../errors.js'
import { JOB_STATUSES, type Job, type JobStatus, type JsonValue } from '../job.js'
import type { KindDef } from '../kind.js'
import type { Logger } from '../logger.js'
import { optionsObject } from '../options.js'
import { isThenable } from '../payload.js'
import { Runner, toJob, type Kind, type RunnerOptions } from '../runner/runner.js'
import type { SqliteDatabase } from '../sqlite/database.js'
import type { SqliteDriver } from '../sqlite/driver.js'
import { TestClock } from './clock.js'
import { KitDriver } from './driver.js'
import { DrainLimitError, DrainTimeoutError, type RunningJob } from './errors.js'
import { jsonOf, matches, type PayloadMatch } from './match.js'

/** The Runner options a test kit passes on; the driver and the clock are the kit's own. */
export type TestKitRunnerOptions = Omit<RunnerOptions<SqliteDriver>, 'driver' | 'clock'>

/** Options of one drain; a kit's `drain` option sets the defaults of all of its drains. Unknown keys are refused. */
export interface DrainOptions {
  /**
   * At most this many jobs are started (a retry or a snooze of one job
   * counts again); past it, the drain waits for those running and rejects
   * with DrainLimitError. Bounds a job that enqueues another each time it
   * runs. Default 1000.
   */
  readonly maxJobs?: number
  /**
   * How long, in real milliseconds, the drain waits for the queue to be
   * idle before it rejects with DrainTimeoutError naming the jobs still
   * running: a handler that never returns. Default 4000, under the 5 s a
   * test framework gives a test by default, so this error comes first.
   */
  readonly timeoutMs?: number
  /**
   * Once nothing due is left, move the clock to the next scheduled job's
   * due time (of a kind this kit handles) and go on, until none is left:
   * retries, snoozes and delayed follow-ups run too. Default false: a
   * scheduled job runs only once the clock has reached it.
   */
  readonly advance?: boolean
}

/** Options of `createTestKit`. Unknown keys are refused (ConfigError). */
export interface TestKitOptions<K> {
  /**
   * Registers the kinds on the kit's runner (`runner.register(...)`), as
   * the application does on its own; what it returns is `kit.kinds`.
   * Kinds may also be registered on `kit.runner` before the first drain.
   */
  readonly register?: (runner: Runner<SqliteDriver>) => K
  /** The clock the runner reads: a TestClock (shared between kits if you like), or its start time. Default: a clock frozen at the real time now. */
  readonly clock?: TestClock | Date | number
  /**
   * `memory` (default): a database in memory, gone at close. `file`: a
   * file in a new temporary folder (`kit.path`), removed at close, for a
   * test that opens a second connection or runner on it.
   */
  readonly storage?: 'memory' | 'file'
  /**
   * Passed to the Runner. Defaults here: one worker (jobs run one at a
   * time, by priority then insertion order), a logger that drops every
   * line, stopTimeoutMs 1000, and `retention: false`, so a job the test
   * drained stays readable however far it moves the clock.
   */
  readonly runner?: TestKitRunnerOptions
  /** Defaults of every drain of this kit. */
  readonly drain?: DrainOptions
}

/** A job as a test reads it: what `runner.get()` returns, with its payload (as stored, JSON) and its scope. */
export interface TestJob extends Job {
  readonly payload: JsonValue
  readonly scope: string | null
}

/** Which jobs `kit.jobs()` returns; every field given must hold. Unknown keys are refused. */
export interface JobsFilter {
  readonly kind?: string | { readonly name: string }
  /** One status, or any of several. */
  readonly status?: JobStatus | readonly JobStatus[]
  /** The job's scope; null for jobs enqueued without one. */
  readonly scope?: string | null
}

/** What else an enqueued job must have, beside its kind and payload. Unknown keys are refused. */
export interface EnqueuedOptions {
  /** One status, or any of several. Default: any (a job enqueued and run since was still enqueued). */
  readonly status?: JobStatus | readonly JobStatus[]
  /** The job's scope; null for jobs enqueued without one. */
  readonly scope?: string | null
  readonly priority?: number
  /** Its due time (a Date or epoch ms); null for a job enqueued without one. */
  readonly runAt?: Date | number | null
}

/** Options of `assertEnqueued`. */
export interface AssertEnqueuedOptions extends EnqueuedOptions {
  /** Exactly this many jobs must match. Default: at least one. */
  readonly count?: number
}

/** A kind, by name or by the handle or definition that names it. */
export type KindRef = string | { readonly name: string }

/** The payload type of a kind handle or definition; unknown for a kind named by a string. */
// `any` driver, result and codes: only the payload type is read.
export type PayloadOf<R> = R extends Kind<infer In, any> ? In : R extends KindDef<infer S, any, any> ? StandardSchemaV1.InferInput<S> : unknown

/**
 * A runner on a real SQLite database (in memory, or a temporary file),
 * whose jobs run only when the test drains the queue, on a clock the test
 * moves. See `createTestKit`.
 */
export interface TestKit<K = undefined> extends AsyncDisposable {
  /** The kit's runner: register kinds on it (before the first drain), enqueue, get, list, cancel as the application does. Do not start it: `drain()` does. */
  readonly runner: Runner<SqliteDriver>
  /** What the `register` option returned (the kinds' handles), or undefined. */
  readonly kinds: K
  /** The clock the runner reads. */
  readonly clock: TestClock
  /** The better-sqlite3 Database the jobs live in, for `enqueueTx` and the application's own tables (cast it to better-sqlite3's `Database` type for its whole API). */
  readonly database: SqliteDatabase
  /** The database file with `storage: 'file'`; null in memory. */
  readonly path: string | null
  /**
   * Runs queued jobs until none that is due is left and none is running:
   * the jobs those jobs enqueue too, and scheduled ones once the clock has
   * reached them (`advance` moves it for them). Resolves to each job this
   * drain started, once, in the order it first started, as it stands now.
   * Outside a drain no job starts: a test sees what it enqueued queued.
   */
  drain(options?: DrainOptions): Promise<TestJob[]>
  /** The job with `id` as it stands now; throws JobNotFoundError. */
  job(id: string): TestJob
  /** Every job (or those the filter names) in insertion order. */
  jobs(filter?: JobsFilter): TestJob[]
  /**
   * What the job's handler threw, other than a JobFailure or a snooze,
   * one entry per attempt that threw: the error behind an
   * `internal_error`, which jobtable never stores or logs. Handlers
   * registered through `kit.runner` (or the `register` option) are
   * watched for it; empty for a job whose handler threw nothing.
   */
  thrown(id: string): unknown[]
  /**
   * The jobs of `kind` enqueued so far (in insertion order, whatever they
   * became since) whose payload holds every field of `payload` (see
   * PayloadMatch) and that have what `options` names.
   */
  enqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): TestJob[]
  /**
   * Throws an AssertionError unless a job of `kind` was enqueued with a
   * payload holding every field of `payload` (exactly `count` of them when
   * given); its message lists the jobs of that kind that were enqueued.
   * Returns the first that matches.
   */
  assertEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: AssertEnqueuedOptions): TestJob
  /** Throws an AssertionError, listing them, if any job of `kind` matches. */
  assertNotEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): void
  /** Stops the runner (aborting the signals of jobs still running), closes the database and removes its temporary folder. */
  close(): Promise<void>
}

const KIT_KEYS = ['register', 'clock', 'storage', 'runner', 'drain'] as const
const RUNNER_KEYS = ['workers', 'logger', 'stopTimeoutMs', 'unknownKindGraceMs', 'onFatal', 'timeoutGraceMs', 'retention'] as const
const DRAIN_KEYS = ['maxJobs', 'timeoutMs', 'advance'] as const
const JOBS_KEYS = ['kind', 'status', 'scope'] as const
const ENQUEUED_KEYS = ['status', 'scope', 'priority', 'runAt'] as const
const ASSERT_KEYS = [...ENQUEUED_KEYS, 'count'] as const

const DEFAULT_MAX_JOBS = 1_000
const DEFAULT_TIMEOUT_MS = 4_000
/** A drain looks at the database again at least this often (real ms), whatever it was told: a write by another connection tells it nothing. */
const FALLBACK_MS = 25
const PROMOTE_BATCH = 1_000
/** At most this many jobs are listed in an assertion's message. */
const LISTED = 20

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} }

const COLUMNS = 'id, kind, status, result, error, attempt, max_attempts AS maxAttempts, priority, run_at AS runAt, payload, scope'

interface Row {
  id: string
  kind: string
  status: JobStatus
  result: string | null
  error: string | null
  attempt: number
  maxAttempts: number
  priority: number
  runAt: number | null
  payload: string
  scope: string | null
}

/**
 * Makes a test kit: a Runner on a real SQLite database with the
 * production driver (in memory by default), whose jobs run only when the
 * test calls `drain()`, on a clock the test moves (`kit.clock`).
 *
 * ```ts
 * await using kit = await createTestKit({ register: registerKinds })
 * const id = await kit.kinds.mealPlan.enqueue({ household: 'h1', days: 2 })
 * await kit.drain()
 * expect(kit.job(id)).toMatchObject({ status: 'succeeded' })
 * ```
 */
export async function createTestKit<K = undefined>(options?: TestKitOptions<K>): Promise<TestKit<Awaited<K>>> {
  const { register, clock: clockOption, storage = 'memory', runner: runnerOptions, drain } = optionsObject(options, KIT_KEYS, 'createTestKit')
  if (register !== undefined && typeof register !== 'function') throw new ConfigError('createTestKit: register must be a function (runner) => kinds')
  if (storage !== 'memory' && storage !== 'file') throw new ConfigError("createTestKit: storage must be 'memory' or 'file'")
  if (runnerOptions !== undefined && runnerOptions !== null && typeof runnerOptions === 'object') {
    for (const key of ['driver', 'clock']) {
      if (key in runnerOptions) throw new ConfigError(`createTestKit runner options: unknown option ${JSON.stringify(key)} (the kit's ${key === 'driver' ? 'driver is its own' : 'clock is the clock option'})`)
    }
  }
  const passed = optionsObject(runnerOptions, RUNNER_KEYS, 'createTestKit runner options')
  const defaults = drainOptions(drain, { maxJobs: DEFAULT_MAX_JOBS, timeoutMs: DEFAULT_TIMEOUT_MS, advance: false }, 'createTestKit drain options', 'config')
  const clock = clockOption instanceof TestClock ? clockOption : new TestClock(clockOption)

  let dir: string | null = null
  if (storage === 'file') dir = mkdtempSync(join(tmpdir(), 'jobtable-testkit-'))
  const path = dir === null ? null : join(dir, 'jobs.db')
  let database: Database.Database | undefined
  let driver: KitDriver | undefined
  let runner: Runner<SqliteDriver> | undefined
  try {
    database = new Database(path ?? ':memory:')
    driver = new KitDriver({ database })
    runner = new Runner<SqliteDriver>({ workers: 1, logger: silent, stopTimeoutMs: 1_000, retention: false, ...passed, driver, clock: () => clock.now() })
    const kit = new Kit<Awaited<K>>(runner, driver, database, clock, path, dir, defaults)
    try {
      kit.kinds = (await register?.(runner)) as Awaited<K>
    } catch (err) {
      await kit.close()
      throw err
    }
    return kit
  } catch (err) {
    if (runner === undefined) {
      await driver?.close()
      database?.close()
      if (dir !== null) rmSync(dir, { recursive: true, force: true })
    }
    throw err
  }
}

class Kit<K> implements TestKit<K> {
  readonly runner: Runner<SqliteDriver>
  kinds!: K
  readonly clock: TestClock
  readonly database: SqliteDatabase
  readonly path: string | null
  readonly #driver: KitDriver
  readonly #db: Database.Database
  readonly #dir: string | null
  readonly #defaults: Required<DrainOptions>
  readonly #all: Database.Statement
  readonly #byKind: Database.Statement
  readonly #byId: Database.Statement
  readonly #active: Database.Statement
  readonly #running: Database.Statement
  readonly #scheduled: Database.Statement
  readonly #unlisten: () => void
  readonly #pokes = new Set<() => void>()
  #poked = false
  readonly #thrown = new Map<string, unknown[]>()
  #state: 'new' | 'starting' | 'started' | 'closed' = 'new'
  #draining = false
  /** Set once the runner has stopped: the error a drain waiting then rejects with. */
  #stoppedWith: unknown
  #closing: Promise<void> | undefined

  constructor(runner: Runner<SqliteDriver>, driver: KitDriver, db: Database.Database, clock: TestClock, path: string | null, dir: string | null, defaults: Required<DrainOptions>) {
    this.runner = runner
    this.clock = clock
    this.database = db
    this.path = path
    this.#driver = driver
    this.#db = db
    this.#dir = dir
    this.#defaults = defaults
    // The driver has migrated the database: the table exists.
    this.#all = db.prepare(`SELECT ${COLUMNS} FROM jobtable_jobs ORDER BY seq`)
    this.#byKind = db.prepare(`SELECT ${COLUMNS} FROM jobtable_jobs WHERE kind = ? ORDER BY seq`)
    this.#byId = db.prepare(`SELECT ${COLUMNS} FROM jobtable_jobs WHERE id = ?`)
    this.#active = db.prepare(`SELECT kind, status, count(*) AS n FROM jobtable_jobs WHERE status IN ('queued', 'running') GROUP BY kind, status`)
    this.#running = db.prepare(`SELECT id, kind FROM jobtable_jobs WHERE status = 'running' ORDER BY seq`)
    this.#scheduled = db.prepare(`SELECT kind, min(run_at) AS due FROM jobtable_jobs WHERE status = 'scheduled' GROUP BY kind`)
    driver.changed = () => this.#poke()
    this.#watchHandlers()
    // A moved clock may make jobs due: the started runner's scheduler looks again (drain promotes them itself too).
    this.#unlisten = clock.onChange(() => {
      if (this.#state === 'started') this.runner.wake()
    })
  }

  async drain(options?: DrainOptions): Promise<TestJob[]> {
    const { maxJobs, timeoutMs, advance } = drainOptions(options, this.#defaults, 'drain', 'argument')
    if (this.#state === 'closed') throw new RunnerStateError('testing: drain after close')
    if (this.#draining) throw new RunnerStateError('testing: a drain is already running; await it before the next')
    this.#draining = true
    /** Each job started, once, in the order it first started (a Set keeps insertion order). */
    const started = new Set<string>()
    const ran: Record<string, number> = {}
    const onClaim = (jobs: readonly ClaimedJob[]) => {
      for (const job of jobs) {
        started.add(job.id)
        ran[job.kind] = (ran[job.kind] ?? 0) + 1
      }
    }
    try {
      await this.#start()
      this.#driver.openClaims(maxJobs, onClaim)
      await this.#untilIdle(maxJobs, timeoutMs, advance, ran)
    } finally {
      this.#driver.closeClaims()
      this.#draining = false
    }
    return [...started].map((id) => this.job(id))
  }

  async #start(): Promise<void> {
    if (this.#state !== 'new') return
    this.#state = 'starting'
    try {
      await this.runner.start()
    } catch (err) {
      this.#state = 'new'
      if (err instanceof RunnerStateError) throw new RunnerStateError('testing: the kit starts its runner at the first drain; do not start kit.runner yourself')
      throw err
    }
    this.#state = 'started'
    void this.runner.wait().then(
      () => this.#stopped(new RunnerStateError('testing: the runner stopped while a drain waited for it')),
      (err: unknown) => this.#stopped(err),
    )
  }

  #stopped(err: unknown): void {
    this.#stoppedWith = err
    this.#poke()
  }

  async #untilIdle(maxJobs: number, timeoutMs: number, advance: boolean, ran: Readonly<Record<string, number>>): Promise<void> {
    const deadline = performance.now() + timeoutMs
    for (;;) {
      if (this.#stoppedWith !== undefined) throw this.#stoppedWith
      // The recurring schedules' ticks the clock has reached are enqueued (and their jobs drained) before the queue counts as idle.
      await this.runner.wake()
      await this.#promoteDue()
      const { queued, running } = this.#activity()
      const queuedCount = Object.values(queued).reduce((a, b) => a + b, 0)
      if (queuedCount === 0 && running === 0 && this.#driver.claimsInFlight === 0) {
        if (!advance) return
        const due = this.#nextDue()
        if (due === null) return
        if (due > this.clock.now()) {
          this.clock.set(due)
          continue
        }
        // Due already, yet still scheduled (its promotion was refused for now): wait, as for any other change.
      } else if (queuedCount > 0) {
        if (this.#driver.budget === 0 && running === 0 && this.#driver.claimsInFlight === 0) throw new DrainLimitError(maxJobs, queued, ran)
        this.runner.wake()
      }
      const left = deadline - performance.now()
      if (left <= 0 || !(await this.#change(left))) {
        throw new DrainTimeoutError(timeoutMs, this.#running.all() as RunningJob[], this.#activity().queued)
      }
    }
  }

  /** Makes the due scheduled jobs queued; a write refused for now (the application's transaction) is tried again at the next look. */
  async #promoteDue(): Promise<void> {
    try {
      while ((await this.#driver.jobPromoteDue({ now: this.clock.now(), limit: PROMOTE_BATCH })) === PROMOTE_BATCH);
    } catch (err) {
      if (!(err instanceof DatabaseError && err.transient)) throw err
    }
  }

  /** The queued jobs of kinds this runner handles, by kind, and how many jobs run. */
  #activity(): { queued: Record<string, number>; running: number } {
    const queued: Record<string, number> = {}
    let running = 0
    for (const { kind, status, n } of this.#active.all() as { kind: string; status: string; n: number }[]) {
      if (status === 'running') running += n
      else if (this.runner.kind(kind)?.handled === true) queued[kind] = n
    }
    return { queued, running }
  }

  /** The earliest due time of a scheduled job of a kind this runner handles, or null. */
  #nextDue(): number | null {
    let next: number | null = null
    for (const { kind, due } of this.#scheduled.all() as { kind: string; due: number }[]) {
      if (this.runner.kind(kind)?.handled === true && (next === null || due < next)) next = due
    }
    return next
  }

  /** Resolves true at the next write the driver reports (or the fallback look), false once `ms` have passed. */
  #change(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (changed: boolean) => {
        clearTimeout(fallback)
        clearTimeout(timeout)
        this.#pokes.delete(poke)
        resolve(changed)
      }
      const poke = () => done(true)
      this.#pokes.add(poke)
      const fallback = setTimeout(() => done(true), Math.min(FALLBACK_MS, ms))
      const timeout = setTimeout(() => done(false), ms)
    })
  }

  /**
   * Tells a waiting drain the database changed, a turn of the event loop
   * later: the write is one of many the runner makes in a row, and the
   * drain's next look must never starve the timers handlers wait on.
   */
  #poke(): void {
    if (this.#poked || this.#pokes.size === 0) return
    this.#poked = true
    setImmediate(() => {
      this.#poked = false
      for (const poke of [...this.#pokes]) poke()
    })
  }

  /**
   * Makes the runner's `register` hand each handler over wrapped, so that
   * what it throws is kept for `thrown(id)` before the runner turns it
   * into a code. The runner sees the same outcome: the error is thrown on.
   */
  #watchHandlers(): void {
    const register = this.runner.register.bind(this.runner) as (kind: unknown, second?: unknown) => unknown
    const watch = (handler: (payload: unknown, ctx: { id: string }) => unknown) => (payload: unknown, ctx: { id: string }) => {
      const keep = (err: unknown) => {
        if (!(err instanceof JobFailure) && !(err instanceof JobSnooze)) this.#thrown.set(ctx.id, [...(this.#thrown.get(ctx.id) ?? []), err])
        throw err
      }
      let result: unknown
      try {
        result = handler(payload, ctx)
      } catch (err) {
        return keep(err)
      }
      // A synchronous handler stays synchronous: the runner awaits only what is a promise.
      return isThenable(result) ? Promise.resolve(result).catch(keep) : result
    }
    const watched = (kind: unknown, second?: unknown): unknown => {
      if (typeof second === 'function') return register(kind, watch(second as never))
      const handler: unknown = second !== null && typeof second === 'object' ? (second as { handler?: unknown }).handler : undefined
      if (typeof kind === 'string' && typeof handler === 'function') return register(kind, { ...(second as object), handler: watch(handler as never) })
      return register(kind, second)
    }
    Object.defineProperty(this.runner, 'register', { value: watched, configurable: true, writable: true })
  }

  thrown(id: string): unknown[] {
    if (typeof id !== 'string') throw new InvalidArgumentError('thrown: id must be a string')
    return [...(this.#thrown.get(id) ?? [])]
  }

  job(id: string): TestJob {
    if (typeof id !== 'string') throw new InvalidArgumentError('job: id must be a string')
    const row = this.#byId.get(id) as Row | undefined
    if (row === undefined) throw new JobNotFoundError()
    return toTestJob(row)
  }

  jobs(filter?: JobsFilter): TestJob[] {
    const { kind, status, scope } = optionsObject(filter, JOBS_KEYS, 'jobs', 'argument')
    const statuses = statusesOf(status, 'jobs')
    const rows = (kind === undefined ? this.#all.all() : this.#byKind.all(kindName(kind, 'jobs'))) as Row[]
    return rows.filter((r) => (statuses === undefined || statuses.includes(r.status)) && (scope === undefined || r.scope === scope)).map(toTestJob)
  }

  enqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): TestJob[] {
    return this.#search('enqueued', kind, payload, optionsObject(options, ENQUEUED_KEYS, 'enqueued', 'argument')).found
  }

  assertEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: AssertEnqueuedOptions): TestJob {
    const { count, ...rest } = optionsObject(options, ASSERT_KEYS, 'assertEnqueued', 'argument')
    if (count !== undefined && !(Number.isSafeInteger(count) && count >= 1)) throw new InvalidArgumentError('assertEnqueued: count must be an integer >= 1 (assertNotEnqueued asserts none)')
    const search = this.#search('assertEnqueued', kind, payload, rest)
    if (search.found.length > 0 && (count === undefined || search.found.length === count)) return search.found[0]!
    const wanted = `${count === undefined ? 'a job' : `exactly ${count} job${count === 1 ? '' : 's'}`} ${search.wanted}`
    let message: string
    if (search.ofKind.length === 0) {
      const kinds = countBy(this.jobs().map((j) => j.kind))
      message = `expected ${wanted} to have been enqueued, but no job of kind ${JSON.stringify(search.name)} was; ${kinds === '' ? 'no job was enqueued at all' : `jobs enqueued: ${kinds}`}`
    } else if (search.found.length === 0) {
      message = `expected ${wanted} to have been enqueued, but none of the ${plural(search.ofKind.length, 'job')} of that kind matches:\n${listing(search.ofKind)}`
    } else {
      message = `expected ${wanted} to have been enqueued, but ${search.found.length} match:\n${listing(search.found)}`
    }
    throw new AssertionError({ message, operator: 'assertEnqueued' })
  }

  assertNotEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): void {
    const search = this.#search('assertNotEnqueued', kind, payload, optionsObject(options, ENQUEUED_KEYS, 'assertNotEnqueued', 'argument'))
    if (search.found.length === 0) return
    const message = `expected no job ${search.wanted} to have been enqueued, but ${plural(search.found.length, 'job')} match:\n${listing(search.found)}`
    throw new AssertionError({ message, operator: 'assertNotEnqueued' })
  }

  /** The jobs of a kind, those of them that match, and the words for what was looked for. */
  #search(where: string, kind: KindRef, payload: unknown, options: EnqueuedOptions): { name: string; ofKind: TestJob[]; found: TestJob[]; wanted: string } {
    const name = kindName(kind, where)
    const expected = payload === undefined ? undefined : jsonOf(payload, where)
    const statuses = statusesOf(options.status, where)
    const { scope, priority } = options
    if (scope !== undefined && scope !== null && typeof scope !== 'string') throw new InvalidArgumentError(`${where}: scope must be a string or null`)
    if (priority !== undefined && !Number.isSafeInteger(priority)) throw new InvalidArgumentError(`${where}: priority must be an integer`)
    const runAt = options.runAt === undefined || options.runAt === null ? options.runAt : options.runAt instanceof Date ? options.runAt.getTime() : options.runAt
    if (runAt !== undefined && runAt !== null && !Number.isFinite(runAt)) throw new InvalidArgumentError(`${where}: runAt must be a valid Date, epoch milliseconds or null`)
    const ofKind = (this.#byKind.all(name) as Row[]).map(toTestJob)
    const found = ofKind.filter(
      (j) =>
        (statuses === undefined || statuses.includes(j.status)) &&
        (scope === undefined || j.scope === scope) &&
        (priority === undefined || j.priority === priority) &&
        (runAt === undefined || j.runAt === runAt) &&
        (expected === undefined || matches(j.payload, expected)),
    )
    const also: string[] = []
    if (statuses !== undefined) also.push(`status ${statuses.join(' or ')}`)
    if (scope !== undefined) also.push(`scope ${JSON.stringify(scope)}`)
    if (priority !== undefined) also.push(`priority ${priority}`)
    if (runAt !== undefined) also.push(`runAt ${runAt === null ? 'null' : new Date(runAt).toISOString()}`)
    const wanted =
      `of kind ${JSON.stringify(name)}` +
      (expected === undefined ? '' : ` with a payload matching ${JSON.stringify(expected)}`) +
      (also.length > 0 ? ` (${also.join(', ')})` : '')
    return { name, ofKind, found, wanted }
  }

  close(): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  async #close(): Promise<void> {
    this.#state = 'closed'
    this.#unlisten()
    try {
      await this.runner.close()
    } finally {
      this.#db.close()
      if (this.#dir !== null) rmSync(this.#dir, { recursive: true, force: true })
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }
}

function drainOptions(options: DrainOptions | undefined, defaults: Required<DrainOptions>, where: string, kind: 'config' | 'argument'): Required<DrainOptions> {
  const { maxJobs = defaults.maxJobs, timeoutMs = defaults.timeoutMs, advance = defaults.advance } = optionsObject(options, DRAIN_KEYS, where, kind)
  const fail = (message: string) => (kind === 'config' ? new ConfigError(message) : new InvalidArgumentError(message))
  if (!Number.isSafeInteger(maxJobs) || maxJobs < 1) throw fail(`${where}: maxJobs must be an integer >= 1`)
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw fail(`${where}: timeoutMs must be an integer >= 1 (milliseconds)`)
  if (typeof advance !== 'boolean') throw fail(`${where}: advance must be true or false`)
  return { maxJobs, timeoutMs, advance }
}

function kindName(kind: KindRef, where: string): string {
  const name: unknown = typeof kind === 'string' ? kind : kind !== null && typeof kind === 'object' ? kind.name : undefined
  if (typeof name !== 'string' || name === '') throw new InvalidArgumentError(`${where}: kind must be a kind's name, or its handle or definition`)
  return name
}

function statusesOf(status: JobStatus | readonly JobStatus[] | undefined, where: string): readonly JobStatus[] | undefined {
  if (status === undefined) return undefined
  const list = typeof status === 'string' ? [status] : status
  if (!Array.isArray(list) || list.length === 0 || !list.every((s) => JOB_STATUSES.includes(s))) {
    throw new InvalidArgumentError(`${where}: status must be one of ${JOB_STATUSES.join(', ')}, or a non-empty array of them`)
  }
  return list
}

function toTestJob(row: Row): TestJob {
  return { ...toJob(row), payload: JSON.parse(row.payload) as JsonValue, scope: row.scope }
}

/** One line per job, at most LISTED of them: the user's own test data, shown to the test that made it. */
function listing(jobs: readonly TestJob[]): string {
  const lines = jobs.slice(0, LISTED).map((j) => {
    const extra = [j.scope === null ? '' : ` scope ${JSON.stringify(j.scope)}`, j.priority === 0 ? '' : ` priority ${j.priority}`, j.runAt === null ? '' : ` runAt ${new Date(j.runAt).toISOString()}`].join('')
    return `  - ${j.status} ${j.id}${extra}: ${JSON.stringify(j.payload)}`
  })
  if (jobs.length > LISTED) lines.push(`  (and ${jobs.length - LISTED} more)`)
  return lines.join('\n')
}

function countBy(values: readonly string[]): string {
  const counts = new Map<string, number>()
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1)
  return [...counts].map(([v, n]) => `${JSON.stringify(v)} ×${n}`).join(', ')
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`
}
