import Database from 'better-sqlite3'
import { migrate } from 'jobtable/sqlite'
import { newJobId } from '../src/id.js'
import * as sql from '../src/sqlite/queries.js'
import type { EnqueueShape } from './backend.js'
import { percentile } from './stats.js'

/**
 * The raw-SQL floors on SQLite, through better-sqlite3 directly, on
 * jobtable's own schema (same table, same indexes), with ids made by
 * jobtable's own newJobId (UUID version 7), so the id index grows as the
 * library's does.
 *
 * - "single" and "batched": the least SQL a durable queue runs per job in
 *   one process, so the ratio to them is what the library's design adds.
 *   "single" runs one transaction per write (a claim, a completion, an
 *   insert each commit on their own); "batched" puts 100 claims, 100
 *   completions or 100 inserts in one statement.
 * - "shaped": the library's OWN statements (src/sqlite/queries.ts, bound
 *   as src/sqlite/driver.ts binds them) in the library's own batch shape,
 *   with none of its JavaScript: a drain cycle is one immediate
 *   transaction holding finishJob for each job of the previous cycle and
 *   claimJobs for `workers` more (the first claim alone, autocommitted, as
 *   a starting runner makes it); an enqueue is insertJob autocommitted
 *   alone (sequential), or 16 or 1,000 insertJob runs in one immediate
 *   transaction (16 concurrent producers, enqueueMany). The library's
 *   ratio to it is what the library's JavaScript costs.
 */

const BATCH = 100
const PAYLOAD = JSON.stringify({ n: 0 })

export type Sync = 'normal' | 'full'

export function openFloorDb(path: string, sync: Sync): Database.Database {
  const db = new Database(path)
  db.pragma('journal_mode = WAL')
  db.pragma(`synchronous = ${sync === 'full' ? 'FULL' : 'NORMAL'}`)
  migrate(db)
  return db
}

/** Inserts n queued jobs in one transaction (setup, not timed). */
export function seedQueued(db: Database.Database, n: number): void {
  const insert = db.prepare(
    `INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES (?, 'noop', ?, ?, ?)`,
  )
  const now = Date.now()
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(newJobId(now), PAYLOAD, now, now)
  })()
}

/**
 * Inserts n finished (succeeded) jobs: the history a long-lived queue
 * accumulates. Their ids are made by newJobId, as the library made them,
 * at times 1 ms apart ending just before now, so they sit in time order at
 * the start of the id index and later jobs' ids land after them. One
 * prepared INSERT per row in one transaction.
 */
export function seedFinished(db: Database.Database, n: number): void {
  const now = Date.now()
  const insert = db.prepare(
    `INSERT INTO jobtable_jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at)
     VALUES (?, 'noop', 'succeeded', '{"n":0}', 'null', 1, 'old-runner', ?, ?, ?, ?)`,
  )
  db.transaction(() => {
    for (let i = 0; i < n; i++) {
      const at = now - n + i
      insert.run(newJobId(at), at, at, at, at)
    }
  })()
}

/**
 * Inserts n scheduled jobs, as if each had been enqueued with a delay of
 * `delayMs`: created 1 ms apart ending just before now (ids by newJobId at
 * that time, so they sort like real ones, before any job enqueued later),
 * status 'scheduled', run_at = created_at + delayMs. One prepared INSERT
 * per row in one transaction, as seedFinished.
 */
export function seedScheduled(db: Database.Database, n: number, delayMs: number): void {
  const now = Date.now()
  const insert = db.prepare(
    `INSERT INTO jobtable_jobs (id, kind, status, payload, created_at, updated_at, run_at)
     VALUES (?, 'noop', 'scheduled', '{"n":0}', ?, ?, ?)`,
  )
  db.transaction(() => {
    for (let i = 0; i < n; i++) {
      const at = now - n + i
      insert.run(newJobId(at), at, at, at + delayMs)
    }
  })()
}

/** How many jobs the table holds in each status. */
export function countByStatus(db: Database.Database): Record<string, number> {
  const rows = db.prepare(`SELECT status, count(*) AS n FROM jobtable_jobs GROUP BY status`).all() as { status: string; n: number }[]
  return Object.fromEntries(rows.map((r) => [r.status, r.n]))
}

/** Jobs per kind, then per status. */
export function countByKindAndStatus(db: Database.Database): Record<string, Record<string, number>> {
  const rows = db.prepare(`SELECT kind, status, count(*) AS n FROM jobtable_jobs GROUP BY kind, status`).all() as { kind: string; status: string; n: number }[]
  const out: Record<string, Record<string, number>> = {}
  for (const r of rows) (out[r.kind] ??= {})[r.status] = r.n
  return out
}

/** When each job of `kind` started, and its scope, earliest first (see Store.starts). */
export function starts(db: Database.Database, kind: string): { scope: string | null; at: number }[] {
  return db.prepare(`SELECT scope, started_at AS at FROM jobtable_jobs WHERE kind = ? AND started_at IS NOT NULL ORDER BY started_at, seq`).all(kind) as { scope: string | null; at: number }[]
}

const CLAIM_ONE = `
  UPDATE jobtable_jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = @now, updated_at = @now
   WHERE seq = (SELECT seq FROM jobtable_jobs WHERE status = 'queued' AND kind = 'noop' ORDER BY priority DESC, seq LIMIT 1)
  RETURNING seq, id, kind, payload, attempt`
const CLAIM_MANY = `
  UPDATE jobtable_jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = @now, updated_at = @now
   WHERE seq IN (SELECT seq FROM jobtable_jobs WHERE status = 'queued' AND kind = 'noop' ORDER BY priority DESC, seq LIMIT ${BATCH})
  RETURNING seq, id, kind, payload, attempt`
const FINISH_ONE = `
  UPDATE jobtable_jobs SET status = 'succeeded', result = 'null', finished_at = @now, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`
/** 100 completions in one statement, fenced on status: the ids as a JSON array. */
const FINISH_MANY = `
  UPDATE jobtable_jobs SET status = 'succeeded', result = 'null', finished_at = @now, updated_at = @now
   WHERE status = 'running'
     AND id IN (SELECT value FROM json_each(@done))`
const INSERT_MANY = `INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES ${Array.from({ length: BATCH }, () => `(?, 'noop', ?, ?, ?)`).join(', ')}`

interface Claimed {
  seq: number
  id: string
  attempt: number
}

/** Claims and completes every queued job, one autocommitted statement each; returns jobs/s. */
export function drainSingle(db: Database.Database): number {
  const claim = db.prepare(CLAIM_ONE)
  const finish = db.prepare(FINISH_ONE)
  let done = 0
  const t0 = performance.now()
  for (;;) {
    const job = claim.get({ now: Date.now() }) as Claimed | undefined
    if (job === undefined) break
    finish.run({ id: job.id, attempt: job.attempt, now: Date.now() })
    done++
  }
  return done / ((performance.now() - t0) / 1000)
}

/** Claims 100 per statement and completes 100 per statement; returns jobs/s. */
export function drainBatched(db: Database.Database): number {
  const claim = db.prepare(CLAIM_MANY)
  const finish = db.prepare(FINISH_MANY)
  let done = 0
  const t0 = performance.now()
  for (;;) {
    const jobs = claim.all({ now: Date.now() }) as Claimed[]
    if (jobs.length === 0) break
    finish.run({ done: JSON.stringify(jobs.map((j) => j.id)), now: Date.now() })
    done += jobs.length
  }
  return done / ((performance.now() - t0) / 1000)
}

/** Inserts n jobs, one autocommitted INSERT each; returns jobs/s. */
export function insertSingle(db: Database.Database, n: number): number {
  const insert = db.prepare(`INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES (?, 'noop', ?, ?, ?)`)
  const t0 = performance.now()
  for (let i = 0; i < n; i++) {
    const now = Date.now()
    insert.run(newJobId(now), PAYLOAD, now, now)
  }
  return n / ((performance.now() - t0) / 1000)
}

/** The values of one INSERT_MANY: BATCH new jobs made at `now`. */
function batchValues(now: number): unknown[] {
  const values: unknown[] = []
  for (let j = 0; j < BATCH; j++) values.push(newJobId(now), PAYLOAD, now, now)
  return values
}

/** Inserts n jobs, 100 rows per INSERT statement; returns jobs/s. */
export function insertBatched(db: Database.Database, n: number): number {
  const insert = db.prepare(INSERT_MANY)
  const t0 = performance.now()
  for (let i = 0; i < n; i += BATCH) {
    const now = Date.now()
    insert.run(...batchValues(now))
  }
  return (Math.ceil(n / BATCH) * BATCH) / ((performance.now() - t0) / 1000)
}

/** Per job: insert, claim, complete, each its own transaction; returns jobs/s. */
export function mixedSingle(db: Database.Database, n: number): number {
  const insert = db.prepare(`INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES (?, 'noop', ?, ?, ?)`)
  const claim = db.prepare(CLAIM_ONE)
  const finish = db.prepare(FINISH_ONE)
  const t0 = performance.now()
  for (let i = 0; i < n; i++) {
    const now = Date.now()
    insert.run(newJobId(now), PAYLOAD, now, now)
    const job = claim.get({ now }) as Claimed
    finish.run({ id: job.id, attempt: job.attempt, now })
  }
  return n / ((performance.now() - t0) / 1000)
}

/** Per 100 jobs: one insert, one claim, one completion statement; returns jobs/s. */
export function mixedBatched(db: Database.Database, n: number): number {
  const insert = db.prepare(INSERT_MANY)
  const claim = db.prepare(CLAIM_MANY)
  const finish = db.prepare(FINISH_MANY)
  const t0 = performance.now()
  for (let i = 0; i < n; i += BATCH) {
    const now = Date.now()
    insert.run(...batchValues(now))
    const jobs = claim.all({ now }) as Claimed[]
    finish.run({ done: JSON.stringify(jobs.map((j) => j.id)), now })
  }
  return (Math.ceil(n / BATCH) * BATCH) / ((performance.now() - t0) / 1000)
}

/** Enqueue-to-claim with no library: an autocommitted insert then a claim, timed per sample (ms). */
export function latencyFloor(db: Database.Database, samples: number): { p50: number; p99: number } {
  const insert = db.prepare(`INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES (?, 'noop', ?, ?, ?)`)
  const claim = db.prepare(CLAIM_ONE)
  const finish = db.prepare(FINISH_ONE)
  const times: number[] = []
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now()
    const now = Date.now()
    insert.run(newJobId(now), PAYLOAD, now, now)
    const job = claim.get({ now }) as Claimed
    times.push(performance.now() - t0)
    finish.run({ id: job.id, attempt: job.attempt, now })
  }
  return { p50: percentile(times, 50), p99: percentile(times, 99) }
}

/** A claimed row as claimJobs returns it. */
interface ShapedClaim {
  id: string
  attempt: number
}

/**
 * The library's own statements in the runner's shape: the first claim of
 * `workers` jobs autocommitted alone, then per cycle one immediate
 * transaction with finishJob for each job of the previous cycle and
 * claimJobs for `workers` more, until a claim finds none; then checks
 * (untimed) that every job succeeded. Returns jobs/s.
 */
export function drainShaped(db: Database.Database, workers: number): number {
  const claim = db.prepare(sql.claimJobs(['free']))
  const finish = db.prepare(sql.finishJob)
  const cycle = db.transaction((jobs: readonly ShapedClaim[], now: number): ShapedClaim[] => {
    for (const j of jobs) finish.run({ id: j.id, attempt: j.attempt, status: 'succeeded', result: 'null', error: null, now })
    return claim.all({ limit: workers, runnerId: 'floor', k0: 'noop', now }) as ShapedClaim[]
  }).immediate
  let done = 0
  const t0 = performance.now()
  let jobs = claim.all({ limit: workers, runnerId: 'floor', k0: 'noop', now: Date.now() }) as ShapedClaim[]
  while (jobs.length > 0) {
    const next = cycle(jobs, Date.now())
    done += jobs.length
    jobs = next
  }
  const rate = done / ((performance.now() - t0) / 1000)
  // Scheduled jobs beside the queued ones (the scheduled workload) are not the floor's to run.
  const left = db.prepare(`SELECT count(*) FROM jobtable_jobs WHERE status NOT IN ('succeeded', 'scheduled')`).pluck().get() as number
  if (left !== 0) throw new Error(`shaped drain floor: ${left} jobs not succeeded after ${done} finished`)
  return rate
}

/** Jobs per transaction of each enqueue shape: as the library batches 1 awaited enqueue, 16 concurrent ones, one enqueueMany of 1,000. */
export const ENQUEUE_SHAPES: Readonly<Record<EnqueueShape, number>> = { sequential: 1, concurrent: 16, many: 1_000 }

/**
 * The library's inserts: insertJob, one autocommitted run per job when
 * `perTx` is 1 (no BEGIN and COMMIT around a lone insert, as the driver
 * does), else `perTx` jobs in one immediate transaction through insertJobs
 * statements of up to INSERT_ROWS_MAX rows; returns jobs/s.
 */
export function insertShaped(db: Database.Database, n: number, perTx: number): number {
  const insert = db.prepare(sql.insertJob)
  const statements = new Map<number, Database.Statement>()
  // As the driver writes a batch: statements of up to INSERT_ROWS_MAX rows, fourteen values a row.
  const many = db.transaction((count: number, now: number) => {
    for (let from = 0; from < count; from += sql.INSERT_ROWS_MAX) {
      const rows = Math.min(sql.INSERT_ROWS_MAX, count - from)
      let statement = statements.get(rows)
      if (statement === undefined) statements.set(rows, (statement = db.prepare(sql.insertJobs(rows))))
      const values: unknown[] = []
      for (let j = 0; j < rows; j++) values.push(newJobId(now), 'noop', PAYLOAD, null, now, now, 0, null, null, now, 1, null, 0, null)
      statement.run(values)
    }
  }).immediate
  const t0 = performance.now()
  for (let i = 0; i < n; i += perTx) {
    const now = Date.now()
    const count = Math.min(perTx, n - i)
    if (count === 1) insert.run({ id: newJobId(now), kind: 'noop', payload: PAYLOAD, scope: null, now, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: 0, traceContext: null })
    else many(count, now)
  }
  return n / ((performance.now() - t0) / 1000)
}

/** Pages of the file, and pages on its free list (deleted rows' pages, reused by later writes). */
export function storage(db: Database.Database): Record<string, number> {
  return { pages: db.pragma('page_count', { simple: true }) as number, free_pages: db.pragma('freelist_count', { simple: true }) as number }
}

/**
 * The library's prune statement (sql.pruneJobs, bound as the driver binds
 * it) on the table's finished jobs, `batch` rows a statement,
 * autocommitted one after another until one deletes fewer; times each.
 */
export function pruneShaped(db: Database.Database, batch: number): { rows_per_s: number; times: number[] } {
  const prune = db.prepare(sql.pruneJobs)
  const params = { kind: 'noop', statuses: JSON.stringify(['succeeded', 'failed', 'cancelled']), before: Date.now() + 1, limit: batch }
  const times: number[] = []
  let rows = 0
  const t0 = performance.now()
  for (;;) {
    const s = performance.now()
    const n = prune.run(params).changes
    times.push(performance.now() - s)
    rows += n
    if (n < batch) break
  }
  return { rows_per_s: rows / ((performance.now() - t0) / 1000), times }
}
