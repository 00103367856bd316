/**
 * A runner in its own process, for the multi-process tests. Configured by
 * environment variables:
 *
 * - JT_BACKEND: `postgres` (JT_PG_URL, JT_SCHEMA, JT_LEASE_MS, JT_SWEEP_MS)
 *   or `sqlite` (JT_SQLITE_PATH, JT_SWEEP_MS).
 * - JT_WORKERS: the runner's worker count.
 * - JT_LEDGER: where each handler start is recorded before the handler
 *   goes on: a table `<schema>.ledger (job_id, token)` on PostgreSQL, or a
 *   SQLite file of this process's own (`<JT_LEDGER>-<pid>.db`).
 *
 * - JT_KINDS: the kinds it has handlers for, comma-separated (default
 *   `ledgered`).
 * - JT_SIGNAL_KINDS: more kinds, comma-separated (default none), whose
 *   handler records its start, then waits until its `job.signal` aborts
 *   and returns normally (ignoring `ms`).
 * - JT_POLL_MS: the driver's `pollIntervalMs` (default the driver's own).
 * - JT_RETENTION_MS, JT_RETENTION_INTERVAL_MS: the runner's
 *   `retention: { maxAgeMs, intervalMs }` (default the runner's own).
 * - JT_LOG: a file each warning and error is appended to, as a JSON line;
 *   info lines too with JT_LOG_INFO=1.
 *
 * Each kind of JT_KINDS records its start, then waits `ms` milliseconds.
 * Prints `ready <runner id>` once started; SIGTERM closes the runner.
 */
import { randomUUID } from 'node:crypto'
import { appendFileSync } from 'node:fs'
import Database from 'better-sqlite3'
import pg from 'pg'
import { z } from 'zod'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`worker-process: ${name} is required`)
  return value
}
const backend = env('JT_BACKEND')
const workers = Number(env('JT_WORKERS'))
const logFile = process.env['JT_LOG']
const line = (level: string) => (fields: object, message: string) => {
  if (logFile) appendFileSync(logFile, JSON.stringify({ pid: process.pid, level, ...fields, message }) + '\n')
}
/** Warnings and errors go to JT_LOG when it is set, to explain a failing test. */
const logger = { debug() {}, info: process.env['JT_LOG_INFO'] === '1' ? line('info') : () => {}, warn: line('warn'), error: line('error') }

let driver: Driver
let record: (jobId: string) => Promise<void>
/**
 * With JT_CONCURRENCY or JT_SCOPE_CONCURRENCY: records, at a handler's
 * start, how many jobs of its kind the database holds running then, in
 * all and in the job's scope (its own included), in a table `seen
 * (job_id, running, scope_running)` (PostgreSQL: `<schema>.seen`, made by the test;
 * SQLite: this process's ledger file). A limit broken for a moment shows.
 */
let recordRunning: (jobId: string, kind: string) => Promise<void> = async () => undefined
if (backend === 'postgres') {
  const url = env('JT_PG_URL')
  const schema = env('JT_SCHEMA')
  driver = postgres({
    connectionString: url,
    schema,
    leaseMs: Number(process.env['JT_LEASE_MS'] ?? 30_000),
    ...(process.env['JT_POLL_MS'] ? { pollIntervalMs: Number(process.env['JT_POLL_MS']) } : {}),
    ...(process.env['JT_SWEEP_MS'] ? { sweepIntervalMs: Number(process.env['JT_SWEEP_MS']) } : {}),
  })
  const ledger = new pg.Pool({ connectionString: url, max: 4 })
  ledger.on('error', () => undefined)
  recordRunning = async (jobId, kind) => {
    await ledger.query(
      `INSERT INTO "${schema}".seen (job_id, running, scope_running)
       SELECT $1, count(*), count(*) FILTER (WHERE r.scope IS NOT DISTINCT FROM (SELECT j.scope FROM "${schema}".jobs j WHERE j.id = $1))
         FROM "${schema}".jobs r WHERE r.status = 'running' AND r.kind = $2`,
      [jobId, kind],
    )
  }
  record = async (jobId) => {
    // One token per start: a retried insert of this start is deduplicated,
    // a second start of the job is not. Retried until it lands, so a
    // database restart cannot turn a start into a handler failure.
    const token = randomUUID()
    for (;;) {
      try {
        await ledger.query(`INSERT INTO "${schema}".ledger (job_id, token) VALUES ($1, $2) ON CONFLICT (token) DO NOTHING`, [jobId, token])
        return
      } catch {
        await new Promise((r) => setTimeout(r, 100))
      }
    }
  }
} else {
  driver = sqlite({
    path: env('JT_SQLITE_PATH'),
    sweepIntervalMs: Number(process.env['JT_SWEEP_MS'] ?? 5_000),
    ...(process.env['JT_POLL_MS'] ? { pollIntervalMs: Number(process.env['JT_POLL_MS']) } : {}),
  })
  const ledger = new Database(`${env('JT_LEDGER')}-${process.pid}.db`)
  ledger.pragma('journal_mode = WAL')
  ledger.exec('CREATE TABLE IF NOT EXISTS ledger (job_id TEXT NOT NULL, token TEXT NOT NULL)')
  const insert = ledger.prepare('INSERT INTO ledger (job_id, token) VALUES (?, ?)')
  record = async (jobId) => void insert.run(jobId, randomUUID())
  ledger.exec('CREATE TABLE IF NOT EXISTS seen (job_id TEXT NOT NULL, running INTEGER NOT NULL, scope_running INTEGER NOT NULL)')
  const jobs = new Database(env('JT_SQLITE_PATH'), { readonly: true })
  jobs.pragma('busy_timeout = 5000')
  // One statement, so both counts come from one snapshot of the file.
  const count = jobs.prepare(
    `SELECT count(*) AS n, count(*) FILTER (WHERE r.scope IS (SELECT j.scope FROM jobtable_jobs j WHERE j.id = @id)) AS inScope
       FROM jobtable_jobs r WHERE r.status = 'running' AND r.kind = @kind`,
  )
  const seen = ledger.prepare('INSERT INTO seen (job_id, running, scope_running) VALUES (?, ?, ?)')
  recordRunning = async (jobId, kind) => {
    const { n, inScope } = count.get({ id: jobId, kind }) as { n: number; inScope: number }
    seen.run(jobId, n, inScope)
  }
}

const retention = process.env['JT_RETENTION_MS']
  ? { retention: { maxAgeMs: Number(process.env['JT_RETENTION_MS']), intervalMs: Number(process.env['JT_RETENTION_INTERVAL_MS'] ?? 60_000) } }
  : {}
const runner = new Runner({ driver, workers, logger, ...retention })
// JT_KINDS: the kinds this process has handlers for (default `ledgered`); a
// rolling deploy runs processes of an older set beside a newer one.
// JT_CONCURRENCY: a limit on each of those kinds' running jobs across every process.
// JT_SCOPE_CONCURRENCY: a limit on each of those kinds' running jobs per scope across every process.
const concurrency = {
  ...(process.env['JT_CONCURRENCY'] ? { concurrency: Number(process.env['JT_CONCURRENCY']) } : {}),
  ...(process.env['JT_SCOPE_CONCURRENCY'] ? { scopeConcurrency: Number(process.env['JT_SCOPE_CONCURRENCY']) } : {}),
}
const countsRunning = process.env['JT_CONCURRENCY'] !== undefined || process.env['JT_SCOPE_CONCURRENCY'] !== undefined
for (const kind of (process.env['JT_KINDS'] ?? 'ledgered').split(',')) {
  runner.register(kind, {
    ...concurrency,
    payload: z.strictObject({ ms: z.number().int() }),
    handler: async ({ ms }, job) => {
      await record(job.id)
      if (countsRunning) await recordRunning(job.id, job.kind)
      if (ms > 0) await new Promise((r) => setTimeout(r, ms))
    },
  })
}
// JT_SIGNAL_KINDS: kinds whose handler ends only when its signal aborts (a cancellation, or stop()).
for (const kind of (process.env['JT_SIGNAL_KINDS'] ?? '').split(',').filter((k) => k !== '')) {
  runner.register(kind, {
    payload: z.strictObject({ ms: z.number().int() }),
    handler: async (_payload, job) => {
      await record(job.id)
      const { signal } = job
      if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    },
  })
}
await runner.start()
process.stdout.write(`ready ${runner.id}\n`)
process.on('SIGTERM', () => {
  void runner.close().then(() => process.exit(0))
})
