import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { eventually, readSqlite, spawnWorker, sqliteLedger, type WorkerProcess } from './processes.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const PROCESSES = 3
const JOBS = 600

interface LogLine {
  pid: number
  level: string
  message: string
  count?: number
}

/**
 * PROCESSES worker processes drain JOBS jobs while each prunes every 10 ms
 * with an age of 0, so their pruners run at once, on the same rows, beside
 * each other's claims and final writes. Every job must start exactly once,
 * every one must be deleted once it has finished, and no pruner may fail.
 */
async function drainWhilePruning(
  env: Record<string, string>,
  driver: () => Driver,
  ledger: () => Promise<Map<string, number>>,
  count: () => Promise<number>,
  log: string,
  children: WorkerProcess[],
): Promise<void> {
  const procs = Array.from({ length: PROCESSES }, () =>
    spawnWorker({ ...env, JT_WORKERS: '4', JT_RETENTION_MS: '0', JT_RETENTION_INTERVAL_MS: '10', JT_LOG: log, JT_LOG_INFO: '1' }),
  )
  children.push(...procs)
  await Promise.all(procs.map((p) => p.ready))
  const web = new Runner({ driver: driver(), logger: silent, retention: false })
  const kind = web.register('ledgered', { payload: z.strictObject({ ms: z.number().int() }), handler: () => undefined })
  const ids: string[] = []
  for (let i = 0; i < JOBS; i += 100) ids.push(...(await kind.enqueueMany(Array.from({ length: 100 }, () => ({ ms: 1 })))))
  await web.close()
  // Every job has started, and none is left: each was deleted once it had finished.
  await eventually(async () => (await ledger()).size === JOBS && (await count()) === 0, 50)
  const starts = await ledger()
  expect(ids.filter((id) => starts.get(id) !== 1)).toEqual([])
  const lines = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as LogLine) : []
  expect(lines.filter((l) => /prune/.test(l.message) && l.level !== 'info')).toEqual([])
  const deleted = lines.filter((l) => l.message === 'deleted terminal jobs past their retention')
  expect(deleted.reduce((sum, l) => sum + (l.count ?? 0), 0)).toBe(JOBS)
  // More than one process pruned: the deletes really ran beside each other.
  expect(new Set(deleted.map((l) => l.pid)).size).toBeGreaterThan(1)
}

describe('retention across processes', () => {
  let children: WorkerProcess[] = []
  const cleanups: (() => Promise<void> | void)[] = []
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const fn of cleanups.splice(0).reverse()) await fn()
  })

  it(`sqlite: ${PROCESSES} processes draining one file, each pruning every 10 ms: every job runs once and is deleted once, no pruner fails`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-retention-'))
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'jobs.db')
    // Made before the processes start, so none of them races to migrate.
    await new Runner({ driver: sqlite({ path }), logger: silent }).close()
    await drainWhilePruning(
      // A job another process enqueues is found within the poll: a short one.
      { JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_POLL_MS: '20' },
      () => sqlite({ path }),
      async () => sqliteLedger(dir),
      async () => readSqlite<{ n: number }>(path, 'SELECT count(*) AS n FROM jobtable_jobs')[0]!.n,
      join(dir, 'log'),
      children,
    )
  }, 120_000)

  it.skipIf(postgresBackend().skip !== undefined)(`postgres: ${PROCESSES} processes draining one schema, each pruning every 10 ms: every job runs once and is deleted once, no pruner fails`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-retention-'))
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    admin.on('error', () => undefined)
    cleanups.push(async () => {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    })
    const migrator = postgres({ connectionString: PG_URL, schema })
    await migrator.migrate()
    await migrator.close()
    await admin.query(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
    const q = async <R extends object>(text: string) => (await admin.query<R>(text)).rows
    await drainWhilePruning(
      { JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema },
      () => postgres({ connectionString: PG_URL, schema }),
      async () => new Map((await q<{ job_id: string; n: string }>(`SELECT job_id, count(*) AS n FROM "${schema}".ledger GROUP BY job_id`)).map((r) => [r.job_id, Number(r.n)])),
      async () => Number((await q<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".jobs`))[0]!.n),
      join(dir, 'log'),
      children,
    )
  }, 120_000)
})
