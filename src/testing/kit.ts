import { AssertionError } from 'node:assert'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import type { ClaimedJob, Cooldown, Driver } from '../driver.js'
import { ConfigError, DatabaseError, InvalidArgumentError, JobNotFoundError, RunnerStateError } from '../errors.js'
import { JOB_STATUSES, type Job, type JobStatus, type JsonValue } from '../job.js'
import type { KindDef } from '../kind.js'
import type { Logger } from '../logger.js'
import { optionsObject } from '../options.js'
import { Runner, type Kind, type ListOptions, type RateLimitState, type RunnerOptions } from '../runner/runner.js'
import type { SqliteDatabase } from '../sqlite/database.js'
import type { SqliteDriver } from '../sqlite/driver.js'
import { TestClock } from './clock.js'
import { KitDriver } from './driver.js'
import { DrainLimitError, DrainTimeoutError, type RunningJob } from './errors.js'
import { jsonOf, matches, type PayloadMatch } from './match.js'

/** The Runner options a test kit passes on; the driver and the clock are the kit's own options. */
export type TestKitRunnerOptions = Omit<RunnerOptions<Driver>, 'driver' | 'clock'>

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
   * due time (of a kind this kit handles), or to when a rate limit or a
   * cooldown lets a held queued job start, whichever comes first, and go
   * on, until none is left: retries, snoozes, rate-limited jobs and
   * delayed follow-ups run too. Default false: a scheduled job runs only
   * once the clock has reached it, and a held one once it has passed its
   * cooldown or window.
   */
  readonly advance?: boolean
}

/** Options of `createTestKit`. Unknown keys are refused (ConfigError). */
export interface TestKitOptions<K, D extends Driver = SqliteDriver> {
  /**
   * Registers the kinds on the kit's runner (`runner.register(...)`), as
   * the application does on its own; what it returns is `kit.kinds`.
   * Kinds may also be registered on `kit.runner` before the first drain.
   */
  readonly register?: (runner: Runner<D>) => K
  /**
   * The clock the runner reads: a TestClock (shared between kits if you
   * like), or its start time. Default: a clock frozen at the real time
   * now. On PostgreSQL, start it in the past when the test moves it on: the
   * database compares due times with the earlier of the runner's clock and
   * its own, so a clock moved past the real time makes nothing due.
   */
  readonly clock?: TestClock | Date | number
  /**
   * The kit's own SQLite database (without `driver`). `memory` (default):
   * a database in memory, gone at close. `file`: a file in a new
   * temporary folder (`kit.path`), removed at close, for a test that
   * opens a second connection or runner on it.
   */
  readonly storage?: 'memory' | 'file'
  /**
   * The database to run on instead of the kit's own SQLite one: a driver
   * made for the test, such as `postgres({ connectionString, schema })`
   * from `jobtable/postgres` on a schema of the test's own. The kit wraps
   * it (its claims wait for a drain) and from then on it is the kit's: it
   * is closed at `close()`, or when createTestKit fails. The kit reads
   * every job the database holds and drops nothing: give each test a
   * fresh schema (or file), and drop it after.
   */
  readonly driver?: D
  /**
   * Passed to the Runner. Defaults here: one worker (jobs run one at a
   * time, by priority then insertion order), a logger that drops every
   * line, stopTimeoutMs 1000, and `retention: false`, so a job the test
   * drained stays readable however far it moves the clock. An
   * `onHandlerError` given is called as well as the kit's own (which
   * keeps what handlers throw for `thrown()`).
   */
  readonly runner?: TestKitRunnerOptions
  /** Defaults of every drain of this kit. */
  readonly drain?: DrainOptions
}

/**
 * A job as a test reads it: what `runner.get()` returns, with its payload
 * (as stored, JSON) and its scope, as the kit's runner stored them. Both
 * are undefined for a job stored through another connection or process
 * (another runner on the kit's file or schema): the runner's reads return
 * neither, so the kit knows them from the inserts its own runner made.
 */
export interface TestJob extends Job {
  readonly payload: JsonValue | undefined
  readonly scope: string | null | undefined
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


/** The database handle of a kit on SQLite (its own, or a SQLite driver given), for `enqueueTx`; null on any other driver. */
export type TestKitDatabase<D extends Driver> = D extends SqliteDriver ? SqliteDatabase : null

/**
 * A runner on a real database (the kit's own SQLite one in memory or in a
 * temporary file, or the driver given, such as PostgreSQL), whose jobs
 * run only when the test drains the queue, on a clock the test moves. See
 * `createTestKit`.
 */
export interface TestKit<K = undefined, D extends Driver = SqliteDriver> extends AsyncDisposable {
  /** The kit's runner: register kinds on it (before the first drain), enqueue, get, list, cancel as the application does. Do not start it: `drain()` does. */
  readonly runner: Runner<D>
  /** What the `register` option returned (the kinds' handles), or undefined. */
  readonly kinds: K
  /** The clock the runner reads. */
  readonly clock: TestClock
  /**
   * On SQLite, the better-sqlite3 Database the jobs live in, for
   * `enqueueTx` and the application's own tables (cast it to
   * better-sqlite3's `Database` type for its whole API); null on another
   * driver (on PostgreSQL, `enqueueTx` takes a client of your own pool).
   */
  readonly database: TestKitDatabase<D>
  /** The database file with `storage: 'file'`; null otherwise. */
  readonly path: string | null
  /**
   * Runs queued jobs until none that is due is left and none is running:
   * the jobs those jobs enqueue too, and scheduled ones once the clock has
   * reached them (`advance` moves it for them). Jobs of a kind this kit
   * has no handler for, or of a paused kind, are not its work: they stay
   * queued or scheduled. Nor are queued jobs that a rate limit or a
   * cooldown holds back by the kit's clock (a cooldown of their key in
   * force, `job.rateLimited`'s included; their bucket's window full):
   * they stay queued until the clock passes the cooldown's end or the
   * oldest start in the window (`kit.clock.advance(ms)`, then drain
   * again; `advance` moves it there too). Resolves to each job this drain started, once,
   * in the order it first started, as it stands now. Outside a drain no
   * job starts: a test sees what it enqueued queued.
   */
  drain(options?: DrainOptions): Promise<TestJob[]>
  /** The job with `id` as it stands now, read through the runner; rejects with JobNotFoundError. */
  job(id: string): Promise<TestJob>
  /** Every job (or those the filter names) in insertion order, read through the runner. */
  jobs(filter?: JobsFilter): Promise<TestJob[]>
  /**
   * What the job's handler threw, one entry per attempt a throw ended as
   * a failure (a declared failure's JobFailure, or the error behind an
   * `internal_error`, which jobtable never stores or logs; a snooze is
   * not kept): the runner's `onHandlerError` hands it to the kit. Empty
   * for a job whose handler threw nothing.
   */
  thrown(id: string): unknown[]
  /**
   * The jobs of `kind` enqueued so far (in insertion order, whatever they
   * became since) whose payload holds every field of `payload` (see
   * PayloadMatch) and that have what `options` names.
   */
  enqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): Promise<TestJob[]>
  /**
   * Rejects with an AssertionError unless a job of `kind` was enqueued
   * with a payload holding every field of `payload` (exactly `count` of
   * them when given); its message lists the jobs of that kind that were
   * enqueued. Resolves to the first that matches.
   */
  assertEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: AssertEnqueuedOptions): Promise<TestJob>
  /** Rejects with an AssertionError, listing them, if any job of `kind` matches. */
  assertNotEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): Promise<void>
  /** Stops the runner (aborting the signals of jobs still running), closes the driver, and the kit's own database and its temporary folder. */
  close(): Promise<void>
}

const KIT_KEYS = ['register', 'clock', 'storage', 'driver', 'runner', 'drain'] as const
const RUNNER_KEYS = ['workers', 'logger', 'stopTimeoutMs', 'unknownKindGraceMs', 'onFatal', 'timeoutGraceMs', 'retention', 'onHandlerError'] as const
const DRAIN_KEYS = ['maxJobs', 'timeoutMs', 'advance'] as const
const JOBS_KEYS = ['kind', 'status', 'scope'] as const
const ENQUEUED_KEYS = ['status', 'scope', 'priority', 'runAt'] as const
const ASSERT_KEYS = [...ENQUEUED_KEYS, 'count'] as const

const DEFAULT_MAX_JOBS = 1_000
const DEFAULT_TIMEOUT_MS = 4_000
/** A drain looks at the database again at least this often (real ms), whatever it was told: a write by another connection tells it nothing. */
const FALLBACK_MS = 25
const PROMOTE_BATCH = 1_000
/** The page size of the kit's reads (runner.list's largest). */
const PAGE = 1_000
/** At most this many jobs are listed in an assertion's message. */
const LISTED = 20

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} }

/** What a kit's own database leaves to undo at close. */
interface Own {
  readonly database: { close(): unknown }
  readonly dir: string | null
}

/**
 * Makes a test kit: a Runner on a real database, whose jobs run only when
 * the test calls `drain()`, on a clock the test moves (`kit.clock`). The
 * database is SQLite with the production driver (in memory by default),
 * or the driver given (`driver: postgres({ ... })`).
 *
 * ```ts
 * await using kit = await createTestKit({ register: registerKinds })
 * const id = await kit.kinds.mealPlan.enqueue({ household: 'h1', days: 2 })
 * await kit.drain()
 * expect(await kit.job(id)).toMatchObject({ status: 'succeeded' })
 * ```
 */
export async function createTestKit<K = undefined, D extends Driver = SqliteDriver>(options?: TestKitOptions<K, D>): Promise<TestKit<Awaited<K>, D>> {
  const { register, clock: clockOption, storage, driver: given, runner: runnerOptions, drain } = optionsObject(options, KIT_KEYS, 'createTestKit')
  if (given !== undefined && (given === null || typeof given !== 'object' || typeof given.jobClaim !== 'function' || typeof given.close !== 'function')) {
    throw new ConfigError('createTestKit: driver must be a jobtable driver, e.g. postgres({ connectionString, schema }) from jobtable/postgres')
  }
  let own: Own | undefined
  /** The driver the runner runs on: the one given (the kit's from the start), or the kit's own SQLite one. */
  let real: D | undefined = given
  let runner: Runner<D> | undefined
  try {
    if (register !== undefined && typeof register !== 'function') throw new ConfigError('createTestKit: register must be a function (runner) => kinds')
    if (storage !== undefined && storage !== 'memory' && storage !== 'file') throw new ConfigError("createTestKit: storage must be 'memory' or 'file'")
    if (storage !== undefined && given !== undefined) throw new ConfigError("createTestKit: storage is for the kit's own SQLite database; with a driver, the driver says where the jobs are")
    if (runnerOptions !== undefined && runnerOptions !== null && typeof runnerOptions === 'object') {
      for (const key of ['driver', 'clock']) {
        if (key in runnerOptions) throw new ConfigError(`createTestKit runner options: unknown option ${JSON.stringify(key)} (the kit's ${key} is its ${key} option)`)
      }
    }
    const passed = optionsObject(runnerOptions, RUNNER_KEYS, 'createTestKit runner options')
    const { onHandlerError: theirs } = passed
    if (theirs !== undefined && typeof theirs !== 'function') throw new ConfigError('createTestKit runner options: onHandlerError must be a function')
    const defaults = drainOptions(drain, { maxJobs: DEFAULT_MAX_JOBS, timeoutMs: DEFAULT_TIMEOUT_MS, advance: false }, 'createTestKit drain options', 'config')
    const clock = clockOption instanceof TestClock ? clockOption : new TestClock(clockOption)

    let path: string | null = null
    if (real === undefined) {
      const made = await ownSqlite(storage ?? 'memory')
      own = made.own
      path = made.path
      real = made.driver as unknown as D
    }
    const driver = new KitDriver(real)
    const thrown = new Map<string, unknown[]>()
    runner = new Runner<D>({
      workers: 1,
      logger: silent,
      stopTimeoutMs: 1_000,
      retention: false,
      ...passed,
      driver: driver.driver,
      clock: () => clock.now(),
      onHandlerError: (error, job) => {
        thrown.set(job.id, [...(thrown.get(job.id) ?? []), error])
        theirs?.(error, job)
      },
    })
    const database = (real.name === 'sqlite' ? (real as unknown as SqliteDriver).database : null) as TestKitDatabase<D>
    const kit = new Kit<Awaited<K>, D>(runner, driver, clock, database, path, own, thrown, defaults)
    try {
      kit.kinds = (await register?.(runner)) as Awaited<K>
    } catch (err) {
      await kit.close()
      throw err
    }
    return kit
  } catch (err) {
    if (runner === undefined) {
      // No runner to close the driver: the one given, or the kit's own with its database and folder.
      await real?.close().catch(() => undefined)
      if (own !== undefined) {
        own.database.close()
        if (own.dir !== null) rmSync(own.dir, { recursive: true, force: true })
      }
    }
    throw err
  }
}

/**
 * The kit's own SQLite database and driver, in memory or in a temporary
 * folder. better-sqlite3 is loaded only here: a kit on another driver
 * needs none.
 */
async function ownSqlite(storage: 'memory' | 'file'): Promise<{ driver: SqliteDriver; own: Own; path: string | null }> {
  const [{ default: Database }, { SqliteDriver }] = await Promise.all([import('better-sqlite3'), import('../sqlite/driver.js')])
  const dir = storage === 'file' ? mkdtempSync(join(tmpdir(), 'jobtable-testkit-')) : null
  const path = dir === null ? null : join(dir, 'jobs.db')
  let database: InstanceType<typeof Database> | undefined
  try {
    database = new Database(path ?? ':memory:')
    return { driver: new SqliteDriver({ database }), own: { database, dir }, path }
  } catch (err) {
    database?.close()
    if (dir !== null) rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

class Kit<K, D extends Driver> implements TestKit<K, D> {
  readonly runner: Runner<D>
  kinds!: K
  readonly clock: TestClock
  readonly database: TestKitDatabase<D>
  readonly path: string | null
  readonly #driver: KitDriver<D>
  readonly #own: Own | undefined
  readonly #thrown: Map<string, unknown[]>
  readonly #defaults: Required<DrainOptions>
  readonly #unlisten: () => void
  readonly #pokes = new Set<() => void>()
  #poked = false
  #state: 'new' | 'starting' | 'started' | 'closed' = 'new'
  #draining = false
  /** Set once the runner has stopped: the error a drain waiting then rejects with. */
  #stoppedWith: unknown
  #closing: Promise<void> | undefined

  constructor(
    runner: Runner<D>,
    driver: KitDriver<D>,
    clock: TestClock,
    database: TestKitDatabase<D>,
    path: string | null,
    own: Own | undefined,
    thrown: Map<string, unknown[]>,
    defaults: Required<DrainOptions>,
  ) {
    this.runner = runner
    this.clock = clock
    this.database = database
    this.path = path
    this.#driver = driver
    this.#own = own
    this.#thrown = thrown
    this.#defaults = defaults
    driver.changed = () => this.#poke()
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
    if (started.size === 0) return []
    const byId = new Map((await this.#list({})).map((j) => [j.id, j]))
    return [...started].map((id) => {
      const job = byId.get(id)
      // Deleted since it started (the test turned retention on): as job(id) would.
      if (job === undefined) throw new JobNotFoundError()
      return job
    })
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
      const moves = this.#driver.claimMoves
      const { queued, running, runnable, release } = await this.#activity()
      // The counts were read while claims may have been moving jobs: they say nothing is running only if no claim moved one meanwhile.
      const quiet = this.#driver.claimsInFlight === 0 && this.#driver.claimMoves === moves
      const queuedCount = Object.values(queued).reduce((a, b) => a + b, 0)
      if (queuedCount === 0 && running === 0 && quiet) {
        const due = earliest(await this.#nextDue(runnable), release)
        if (due === null) return
        if (due > this.clock.now()) {
          if (!advance) return
          this.clock.set(due)
          continue
        }
        // Due already, yet still scheduled: its promotion was refused for now (another connection's write), or the database's
        // clock has not reached it (see DrainTimeoutError). Wait, as for any other change.
      } else if (queuedCount > 0) {
        if (this.#driver.budget === 0 && running === 0 && quiet) throw new DrainLimitError(maxJobs, queued, ran)
        this.runner.wake()
      }
      const left = deadline - performance.now()
      if (left <= 0 || !(await this.#change(left))) {
        const now = await this.#activity()
        const scheduledDue = (await this.#list({ status: 'scheduled' })).filter((j) => now.runnable.has(j.kind) && j.runAt !== null && j.runAt <= this.clock.now()).length
        throw new DrainTimeoutError(timeoutMs, await this.#runningJobs(), now.queued, scheduledDue)
      }
    }
  }

  /** Makes the due scheduled jobs queued; a write refused for now (the application's transaction) is tried again at the next look. */
  async #promoteDue(): Promise<void> {
    try {
      while ((await this.#driver.driver.jobPromoteDue({ now: this.clock.now(), limit: PROMOTE_BATCH })) === PROMOTE_BATCH);
    } catch (err) {
      if (!(err instanceof DatabaseError && err.transient)) throw err
    }
  }

  /**
   * The queued jobs a drain of this kit runs, by kind (those of kinds it
   * has handlers for and that are not paused: the kinds it may claim,
   * less those a cooldown or a full rate bucket holds back), how many
   * jobs run, those kinds, and when the first held job may start (null
   * when none is held).
   */
  async #activity(): Promise<{ queued: Record<string, number>; running: number; runnable: ReadonlySet<string>; release: number | null }> {
    const [counts, paused, cooldowns, limits] = await Promise.all([this.runner.counts(), this.runner.paused(), this.runner.cooldowns(), this.runner.rateLimits()])
    const pausedKinds = new Set(paused.map((p) => p.kind))
    const runnable = new Set(
      this.runner
        .kinds()
        .filter((k) => k.handled && !pausedKinds.has(k.name))
        .map((k) => k.name),
    )
    const queued: Record<string, number> = {}
    let running = 0
    for (const { kind, status, count } of counts) {
      if (status === 'running') running += count
      else if (status === 'queued' && runnable.has(kind)) queued[kind] = count
    }
    let release: number | null = null
    if (cooldowns.length > 0 || limits.length > 0) {
      const hold = new Holds(this.clock.now(), cooldowns, limits)
      for (const kind of Object.keys(queued)) {
        const held = await hold.kind(kind, queued[kind]!, () => this.#list({ kind, status: 'queued' }))
        if (held.count === 0) continue
        release = earliest(release, held.release)
        queued[kind] = queued[kind]! - held.count
        if (queued[kind] <= 0) delete queued[kind]
      }
    }
    return { queued, running, runnable, release }
  }

  /** The earliest due time of a scheduled job of a kind in `kinds`, or null. */
  async #nextDue(kinds: ReadonlySet<string>): Promise<number | null> {
    let next: number | null = null
    for (const { kind, runAt } of await this.#list({ status: 'scheduled' })) {
      if (kinds.has(kind) && runAt !== null && (next === null || runAt < next)) next = runAt
    }
    return next
  }

  /** The running jobs, in insertion order. */
  async #runningJobs(): Promise<RunningJob[]> {
    return (await this.#list({ status: 'running' })).map(({ id, kind }) => ({ id, kind }))
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

  /** Every job the filter names, read through the runner page by page, in insertion order, with what the kit knows of its payload and scope. */
  async #list(filter: Pick<ListOptions, 'kind' | 'status' | 'scope'>): Promise<TestJob[]> {
    const jobs: Job[] = []
    let cursor: string | undefined
    do {
      const page = await this.runner.list({ ...filter, limit: PAGE, ...(cursor === undefined ? {} : { cursor }) })
      jobs.push(...page.jobs)
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    // runner.list reads newest first.
    return jobs.reverse().map((j) => this.#testJob(j))
  }

  #testJob(job: Job): TestJob {
    const stored = this.#driver.stored.get(job.id)
    return { ...job, payload: stored === undefined ? undefined : (JSON.parse(stored.payload) as JsonValue), scope: stored?.scope }
  }

  thrown(id: string): unknown[] {
    if (typeof id !== 'string') throw new InvalidArgumentError('thrown: id must be a string')
    return [...(this.#thrown.get(id) ?? [])]
  }

  async job(id: string): Promise<TestJob> {
    if (typeof id !== 'string') throw new InvalidArgumentError('job: id must be a string')
    return this.#testJob(await this.runner.get(id))
  }

  async jobs(filter?: JobsFilter): Promise<TestJob[]> {
    const { kind, status, scope } = optionsObject(filter, JOBS_KEYS, 'jobs', 'argument')
    const statuses = statusesOf(status, 'jobs')
    if (scope !== undefined && scope !== null && typeof scope !== 'string') throw new InvalidArgumentError('jobs: scope must be a string or null')
    const jobs = await this.#list({ ...(kind === undefined ? {} : { kind: kindName(kind, 'jobs') }), ...(scope === undefined ? {} : { scope }) })
    return jobs.filter((j) => statuses === undefined || statuses.includes(j.status))
  }

  async enqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): Promise<TestJob[]> {
    return (await this.#search('enqueued', kind, payload, optionsObject(options, ENQUEUED_KEYS, 'enqueued', 'argument'))).found
  }

  async assertEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: AssertEnqueuedOptions): Promise<TestJob> {
    const { count, ...rest } = optionsObject(options, ASSERT_KEYS, 'assertEnqueued', 'argument')
    if (count !== undefined && !(Number.isSafeInteger(count) && count >= 1)) throw new InvalidArgumentError('assertEnqueued: count must be an integer >= 1 (assertNotEnqueued asserts none)')
    const search = await this.#search('assertEnqueued', kind, payload, rest)
    if (search.found.length > 0 && (count === undefined || search.found.length === count)) return search.found[0]!
    const wanted = `${count === undefined ? 'a job' : `exactly ${count} job${count === 1 ? '' : 's'}`} ${search.wanted}`
    let message: string
    if (search.ofKind.length === 0) {
      const kinds = countBy((await this.#list({})).map((j) => j.kind))
      message = `expected ${wanted} to have been enqueued, but no job of kind ${JSON.stringify(search.name)} was; ${kinds === '' ? 'no job was enqueued at all' : `jobs enqueued: ${kinds}`}`
    } else if (search.found.length === 0) {
      message = `expected ${wanted} to have been enqueued, but none of the ${plural(search.ofKind.length, 'job')} of that kind matches:\n${listing(search.ofKind)}`
    } else {
      message = `expected ${wanted} to have been enqueued, but ${search.found.length} match:\n${listing(search.found)}`
    }
    throw new AssertionError({ message, operator: 'assertEnqueued' })
  }

  async assertNotEnqueued<R extends KindRef>(kind: R, payload?: PayloadMatch<PayloadOf<R>>, options?: EnqueuedOptions): Promise<void> {
    const search = await this.#search('assertNotEnqueued', kind, payload, optionsObject(options, ENQUEUED_KEYS, 'assertNotEnqueued', 'argument'))
    if (search.found.length === 0) return
    const message = `expected no job ${search.wanted} to have been enqueued, but ${plural(search.found.length, 'job')} match:\n${listing(search.found)}`
    throw new AssertionError({ message, operator: 'assertNotEnqueued' })
  }

  /** The jobs of a kind, those of them that match, and the words for what was looked for. */
  async #search(where: string, kind: KindRef, payload: unknown, options: EnqueuedOptions): Promise<{ name: string; ofKind: TestJob[]; found: TestJob[]; wanted: string }> {
    const name = kindName(kind, where)
    const expected = payload === undefined ? undefined : jsonOf(payload, where)
    const statuses = statusesOf(options.status, where)
    const { scope, priority } = options
    if (scope !== undefined && scope !== null && typeof scope !== 'string') throw new InvalidArgumentError(`${where}: scope must be a string or null`)
    if (priority !== undefined && !Number.isSafeInteger(priority)) throw new InvalidArgumentError(`${where}: priority must be an integer`)
    const runAt = options.runAt === undefined || options.runAt === null ? options.runAt : options.runAt instanceof Date ? options.runAt.getTime() : options.runAt
    if (runAt !== undefined && runAt !== null && !Number.isFinite(runAt)) throw new InvalidArgumentError(`${where}: runAt must be a valid Date, epoch milliseconds or null`)
    const ofKind = await this.#list({ kind: name })
    const found = ofKind.filter(
      (j) =>
        (statuses === undefined || statuses.includes(j.status)) &&
        (scope === undefined || j.scope === scope) &&
        (priority === undefined || j.priority === priority) &&
        (runAt === undefined || j.runAt === runAt) &&
        (expected === undefined || (j.payload !== undefined && matches(j.payload, expected))),
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
      // Stops the runner and closes the driver.
      await this.runner.close()
    } finally {
      if (this.#own !== undefined) {
        this.#own.database.close()
        if (this.#own.dir !== null) rmSync(this.#own.dir, { recursive: true, force: true })
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }
}

/**
 * What rate limits and cooldowns hold back at `now`, read as an operator
 * reads them (runner.cooldowns, runner.rateLimits): a job whose bucket
 * (rateBucket) cools down or has no room in its window does not start
 * until the later of the cooldown's end and the window's reopening.
 */
class Holds {
  readonly #now: number
  readonly #cooling: ReadonlyMap<string, number>
  readonly #limits: readonly RateLimitState[]

  constructor(now: number, cooldowns: readonly Cooldown[], limits: readonly RateLimitState[]) {
    this.#now = now
    this.#cooling = new Map(cooldowns.map((c) => [c.key, c.until]))
    this.#limits = limits
  }

  /**
   * How many of `kind`'s `queued` jobs are held and when the first may
   * start. A per-scope limit reads the jobs (`queuedJobs`) to know their
   * scopes; a job whose scope the kit does not know (stored through
   * another connection) counts as not held.
   */
  async kind(kind: string, queued: number, queuedJobs: () => Promise<TestJob[]>): Promise<{ count: number; release: number | null }> {
    const state = this.#limits.find((l) => l.kinds.includes(kind))
    if (state === undefined || !state.perScope) {
      const key = state?.key ?? kind
      const at = this.#release(key, state, state === undefined ? undefined : { used: state.used, resetAt: state.resetAt })
      return at === null ? { count: 0, release: null } : { count: queued, release: at }
    }
    const prefix = `${kind}@`
    const full = state.scopes?.some((s) => s.used >= state.limit) ?? false
    if (!full && ![...this.#cooling.keys()].some((k) => k.startsWith(prefix))) return { count: 0, release: null }
    let count = 0
    let release: number | null = null
    for (const job of await queuedJobs()) {
      if (job.scope === undefined) continue
      const scope = job.scope ?? ''
      const use = state.scopes?.find((s) => s.scope === scope)
      const at = this.#release(`${prefix}${scope}`, state, use)
      if (at === null) continue
      count++
      release = earliest(release, at)
    }
    return { count, release }
  }

  /** When a job of bucket `key` may start, or null when it may now. */
  #release(key: string, state: RateLimitState | undefined, use: { used: number; resetAt: number | null } | undefined): number | null {
    let at: number | null = null
    const until = this.#cooling.get(key)
    if (until !== undefined && until > this.#now) at = until
    // The window counts claims after now - periodMs: the oldest leaves it at resetAt.
    if (state !== undefined && use !== undefined && use.used >= state.limit && use.resetAt !== null) at = Math.max(at ?? Number.NEGATIVE_INFINITY, Math.max(use.resetAt, this.#now + 1))
    return at
  }
}

function earliest(a: number | null, b: number | null): number | null {
  if (a === null) return b
  return b === null ? a : Math.min(a, b)
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

/** One line per job, at most LISTED of them: the user's own test data, shown to the test that made it. */
function listing(jobs: readonly TestJob[]): string {
  const lines = jobs.slice(0, LISTED).map((j) => {
    const extra = [j.scope === null || j.scope === undefined ? '' : ` scope ${JSON.stringify(j.scope)}`, j.priority === 0 ? '' : ` priority ${j.priority}`, j.runAt === null ? '' : ` runAt ${new Date(j.runAt).toISOString()}`].join('')
    return `  - ${j.status} ${j.id}${extra}: ${j.payload === undefined ? '(payload unknown: stored through another connection)' : JSON.stringify(j.payload)}`
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
