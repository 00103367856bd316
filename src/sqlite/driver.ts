import Database from 'better-sqlite3'
import type {
  ClaimedJob,
  Cooldown,
  JobActivity,
  JobCount,
  QueueNowResult,
  ClaimParams,
  Driver,
  DriverCapabilities,
  FinishAndClaimParams,
  FinishAndClaimResult,
  JobFinish,
  JobListParams,
  KindRule,
  JobRow,
  NewJob,
  InsertResult,
  QueueCount,
  RateRule,
  RateUse,
  ScheduleAdvance,
} from '../driver.js'
import { sendsBack } from '../driver.js'
import { FullBuckets, ledgerKeepMs, pickWithinRates, type RateCandidate } from '../rate-limit.js'
import { idPrefixAfter } from '../id.js'
import { ConfigError, DatabaseError } from '../errors.js'
import type { TerminalStatus } from '../job.js'
import { checkKeys } from '../options.js'
import type { SqliteDatabase } from './database.js'
import { openSchema } from './migrations.js'
import { migrateMode, type MigrateMode } from '../schema-window.js'
import * as sql from './queries.js'
import { RunnerLocks } from './runner-locks.js'
import { CountsCache } from '../counts-cache.js'
import { CountWorker, CountWorkerError } from './count-worker.js'

/** Options of the SQLite driver. Give `path` or `database`, not both. */
export interface SqliteOptions {
  /** The database file; created when missing. */
  readonly path?: string
  /**
   * The application's own better-sqlite3 database, so jobs live in its file
   * and can be enqueued in its transactions (`enqueueTx`, the only write
   * jobtable makes through it). Everything else jobtable writes (claims,
   * results, final writes) goes through a connection of its own on the
   * same file, so it never joins a transaction the application holds open
   * across an await. jobtable switches the file to WAL and leaves the
   * handle open on close. A database in memory has no file to open a
   * second connection on: jobtable then writes through the handle, and
   * waits (retrying, as for a busy lock) while it is in a transaction.
   */
  readonly database?: SqliteDatabase
  /**
   * `normal` (default for a file jobtable opens): in WAL mode, an
   * acknowledged enqueue survives a killed process but may be lost with
   * the last transactions if the machine itself loses power. `full`: it
   * survives power loss too, at the cost of an fsync per commit. A
   * database handed in keeps its own setting unless this is given.
   */
  readonly synchronous?: 'normal' | 'full'
  /**
   * How long a statement waits for another connection's write lock before
   * failing with SQLITE_BUSY, which the runner retries with backoff.
   * Default 20 ms: better-sqlite3 waits synchronously, blocking the event
   * loop, so a long wait would stall every handler in the process.
   */
  readonly busyTimeoutMs?: number
  /**
   * How long a write a caller waits for (an enqueue, `enqueueMany`,
   * `cancel`, `retry`, `pause`, `resume`) keeps trying again while another
   * connection holds the file's write lock, before it rejects with the
   * transient DatabaseError `SQLITE_BUSY` (or `SQLITE_BUSY_*`), counted
   * from its first refusal. Default 5000 ms; 0 tries once, as jobtable did
   * before. Each try blocks the event loop for at most `busyTimeoutMs`;
   * between tries the process goes on with its other work (a timer, with
   * a jittered backoff of a few to 100 ms). A busy write stored nothing,
   * so a job is stored once however many tries it takes. An uncontended
   * write pays nothing for this. The runner's own writes (claims, final
   * writes, maintenance, retention) keep their own retries with backoff.
   */
  readonly busyRetryMs?: number
  /**
   * How often a runner looks for the running jobs of runners on this file
   * that are gone (a process killed beside it) and fails them as
   * interrupted. Default 5000 ms. A starting runner does so at once.
   */
  readonly sweepIntervalMs?: number
  /**
   * How often an idle runner checks whether another process committed to
   * the file (PRAGMA data_version, which reads no table), and looks for
   * queued jobs when one did: a job enqueued by another process sharing
   * the file starts within this. Enqueues in this process wake at once.
   * Default 1000 ms.
   */
  readonly pollIntervalMs?: number
  /**
   * What opening does with the schema (see MigrateMode): `auto` (default)
   * applies missing migrations; `verify` applies none and refuses a schema
   * that is behind this jobtable or outside its window, for a team whose
   * own migration tool applies `jobtable migrate --sql`; `off` trusts it.
   */
  readonly migrate?: MigrateMode
}

const SYNCHRONOUS = { normal: 'NORMAL', full: 'FULL' } as const

/** A limit that never binds, for a kind limited in one way only. */
const UNLIMITED = 2 ** 31 - 1

/**
 * SQLite error codes that can clear by themselves: another connection's
 * lock, a full disk, a passing I/O error. Anything else (a corrupt file, a
 * read-only database, a constraint, a value too big) will fail again.
 */
const TRANSIENT = /^SQLITE_(BUSY|LOCKED|IOERR|FULL|NOMEM|PROTOCOL|INTERRUPT)/

/** The first wait, in ms, between the tries of a caller's write refused as busy (see busyRetryMs); it doubles up to BUSY_RETRY_MAX_MS. */
const BUSY_RETRY_FIRST_MS = 4
const BUSY_RETRY_MAX_MS = 100

/** Another connection's lock, or the application's transaction on a shared handle in memory: the write stored nothing and may be tried again. */
function isBusy(err: unknown): boolean {
  return err instanceof DatabaseError && err.dbCode.startsWith('SQLITE_BUSY')
}

/**
 * Makes the SQLite driver: one writing connection and one reading
 * connection in WAL mode, so reads never wait for a write. Opening applies
 * any missing migrations and refuses a database made by a newer jobtable.
 */
export function sqlite(options: SqliteOptions): SqliteDriver {
  return new SqliteDriver(options)
}

/** The embedded default driver, over better-sqlite3. */
export class SqliteDriver implements Driver<SqliteDatabase, true> {
  readonly name = 'sqlite'
  readonly capabilities: DriverCapabilities<true>
  readonly #writer: Database.Database
  readonly #reader: Database.Database
  readonly #ownsWriter: boolean
  /** The application's handle, when one was handed in. */
  readonly #app: Database.Database | undefined
  /** Set when jobtable writes through the application's handle (a database in memory): no write while it is in a transaction. */
  readonly #sharesApp: boolean
  readonly #insert: Database.Statement
  /** claimJobs statements by their arms, and each kinds array's statement and parameters, made once. */
  readonly #claims = new Map<string, Database.Statement>()
  readonly #claimPlans = new WeakMap<readonly string[], ClaimPlan>()
  /** The rated buckets known to have no room, until when (src/rate-limit.ts). */
  readonly #full = new FullBuckets()
  /** Statements prepared at their first use, by their text (see #on). */
  readonly #writerStatements = new Map<string, Database.Statement>()
  readonly #readerStatements = new Map<string, Database.Statement>()
  readonly #claimRatedTx: (plan: ClaimPlan, open: readonly RatedKind[], limit: number, runnerId: string, now: number) => ClaimedJob[]
  readonly #publish: Database.Statement
  readonly #finish: Database.Statement
  readonly #failInterrupted: Database.Statement
  readonly #requeueInterrupted: Database.Statement
  readonly #retry: Database.Statement
  readonly #registerRunner: Database.Statement
  readonly #heartbeatRunner: Database.Statement
  readonly #deleteRunner: Database.Statement
  readonly #otherRunners: Database.Statement
  readonly #runnersWithKinds: Database.Statement
  readonly #requeueLost: Database.Statement
  readonly #unservedKinds: Database.Statement
  readonly #failUnserved: Database.Statement
  readonly #promoteDue: Database.Statement
  readonly #cancelWaiting: Database.Statement
  readonly #requestCancel: Database.Statement
  readonly #cancelRequested: Database.Statement
  readonly #queueNow: Database.Statement
  readonly #countJobs: Database.Statement
  readonly #countScopedJobs: Database.Statement
  readonly #countJobsUpTo: Database.Statement
  readonly #countScopedJobsUpTo: Database.Statement
  /** Big counts, read on a thread of their own; undefined for a database in memory, which no other connection can open. */
  readonly #countWorker: CountWorker | undefined
  readonly #counts: CountsCache
  readonly #nextDue: Database.Statement
  readonly #prune: Database.Statement
  readonly #finishedKinds: Database.Statement
  readonly #queueCounts: Database.Statement
  readonly #sweep: (gone: readonly string[], runnerId: string, error: string, now: number) => { failed: number; requeued: number }
  readonly #locks: RunnerLocks
  readonly #get: Database.Statement
  readonly #getScoped: Database.Statement
  readonly #list: Database.Statement
  /** insertJobs statements by row count, up to INSERT_ROWS_MAX of them. */
  readonly #insertRows = new Map<number, Database.Statement>()
  /** The writer's count of its own changes, for changeToken; prepared at first use. */
  #totalChanges: Database.Statement | undefined
  /** The insert statements prepared on each connection jobs are inserted through (jobtable's writer, and the handles of enqueueTx). */
  readonly #insertOnTx = new WeakMap<SqliteDatabase, InsertStatements>()
  readonly #insertMany: (jobs: readonly NewJob[], now: number) => void
  /** A batch with unique keys or fair jobs: one job at a time, in one transaction. */
  readonly #insertManyEach: (jobs: readonly NewJob[], now: number) => (string | null)[]
  /** A schedule's move to a later tick and that tick's jobs, in one transaction. */
  readonly #advanceSchedule: (name: string, tickAt: number, jobs: readonly NewJob[], now: number) => ScheduleAdvance
  readonly #releaseMany: (jobs: readonly { id: string; attempt: number }[], now: number) => void
  readonly #finishMany: (finishes: readonly JobFinish[], now: number) => boolean[]
  readonly #finishManyAndClaim: (
    finishes: readonly JobFinish[],
    now: number,
    limit: number,
    runnerId: string,
    kinds: readonly string[],
    limits?: ClaimParams['limits'],
  ) => FinishAndClaimResult
  /** See SqliteOptions.busyRetryMs. */
  readonly #busyRetryMs: number
  #closed = false

  constructor(options: SqliteOptions) {
    if (options === null || typeof options !== 'object') throw new ConfigError('sqlite: options are required')
    checkKeys(options, Object.keys({ path: 1, database: 1, synchronous: 1, busyTimeoutMs: 1, busyRetryMs: 1, sweepIntervalMs: 1, pollIntervalMs: 1, migrate: 1 } satisfies Record<keyof SqliteOptions, 1>), 'sqlite')
    const { path, database, synchronous, busyTimeoutMs = 20, busyRetryMs = 5_000, sweepIntervalMs = 5_000, pollIntervalMs = 1_000 } = options
    const schemaMode = migrateMode('sqlite', options.migrate)
    if ((path === undefined) === (database === undefined)) {
      throw new ConfigError('sqlite: give either path (a database file) or database (a better-sqlite3 Database)')
    }
    if (path !== undefined && (typeof path !== 'string' || path === '')) throw new ConfigError('sqlite: path must be a non-empty string')
    if (database !== undefined && !(database instanceof Database)) throw new ConfigError('sqlite: database must be a better-sqlite3 Database')
    if (synchronous !== undefined && !(synchronous in SYNCHRONOUS)) throw new ConfigError("sqlite: synchronous must be 'normal' or 'full'")
    if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) throw new ConfigError('sqlite: busyTimeoutMs must be an integer >= 0')
    if (!Number.isInteger(busyRetryMs) || busyRetryMs < 0) throw new ConfigError('sqlite: busyRetryMs must be an integer >= 0')
    this.#busyRetryMs = busyRetryMs
    if (!Number.isInteger(sweepIntervalMs) || sweepIntervalMs < 1) throw new ConfigError('sqlite: sweepIntervalMs must be an integer >= 1')
    if (!Number.isInteger(pollIntervalMs) || pollIntervalMs < 1) throw new ConfigError('sqlite: pollIntervalMs must be an integer >= 1')
    // An OS lock proves a runner alive or gone (RunnerLocks): no heartbeat.
    this.capabilities = { txSync: true, liveness: { heartbeatMs: null, sweepMs: sweepIntervalMs }, pollMs: pollIntervalMs }

    const app = database as Database.Database | undefined
    this.#app = app
    this.#sharesApp = app !== undefined && app.memory
    this.#ownsWriter = !this.#sharesApp
    this.#writer = this.#sharesApp ? app! : new Database(app?.name ?? (path as string))
    try {
      this.#writer.pragma('journal_mode = WAL')
      // A database handed in keeps its own durability: jobtable's connection takes the handle's setting unless told otherwise.
      const inherited = app !== undefined && synchronous === undefined ? (app.pragma('synchronous', { simple: true }) as number) : undefined
      if (inherited !== undefined) this.#writer.pragma(`synchronous = ${inherited}`)
      else if (synchronous !== undefined || app === undefined) this.#writer.pragma(`synchronous = ${SYNCHRONOUS[synchronous ?? 'normal']}`)
      // Migrating may wait for another process's migration: give it longer than a statement.
      this.#writer.pragma('busy_timeout = 5000')
      openSchema(this.#writer, schemaMode)
      this.#writer.pragma(`busy_timeout = ${busyTimeoutMs}`)
      this.#reader = this.#writer.memory ? this.#writer : new Database(this.#writer.name, { readonly: true, fileMustExist: true })
      this.#reader.pragma(`busy_timeout = ${busyTimeoutMs}`)
    } catch (err) {
      if (this.#ownsWriter) this.#writer.close()
      throw err
    }
    // The application's synchronous setting, if it asked for one, applies to its handle too.
    if (app !== undefined && synchronous !== undefined && !this.#sharesApp) app.pragma(`synchronous = ${SYNCHRONOUS[synchronous]}`)
    this.#insert = this.#writer.prepare(sql.insertJob)
    this.#publish = this.#writer.prepare(sql.publishResult)
    this.#finish = this.#writer.prepare(sql.finishJob)
    this.#failInterrupted = this.#writer.prepare(sql.failInterrupted)
    this.#requeueInterrupted = this.#writer.prepare(sql.requeueInterrupted)
    this.#retry = this.#writer.prepare(sql.retryJob)
    this.#registerRunner = this.#writer.prepare(sql.registerRunner)
    this.#heartbeatRunner = this.#writer.prepare(sql.heartbeatRunner)
    this.#deleteRunner = this.#writer.prepare(sql.deleteRunner)
    this.#otherRunners = this.#reader.prepare(sql.otherRunners)
    this.#runnersWithKinds = this.#reader.prepare(sql.runnersWithKinds)
    this.#requeueLost = this.#writer.prepare(sql.requeueLost)
    this.#unservedKinds = this.#reader.prepare(sql.unservedKinds)
    this.#failUnserved = this.#writer.prepare(sql.failUnserved)
    this.#promoteDue = this.#writer.prepare(sql.promoteDue)
    this.#cancelWaiting = this.#writer.prepare(sql.cancelWaiting)
    this.#requestCancel = this.#writer.prepare(sql.requestCancel)
    this.#cancelRequested = this.#writer.prepare(sql.cancelRequested)
    this.#queueNow = this.#writer.prepare(sql.queueNow)
    this.#nextDue = this.#reader.prepare(sql.nextDue)
    this.#prune = this.#writer.prepare(sql.pruneJobs)
    this.#finishedKinds = this.#reader.prepare(sql.finishedKinds)
    this.#queueCounts = this.#reader.prepare(sql.queueCounts)
    this.#locks = new RunnerLocks(this.#writer.memory ? null : this.#writer.name)
    this.#sweep = this.#writer.transaction((gone: readonly string[], runnerId: string, error: string, now: number) => {
      for (const id of gone) this.#deleteRunner.run({ runnerId: id })
      const requeued = this.#requeueInterrupted.run({ runnerId, now }).changes
      return { failed: this.#failInterrupted.run({ runnerId, error, now }).changes, requeued }
    }).immediate
    this.#get = this.#reader.prepare(sql.getJob)
    this.#getScoped = this.#reader.prepare(sql.getScopedJob)
    this.#list = this.#reader.prepare(sql.listJobs)
    this.#countJobs = this.#reader.prepare(sql.countJobs)
    this.#countScopedJobs = this.#reader.prepare(sql.countScopedJobs)
    this.#countJobsUpTo = this.#reader.prepare(sql.countJobsUpTo).pluck()
    this.#countScopedJobsUpTo = this.#reader.prepare(sql.countScopedJobsUpTo).pluck()
    this.#countWorker = this.#writer.memory ? undefined : new CountWorker(this.#writer.name, 1_000)
    this.#counts = new CountsCache({
      size: (scope, limit) =>
        run('count jobs', () => (scope === undefined ? this.#countJobsUpTo.get({ limit }) : this.#countScopedJobsUpTo.get({ scope, limit })) as number),
      exact: (scope) => this.#countNow(scope),
      snapshot: (scope) => this.#countOffLoop(scope),
    })
    const onWriter = new InsertStatements(this.#writer, this.#insert)
    this.#insertOnTx.set(this.#writer, onWriter)
    this.#insertMany = this.#writer.transaction((jobs: readonly NewJob[], now: number) => {
      for (let i = 0; i < jobs.length; i += sql.INSERT_ROWS_MAX) this.#insertChunk(jobs, i, Math.min(jobs.length, i + sql.INSERT_ROWS_MAX), now)
    }).immediate
    this.#insertManyEach = this.#writer.transaction((jobs: readonly NewJob[], now: number) => this.#insertEach(onWriter, jobs, now)).immediate
    const advance = this.#writer.prepare(sql.advanceSchedule)
    this.#advanceSchedule = this.#writer.transaction((name: string, tickAt: number, jobs: readonly NewJob[], now: number): ScheduleAdvance => {
      if (advance.get({ name, tick: tickAt, now }) === undefined) return { advanced: false, stored: 0 }
      // insertEach answers null for each job it stored, a holder's id for each a live job's unique key refused.
      return { advanced: true, stored: this.#insertEach(onWriter, jobs, now).filter((holder) => holder === null).length }
    }).immediate
    const release = this.#writer.prepare(sql.releaseJob)
    this.#releaseMany = this.#writer.transaction((jobs: readonly { id: string; attempt: number }[], now: number) => {
      for (const job of jobs) release.run({ id: job.id, attempt: job.attempt, now })
    }).immediate
    this.#finishMany = this.#writer.transaction((finishes: readonly JobFinish[], now: number) => this.#finishEach(finishes, now)).immediate
    this.#finishManyAndClaim = this.#writer.transaction(
      (finishes: readonly JobFinish[], now: number, limit: number, runnerId: string, kinds: readonly string[], limits?: ClaimParams['limits']) => ({
        applied: this.#finishEach(finishes, now),
        claimed: this.#claimRows(limit, runnerId, kinds, limits, now, true),
      }),
    ).immediate
    this.#claimRatedTx = this.#writer.transaction((plan: ClaimPlan, open: readonly RatedKind[], limit: number, runnerId: string, now: number) =>
      this.#claimRated(plan, open, limit, runnerId, now),
    ).immediate
  }

  // Named parameters spelled out rather than spread: this runs once per job on the hot path.
  #insertOne(statement: Database.Statement, job: NewJob, now: number): void {
    statement.run({
      id: job.id,
      kind: job.kind,
      payload: job.payload,
      scope: job.scope,
      now,
      priority: job.priority,
      runAt: job.runAt,
      maxAttempts: job.maxAttempts,
      timeoutMs: job.timeoutMs,
      requeueInterrupted: job.requeueInterrupted ? 1 : 0,
      traceContext: job.traceContext ?? null,
    })
  }

  /** Inserts jobs[from..to) with one statement, prepared once per row count. */
  #insertChunk(jobs: readonly NewJob[], from: number, to: number, now: number): void {
    const rows = to - from
    let statement = this.#insertRows.get(rows)
    if (statement === undefined) {
      statement = this.#writer.prepare(sql.insertJobs(rows))
      this.#insertRows.set(rows, statement)
    }
    const values: unknown[] = new Array(rows * 14)
    for (let i = from, v = 0; i < to; i++) {
      const job = jobs[i]!
      values[v++] = job.id
      values[v++] = job.kind
      values[v++] = job.payload
      values[v++] = job.scope
      values[v++] = now
      values[v++] = now
      values[v++] = job.priority
      values[v++] = job.runAt
      values[v++] = job.runAt
      values[v++] = now
      values[v++] = job.maxAttempts
      values[v++] = job.timeoutMs
      values[v++] = job.requeueInterrupted ? 1 : 0
      values[v++] = job.traceContext ?? null
    }
    statement.run(values)
  }

  #finishEach(finishes: readonly JobFinish[], now: number): boolean[] {
    return finishes.map((f) => {
      const applied =
        (sendsBack(f)
          ? this.#retry.run({ id: f.id, attempt: f.attempt, result: f.result, runAt: f.runAt, grant: f.status === 'snoozed' ? 1 : 0, now })
          : this.#finish.run({ id: f.id, attempt: f.attempt, status: f.status, result: f.result, error: f.error, now })
        ).changes === 1
      // Whatever status the write ended with (a cancel request wins over the snooze): the provider's reset holds for the others.
      if (applied && f.cooldown !== undefined && f.cooldown !== null) {
        this.#on(this.#writer, sql.upsertCooldown).run({ key: f.cooldown.key, until: f.cooldown.until, now })
      }
      return applied
    })
  }

  /**
   * Claims for the runner's kinds. Kinds without a rate rule take one
   * statement (sql.claimJobs), made once per kinds array: the producer
   * passes the same array, and the same limits, with every claim. Rated
   * kinds not known full add the rated path (#claimRated), in a
   * transaction of its own unless `inTx` (the caller's one); while every
   * rated kind is known full, the others' statement runs alone.
   */
  #claimRows(limit: number, runnerId: string, kinds: readonly string[], limits: ClaimParams['limits'], now: number, inTx: boolean): ClaimedJob[] {
    const plan = this.#planOf(kinds, limits)
    if (plan.rated.length === 0) return this.#claimPlain(plan.plain!, limit, runnerId, now)
    const open = this.#full.open(plan.rated, now)
    if (open.length === 0) return plan.plain === undefined ? [] : this.#claimPlain(plan.plain, limit, runnerId, now)
    return inTx ? this.#claimRated(plan, open, limit, runnerId, now) : this.#claimRatedTx(plan, open, limit, runnerId, now)
  }

  #planOf(kinds: readonly string[], limits: ClaimParams['limits']): ClaimPlan {
    const known = this.#claimPlans.get(kinds)
    // Kept per kinds array while its limits are the same object: a caller passing other limits with the same array gets a new plan.
    if (known !== undefined && known.limits === limits) return known
    const unrated: PlannedKind[] = []
    const rated: RatedKind[] = []
    for (const kind of kinds) {
      const rule = limits?.get(kind)
      const rate = rule?.rate
      if (rate !== undefined && rate !== null) rated.push({ kind, rule: rule!, arm: armOf(rule), rate })
      else unrated.push({ kind, rule, arm: armOf(rule) })
    }
    let plain: ClaimPlan['plain']
    if (unrated.length > 0) {
      const params: Record<string, unknown> = {}
      unrated.forEach((k, i) => armParams(params, i, k))
      plain = { statement: this.#claimStatement(unrated.map((k) => k.arm)), params }
    }
    const plan: ClaimPlan = { limits, plain, unrated, rated, ratedKinds: new Set(rated.map((r) => r.kind)) }
    this.#claimPlans.set(kinds, plan)
    return plan
  }

  /** sql.claimJobs for `arms`, prepared once per shape. */
  #claimStatement(arms: readonly sql.ClaimArm[]): Database.Statement {
    const shape = arms.map(sql.armShape).join(',')
    let statement = this.#claims.get(shape)
    if (statement === undefined) {
      statement = this.#writer.prepare(sql.claimJobs(arms))
      this.#claims.set(shape, statement)
    }
    return statement
  }

  /** The one statement of the kinds without a rate rule. */
  #claimPlain(plain: NonNullable<ClaimPlan['plain']>, limit: number, runnerId: string, now: number): ClaimedJob[] {
    const params = plain.params
    params.limit = limit
    params.runnerId = runnerId
    params.now = now
    return inSeqOrder(plain.statement.all(params) as ClaimedRow[])
  }

  /**
   * A claim with rated kinds, in one transaction (src/rate-limit.ts): for
   * the rated kinds whose bucket is not known full (`open`), reads each named
   * bucket's claims in its window and its cooldown (a bucket cooling or
   * spent leaves its kinds out), fetches the candidates of every kind
   * (per-scope buckets passed over in SQL when cooling or spent), picks
   * within the buckets' room and the claim's limit, marks the picks
   * running as claimJobs does, records one claim per rated pick and
   * deletes the bucket's records long past its window. SQLite serializes
   * writers: no claim of another process comes between the read and the
   * record, so no window ever holds more than its limit.
   */
  #claimRated(plan: ClaimPlan, open: readonly RatedKind[], limit: number, runnerId: string, now: number): ClaimedJob[] {
    const used = new Map<string, number>()
    const cooling = new Set<string>()
    const named = new Map<string, { used: number; oldest: number | null }>()
    const arms: (PlannedKind & { room?: number; since?: number; rlim?: number })[] = [...plan.unrated]
    for (const r of open) {
      const { bucket, limit: most, periodMs } = r.rate
      if (bucket === null) {
        for (const row of this.#on(this.#writer, sql.rateUseByScope).all({ kind: r.kind, since: now - periodMs + 1 }) as { bucket: string; used: number }[]) {
          used.set(row.bucket, row.used)
        }
        arms.push({ ...r, arm: { ...r.arm, rate: 'scope' }, since: now - periodMs + 1, rlim: most })
        continue
      }
      let use = named.get(bucket)
      if (use === undefined) {
        use = this.#on(this.#writer, sql.rateUse).get({ bucket, since: now - periodMs + 1 }) as { used: number; oldest: number | null }
        named.set(bucket, use)
        used.set(bucket, use.used)
        if (this.#on(this.#writer, sql.cooldownOf).get({ key: bucket, now }) !== undefined) cooling.add(bucket)
      }
      if (cooling.has(bucket)) continue
      if (use.used >= most) {
        this.#full.full(bucket, use.oldest! + periodMs)
        continue
      }
      arms.push({ ...r, arm: { ...r.arm, rate: 'named' }, room: most - use.used })
    }
    // No rated kind may take a job now: the others' one statement, as without rates.
    if (arms.length === plan.unrated.length) return plan.plain === undefined ? [] : this.#claimPlain(plan.plain, limit, runnerId, now)

    const params: Record<string, unknown> = { limit, now }
    arms.forEach((a, i) => {
      armParams(params, i, a)
      if (a.room !== undefined) params[`room${i}`] = a.room
      if (a.since !== undefined) {
        params[`since${i}`] = a.since
        params[`rlim${i}`] = a.rlim
      }
    })
    const shape = `candidates:${arms.map((a) => sql.armShape(a.arm)).join(',')}`
    let statement = this.#claims.get(shape)
    if (statement === undefined) {
      statement = this.#writer.prepare(sql.claimCandidates(arms.map((a) => a.arm)))
      this.#claims.set(shape, statement)
    }
    const candidates = statement.all(params) as RateCandidate<number>[]
    const picks = pickWithinRates({ candidates, rules: plan.limits!, used, cooling, limit })
    if (picks.length === 0) return []
    const rows = this.#on(this.#writer, sql.claimPicked).all({ seqs: JSON.stringify(picks.map((p) => p.seq)), runnerId, now }) as ClaimedRow[]

    const kindOf = new Map(candidates.map((c) => [c.seq, c.kind]))
    const starts: string[] = []
    const taken = new Map<string, number>()
    const prune = new Map<string, RatedKind>()
    for (const p of picks) {
      const kind = kindOf.get(p.seq)!
      if (!plan.ratedKinds.has(kind)) continue
      starts.push(p.bucket)
      taken.set(p.bucket, (taken.get(p.bucket) ?? 0) + 1)
      const r = plan.rated.find((x) => x.kind === kind)!
      prune.set(r.rate.bucket ?? `${kind}@*`, r)
    }
    if (starts.length > 0) this.#on(this.#writer, sql.recordStarts).run({ buckets: JSON.stringify(starts), now })
    for (const [name, r] of prune) {
      const before = now - ledgerKeepMs(r.rate.periodMs)
      if (r.rate.bucket === null) this.#on(this.#writer, sql.pruneStartsByScope).run({ kind: r.kind, before })
      else this.#on(this.#writer, sql.pruneStarts).run({ bucket: name, before })
    }
    // A named bucket left without room: its kinds stay out of claims until its oldest claim leaves the window.
    for (const [bucket, use] of named) {
      const took = taken.get(bucket) ?? 0
      const rate = plan.rated.find((x) => x.rate.bucket === bucket)!.rate
      if (took === 0 || use.used + took < rate.limit) continue
      this.#full.full(bucket, Math.min(use.oldest ?? now, now) + rate.periodMs)
    }
    return inSeqOrder(rows)
  }

  /** A statement on `db`, prepared at its first use and kept: the statements of rates, cooldowns and the admin reads. */
  #on(db: Database.Database, text: string): Database.Statement {
    const statements = db === this.#writer ? this.#writerStatements : this.#readerStatements
    let statement = statements.get(text)
    if (statement === undefined) {
      statement = db.prepare(text)
      statements.set(text, statement)
    }
    return statement
  }

  /** The database handed in, or else the writing connection jobtable opened. */
  get database(): SqliteDatabase {
    return this.#app ?? this.#writer
  }

  /**
   * Runs one of jobtable's own writes. Through a connection of jobtable's
   * own it is a plain statement; through the application's handle (a
   * database in memory) it waits while the application holds a
   * transaction open, failing as busy so the runner retries with backoff:
   * written inside that transaction, a rollback would undo it.
   */
  #write<T>(operation: string, fn: () => T): T {
    if (this.#sharesApp && this.#writer.inTransaction) throw new DatabaseError(operation, 'SQLITE_BUSY_APP_TRANSACTION', true)
    return run(operation, fn)
  }

  /**
   * Runs a write a caller waits for (see busyRetryMs): once, at once, as
   * #write does, and only when another connection's lock refused it,
   * again after a timer until the lock goes or busyRetryMs have passed.
   * The first try's answer is returned as it is: an uncontended write
   * makes no promise and sets no timer here.
   */
  #callerWrite<T>(operation: string, fn: () => T): T | Promise<T> {
    try {
      return this.#write(operation, fn)
    } catch (err) {
      if (this.#busyRetryMs === 0 || !isBusy(err)) throw err
      return this.#retryBusy(operation, fn, err)
    }
  }

  /**
   * The tries after a busy refusal: each blocks for at most busyTimeoutMs
   * (the connection's busy_timeout), and between them the event loop is
   * free for a jittered wait, BUSY_RETRY_FIRST_MS doubling up to
   * BUSY_RETRY_MAX_MS (random within its upper half, so processes that
   * collided do not try again in step). The last try is made at the
   * deadline; its refusal, the same transient DatabaseError the first try
   * gave, is the caller's. A busy refusal stored nothing (SQLite refuses
   * before the statement or the transaction writes), so trying again
   * never stores twice. A driver closed meanwhile fails the next try as
   * 'closed'.
   */
  async #retryBusy<T>(operation: string, fn: () => T, refusal: unknown): Promise<T> {
    const deadline = performance.now() + this.#busyRetryMs
    let wait = BUSY_RETRY_FIRST_MS
    for (;;) {
      const left = deadline - performance.now()
      if (left <= 0) throw refusal
      await new Promise((resolve) => setTimeout(resolve, Math.min(left, wait / 2 + Math.random() * (wait / 2))))
      wait = Math.min(2 * wait, BUSY_RETRY_MAX_MS)
      try {
        return this.#write(operation, fn)
      } catch (err) {
        if (!isBusy(err)) throw err
        refusal = err
      }
    }
  }

  async jobInsertMany({ jobs, now }: { jobs: readonly NewJob[]; now: number }): Promise<InsertResult> {
    if (insertsEach(jobs)) return this.#callerWrite('insert jobs', () => this.#insertManyEach(jobs, now))
    // A single statement is its own transaction: no BEGIN and COMMIT around a lone insert.
    if (jobs.length === 1) return this.#callerWrite('insert jobs', () => this.#insertOne(this.#insert, jobs[0]!, now))
    return this.#callerWrite('insert jobs', () => this.#insertMany(jobs, now))
  }

  jobInsertTx({ tx, jobs, now }: { tx: SqliteDatabase; jobs: readonly NewJob[]; now: number }): InsertResult {
    if (!(tx instanceof Database)) throw new ConfigError('sqlite: enqueueTx needs the better-sqlite3 Database the transaction runs on')
    let statements = this.#insertOnTx.get(tx)
    if (statements === undefined) {
      statements = new InsertStatements(tx as Database.Database, (tx as Database.Database).prepare(sql.insertJob))
      this.#insertOnTx.set(tx, statements)
    }
    const on = statements
    if (insertsEach(jobs)) return run('insert job', () => this.#insertEach(on, jobs, now))
    run('insert job', () => {
      for (const job of jobs) this.#insertOne(on.insert, job, now)
    })
  }

  /**
   * Inserts each job in turn on `on`'s connection, within the transaction
   * the caller holds: a job with a unique key through insertUniqueJob,
   * and when a live job holds the key, that job's id in the result; a
   * fair job with its position (insertFairJob), its lane moved past it
   * only when it was stored. SQLite serializes writers, so the holder
   * read in the same transaction is the job that refused the insert, and
   * no other insert of the lane comes between its read and its move.
   */
  #insertEach(on: InsertStatements, jobs: readonly NewJob[], now: number): (string | null)[] {
    return jobs.map((job) => {
      const unique = job.uniqueKey !== undefined && job.uniqueKey !== null
      if (!unique && job.fair !== true) {
        this.#insertOne(on.insert, job, now)
        return null
      }
      const params = {
        id: job.id,
        kind: job.kind,
        payload: job.payload,
        scope: job.scope,
        now,
        priority: job.priority,
        runAt: job.runAt,
        maxAttempts: job.maxAttempts,
        timeoutMs: job.timeoutMs,
        requeueInterrupted: job.requeueInterrupted ? 1 : 0,
        uniqueKey: unique ? job.uniqueKey : null,
        traceContext: job.traceContext ?? null,
      }
      if (job.fair === true) {
        const stored = on.fair.get(params) as { seq: number; pos: number } | undefined
        if (stored !== undefined) {
          on.lane.run({ kind: job.kind, scope: job.scope, pos: stored.pos, seq: stored.seq })
          return null
        }
      } else if (on.unique.run(params).changes === 1) return null
      const holder = unique ? (on.holder.get({ kind: job.kind, scope: job.scope, uniqueKey: job.uniqueKey }) as { id: string } | undefined) : undefined
      // Nothing stored and no holder: the id itself collided (74 random bits; never seen).
      if (holder === undefined) throw new DatabaseError('insert job', 'SQLITE_CONSTRAINT_PRIMARYKEY', false)
      return holder.id
    })
  }

  async jobClaim({ limit, runnerId, kinds, limits, now }: ClaimParams & { now: number }): Promise<ClaimedJob[]> {
    return this.#write('claim jobs', () => this.#claimRows(limit, runnerId, kinds, limits, now, false))
  }

  async jobRelease({ jobs, now }: { jobs: readonly { id: string; attempt: number }[]; now: number }): Promise<void> {
    this.#write('release jobs', () => this.#releaseMany(jobs, now))
  }

  async jobRequeueLost({ runnerId, keep, now }: { runnerId: string; keep: readonly string[]; now: number }): Promise<number> {
    return this.#write('requeue lost claims', () => this.#requeueLost.run({ runnerId, keep: JSON.stringify(keep), now }).changes)
  }

  async jobPublish({ id, attempt, result, now }: { id: string; attempt: number; result: string; now: number }): Promise<boolean> {
    return this.#write('publish result', () => this.#publish.run({ id, attempt, result, now }).changes === 1)
  }

  async jobFinishMany({ finishes, now }: { finishes: readonly JobFinish[]; now: number }): Promise<boolean[]> {
    return this.#write('finish jobs', () => this.#finishMany(finishes, now))
  }

  async jobFinishManyAndClaim({ finishes, now, claim }: FinishAndClaimParams): Promise<FinishAndClaimResult> {
    return this.#write('finish and claim jobs', () => this.#finishManyAndClaim(finishes, now, claim.limit, claim.runnerId, claim.kinds, claim.limits))
  }

  /** The kinds of the runners on this file whose lock proves them alive, as a JSON array. */
  #servedKinds(): string {
    return JSON.stringify(this.#liveRunnerKinds())
  }

  #liveRunnerKinds(): string[] {
    const served = new Set<string>()
    for (const row of this.#runnersWithKinds.all() as { id: string; kinds: string }[]) {
      if (!this.#locks.isAlive(row.id)) continue
      for (const kind of JSON.parse(row.kinds) as string[]) served.add(kind)
    }
    return [...served]
  }

  async runnerKinds(): Promise<string[]> {
    return run('read runner kinds', () => this.#liveRunnerKinds().sort())
  }

  async jobCancelWaiting({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<boolean> {
    return this.#callerWrite('cancel job', () => this.#cancelWaiting.run({ id, anyScope: scope === undefined ? 1 : 0, scope: scope ?? null, now }).changes > 0)
  }

  async jobRequestCancel({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<boolean> {
    return this.#callerWrite('cancel job', () => this.#requestCancel.run({ id, anyScope: scope === undefined ? 1 : 0, scope: scope ?? null, now }).changes > 0)
  }

  async jobQueueNow({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<QueueNowResult> {
    return this.#callerWrite('retry job', () => {
      try {
        return this.#queueNow.run({ id, anyScope: scope === undefined ? 1 : 0, scope: scope ?? null, now }).changes > 0 ? 'queued' : 'unchanged'
      } catch (err) {
        // The only unique index an update of these columns can break: another live job holds the key.
        if (err instanceof Database.SqliteError && err.code === 'SQLITE_CONSTRAINT_UNIQUE') return 'unique_key_held'
        throw err
      }
    })
  }

  /**
   * Exact for a scope (or, without one, a file) of at most
   * COUNTS_EXACT_MAX jobs, counted here; a bigger one from a snapshot at
   * most COUNTS_MAX_AGE_MS old, counted on the worker thread so that this
   * event loop never waits for a read of every job (src/counts-cache.ts).
   */
  async jobCounts({ scope }: { scope?: string | null }): Promise<JobCount[]> {
    if (this.#closed) throw new DatabaseError('count jobs', 'closed', false)
    return this.#counts.read(scope)
  }

  /** The exact counts, read on this thread. */
  #countNow(scope: string | null | undefined): JobCount[] {
    return run('count jobs', () => (scope === undefined ? this.#countJobs.all() : this.#countScopedJobs.all({ scope })) as JobCount[])
  }

  /**
   * The exact counts, read on the worker thread from a snapshot of the
   * file; on this thread, blocking as before, for a database in memory or
   * where the worker cannot run.
   */
  async #countOffLoop(scope: string | null | undefined): Promise<JobCount[]> {
    if (this.#countWorker === undefined) return this.#countNow(scope)
    try {
      return (await this.#countWorker.all(scope === undefined ? sql.countJobs : sql.countScopedJobs, scope === undefined ? {} : { scope })) as JobCount[]
    } catch (err) {
      if (this.#closed) throw new DatabaseError('count jobs', 'closed', false)
      if (err instanceof CountWorkerError && err.code?.startsWith('SQLITE_')) throw new DatabaseError('count jobs', err.code, TRANSIENT.test(err.code))
      return this.#countNow(scope)
    }
  }

  async jobCancelRequested({ runnerId }: { runnerId: string }): Promise<string[]> {
    return run('read cancel requests', () => (this.#cancelRequested.all({ runnerId }) as { id: string }[]).map((r) => r.id))
  }

  async jobPromoteDue({ now, limit }: { now: number; limit: number }): Promise<number> {
    return this.#write('promote due jobs', () => this.#promoteDue.run({ now, limit }).changes)
  }

  async jobPrune({ kind, statuses, finishedBefore, limit }: { kind: string; statuses: readonly TerminalStatus[]; finishedBefore: number; limit: number }): Promise<number> {
    return this.#write('prune jobs', () => this.#prune.run({ kind, statuses: JSON.stringify(statuses), before: finishedBefore, limit }).changes)
  }

  async kindsFinished(): Promise<string[]> {
    return run('read finished kinds', () => (this.#finishedKinds.all() as { kind: string }[]).map((r) => r.kind))
  }

  async kindPause({ kind, now }: { kind: string; now: number }): Promise<boolean> {
    return this.#callerWrite('pause kind', () => this.#writer.prepare(sql.pauseKind).run({ kind, now }).changes === 1)
  }

  async kindResume({ kind }: { kind: string }): Promise<boolean> {
    return this.#callerWrite('resume kind', () => this.#writer.prepare(sql.resumeKind).run({ kind }).changes === 1)
  }

  async kindsPaused(): Promise<{ kind: string; pausedAt: number }[]> {
    return run('read paused kinds', () => this.#reader.prepare(sql.pausedKinds).all() as { kind: string; pausedAt: number }[])
  }

  async cooldownList({ now }: { now: number }): Promise<Cooldown[]> {
    return run('read cooldowns', () => this.#on(this.#reader, sql.cooldownsInForce).all({ now }) as Cooldown[])
  }

  async cooldownClear({ key }: { key: string }): Promise<boolean> {
    return this.#callerWrite('clear cooldown', () => this.#on(this.#writer, sql.clearCooldown).run({ key }).changes > 0)
  }

  async rateUsage({ now, windows }: { now: number; windows: readonly { bucket: string; periodMs: number; perScope: boolean }[] }): Promise<RateUse[]> {
    return run('read rate use', () => {
      const uses: RateUse[] = []
      for (const { bucket, periodMs, perScope } of windows) {
        const since = now - periodMs + 1
        if (perScope) {
          uses.push(...(this.#on(this.#reader, sql.rateUseByScope).all({ kind: bucket, since }) as RateUse[]))
          continue
        }
        const use = this.#on(this.#reader, sql.rateUse).get({ bucket, since }) as { used: number; oldest: number | null }
        if (use.used > 0) uses.push({ bucket, used: use.used, oldest: use.oldest })
      }
      return uses
    })
  }

  async jobActivity({ since, scope }: { since: number; scope?: string | null }): Promise<JobActivity[]> {
    return run('read activity', () => this.#on(this.#reader, sql.jobActivity).all({ since, anyScope: scope === undefined ? 1 : 0, scope: scope ?? null }) as JobActivity[])
  }

  async scheduleAdvance({ name, tickAt, jobs, now }: { name: string; tickAt: number; jobs: readonly NewJob[]; now: number }): Promise<ScheduleAdvance> {
    return this.#write('advance schedule', () => this.#advanceSchedule(name, tickAt, jobs, now))
  }

  async schedulesRead({ names }: { names: readonly string[] }): Promise<{ name: string; lastTickAt: number }[]> {
    return run('read schedules', () => this.#reader.prepare(sql.readSchedules).all({ names: JSON.stringify(names) }) as { name: string; lastTickAt: number }[])
  }

  /**
   * The reading connection's data_version (it moves when another
   * connection, in this process or another, commits) with the writing
   * connection's own count of changes (a database in memory has one
   * connection, whose own commits data_version does not count). Neither
   * reads a table: this is what an idle runner's fallback poll costs.
   */
  async changeToken(): Promise<string> {
    this.#totalChanges ??= this.#writer.prepare('SELECT total_changes()').pluck()
    const own = this.#totalChanges
    return run('read change token', () => `${this.#reader.pragma('data_version', { simple: true })}:${own.get()}`)
  }

  async queueNextDue(_params: { now: number }): Promise<number | null> {
    return run('read next due time', () => (this.#nextDue.get() as { due: number | null }).due)
  }

  async queueCounts({ limit }: { limit: number }): Promise<QueueCount[]> {
    return run('count live jobs', () => (this.#queueCounts.all({ limit }) as QueueCount[]).filter((c) => c.count > 0))
  }

  async queueUnservedKinds(_params: { now: number }): Promise<string[]> {
    return run('read unserved kinds', () => (this.#unservedKinds.all({ served: this.#servedKinds() }) as { kind: string }[]).map((r) => r.kind))
  }

  async jobFailUnserved({ createdBefore, error, now }: { createdBefore: number; error: string; now: number }): Promise<number> {
    return this.#write('fail unserved jobs', () => this.#failUnserved.run({ served: this.#servedKinds(), before: createdBefore, error, now }).changes)
  }

  /**
   * Every process on one SQLite file shares one machine, so a runner's lock
   * file proves at once whether it is gone: a restart fails its
   * predecessor's jobs without waiting for a lease, and leaves those of a
   * live process beside it alone.
   */
  async jobFailInterrupted({ runnerId, error, now }: { runnerId: string; error: string; now: number }): Promise<{ failed: number; requeued: number }> {
    return this.#write('fail interrupted jobs', () => {
      const others = this.#otherRunners.all({ runnerId }) as { id: string }[]
      const gone = others.map((r) => r.id).filter((id) => !this.#locks.isAlive(id))
      const failed = this.#sweep(gone, runnerId, error, now)
      for (const id of gone) this.#locks.forget(id)
      return failed
    })
  }

  async runnerRegister({ runnerId, kinds, now }: { runnerId: string; kinds: readonly string[]; now: number }): Promise<void> {
    this.#write('register runner', () => {
      // The lock first: a registered runner without its lock would read as gone.
      this.#locks.acquire(runnerId)
      this.#registerRunner.run({ runnerId, kinds: JSON.stringify(kinds), now })
    })
  }

  async runnerHeartbeat({ runnerId, now }: { runnerId: string; now: number }): Promise<boolean> {
    return this.#write('renew runner', () => this.#heartbeatRunner.run({ runnerId, now }).changes === 1)
  }

  async runnerUnregister({ runnerId }: { runnerId: string }): Promise<void> {
    this.#write('unregister runner', () => {
      this.#deleteRunner.run({ runnerId })
      this.#locks.release(runnerId)
    })
  }

  async jobGet({ id, scope }: { id: string; scope?: string | null }): Promise<JobRow | undefined> {
    if (scope === undefined) return run('get job', () => this.#get.get({ id })) as JobRow | undefined
    return run('get job', () => this.#getScoped.get({ id, scope })) as JobRow | undefined
  }

  async jobList({ scope, status, kind, limit, beforeId }: JobListParams): Promise<JobRow[]> {
    const rows = run('list jobs', () =>
      this.#list.all({
        anyScope: scope === undefined ? 1 : 0,
        scope: scope ?? null,
        status: status ?? null,
        kind: kind ?? null,
        limit,
        beforeId: beforeId ?? null,
        after: beforeId === undefined ? null : idPrefixAfter(beforeId),
      }),
    ) as JobRow[]
    return rows
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#locks.releaseAll()
    await this.#countWorker?.close()
    if (this.#reader !== this.#writer) this.#reader.close()
    if (this.#ownsWriter) this.#writer.close()
  }
}

/** Runs a statement, turning a SQLite error into a DatabaseError that names its code, not its message. */
function run<T>(operation: string, fn: () => T): T {
  try {
    return fn()
  } catch (err) {
    if (err instanceof Database.SqliteError) throw new DatabaseError(operation, err.code, TRANSIENT.test(err.code))
    if (err instanceof TypeError && /database connection is not open/.test(err.message)) {
      throw new DatabaseError(operation, 'closed', false)
    }
    throw err
  }
}

/** The insert statements of one connection; those for unique keys are prepared at their first use. */
class InsertStatements {
  readonly insert: Database.Statement
  readonly #db: Database.Database
  #unique: Database.Statement | undefined
  #holder: Database.Statement | undefined
  #fair: Database.Statement | undefined
  #lane: Database.Statement | undefined

  constructor(db: Database.Database, insert: Database.Statement) {
    this.#db = db
    this.insert = insert
  }

  get unique(): Database.Statement {
    return (this.#unique ??= this.#db.prepare(sql.insertUniqueJob))
  }

  get holder(): Database.Statement {
    return (this.#holder ??= this.#db.prepare(sql.uniqueHolder))
  }

  get fair(): Database.Statement {
    return (this.#fair ??= this.#db.prepare(sql.insertFairJob))
  }

  get lane(): Database.Statement {
    return (this.#lane ??= this.#db.prepare(sql.advanceLane))
  }
}

/**
 * Whether a batch is inserted one job at a time (insertEach): some job
 * has a unique key or a fair position to take. One pass, as a check for
 * unique keys alone would make: a batch of neither pays nothing more.
 */
function insertsEach(jobs: readonly NewJob[]): boolean {
  for (const job of jobs) if ((job.uniqueKey !== undefined && job.uniqueKey !== null) || job.fair === true) return true
  return false
}

/** A claimed row as the claim statements return it: the job, and its seq to order by. */
type ClaimedRow = ClaimedJob & { seq: number }

/** RETURNING promises no order; workers start oldest first. */
function inSeqOrder(rows: ClaimedRow[]): ClaimedJob[] {
  for (let i = 1; i < rows.length; i++) {
    if (rows[i - 1]!.seq > rows[i]!.seq) return rows.sort((a, b) => a.seq - b.seq)
  }
  return rows
}

/** One of a runner's kinds in its claim plan, with its rule (undefined: none) and arm. */
interface PlannedKind {
  readonly kind: string
  readonly rule: KindRule | undefined
  readonly arm: sql.ClaimArm
}

/** A kind with a rate rule. */
interface RatedKind extends PlannedKind {
  readonly rule: KindRule
  readonly rate: RateRule
}

/** How a kinds array is claimed: made once per array and limits (see #planOf). */
interface ClaimPlan {
  readonly limits: ClaimParams['limits']
  /** sql.claimJobs for the kinds without a rate rule, with its parameters; undefined when every kind has one. */
  readonly plain: { readonly statement: Database.Statement; readonly params: Record<string, unknown> } | undefined
  readonly unrated: readonly PlannedKind[]
  readonly rated: readonly RatedKind[]
  readonly ratedKinds: ReadonlySet<string>
}

/** A kind's arm: its caps (a rule with neither cap is free) and its order. */
function armOf(rule: KindRule | undefined): sql.ClaimArm {
  if (rule === undefined) return FREE_ARM
  const cap = rule.scopeConcurrency !== null && rule.scopeConcurrency !== undefined ? 'scoped' : rule.concurrency !== null && rule.concurrency !== undefined ? 'capped' : 'free'
  return cap === 'free' && rule.fair !== true ? FREE_ARM : { cap, fair: rule.fair === true }
}

const FREE_ARM: sql.ClaimArm = { cap: 'free', fair: false }

/** Sets the parameters of arm `i`: its kind @k{i}, and its caps @cap{i} and @scap{i} when it has any. */
function armParams(params: Record<string, unknown>, i: number, { kind, rule, arm }: PlannedKind): void {
  params[`k${i}`] = kind
  if (arm.cap === 'free') return
  params[`cap${i}`] = rule!.concurrency ?? UNLIMITED
  if (arm.cap === 'scoped') params[`scap${i}`] = rule!.scopeConcurrency
}
