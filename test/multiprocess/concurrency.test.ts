import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
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

describe('concurrency limits across processes', () => {
  let children: WorkerProcess[] = []
  const cleanup: (() => Promise<void> | void)[] = []
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const f of cleanup.splice(0).reverse()) await f()
  })

  it('sqlite: 3 processes x 4 workers, a kind limited to 2: no handler ever sees more than 2 running, all 60 succeed, each started once', async () => {
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
    const rows = read<{ id: string; attempt: number }>(`SELECT id, attempt FROM jobtable_jobs`)
    expect(rows).toHaveLength(ids.length)
    for (const r of rows) expect(r.attempt).toBe(1)
    // What each handler saw running in the database at its start, from every process's ledger.
    const seen = readdirSync(dir)
      .filter((f) => /^ledger-\d+\.db$/.test(f))
      .flatMap((f) => {
        const db = new Database(join(dir, f), { readonly: true })
        try {
          return db.prepare('SELECT job_id, running FROM seen').all() as { job_id: string; running: number }[]
        } finally {
          db.close()
        }
      })
    expect(new Set(seen.map((r) => r.job_id)).size).toBe(ids.length)
    expect(Math.max(...seen.map((r) => r.running))).toBeLessThanOrEqual(2)
    expect(Math.max(...seen.map((r) => r.running))).toBe(2)
  }, 60_000)

  it.skipIf(postgresBackend().skip !== undefined)('postgres: 3 processes x 4 workers, a kind limited to 2: no handler ever sees more than 2 running, all 60 succeed, each started once', async () => {
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
    await admin.query(`CREATE TABLE "${schema}".seen (job_id text NOT NULL, running int NOT NULL)`)
    children = Array.from({ length: 3 }, () =>
      spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_WORKERS: '4', JT_CONCURRENCY: '2' }),
    )
    await Promise.all(children.map((c) => c.ready))
    await eventually(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".jobs WHERE status <> 'succeeded'`)).rows[0].n === 0, 50)
    const rows = (await admin.query(`SELECT id, attempt FROM "${schema}".jobs`)).rows
    expect(rows).toHaveLength(ids.length)
    for (const r of rows) expect(r.attempt).toBe(1)
    const starts = (await admin.query(`SELECT job_id, count(*)::int AS n FROM "${schema}".ledger GROUP BY job_id`)).rows
    expect(starts).toHaveLength(ids.length)
    for (const s of starts) expect(s.n).toBe(1)
    // What each handler saw running in the database at its start.
    const seen = (await admin.query<{ running: number }>(`SELECT running FROM "${schema}".seen`)).rows.map((r) => r.running)
    expect(seen).toHaveLength(ids.length)
    expect(Math.max(...seen)).toBeLessThanOrEqual(2)
    expect(Math.max(...seen)).toBe(2)
  }, 60_000)
})
