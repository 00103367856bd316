import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { eventually, spawnWorker, type WorkerProcess } from './processes.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const limited = defineKind('ledgered', { payload: z.strictObject({ ms: z.number().int() }), concurrency: 2 })

/**
 * The most jobs running at once, from the stored [started_at, finished_at)
 * of every job: a claim may start a job in the very millisecond another's
 * final write freed its place, so the intervals are half-open.
 */
function mostAtOnce(rows: readonly { started_at: number | string; finished_at: number | string }[]): number {
  const events = rows.flatMap((r) => [
    [Number(r.started_at), 1],
    [Number(r.finished_at), -1],
  ])
  events.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!)
  let now = 0
  let most = 0
  for (const [, d] of events) most = Math.max(most, (now += d!))
  return most
}

describe('concurrency limits across processes', () => {
  let children: WorkerProcess[] = []
  const cleanup: (() => Promise<void> | void)[] = []
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const f of cleanup.splice(0).reverse()) await f()
  })

  it('sqlite: 3 processes x 4 workers, a kind limited to 2: never more than 2 running at once, all 60 succeed, each started once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-limit-'))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'jobs.db')
    const web = new Runner({ driver: sqlite({ path }), logger: silent })
    cleanup.push(() => web.close())
    const ids = await web.register(limited).enqueueMany(Array.from({ length: 60 }, () => ({ ms: 15 })))
    children = Array.from({ length: 3 }, () =>
      spawnWorker({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_WORKERS: '4', JT_CONCURRENCY: '2', JT_POLL_MS: '20' }),
    )
    await Promise.all(children.map((c) => c.ready))
    const read = <R>(text: string) => {
      const db = new Database(path, { readonly: true })
      try {
        return db.prepare(text).all() as R[]
      } finally {
        db.close()
      }
    }
    await eventually(async () => read<{ n: number }>(`SELECT count(*) AS n FROM jobtable_jobs WHERE status <> 'succeeded'`)[0]!.n === 0, 50)
    const rows = read<{ id: string; started_at: number; finished_at: number; attempt: number }>(`SELECT id, started_at, finished_at, attempt FROM jobtable_jobs`)
    expect(rows).toHaveLength(ids.length)
    for (const r of rows) expect(r.attempt).toBe(1)
    expect(mostAtOnce(rows)).toBeLessThanOrEqual(2)
    expect(mostAtOnce(rows)).toBe(2)
  }, 60_000)

  it.skipIf(postgresBackend().skip !== undefined)('postgres: 3 processes x 4 workers, a kind limited to 2: never more than 2 running at once, all 60 succeed, each started once', async () => {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    cleanup.push(async () => {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    })
    const web = new Runner({ driver: postgres({ connectionString: PG_URL, schema }), logger: silent })
    cleanup.push(() => web.close())
    const ids = await web.register(limited).enqueueMany(Array.from({ length: 60 }, () => ({ ms: 15 })))
    await admin.query(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
    children = Array.from({ length: 3 }, () =>
      spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_WORKERS: '4', JT_CONCURRENCY: '2' }),
    )
    await Promise.all(children.map((c) => c.ready))
    await eventually(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".jobs WHERE status <> 'succeeded'`)).rows[0].n === 0, 50)
    const rows = (await admin.query(`SELECT id, started_at, finished_at, attempt FROM "${schema}".jobs`)).rows
    expect(rows).toHaveLength(ids.length)
    for (const r of rows) expect(r.attempt).toBe(1)
    const starts = (await admin.query(`SELECT job_id, count(*)::int AS n FROM "${schema}".ledger GROUP BY job_id`)).rows
    expect(starts).toHaveLength(ids.length)
    for (const s of starts) expect(s.n).toBe(1)
    expect(mostAtOnce(rows)).toBeLessThanOrEqual(2)
    expect(mostAtOnce(rows)).toBe(2)
  }, 60_000)
})
