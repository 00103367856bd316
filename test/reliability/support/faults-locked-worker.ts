/**
 * A SQLite runner in its own process for the locked-file test, measuring
 * its own event loop's delay. Configured by environment variables:
 * JT_SQLITE_PATH (the jobs file), JT_LEDGER (each handler start is
 * recorded in `<JT_LEDGER>-<pid>.db`), JT_WORKERS, JT_JOB_MS (each
 * handler's length; it ends early when its signal aborts),
 * JT_STOP_TIMEOUT_MS, JT_STATS (where the loop's delay percentiles are
 * written as JSON at SIGTERM, before exiting) and JT_LOG (warnings and
 * errors, one JSON line each).
 *
 * Prints `ready <runner id>` once started; SIGTERM closes the runner,
 * writes the statistics and exits 0.
 */
import { randomUUID } from 'node:crypto'
import { appendFileSync, writeFileSync } from 'node:fs'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Database from 'better-sqlite3'
import { z } from 'zod'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`faults-locked-worker: ${name} is required`)
  return value
}
const loop = monitorEventLoopDelay({ resolution: 10 })
loop.enable()
const logFile = process.env['JT_LOG']
const line = (level: string) => (fields: object, message: string) => {
  if (logFile) appendFileSync(logFile, JSON.stringify({ pid: process.pid, level, ...fields, message }) + '\n')
}
const logger = { debug() {}, info() {}, warn: line('warn'), error: line('error') }

const ledger = new Database(`${env('JT_LEDGER')}-${process.pid}.db`)
ledger.pragma('journal_mode = WAL')
ledger.exec('CREATE TABLE IF NOT EXISTS ledger (job_id TEXT NOT NULL, token TEXT NOT NULL)')
const record = ledger.prepare('INSERT INTO ledger (job_id, token) VALUES (?, ?)')

const jobMs = Number(env('JT_JOB_MS'))
const runner = new Runner({ driver: sqlite({ path: env('JT_SQLITE_PATH') }), workers: Number(env('JT_WORKERS')), logger, stopTimeoutMs: Number(env('JT_STOP_TIMEOUT_MS')) })
runner.register('locked', {
  payload: z.strictObject({ n: z.number().int() }),
  handler: async (_payload, job) => {
    record.run(job.id, randomUUID())
    const { signal } = job
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, jobMs)
      signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true })
    })
  },
})
await runner.start()
process.stdout.write(`ready ${runner.id}\n`)
process.on('SIGTERM', () => {
  void runner.close().then(() => {
    loop.disable()
    const ms = (ns: number) => Math.round(ns / 1e4) / 100
    writeFileSync(env('JT_STATS'), JSON.stringify({ p50: ms(loop.percentile(50)), p99: ms(loop.percentile(99)), max: ms(loop.max), samples: loop.count }))
    process.exit(0)
  })
})
