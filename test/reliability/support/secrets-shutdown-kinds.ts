/**
 * The kinds of `jobtable worker --kinds` in graceful-shutdown.test.ts: one
 * kind, `sleepy`, whose handler sleeps its payload's `ms`, ignoring its
 * signal, and returns. Every handler start and finish, and every SIGTERM
 * the process receives, is written to a ledger the test reads after the
 * process has exited: a SQLite file (JT_SHUTDOWN_LEDGER), one row per
 * event in the order the process saw them (`seq`), with the process's
 * clock (`at`, epoch ms). A start after the first signal shows as a
 * `start` row with a greater `seq`, whatever the clocks say.
 */
import Database from 'better-sqlite3'
import { z } from 'zod'
import type { Runner } from 'jobtable'

export const SLEEPY = 'sleepy'
export const sleepyPayload = z.strictObject({ ms: z.number().int().min(0) })

/** The ledger's rows. */
export interface LedgerRow {
  readonly seq: number
  readonly what: 'start' | 'finish' | 'signal'
  readonly job_id: string | null
  readonly at: number
}

export const LEDGER_TABLE = 'CREATE TABLE IF NOT EXISTS ledger (seq INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL, job_id TEXT, at REAL NOT NULL)'

export function registerKinds(runner: Runner): void {
  const path = process.env['JT_SHUTDOWN_LEDGER']
  if (path === undefined) throw new Error('JT_SHUTDOWN_LEDGER is required')
  const ledger = new Database(path)
  ledger.pragma('journal_mode = WAL')
  ledger.exec(LEDGER_TABLE)
  const insert = ledger.prepare('INSERT INTO ledger (what, job_id, at) VALUES (?, ?, ?)')
  const note = (what: LedgerRow['what'], jobId: string | null) => void insert.run(what, jobId, performance.timeOrigin + performance.now())
  // Beside the command's own handler: Node calls both, in one go, before anything else runs.
  process.on('SIGTERM', () => note('signal', null))
  runner.register(SLEEPY, {
    payload: sleepyPayload,
    handler: async ({ ms }, job) => {
      note('start', job.id)
      await new Promise((resolve) => setTimeout(resolve, ms))
      note('finish', job.id)
      return undefined
    },
  })
}
