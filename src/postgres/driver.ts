import { createHash } from 'node:crypto'
import { connect as netConnect } from 'node:net'
import pg from 'pg'
import type {
  ClaimedJob,
  JobCount,
  QueueNowResult,
  ClaimParams,
  Driver,
  DriverCapabilities,
  FinishAndClaimParams,
  WakeReason,
  FinishAndClaimResult,
  JobFinish,
  JobListParams,
  JobRow,
  QueueCount,
  NewJob,
  InsertResult,
  ScheduleAdvance,
  Cooldown,
  RateUse,
  JobActivity,
} from '../driver.js'
import { hasUniqueKey, sendsBack } from '../driver.js'
import { idPrefixAfter } from '../id.js'
import { ConfigError, DatabaseError, JobtableError } from '../errors.js'
import type { TerminalStatus } from '../job.js'
import { checkKeys } from '../options.js'
import { type AbortLike, Deadlines } from './deadlines.js'
import { NotificationListener } from './listener.js'
import { CountsCache } from '../counts-cache.js'
import { migrateSchema } from './migrations.js'
import { migrateMode, type MigrateMode } from '../schema-window.js'
import { NOTIFY_CHANNEL, queries, type Queries } from './queries.js'
import { FullBuckets } from '../rate-limit.js'
import { claimPlan, claimRated, type ClaimedRow, type ClaimPlan, type Query } from './rated-claim.js'

/**
 * What `enqueueTx` writes through: anything that runs one parameterized
 * statement (`$1`, `$2`, ...) inside the caller's open transaction. A `pg`
 * Client or PoolClient is one as it is; Kysely and Drizzle transactions
 * fit through a two-line adapter (docs/postgres.md). Typed by shape, so
 * jobtable imports neither.
 */
export interface PgQueryable {
  query(text: string, values: unknown[]): Promise<unknown>
}

/** Options of the PostgreSQL driver. Give `pool` or `connectionString`, not both. */
export interface PostgresOptions {
  /** The application's own pg Pool; it stays open on close. Handle its 'error' event as pg asks. */
  readonly pool?: pg.Pool
  /**
   * A connection string; the driver opens its own pool and closes it on
   * close. `undefined` is accepted by the type, so that
   * `connectionString: process.env.DATABASE_URL` compiles, and refused at
   * run time with an error that says the variable is not set.
   */
  readonly connectionString?: string | undefined
  /** The PostgreSQL schema holding jobtable's tables, created when missing. Default `jobtable`. */
  readonly schema?: string
  /**
   * Listen for inserts on a dedicated connection (LISTEN/NOTIFY), so a job
   * enqueued by any process or any client's committed transaction wakes an
   * idle worker within milliseconds. Default true, except under
   * `pooler: 'transaction'` without `listenUrl`, where a LISTEN through the
   * pooler would never hear a notification: workers then find new jobs by
   * the fallback poll alone. `false` turns it off everywhere.
   */
  readonly listen?: boolean
  /**
   * What stands between jobtable and PostgreSQL. `'none'` (default): a
   * direct connection, or a pooler in session mode. `'transaction'`: a
   * pooler in transaction mode (PgBouncer's `pool_mode = transaction`, as
   * managed PostgreSQL services put in front of the database), which hands
   * each transaction to any server connection, so nothing may outlive one.
   * jobtable then prepares no named statements (refusing
   * `preparedStatements: true`), cancels a timed-out statement with the
   * protocol's cancel request through the pooler (the pid a client sees
   * there names no server process), and listens only on `listenUrl`. It
   * never takes a session advisory lock or sets a session setting in
   * either mode: its one lock (migrations) and its claim functions' settings
   * end with their transaction.
   */
  readonly pooler?: 'none' | 'transaction'
  /**
   * A connection string for the listening connection alone (LISTEN/NOTIFY),
   * which bypasses the pooler: the database's direct address, or a pooler
   * in session mode, with its credentials and TLS settings (`sslmode`) in
   * it, since nothing of `pool`'s is taken. Every other statement goes
   * through `connectionString` or `pool`. Under `pooler: 'transaction'` without it, workers find jobs
   * enqueued by other processes by the fallback poll (`pollIntervalMs`)
   * alone. `undefined` is none, so `listenUrl: process.env.DIRECT_URL`
   * polls when the variable is unset; add `listen: true` to refuse that
   * instead.
   */
  readonly listenUrl?: string | undefined
  /**
   * How often an idle runner looks for queued jobs even without a
   * notification, so a lost notification or a dropped listening connection
   * never strands a job. Default 1000 ms.
   */
  readonly pollIntervalMs?: number
  /**
   * What the first operation does with the schema (see MigrateMode):
   * `auto` (default) applies missing migrations; `verify` applies none
   * and refuses a schema that is behind this jobtable or outside its
   * window, for a team whose own migration tool applies `jobtable migrate
   * --sql`; `off` trusts it and reads nothing.
   */
  readonly migrate?: MigrateMode
  /**
   * How long a runner stays live without renewing its lease (it renews
   * every third of it). Once lapsed, any runner's sweep fails its running
   * jobs as interrupted. Default 30000 ms.
   */
  readonly leaseMs?: number
  /** How often a runner sweeps for the jobs of runners whose lease lapsed. Default half of leaseMs. */
  readonly sweepIntervalMs?: number
  /**
   * Prepare each of jobtable's statements once per connection (a named
   * prepared statement), so the server parses and plans it once instead of
   * at every call: 7% to 85% more jobs per second across the benchmark's
   * workloads (BENCHMARKS.md). Default true, and false under
   * `pooler: 'transaction'`, which refuses true: a statement prepared on one
   * server connection is missing on the next (PgBouncer before 1.21, or
   * with max_prepared_statements = 0).
   */
  readonly preparedStatements?: boolean
  /**
   * The client-side bound on every statement jobtable sends (claims,
   * publishes, heartbeats, sweeps, reads; final writes have their own 5 s
   * bound): past it the statement is cancelled, its connection destroyed,
   * and the operation fails as transient, so a half-open connection never
   * holds a runner for TCP's two hours. Default 10000 ms.
   */
  readonly statementTimeoutMs?: number
}


/** How many times an insert with unique keys is tried again for keys whose holder ended as it was read. */
const UNIQUE_ROUNDS = 5

/** A schema name jobtable accepts: a plain identifier, quoted in every statement. */
const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

/**
 * SQLSTATE classes and codes that can clear by themselves: connection
 * exceptions (08), insufficient resources (53), serialization failure and
 * deadlock (40001, 40P01), lock not available (55P03), a cancelled
 * statement (57014), and a server shutting down, terminated or starting
 * (57P01 to 57P03). Anything else (a value a column refuses, a missing
 * table, a permission) fails again.
 */
const TRANSIENT_SQLSTATE = /^(08...|53...|40001|40P01|55P03|57014|57P0[123])$/

/**
 * What a migration racing another one over the catalog fails with: a
 * unique violation in a catalog index, or an object that exists already
 * (a schema, a relation, an object such as a type). See #migrate.
 */
const CATALOG_RACE = new Set(['23505', '42P06', '42P07', '42710'])

/** Socket errors of a lost or refused connection. */
const TRANSIENT_ERRNO = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'])

/**
 * node-postgres's own texts for a connection that dropped or timed out.
 * These come from the client library, never from the server, so matching
 * them quotes no value; they are not stored or logged either way.
 */
const PG_CONNECTION_LOST = /^(Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Client was closed)/

/**
 * Makes the PostgreSQL driver. Nothing is sent to the database until the
 * first operation, which applies any missing migrations first (or call
 * `migrate()` at deploy time).
 */
export function postgres(options: PostgresOptions): PostgresDriver {
  return new PostgresDriver(options)
}

/** The PostgreSQL driver, over node-postgres: many runner processes on many machines share one database. */
export class PostgresDriver implements Driver<PgQueryable, false> {
  readonly name = 'postgres'
  readonly capabilities: DriverCapabilities<false>
  /** The schema name as given (unquoted). */
  readonly schema: string
  readonly #pool: pg.Pool
  readonly #ownsPool: boolean
  readonly #q: Queries
  readonly #quoted: string
  readonly #listen: boolean
  readonly #listenUrl: string | undefined
  readonly #pooler: 'none' | 'transaction'
  readonly #leaseMs: number
  readonly #prepared: boolean
  readonly #deadlines: Deadlines
  readonly #plans = new WeakMap<readonly string[], ClaimPlan>()
  /** The rate buckets this driver's claims found full, and until when (see claimRated). */
  readonly #full = new FullBuckets()
  #migrated: Promise<void> | undefined
  readonly #schemaMode: MigrateMode
  readonly #wakers = new Set<(what: WakeReason) => void>()
  #listener: NotificationListener | undefined
  #closed = false

  constructor(options: PostgresOptions) {
    if (options === null || typeof options !== 'object') throw new ConfigError('postgres: options are required')
    checkKeys(options, Object.keys({ pool: 1, connectionString: 1, schema: 1, listen: 1, pollIntervalMs: 1, leaseMs: 1, sweepIntervalMs: 1, preparedStatements: 1, statementTimeoutMs: 1, pooler: 1, listenUrl: 1, migrate: 1 } satisfies Record<keyof PostgresOptions | 'statementTimeoutMs', 1>), 'postgres')
    const { pool, connectionString, schema = 'jobtable', pooler = 'none', listenUrl, pollIntervalMs = 1_000, leaseMs = 30_000 } = options
    const behindPooler = pooler === 'transaction'
    const { listen = !behindPooler || listenUrl !== undefined, preparedStatements = !behindPooler } = options
    const { statementTimeoutMs = 10_000 } = options
    const { sweepIntervalMs = Math.max(1, Math.floor(leaseMs / 2)) } = options
    if (pool === undefined && connectionString === undefined && 'connectionString' in options) {
      throw new ConfigError('postgres: connectionString is undefined (is the environment variable you read it from, such as DATABASE_URL, set?)')
    }
    if ((pool === undefined) === (connectionString === undefined)) {
      throw new ConfigError('postgres: give either pool (a pg Pool) or connectionString')
    }
    if (pool !== undefined && !(pool instanceof pg.Pool)) throw new ConfigError('postgres: pool must be a pg Pool')
    if (connectionString !== undefined && (typeof connectionString !== 'string' || connectionString === '')) {
      throw new ConfigError('postgres: connectionString must be a non-empty string')
    }
    if (typeof schema !== 'string' || !SCHEMA_NAME.test(schema)) {
      throw new ConfigError('postgres: schema must be an identifier of letters, digits and underscores, at most 63 long')
    }
    if (pooler !== 'none' && pooler !== 'transaction') throw new ConfigError("postgres: pooler must be 'none' or 'transaction'")
    if (typeof listen !== 'boolean') throw new ConfigError('postgres: listen must be true or false')
    if (typeof preparedStatements !== 'boolean') throw new ConfigError('postgres: preparedStatements must be true or false')
    if (listenUrl !== undefined && (typeof listenUrl !== 'string' || listenUrl === '')) throw new ConfigError('postgres: listenUrl must be a non-empty connection string')
    if (listenUrl !== undefined && !listen) throw new ConfigError('postgres: listenUrl is for the listening connection, and listen is false: give one or the other')
    if (behindPooler && preparedStatements) {
      throw new ConfigError("postgres: preparedStatements: true cannot work under pooler: 'transaction' (a statement prepared on one server connection is missing on the next); leave preparedStatements out")
    }
    if (behindPooler && listen && listenUrl === undefined) {
      throw new ConfigError("postgres: listen: true needs listenUrl under pooler: 'transaction' (a LISTEN through the pooler never hears a notification); give listenUrl (is the environment variable you read it from set?), a connection string that bypasses the pooler, or leave listen out to find jobs by the poll")
    }
    for (const [name, value] of Object.entries({ pollIntervalMs, leaseMs, sweepIntervalMs, statementTimeoutMs })) {
      if (!Number.isInteger(value) || value < 1) throw new ConfigError(`postgres: ${name} must be an integer >= 1`)
    }
    if (leaseMs < 3) throw new ConfigError('postgres: leaseMs must be at least 3')
    this.#schemaMode = migrateMode('postgres', options.migrate)
    this.schema = schema
    this.#quoted = `"${schema}"`
    this.#q = queries(this.#quoted)
    this.#listen = listen
    this.#listenUrl = listenUrl
    this.#pooler = pooler
    this.#leaseMs = leaseMs
    this.#prepared = preparedStatements
    this.#deadlines = new Deadlines(statementTimeoutMs)
    this.capabilities = { txSync: false, liveness: { heartbeatMs: Math.floor(leaseMs / 3), sweepMs: sweepIntervalMs }, pollMs: pollIntervalMs }
    this.#ownsPool = pool === undefined
    // allowExitOnIdle: a process that enqueues and never calls close() (a script, a web process at its end) exits once its
    // connections are idle, instead of waiting out the pool's idle timer.
    this.#pool = pool ?? new pg.Pool({ connectionString, connectionTimeoutMillis: 5_000, keepAlive: true, allowExitOnIdle: true })
    // An idle connection the server drops emits 'error' on the pool; the
    // next query on a fresh connection is the recovery, so ours must not
    // crash the process. A pool handed in is the application's to watch.
    if (this.#ownsPool) this.#pool.on('error', () => undefined)
  }

  /** Applies any missing migrations now, rather than at the first operation; refuses a newer schema. */
  migrate(): Promise<void> {
    if (this.#migrated === undefined) {
      const attempt = this.#migrate()
      this.#migrated = attempt
      attempt.catch(() => {
        // A failed migration is tried again by the next operation.
        if (this.#migrated === attempt) this.#migrated = undefined
      })
    }
    return this.#migrated
  }

  async #migrate(): Promise<void> {
    let client: pg.PoolClient | undefined
    try {
      client = await this.#pool.connect()
      client.on('error', ignore)
      try {
        await migrateSchema(client, this.#quoted, undefined, this.#schemaMode)
      } catch (err) {
        if (!CATALOG_RACE.has((err as { code?: unknown } | null)?.code as string)) throw err
        // Another process migrated while this one waited for the migration lock, and this server connection's
        // catalog cache still held what it saw before (an advisory lock, unlike a table's, does not refresh it):
        // seen behind a transaction pooler, where the version check before the lock ran on another server
        // connection. The migration rolled back whole; a new transaction starts with a fresh cache, and finds
        // the schema migrated.
        await migrateSchema(client, this.#quoted, undefined, this.#schemaMode)
      }
      client.off('error', ignore)
      client.release()
    } catch (err) {
      client?.off('error', ignore)
      client?.release(true)
      throw toDatabaseError('migrate', err)
    }
  }

  async jobInsertMany({ jobs, now }: { jobs: readonly NewJob[]; now: number }): Promise<InsertResult> {
    if (hasFairJob(jobs)) return this.#transaction('insert jobs', (query) => this.#insertFair(query, jobs, now), { readCommitted: true })
    if (!hasUniqueKey(jobs)) {
      await this.#query('insert jobs', this.#q.insertJobs, insertValues(jobs, now))
      return
    }
    return this.#transaction('insert jobs', (query) => this.#insertUnique(query, jobs, now))
  }

  async jobInsertTx({ tx, jobs, now }: { tx: PgQueryable; jobs: readonly NewJob[]; now: number }): Promise<InsertResult> {
    if (tx === null || typeof tx !== 'object' || typeof tx.query !== 'function') {
      throw new ConfigError('postgres: enqueueTx needs the pg client (or an adapter with query(text, values)) the transaction runs on')
    }
    await this.migrate()
    try {
      const query: Query = <R extends object>(text: string, values: unknown[]) => tx.query(text, values) as Promise<pg.QueryResult<R>>
      if (hasFairJob(jobs)) return await this.#insertFair(query, jobs, now)
      if (!hasUniqueKey(jobs)) {
        await tx.query(this.#q.insertJobs, insertValues(jobs, now))
        return
      }
      return await this.#insertUnique(query, jobs, now)
    } catch (err) {
      throw toDatabaseError('insert job', err)
    }
  }

  /**
   * Inserts a batch with unique keys within the transaction `query` runs
   * in: the insert stores what no live job's key refuses, and each refused
   * job is answered with the holder's id, read by a statement of its own
   * (READ COMMITTED: a holder that committed while the insert waited for
   * it is seen). A holder that ended between the two frees its key: those
   * jobs are inserted again, a few times at most.
   */
  async #insertUnique(query: Query, jobs: readonly NewJob[], now: number, fair = false): Promise<(string | null)[]> {
    const result: (string | null)[] = jobs.map(() => null)
    let pending = jobs.map((job, index) => ({ job, index }))
    for (let round = 0; round < UNIQUE_ROUNDS && pending.length > 0; round++) {
      const batch = pending.map((p) => p.job)
      const keys = batch.map((j) => j.uniqueKey ?? null)
      const { rows } = fair
        ? await query<{ id: string }>(this.#q.insertFairUniqueJobs, [...insertValues(batch, now), batch.map((j) => j.fair === true), keys])
        : await query<{ id: string }>(this.#q.insertUniqueJobs, [...insertValues(batch, now), keys])
      const stored = new Set(rows.map((r) => r.id))
      const refused = pending.filter((p) => !stored.has(p.job.id))
      if (refused.length === 0) return result
      const holders = await query<{ id: string; ord: number }>(this.#q.uniqueHolders, [refused.map((p) => p.job.kind), refused.map((p) => p.job.scope), refused.map((p) => p.job.uniqueKey ?? null)])
      const holderOf = new Map(holders.rows.map((r) => [r.ord - 1, r.id]))
      pending = []
      refused.forEach((p, i) => {
        const holder = holderOf.get(i)
        if (holder !== undefined) result[p.index] = holder
        // A job without a key is refused only by its id (74 random bits): inserted again, with the same id, it is refused again.
        else if (p.job.uniqueKey !== undefined && p.job.uniqueKey !== null) pending.push(p)
        else throw new DatabaseError('insert job', '23505', false)
      })
    }
    if (pending.length > 0) throw new DatabaseError('insert job', 'unique_key_contended', true)
    return result
  }

  /**
   * Inserts a batch with fair jobs in the transaction `query` runs in:
   * locks their lanes (lockFairLanes), then inserts the batch giving each
   * fair job its lane's next position (queries' fairInsert), unique keys
   * as in #insertUnique. Under READ COMMITTED the insert's snapshot is
   * taken after the locks; in a user's REPEATABLE READ transaction, a lane
   * another transaction moved meanwhile fails the insert (40001, transient).
   */
  async #insertFair(query: Query, jobs: readonly NewJob[], now: number): Promise<InsertResult> {
    const lanes = new Map<string, [string, string]>()
    for (const j of jobs) if (j.fair === true) lanes.set(JSON.stringify([j.kind, j.scope ?? '']), [j.kind, j.scope ?? ''])
    await query(this.#q.lockFairLanes, [[...lanes.values()].map((l) => l[0]), [...lanes.values()].map((l) => l[1])])
    if (hasUniqueKey(jobs)) return this.#insertUnique(query, jobs, now, true)
    await query(this.#q.insertFairJobs, [...insertValues(jobs, now), jobs.map((j) => j.fair === true)])
  }

  /**
   * Claims for the runner: the kinds without a rate rule in one statement
   * (claimJobs), as before rate limits; with rated kinds whose buckets are
   * not known full, one READ COMMITTED transaction that claims those
   * within their limits and then the others (see claimRated).
   */
  async jobClaim({ limit, runnerId, kinds, limits, now }: ClaimParams & { now: number }): Promise<ClaimedJob[]> {
    const plan = this.#planOf(kinds, limits)
    const open = plan.rated.length === 0 ? plan.rated : this.#full.open(plan.rated, now)
    if (open.length > 0) {
      return toClaimed(await this.#transaction('claim jobs', (query) => claimRated(query, this.#q, this.#full, { limit, runnerId, now, plan, open }), { readCommitted: true }))
    }
    if (plan.unrated[0].length === 0) return []
    return toClaimed((await this.#query<ClaimedRow>('claim jobs', this.#q.claimJobs, [...plan.unrated, limit, runnerId, now])).rows)
  }

  /** How claims split the kinds (see ClaimPlan); made once per kinds array, while its limits are the same object. */
  #planOf(kinds: readonly string[], limits: ClaimParams['limits']): ClaimPlan {
    const cached = this.#plans.get(kinds)
    if (cached !== undefined && cached.limits === limits) return cached
    const plan = claimPlan(kinds, limits)
    this.#plans.set(kinds, plan)
    return plan
  }

  /**
   * Final writes and the next claim in one statement (see
   * queries.finishAndClaimJobs); a batch with retries or snoozes sends
   * them back in that same statement (queries.retryFinishAndClaimJobs),
   * so it applies whole or not at all. A batch with cooldowns, or a claim
   * with rated kinds not known full, is one transaction instead: the final
   * writes first (finishCooling records the cooldowns), then the claims,
   * which see them.
   */
  async jobFinishManyAndClaim({ finishes, now, signal, claim }: FinishAndClaimParams): Promise<FinishAndClaimResult> {
    const plan = this.#planOf(claim.kinds, claim.limits)
    const open = plan.rated.length === 0 ? plan.rated : this.#full.open(plan.rated, now)
    if (open.length > 0 || finishes.some(hasCooldown)) {
      // The final writes (and their cooldowns) first, in a statement of their own, so the claims after them see the cooldowns.
      return this.#transaction(
        'finish and claim jobs',
        async (query): Promise<FinishAndClaimResult> => {
          const applied = await this.#finishIn(query, finishes, now)
          if (open.length > 0) return { applied, claimed: toClaimed(await claimRated(query, this.#q, this.#full, { limit: claim.limit, runnerId: claim.runnerId, now, plan, open })) }
          if (plan.unrated[0].length === 0) return { applied, claimed: [] }
          return { applied, claimed: toClaimed((await query<ClaimedRow>(this.#q.claimJobs, [...plan.unrated, claim.limit, claim.runnerId, now])).rows) }
        },
        { signal, readCommitted: open.length > 0 },
      )
    }
    const [kinds, caps, scopeCaps, fair] = plan.unrated
    const claimValues = [claim.limit, claim.runnerId, kinds, caps, scopeCaps, fair]
    const sent = finishes.some(sendsBack)
    const rows = sent
      ? (await this.#query<ClaimedRow & { part: 'f' | 'c' }>('finish and claim jobs', this.#q.retryFinishAndClaimJobs, [...finishValues(finishes.filter((f) => !sendsBack(f)), now), ...claimValues, ...retryValues(finishes)], signal)).rows
      : (await this.#query<ClaimedRow & { part: 'f' | 'c' }>('finish and claim jobs', this.#q.finishAndClaimJobs, [...finishValues(finishes, now), ...claimValues], signal)).rows
    const changed = new Set(rows.filter((r) => r.part === 'f').map((r) => r.id))
    return { applied: finishes.map((f) => changed.has(f.id)), claimed: toClaimed(rows.filter((r) => r.part === 'c')) }
  }

  /** The final writes of jobFinishMany as one statement in the transaction `query` runs in: with cooldowns, finishCooling. */
  async #finishIn(query: Query, finishes: readonly JobFinish[], now: number): Promise<boolean[]> {
    if (finishes.length === 0) return []
    const { rows } = finishes.some(hasCooldown)
      ? await query<{ id: string }>(this.#q.finishCooling, [...finishValues(finishes.filter((f) => !sendsBack(f)), now), ...retryValues(finishes), ...cooldownValues(finishes)])
      : finishes.some(sendsBack)
        ? await query<{ id: string }>(this.#q.retryAndFinishJobs, [...finishValues(finishes.filter((f) => !sendsBack(f)), now), ...retryValues(finishes)])
        : await query<{ id: string }>(this.#q.finishJobs, finishValues(finishes, now))
    const changed = new Set(rows.map((r) => r.id))
    return finishes.map((f) => changed.has(f.id))
  }

  async jobRequeueLost({ runnerId, keep, now }: { runnerId: string; keep: readonly string[]; now: number }): Promise<number> {
    return (await this.#query('requeue lost claims', this.#q.requeueLostClaims, [runnerId, keep, now])).rowCount ?? 0
  }

  async jobCancelWaiting({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<boolean> {
    return ((await this.#query('cancel job', this.#q.cancelWaiting, [id, now, scope === undefined, scope ?? null])).rowCount ?? 0) > 0
  }

  async jobRequestCancel({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<boolean> {
    return (await this.#query('cancel job', this.#q.requestCancel, [id, now, scope === undefined, scope ?? null, `${this.schema}:cancel`])).rows.length > 0
  }

  async jobQueueNow({ id, scope, now }: { id: string; scope?: string | null; now: number }): Promise<QueueNowResult> {
    try {
      return (await this.#query('retry job', this.#q.queueNow, [id, now, scope === undefined, scope ?? null, this.schema])).rows.length > 0 ? 'queued' : 'unchanged'
    } catch (err) {
      // The only unique index an update of these columns can break: another live job holds the key.
      if (err instanceof DatabaseError && err.dbCode === '23505') return 'unique_key_held'
      throw err
    }
  }

  async jobCounts({ scope }: { scope?: string | null }): Promise<JobCount[]> {
    return this.#counts.read(scope)
  }

  /** Counts exactly up to COUNTS_EXACT_MAX jobs, a bigger scope from a snapshot (see CountsCache); the server counts either. */
  readonly #counts = new CountsCache({
    size: async (scope, limit) => {
      const [text, values] =
        scope === undefined ? [this.#q.countJobsUpTo, [limit]] : scope === null ? [this.#q.countUnscopedJobsUpTo, [limit]] : [this.#q.countScopedJobsUpTo, [scope, limit]]
      return Number((await this.#query<{ n: number }>('count jobs', text, values)).rows[0]!.n)
    },
    exact: (scope) => this.#countNow(scope),
    snapshot: (scope) => this.#countNow(scope),
  })

  async #countNow(scope: string | null | undefined): Promise<JobCount[]> {
    if (scope === undefined) return (await this.#query<JobCount>('count jobs', this.#q.countJobs, [])).rows
    if (scope === null) return (await this.#query<JobCount>('count jobs', this.#q.countUnscopedJobs, [])).rows
    return (await this.#query<JobCount>('count jobs', this.#q.countScopedJobs, [scope])).rows
  }

  async jobCancelRequested({ runnerId }: { runnerId: string }): Promise<string[]> {
    return (await this.#query<{ id: string }>('read cancel requests', this.#q.cancelRequested, [runnerId])).rows.map((r) => r.id)
  }

  async jobPrune({ kind, statuses, finishedBefore, limit }: { kind: string; statuses: readonly TerminalStatus[]; finishedBefore: number; limit: number }): Promise<number> {
    return (await this.#query('prune jobs', this.#q.pruneJobs, [kind, statuses, finishedBefore, limit])).rowCount ?? 0
  }

  async kindsFinished(): Promise<string[]> {
    return (await this.#query<{ kind: string }>('read finished kinds', this.#q.finishedKinds, [])).rows.map((r) => r.kind)
  }

  async kindPause({ kind, now }: { kind: string; now: number }): Promise<boolean> {
    return ((await this.#query('pause kind', this.#q.pauseKind, [kind, now])).rowCount ?? 0) === 1
  }

  async kindResume({ kind }: { kind: string }): Promise<boolean> {
    return (await this.#query('resume kind', this.#q.resumeKind, [kind, this.schema])).rows.length === 1
  }

  async kindsPaused(): Promise<{ kind: string; pausedAt: number }[]> {
    return (await this.#query<{ kind: string; pausedAt: number }>('read paused kinds', this.#q.pausedKinds, [])).rows
  }

  async cooldownList({ now }: { now: number }): Promise<Cooldown[]> {
    // Sorted here, not by the server's collation: the same order on every backend.
    return (await this.#query<Cooldown>('read cooldowns', this.#q.cooldowns, [now])).rows.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  }

  async cooldownClear({ key }: { key: string }): Promise<boolean> {
    return (await this.#query('clear cooldown', this.#q.clearCooldown, [key, this.schema])).rows.length > 0
  }

  async rateUsage({ now, windows }: { now: number; windows: readonly { bucket: string; periodMs: number; perScope: boolean }[] }): Promise<RateUse[]> {
    if (windows.length === 0) return []
    const named = windows.filter((w) => !w.perScope)
    const scoped = windows.filter((w) => w.perScope)
    const values = [named.map((w) => w.bucket), named.map((w) => w.periodMs), scoped.map((w) => w.bucket), scoped.map((w) => w.periodMs), now]
    return (await this.#query<RateUse>('read rate use', this.#q.rateUsage, values)).rows
  }

  async jobActivity({ since, scope }: { since: number; scope?: string | null }): Promise<JobActivity[]> {
    return (await this.#query<JobActivity>('read job activity', this.#q.jobActivity, [since, scope === undefined, scope ?? null])).rows
  }

  async scheduleAdvance({ name, tickAt, jobs, now }: { name: string; tickAt: number; jobs: readonly NewJob[]; now: number }): Promise<ScheduleAdvance> {
    const fair = hasFairJob(jobs)
    return this.#transaction('advance schedule', async (query): Promise<ScheduleAdvance> => {
      if ((await query(this.#q.advanceSchedule, [name, tickAt, now])).rows.length === 0) return { advanced: false, stored: 0 }
      if (jobs.length === 0) return { advanced: true, stored: 0 }
      if (fair) {
        const holders = await this.#insertFair(query, jobs, now)
        return { advanced: true, stored: holders === undefined ? jobs.length : holders.filter((holder) => holder === null).length }
      }
      if (!hasUniqueKey(jobs)) {
        await query(this.#q.insertJobs, insertValues(jobs, now))
        return { advanced: true, stored: jobs.length }
      }
      // insertUnique answers null for each job it stored, a holder's id for each a live job's unique key refused.
      return { advanced: true, stored: (await this.#insertUnique(query, jobs, now)).filter((holder) => holder === null).length }
    }, fair ? { readCommitted: true } : {})
  }

  async schedulesRead({ names }: { names: readonly string[] }): Promise<{ name: string; lastTickAt: number }[]> {
    return (await this.#query<{ name: string; lastTickAt: number }>('read schedules', this.#q.readSchedules, [names])).rows
  }

  async jobPromoteDue({ now, limit }: { now: number; limit: number }): Promise<number> {
    return (await this.#query('promote due jobs', this.#q.promoteDue, [now, limit])).rowCount ?? 0
  }

  async queueCounts({ limit }: { limit: number }): Promise<QueueCount[]> {
    return (await this.#query<QueueCount>('count live jobs', this.#q.queueCounts, [limit])).rows.filter((c) => c.count > 0)
  }

  async queueNextDue(_params: { now: number }): Promise<number | null> {
    const due = (await this.#query<{ due: string | null }>('read next due time', this.#q.nextDue, [])).rows[0]?.due
    return due === null || due === undefined ? null : Number(due)
  }

  async runnerKinds(): Promise<string[]> {
    // Sorted here, not by the server's collation: the same order on every backend.
    return (await this.#query<{ kind: string }>('read runner kinds', this.#q.runnerKinds, [])).rows.map((r) => r.kind).sort()
  }

  async queueUnservedKinds(_params: { now: number }): Promise<string[]> {
    return (await this.#query<{ kind: string }>('read unserved kinds', this.#q.unservedKinds, [])).rows.map((r) => r.kind)
  }

  async jobFailUnserved({ createdBefore, error, now }: { createdBefore: number; error: string; now: number }): Promise<number> {
    return (await this.#query('fail unserved jobs', this.#q.failUnserved, [createdBefore, error, now])).rowCount ?? 0
  }

  async jobRelease({ jobs, now }: { jobs: readonly { id: string; attempt: number }[]; now: number }): Promise<void> {
    await this.#query('release jobs', this.#q.releaseJobs, [jobs.map((j) => j.id), jobs.map((j) => j.attempt), now])
  }

  async jobPublish({ id, attempt, result, now }: { id: string; attempt: number; result: string; now: number }): Promise<boolean> {
    const res = await this.#query('publish result', this.#q.publishResult, [id, attempt, result, now, `${this.schema}:change`])
    return res.rowCount === 1
  }

  /**
   * Every final write of the batch in one statement (finishJobs); a batch
   * with retries or snoozes sends them back in that same statement
   * (retryAndFinishJobs), so it applies whole or not at all.
   */
  async jobFinishMany({ finishes, now, signal }: { finishes: readonly JobFinish[]; now: number; signal?: AbortSignal }): Promise<boolean[]> {
    if (finishes.length === 0) return []
    const res = finishes.some(hasCooldown)
      ? await this.#query<{ id: string }>('finish jobs', this.#q.finishCooling, [...finishValues(finishes.filter((f) => !sendsBack(f)), now), ...retryValues(finishes), ...cooldownValues(finishes)], signal)
      : finishes.some(sendsBack)
      ? await this.#query<{ id: string }>('finish jobs', this.#q.retryAndFinishJobs, [...finishValues(finishes.filter((f) => !sendsBack(f)), now), ...retryValues(finishes)], signal)
      : await this.#query<{ id: string }>('finish jobs', this.#q.finishJobs, finishValues(finishes, now), signal)
    const changed = new Set(res.rows.map((r) => r.id))
    return finishes.map((f) => changed.has(f.id))
  }

  async jobFailInterrupted({ runnerId, error, now }: { runnerId: string; error: string; now: number }): Promise<{ failed: number; requeued: number }> {
    const { rows } = await this.#query<{ requeue: boolean }>('fail interrupted jobs', this.#q.failInterrupted, [runnerId, error, now])
    const requeued = rows.filter((r) => r.requeue).length
    return { failed: rows.length - requeued, requeued }
  }

  async runnerRegister({ runnerId, kinds, now }: { runnerId: string; kinds: readonly string[]; now: number }): Promise<void> {
    await this.#query('register runner', this.#q.registerRunner, [runnerId, now, this.#leaseMs, kinds])
  }

  async runnerHeartbeat({ runnerId, now }: { runnerId: string; now: number }): Promise<boolean> {
    return (await this.#query('renew runner', this.#q.heartbeatRunner, [runnerId, now, this.#leaseMs])).rowCount === 1
  }

  async runnerUnregister({ runnerId }: { runnerId: string }): Promise<void> {
    await this.#query('unregister runner', this.#q.deleteRunner, [runnerId])
  }

  async jobGet({ id, scope }: { id: string; scope?: string | null }): Promise<JobRow | undefined> {
    const res =
      scope === undefined
        ? await this.#query<JobRow>('get job', this.#q.getJob, [id])
        : await this.#query<JobRow>('get job', this.#q.getScopedJob, [id, scope])
    return res.rows[0]
  }

  async jobList({ scope, status, kind, limit, beforeId }: JobListParams): Promise<JobRow[]> {
    const res = await this.#query<JobRow>('list jobs', this.#q.listJobs, [
      beforeId ?? null,
      scope === undefined,
      scope ?? null,
      status ?? null,
      kind ?? null,
      limit,
      beforeId === undefined ? null : idPrefixAfter(beforeId),
    ])
    return res.rows
  }

  /**
   * Calls `callback` on every notification of this schema (an insert from
   * any process or any client's committed transaction, a cancellation
   * requested, a result published), and once listening (again). Polls
   * nothing: the runner's fallback poll covers lost notifications and
   * `listen: false`. The listening connection (to `listenUrl` when given)
   * is opened with the first callback and closed with the last; with
   * `listen: false`, or under `pooler: 'transaction'` without `listenUrl`,
   * it is never opened, and the callback never called.
   */
  onWake(callback: (what: WakeReason) => void): () => void {
    this.#wakers.add(callback)
    if (this.#wakers.size === 1 && !this.#closed) this.#startWaking()
    return () => {
      if (!this.#wakers.delete(callback) || this.#wakers.size > 0) return
      this.#stopWaking()
    }
  }

  #startWaking(): void {
    const wake = (what: WakeReason) => {
      for (const w of this.#wakers) w(what)
    }
    if (this.#listen) {
      // Bounded like the pool's own connections, so a listener reconnecting into a silent network cannot hold close() open.
      const config: pg.ClientConfig =
        this.#listenUrl !== undefined
          ? { connectionString: this.#listenUrl, connectionTimeoutMillis: 5_000, keepAlive: true }
          : this.#ownsPool
            ? { connectionString: this.#pool.options.connectionString, connectionTimeoutMillis: 5_000, keepAlive: true }
            : { ...this.#pool.options }
      this.#listener = new NotificationListener({ ...config, keepAlive: true }, NOTIFY_CHANNEL, this.schema, wake)
      this.#listener.start()
    }
  }

  #stopWaking(): void {
    void this.#listener?.stop()
    this.#listener = undefined
  }

  /** Closes the listening connection and, when the driver opened it, the pool; a pool handed in stays open. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#wakers.clear()
    const listener = this.#listener
    this.#stopWaking()
    await listener?.stop()
    if (this.#ownsPool) await this.#pool.end()
    this.#deadlines.stop()
  }

  /**
   * Cancels the statement a timed-out attempt left on `client`'s server
   * process, then destroys the connection. Closing the socket alone is not
   * enough: a backend waiting for a row lock does not notice it, and would
   * make the write once the lock is granted, after the caller was told it
   * failed. Behind a transaction pooler the pid the client was given names
   * no server process (PgBouncer makes up its own, and pg_cancel_backend
   * would run on whichever server connection the pool hands out): the
   * protocol's cancel request goes to the pooler instead, which passes it
   * to the server connection this client's transaction holds, so the
   * client stays connected until the request is through.
   */
  #cancel(client: pg.PoolClient): void {
    const destroy = () => {
      client.off('error', ignore)
      client.release(true)
    }
    if (this.#pooler === 'transaction') {
      void sendCancelRequest(client).then(destroy)
      return
    }
    const pid = (client as unknown as { processID: number | null }).processID
    if (pid !== null) this.#pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => undefined)
    destroy()
  }



  /**
   * The operation's name, with a hint when the error is the mark of a
   * transaction pooler under named prepared statements: a statement
   * prepared on one server connection missing on the next (26000), or
   * prepared already by another client's session there (42P05).
   */
  #hinted(operation: string, err: unknown): string {
    const code = (err as { code?: unknown } | null)?.code
    if (!this.#prepared || (code !== '26000' && code !== '42P05')) return operation
    return `${operation} (a prepared statement was lost between connections: behind a pooler in transaction mode such as PgBouncer, set pooler: 'transaction')`
  }

  /**
   * Runs `fn` in a transaction on one pooled connection, every statement
   * under one bound of statementTimeoutMs (or `signal`); rolls back on any
   * failure, mapping it to DatabaseError as #query does. `readCommitted`
   * begins it READ COMMITTED whatever the server's default.
   */
  async #transaction<T>(operation: string, fn: (query: Query) => Promise<T>, options: { signal?: AbortSignal; readCommitted?: boolean } = {}): Promise<T> {
    let client: pg.PoolClient | undefined
    const own = options.signal === undefined ? this.#deadlines.start() : undefined
    const deadline: AbortLike = options.signal ?? own!
    try {
      await abortable(this.migrate(), deadline)
      client = await abortable(this.#pool.connect(), deadline, (late) => late.release())
      client.on('error', ignore)
      const c = client
      const query = <R extends object>(text: string, values: unknown[]) =>
        abortable(c.query<R>(this.#prepared ? { name: statementName(text), text, values } : { text, values }), deadline)
      // A rated claim counts with snapshots taken after its locks, which only READ COMMITTED gives (whatever the server's default).
      await abortable(c.query(options.readCommitted === true ? 'BEGIN ISOLATION LEVEL READ COMMITTED' : 'BEGIN'), deadline)
      const result = await fn(query)
      await abortable(c.query('COMMIT'), deadline)
      client.off('error', ignore)
      client.release()
      return result
    } catch (err) {
      if (err instanceof Aborted && client !== undefined) this.#cancel(client)
      else {
        client?.off('error', ignore)
        // A connection in an unknown transaction state is not reused.
        client?.release(true)
      }
      throw toDatabaseError(this.#hinted(operation, err), err)
    } finally {
      if (own !== undefined) this.#deadlines.done(own)
    }
  }

  /**
   * Runs one statement on a pooled connection after the migrations,
   * mapping any failure to DatabaseError. When `signal` (default: a bound

  /**
   * Runs one statement on a pooled connection after the migrations,
   * mapping any failure to DatabaseError. When `signal` (default: a bound
   * of statementTimeoutMs) aborts first, the attempt fails with a
   * transient `timeout`, the statement is cancelled and its connection
   * destroyed, so it ends rather than holding a pooled connection.
   */
  async #query<R extends object = Record<string, unknown>>(
    operation: string,
    text: string,
    values: unknown[],
    signal?: AbortSignal,
  ): Promise<pg.QueryResult<R>> {
    let client: pg.PoolClient | undefined
    const deadline = signal === undefined ? this.#deadlines.start() : undefined
    const bound: AbortLike = signal ?? deadline!
    try {
      await abortable(this.migrate(), bound)
      client = await abortable(this.#pool.connect(), bound, (late) => late.release())
      client.on('error', ignore)
      const query = this.#prepared ? { name: statementName(text), text, values } : { text, values }
      const res = await abortable(client.query<R>(query), bound)
      client.off('error', ignore)
      client.release()
      return res
    } catch (err) {
      if (err instanceof Aborted && client !== undefined) this.#cancel(client)
      else {
        client?.off('error', ignore)
        // A connection that failed is not put back for reuse.
        client?.release(!isStatementError(err))
      }
      throw toDatabaseError(this.#hinted(operation, err), err)
    } finally {
      if (deadline !== undefined) this.#deadlines.done(deadline)
    }
  }
}

/**
 * A checked-out pg client has no 'error' listener of the pool's, and an
 * error event with no listener crashes the process. The server can end a
 * connection (a restart, pg_terminate_backend) in the instant between a
 * statement's answer and the client's release, when no statement is there
 * to receive the error: this listener takes it, and the next statement on
 * that client fails as a transient connection error instead.
 */
function ignore(): void {}

const statementNames = new Map<string, string>()

/**
 * The name a statement is prepared under: derived from its text, so the
 * same text always has the same name on a connection however many drivers
 * (or copies of jobtable) share the pool, and never the name of a
 * statement of the application's own.
 */
function statementName(text: string): string {
  let name = statementNames.get(text)
  if (name === undefined) {
    name = `jobtable_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`
    statementNames.set(text, name)
  }
  return name
}

/** The protocol's CancelRequest code (PostgreSQL's frontend/backend protocol, 55.2.8). */
const CANCEL_REQUEST_CODE = 80877102

/**
 * Sends the protocol's cancel request for the statement running on
 * `client`, to the address it connected to (a pooler passes it on), with
 * the key the server, or pooler, gave it at startup. Settles once the
 * other end closes the request's connection, as PostgreSQL and PgBouncer
 * do once they have passed it on, or after 5 s; never rejects. Sent
 * without TLS, and without closing our side first, as libpq does:
 * PgBouncer 1.18 exits on a cancel request whose client left before the
 * request was passed on.
 */
function sendCancelRequest(client: pg.PoolClient): Promise<void> {
  const { processID, secretKey, host, port } = client as unknown as { processID: number | null; secretKey: number | null; host: string; port: number }
  if (processID === null || secretKey === null) return Promise.resolve()
  return new Promise<void>((resolve) => {
    const socket = host.startsWith('/') ? netConnect(`${host}/.s.PGSQL.${port}`) : netConnect(port, host)
    const done = () => {
      socket.destroy()
      resolve()
    }
    socket.setTimeout(5_000, done)
    socket.on('error', done)
    socket.on('end', done)
    socket.on('close', done)
    socket.on('connect', () => {
      const packet = Buffer.alloc(16)
      packet.writeInt32BE(16, 0)
      packet.writeInt32BE(CANCEL_REQUEST_CODE, 4)
      packet.writeInt32BE(processID, 8)
      packet.writeInt32BE(secretKey, 12)
      socket.write(packet)
    })
  })
}

/** Claimed rows as jobs, oldest first: RETURNING gives no order. */
function toClaimed(rows: readonly ClaimedRow[]): ClaimedJob[] {
  return rows
    .map((r) => ({ seq: Number(r.seq), id: r.id, kind: r.kind, payload: r.payload, attempt: r.attempt, maxAttempts: r.maxAttempts, timeoutMs: r.timeoutMs, scope: r.scope, traceContext: r.traceContext, readyAt: r.readyAt }))
    .sort((a, b) => a.seq - b.seq)
    .map(({ seq: _seq, ...job }) => job)
}

/** The arrays of a batch's send-backs (its retries and snoozes), as queries' retriedPart takes them. */
function retryValues(finishes: readonly JobFinish[]): unknown[] {
  const retries = finishes.filter(sendsBack)
  return [retries.map((f) => f.id), retries.map((f) => f.attempt), retries.map((f) => f.runAt), retries.map((f) => f.result), retries.map((f) => (f.status === 'snoozed' ? 1 : 0))]
}

/** The arrays of a batch's cooldowns (finishCooling's $12-$14): the ids of the writes that carry one, their keys and ends. */
function cooldownValues(finishes: readonly JobFinish[]): unknown[] {
  const cooling = finishes.filter(hasCooldown)
  return [cooling.map((f) => f.id), cooling.map((f) => f.cooldown!.key), cooling.map((f) => f.cooldown!.until)]
}

function hasCooldown(finish: JobFinish): boolean {
  return finish.cooldown !== undefined && finish.cooldown !== null
}

/** Whether any job of a batch is of a fair kind: such a batch is inserted by the fair statements (insertFairJobs). */
function hasFairJob(jobs: readonly NewJob[]): boolean {
  for (const job of jobs) if (job.fair === true) return true
  return false
}

function finishValues(finishes: readonly JobFinish[], now: number): unknown[] {
  return [
    finishes.map((f) => f.id),
    finishes.map((f) => f.attempt),
    finishes.map((f) => f.status),
    finishes.map((f) => f.result),
    finishes.map((f) => f.error),
    now,
  ]
}

function insertValues(jobs: readonly NewJob[], now: number): unknown[] {
  return [
    jobs.map((j) => j.id),
    jobs.map((j) => j.kind),
    jobs.map((j) => j.payload),
    jobs.map((j) => j.scope),
    now,
    jobs.map((j) => j.priority),
    jobs.map((j) => j.runAt),
    jobs.map((j) => j.maxAttempts),
    jobs.map((j) => j.timeoutMs),
    jobs.map((j) => j.requeueInterrupted),
    jobs.map((j) => j.traceContext ?? null),
  ]
}

class Aborted extends Error {}

/** Settles like `promise`, or rejects once `signal` aborts; a value that arrives late goes to `late`. */
function abortable<T>(promise: Promise<T>, signal: AbortLike | undefined, late?: (value: T) => void): Promise<T> {
  if (signal === undefined) return promise
  return new Promise<T>((resolve, reject) => {
    let done = false
    const onAbort = () => {
      if (done) return
      done = true
      promise.then((value) => late?.(value), () => undefined)
      reject(new Aborted())
    }
    if (signal.aborted) return onAbort()
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        if (done) return late?.(value)
        done = true
        resolve(value)
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort)
        if (done) return
        done = true
        reject(err)
      },
    )
  })
}

/** An error the server reported for a statement on a healthy connection (one that can be reused). */
function isStatementError(err: unknown): boolean {
  if (!(err instanceof pg.DatabaseError) || typeof err.code !== 'string') return false
  return !/^(08|57P0)/.test(err.code)
}

/**
 * Turns anything a pg call throws into a DatabaseError naming the SQLSTATE
 * or socket code, never the message, which can quote the values written.
 * jobtable's own errors (a schema too new) pass through.
 */
export function toDatabaseError(operation: string, err: unknown): JobtableError {
  if (err instanceof JobtableError) return err
  if (err instanceof Aborted) return new DatabaseError(operation, 'timeout', true)
  const code = (err as { code?: unknown } | null)?.code
  // Socket codes first: EPIPE has the shape of a SQLSTATE.
  if (typeof code === 'string' && TRANSIENT_ERRNO.has(code)) return new DatabaseError(operation, code, true)
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return new DatabaseError(operation, code, TRANSIENT_SQLSTATE.test(code))
  const message = err instanceof Error ? err.message : ''
  if (PG_CONNECTION_LOST.test(message)) return new DatabaseError(operation, 'connection_lost', true)
  if (/pool after calling end/.test(message)) return new DatabaseError(operation, 'closed', false)
  return new DatabaseError(operation, 'unexpected', false)
}
