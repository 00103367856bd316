import { randomUUID } from 'node:crypto'
import Database from 'better-sqlite3'
import { migrate } from 'jobtable/sqlite'
import { percentile } from './stats.js'

/**
 * The raw-SQL floor on SQLite: the least SQL a durable queue runs per job
 * in one process, through better-sqlite3 directly, on jobtable's own
 * schema (same table, same indexes), so the ratio to it is what the
 * library adds. "single" runs one transaction per write (a claim, a
 * completion, an insert each commit on their own); "batched" puts 100
 * claims, 100 completions or 100 inserts in one statement.
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
    for (let i = 0; i < n; i++) insert.run(randomUUID(), PAYLOAD, now, now)
  })()
}

/**
 * Inserts n finished (succeeded) jobs with one INSERT ... SELECT over a
 * recursive counter: the history a long-lived queue accumulates.
 */
export function seedFinished(db: Database.Database, n: number): void {
  const now = Date.now()
  db.prepare(
    `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < @n)
     INSERT INTO jobtable_jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at)
     SELECT lower(hex(randomblob(16))), 'noop', 'succeeded', '{"n":0}', 'null', 1, 'old-runner', @now, @now, @now, @now FROM c`,
  ).run({ n, now })
}

const CLAIM_ONE = `
  UPDATE jobtable_jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = @now, updated_at = @now
   WHERE seq = (SELECT seq FROM jobtable_jobs WHERE status = 'queued' ORDER BY seq LIMIT 1)
  RETURNING seq, id, kind, payload, attempt`
const CLAIM_MANY = `
  UPDATE jobtable_jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = @now, updated_at = @now
   WHERE seq IN (SELECT seq FROM jobtable_jobs WHERE status = 'queued' ORDER BY seq LIMIT ${BATCH})
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
    insert.run(randomUUID(), PAYLOAD, now, now)
  }
  return n / ((performance.now() - t0) / 1000)
}

/** Inserts n jobs, 100 rows per INSERT statement; returns jobs/s. */
export function insertBatched(db: Database.Database, n: number): number {
  const insert = db.prepare(INSERT_MANY)
  const t0 = performance.now()
  for (let i = 0; i < n; i += BATCH) {
    const now = Date.now()
    const args: unknown[] = []
    for (let j = 0; j < BATCH; j++) args.push(randomUUID(), PAYLOAD, now, now)
    insert.run(...args)
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
    insert.run(randomUUID(), PAYLOAD, now, now)
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
    const args: unknown[] = []
    for (let j = 0; j < BATCH; j++) args.push(randomUUID(), PAYLOAD, now, now)
    insert.run(...args)
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
    insert.run(randomUUID(), PAYLOAD, now, now)
    const job = claim.get({ now }) as Claimed
    times.push(performance.now() - t0)
    finish.run({ id: job.id, attempt: job.attempt, now })
  }
  return { p50: percentile(times, 50), p99: percentile(times, 99) }
}
