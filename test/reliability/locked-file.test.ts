import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, defineKind, Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { eventually, readSqlite, spawnWorker, sqliteLedger, type WorkerProcess } from '../multiprocess/processes.js'
import { FULL, bound, size } from './sizes.js'

const WORKER = fileURLToPath(new URL('./support/faults-locked-worker.ts', import.meta.url))
/** The runner's stop timeout; SIGTERM must end the process within it plus STOP_SLACK_MS. */
const STOP_TIMEOUT_MS = 2_000
const STOP_SLACK_MS = 500
/** The bound on the runner's event loop delay at p99. */
const LOOP_P99_MS = 300

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('sqlite: a locked file', () => {
  let dir: string
  let children: WorkerProcess[] = []
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-locked-'))
  })
  afterEach(async () => {
    for (const c of children) if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    rmSync(dir, { recursive: true, force: true })
  })

  const spawn = (name: string) => {
    const worker = spawnWorker(
      {
        JT_SQLITE_PATH: join(dir, 'jobs.db'),
        JT_LEDGER: join(dir, 'ledger'),
        JT_WORKERS: '2',
        JT_JOB_MS: '50',
        JT_STOP_TIMEOUT_MS: String(STOP_TIMEOUT_MS),
        JT_STATS: join(dir, `${name}.json`),
        JT_LOG: join(dir, 'log.jsonl'),
      },
      WORKER,
    )
    children.push(worker)
    return worker
  }

  /**
   * Proves: another process holding BEGIN EXCLUSIVE on the file, again and
   * again, crashes nothing and stalls the runner's event loop little (its
   * busy wait is short; it backs off instead); SIGTERM during a lock ends
   * the process within its stop timeout; once the locks end, a restarted
   * runner brings every job to exactly one terminal state, none started twice.
   */
  it('rides out repeated exclusive locks, and stops promptly on SIGTERM during one', async () => {
    const jobs = size('locked_file_jobs', 100, 1_000)
    const lockMs = size('locked_file_lock_ms', 1_000, 10_000)
    const periodMs = size('locked_file_period_ms', 5_000, 120_000)
    const gapMs = size('locked_file_gap_ms', 2_000, 2_000)
    const path = join(dir, 'jobs.db')

    const producer = new Runner({ driver: sqlite({ path }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
    const kind = producer.register(defineKind('locked', { payload: z.strictObject({ n: z.number().int() }) }))
    const ids = await kind.enqueueMany(Array.from({ length: jobs }, (_, n) => ({ n })))
    await producer.close()

    const first = spawn('first')
    await first.ready
    const locker = new Database(path)
    // Waits for the runner's own short write to end before it takes the lock.
    locker.pragma('busy_timeout = 2000')
    let locks = 0
    let exitMs: number | undefined
    const startedAt = Date.now()
    for (;;) {
      locker.exec('BEGIN EXCLUSIVE')
      locks++
      const last = Date.now() + lockMs + gapMs > startedAt + periodMs
      if (last) {
        // SIGTERM in the middle of the last lock, with jobs still queued and running.
        await sleep(lockMs / 2)
        const signalled = Date.now()
        first.child.kill('SIGTERM')
        expect(await first.exited).toBe(0)
        exitMs = Date.now() - signalled
        await sleep(lockMs / 2)
      } else {
        await sleep(lockMs)
      }
      locker.exec('COMMIT')
      if (last) break
      await sleep(gapMs)
    }
    locker.close()
    const stats = JSON.parse(readFileSync(join(dir, 'first.json'), 'utf8')) as { p50: number; p99: number; max: number; samples: number }
    const doneBefore = readSqlite<{ n: number }>(path, `SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('succeeded', 'failed', 'cancelled')`)[0]!.n

    // The locks are over: a restarted runner fails what the first left running and runs the rest.
    const second = spawn('second')
    await second.ready
    await eventually(async () => readSqlite<{ n: number }>(path, `SELECT count(*) AS n FROM jobtable_jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')`)[0]!.n === 0)
    second.child.kill('SIGTERM')
    expect(await second.exited).toBe(0)

    const rows = readSqlite<{ id: string; status: string; error: string | null }>(path, 'SELECT id, status, error FROM jobtable_jobs')
    const starts = sqliteLedger(dir)
    expect(rows).toHaveLength(jobs)
    const byStatus: Record<string, number> = {}
    for (const row of rows) {
      byStatus[row.status] = (byStatus[row.status] ?? 0) + 1
      const count = starts.get(row.id) ?? 0
      if (row.status === 'succeeded') expect(count, row.id).toBe(1)
      else {
        // Killed before its final write: started at most once, failed as interrupted.
        expect(row, row.id).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED })
        expect(count, row.id).toBeLessThanOrEqual(1)
      }
    }
    for (const id of ids) expect(starts.get(id) ?? 0).toBeLessThanOrEqual(1)
    expect(readSqlite<{ integrity_check: string }>(path, 'PRAGMA integrity_check')).toEqual([{ integrity_check: 'ok' }])
    const log = existsSync(join(dir, 'log.jsonl')) ? readFileSync(join(dir, 'log.jsonl'), 'utf8') : ''
    console.info(
      `locked file: ${jobs} jobs, ${locks} locks of ${lockMs} ms over ${Date.now() - startedAt} ms; loop delay p50 ${stats.p50} ms, p99 ${stats.p99} ms, max ${stats.max} ms (${stats.samples} samples); SIGTERM to exit ${exitMs} ms; ${doneBefore} terminal before the restart; ${JSON.stringify(byStatus)}; ${log.split('\n').filter((l) => l.includes('SQLITE_BUSY')).length} busy log lines`,
    )
    if (FULL) {
      expect(stats.p99).toBeLessThan(LOOP_P99_MS)
      expect(exitMs).toBeLessThanOrEqual(STOP_TIMEOUT_MS + STOP_SLACK_MS)
    }
  }, bound(40_000, 600_000))
})
