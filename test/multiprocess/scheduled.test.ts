import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { eventually, spawnWorker, type WorkerProcess, readSqlite, sqliteLedger } from './processes.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const payload = z.strictObject({ ms: z.number().int() })
const JOBS = 200

/**
 * Enqueues JOBS jobs from this process (a producer, never started) while
 * the worker processes run, each due 200 to 800 ms from its enqueue on the
 * real clock, spread so that due times interleave with insertion order.
 * The batches land over about two seconds, across several of the workers'
 * polls of the file or the database: a worker that took a job before its
 * due time would find some batch well before it is due. (Enqueued all at
 * once just after the workers started, every job would first be seen by
 * their first SQLite poll, a second later: after every due time, whatever
 * the scheduler did.)
 */
async function enqueueScheduled(kind: { enqueue(p: { ms: number }, o: { delayMs: number }): Promise<string> }): Promise<string[]> {
  const ids: string[] = []
  for (let batch = 0; batch < JOBS; batch += 10) {
    if (batch > 0) await new Promise((r) => setTimeout(r, 100))
    // The ten enqueues of one turn share a transaction.
    ids.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => kind.enqueue({ ms: 0 }, { delayMs: 200 + (((batch + i) * 37) % 601) })))))
  }
  return ids
}

interface Row {
  id: string
  status: string
  error: string | null
  run_at: number | string | null
  /** When the handler started: the row's started_at (SQLite), or the ledger's clock at the handler's first act (PostgreSQL). */
  began: number | string | null
  attempt: number
}

/** The checks both backends share, on every row and the ledger (job id → handler starts). */
function expectEachRanOnceNotBeforeDue(ids: readonly string[], rows: Row[], starts: Map<string, number>): void {
  expect(rows).toHaveLength(JOBS)
  const byId = new Map(rows.map((r) => [r.id, r]))
  for (const id of ids) {
    const row = byId.get(id)!
    expect(row, id).toMatchObject({ status: 'succeeded', error: null, attempt: 1 })
    expect(row.run_at, id).not.toBeNull()
    expect(row.began, id).not.toBeNull()
    expect(Number(row.began), `job ${id} started before its run_at`).toBeGreaterThanOrEqual(Number(row.run_at))
    expect(starts.get(id), id).toBe(1)
  }
  expect(starts.size).toBe(JOBS)
}

describe('sqlite: scheduled jobs across processes on one file', () => {
  let dir: string
  let path: string
  let children: WorkerProcess[] = []
  const opened: Runner[] = []

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-mp-sched-'))
    path = join(dir, 'jobs.db')
  })
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const r of opened.splice(0)) await r.close().catch(() => undefined)
    rmSync(dir, { recursive: true, force: true })
  })

  const read = <R>(text: string, ...values: unknown[]): R[] => readSqlite<R>(path, text, ...values)

  /** Job id → handler starts, from every process's own ledger file. */
  const ledger = () => sqliteLedger(dir)

  it('2 worker processes, 200 jobs with delayMs 200-800 from a producer: each runs exactly once, none before its run_at, all succeed', async () => {
    // The file is created and migrated before the processes open it.
    const producer = new Runner({ driver: sqlite({ path }), logger: silent })
    opened.push(producer)
    const kind = producer.register(defineKind('ledgered', { payload }))
    const procs = Array.from({ length: 2 }, () =>
      spawnWorker({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_WORKERS: '8', JT_LOG: join(dir, 'log') }),
    )
    children.push(...procs)
    await Promise.all(procs.map((p) => p.ready))
    const ids = await enqueueScheduled(kind)
    // The processes learn of these from the file's change counter (pollIntervalMs), then of their due times.
    await eventually(async () => read<{ n: number }>(`SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('scheduled', 'queued', 'running')`)[0]!.n === 0, 100)

    expectEachRanOnceNotBeforeDue(ids, read<Row>('SELECT id, status, error, run_at, started_at AS began, attempt FROM jobtable_jobs'), ledger())
    for (const c of procs) expect(c.child.exitCode, c.stderr()).toBeNull()
  }, 60_000)
})

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: scheduled jobs across processes on one database', () => {
  let schema: string
  let admin: pg.Pool
  let children: WorkerProcess[] = []
  const q = async <R extends object>(text: string, values: unknown[] = []) => (await admin.query<R>(text, values)).rows

  beforeEach(async () => {
    schema = testSchema()
    admin = new pg.Pool({ connectionString: PG_URL, max: 3 })
    admin.on('error', () => undefined)
    const driver = postgres({ connectionString: PG_URL, schema })
    await driver.migrate()
    await driver.close()
    // at: the database's clock (this machine's, as the producer's and the workers' are) when the handler recorded its start.
    await q(
      `CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY, at bigint NOT NULL DEFAULT floor(extract(epoch FROM clock_timestamp()) * 1000))`,
    )
  })
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    await q(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
  })

  it('2 worker processes, 200 jobs with delayMs 200-800 from a producer: each runs exactly once, none before its run_at, all succeed', async () => {
    const procs = Array.from({ length: 2 }, () => spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_WORKERS: '8' }))
    children.push(...procs)
    await Promise.all(procs.map((p) => p.ready))
    const producer = new Runner({ driver: postgres({ connectionString: PG_URL, schema }), logger: silent })
    const kind = producer.register(defineKind('ledgered', { payload }))
    let ids: string[]
    try {
      ids = await enqueueScheduled(kind)
    } finally {
      await producer.close()
    }
    await eventually(
      async () => Number((await q<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".jobs WHERE status IN ('scheduled', 'queued', 'running')`))[0]!.n) === 0,
    )

    // Not the row's started_at: it is the claiming runner's clock read before its claim was sent, which can be
    // a few ms before another process's promotion that the claim then saw (observed: 1-3 ms before run_at, the
    // handler's own start after it). The ledger's time is taken once the handler has started.
    const rows = await q<Row>(
      `SELECT j.id, j.status, j.error, j.run_at, l.at AS began, j.attempt FROM "${schema}".jobs j LEFT JOIN "${schema}".ledger l ON l.job_id = j.id`,
    )
    const starts = new Map(
      (await q<{ job_id: string; n: string }>(`SELECT job_id, count(*) AS n FROM "${schema}".ledger GROUP BY job_id`)).map((r) => [r.job_id, Number(r.n)]),
    )
    expectEachRanOnceNotBeforeDue(ids, rows, starts)
    for (const c of procs) expect(c.child.exitCode, c.stderr()).toBeNull()
  }, 60_000)
})

if (skip !== undefined) console.warn(`jobtable tests: multi-process PostgreSQL scheduling tests SKIPPED: ${skip}`)
