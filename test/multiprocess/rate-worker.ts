/**
 * A runner in its own process for the rate-limit, cooldown and fairness
 * tests across processes (rate-limits.test.ts). Configured by environment
 * variables:
 *
 * - JT_BACKEND: `postgres` (JT_PG_URL, JT_SCHEMA) or `sqlite`
 *   (JT_SQLITE_PATH).
 * - JT_WORKERS: the runner's worker count; JT_POLL_MS: the driver's
 *   pollIntervalMs.
 * - JT_KINDS: the kinds it handles, as JSON: each kind's name with its
 *   options (`{"rated":{"rateLimit":{"limit":5,"periodMs":500}},
 *   "fair":{"fairness":"scope"}}`).
 * - JT_LEDGER: where each handler start is recorded before the handler
 *   goes on: a table `<schema>.ledger (job_id, token)` on PostgreSQL (made
 *   by the test), or a SQLite file of this process's own
 *   (`<JT_LEDGER>-<pid>.db`, read by processes.ts's sqliteLedger).
 *
 * Each job's payload `{ ms, cooldownMs }`: its handler records its start;
 * on its first attempt, with `cooldownMs` > 0, it ends with
 * `job.rateLimited(cooldownMs)`; otherwise it waits `ms` and returns.
 * Prints `ready <runner id>` once started; SIGTERM closes the runner.
 */
import { randomUUID } from 'node:crypto'
import Database from 'better-sqlite3'
import pg from 'pg'
import { z } from 'zod'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`rate-worker: ${name} is required`)
  return value
}
const poll = process.env['JT_POLL_MS'] ? { pollIntervalMs: Number(process.env['JT_POLL_MS']) } : {}

let driver: Driver
let record: (jobId: string) => Promise<void>
if (env('JT_BACKEND') === 'postgres') {
  const url = env('JT_PG_URL')
  const schema = env('JT_SCHEMA')
  driver = postgres({ connectionString: url, schema, ...poll })
  const ledger = new pg.Pool({ connectionString: url, max: 2 })
  ledger.on('error', () => undefined)
  record = async (jobId) => void (await ledger.query(`INSERT INTO "${schema}".ledger (job_id, token) VALUES ($1, $2)`, [jobId, randomUUID()]))
} else {
  driver = sqlite({ path: env('JT_SQLITE_PATH'), ...poll })
  const ledger = new Database(`${env('JT_LEDGER')}-${process.pid}.db`)
  ledger.pragma('journal_mode = WAL')
  ledger.exec('CREATE TABLE IF NOT EXISTS ledger (job_id TEXT NOT NULL, token TEXT NOT NULL)')
  const insert = ledger.prepare('INSERT INTO ledger (job_id, token) VALUES (?, ?)')
  record = async (jobId) => void insert.run(jobId, randomUUID())
}

const quiet = { debug() {}, info() {}, warn() {}, error() {} }
const runner = new Runner({ driver, workers: Number(env('JT_WORKERS')), logger: quiet })
for (const [kind, options] of Object.entries(JSON.parse(env('JT_KINDS')) as Record<string, object>)) {
  runner.register(kind, {
    ...options,
    payload: z.strictObject({ ms: z.number().int(), cooldownMs: z.number().int() }),
    handler: async ({ ms, cooldownMs }, job) => {
      await record(job.id)
      if (cooldownMs > 0 && job.attempt === 1) return job.rateLimited(cooldownMs)
      if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms))
      return undefined
    },
  })
}
await runner.start()
process.stdout.write(`ready ${runner.id}\n`)
process.on('SIGTERM', () => {
  void runner.close().then(() => process.exit(0))
})
