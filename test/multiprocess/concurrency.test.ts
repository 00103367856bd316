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
import { eventually, readSqlite, spawnWorker, sqliteLedger, type WorkerProcess } from './processes.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const limited = defineKind('ledgered', { payload: z.strictObject({ ms: z.number().int() }), concurrency: 2 })
const perHousehold = defineKind('ledgered', { payload: z.strictObject({ ms: z.number().int() }), scopeConcurrency: 1 })
const HOUSEHOLDS = ['h1', 'h2', 'h3']

/** What each handler saw running at its start (worker-process.ts's `seen`), from every SQLite process's ledger file in `dir`. */
function sqliteSeen(dir: string): { job_id: string; running: number; scope_running: number }[] {
  return readdirSync(dir)
    .filter((f) => /^ledger-\d+\.db$/.test(f))
    .flatMap((f) => readSqlite<{ job_id: string; running: number; scope_running: number }>(join(dir, f), 'SELECT job_id, running, scope_running FROM seen'))
}

/** Ten jobs per household, enqueued household by household, so each household's backlog sits in one block. */
async function enqueueHouseholds(web: Runner): Promise<string[]> {
  const handle = web.register(perHousehold)
  const ids: string[] = []
  for (const scope of HOUSEHOLDS) ids.push(...(await handle.enqueueMany(Array.from({ length: 10 }, () => ({ ms: 15 })), { scope })))
  return ids
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

  /** What a run of three worker processes left: the jobs' attempts, each job's handler starts, and what each start saw running. */
  interface Outcome {
    ids: string[]
    attempts: number[]
    starts: Map<string, number>
    seen: { job_id: string; running: number; scope_running: number }[]
  }

  /** Enqueues through `enqueue`, runs 3 worker processes x 4 workers with `env` on a SQLite file until every job succeeded. */
  async function runOnSqlite(enqueue: (web: Runner) => Promise<string[]>, env: Record<string, string>): Promise<Outcome> {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-limit-'))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'jobs.db')
    const web = new Runner({ driver: sqlite({ path }), logger: silent })
    cleanup.push(() => web.close())
    const ids = await enqueue(web)
    children = Array.from({ length: 3 }, () => spawnWorker({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_WORKERS: '4', JT_POLL_MS: '20', ...env }))
    await Promise.all(children.map((c) => c.ready))
    await eventually(async () => readSqlite<{ n: number }>(path, `SELECT count(*) AS n FROM jobtable_jobs WHERE status <> 'succeeded'`)[0]!.n === 0, 50)
    const attempts = readSqlite<{ attempt: number }>(path, `SELECT attempt FROM jobtable_jobs`).map((r) => r.attempt)
    return { ids, attempts, starts: sqliteLedger(dir), seen: sqliteSeen(dir) }
  }

  /** As runOnSqlite, on a PostgreSQL schema of its own. */
  async function runOnPostgres(enqueue: (web: Runner) => Promise<string[]>, env: Record<string, string>): Promise<Outcome> {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    cleanup.push(async () => {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    })
    const web = new Runner({ driver: postgres({ connectionString: PG_URL, schema }), logger: silent })
    cleanup.push(() => web.close())
    const ids = await enqueue(web)
    await admin.query(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
    await admin.query(`CREATE TABLE "${schema}".seen (job_id text NOT NULL, running int NOT NULL, scope_running int NOT NULL)`)
    children = Array.from({ length: 3 }, () => spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_WORKERS: '4', ...env }))
    await Promise.all(children.map((c) => c.ready))
    await eventually(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".jobs WHERE status <> 'succeeded'`)).rows[0].n === 0, 50)
    const attempts = (await admin.query<{ attempt: number }>(`SELECT attempt FROM "${schema}".jobs`)).rows.map((r) => r.attempt)
    const starts = (await admin.query<{ job_id: string; n: number }>(`SELECT job_id, count(*)::int AS n FROM "${schema}".ledger GROUP BY job_id`)).rows
    const seen = (await admin.query<Outcome['seen'][number]>(`SELECT job_id, running, scope_running FROM "${schema}".seen`)).rows
    return { ids, attempts, starts: new Map(starts.map((r) => [r.job_id, r.n])), seen }
  }

  /** Every job ran exactly once, on its first attempt, and each start recorded what it saw. */
  function expectEachStartedOnce({ ids, attempts, starts, seen }: Outcome): void {
    expect(attempts).toHaveLength(ids.length)
    for (const a of attempts) expect(a).toBe(1)
    expect(starts.size).toBe(ids.length)
    for (const id of ids) expect(starts.get(id)).toBe(1)
    expect(seen).toHaveLength(ids.length)
    expect(new Set(seen.map((r) => r.job_id)).size).toBe(ids.length)
  }

  const sixtyLimited = (web: Runner) => web.register(limited).enqueueMany(Array.from({ length: 60 }, () => ({ ms: 15 })))
  const backends = [
    { name: 'sqlite', run: runOnSqlite, skip: false },
    { name: 'postgres', run: runOnPostgres, skip: postgresBackend().skip !== undefined },
  ]

  for (const { name, run, skip } of backends) {
    it.skipIf(skip)(`${name}: 3 processes x 4 workers, a kind limited to 2: no handler ever sees more than 2 running, all 60 succeed, each started once`, async () => {
      const outcome = await run(sixtyLimited, { JT_CONCURRENCY: '2' })
      expectEachStartedOnce(outcome)
      expect(Math.max(...outcome.seen.map((r) => r.running))).toBeLessThanOrEqual(2)
      expect(Math.max(...outcome.seen.map((r) => r.running))).toBe(2)
    }, 60_000)

    it.skipIf(skip)(`${name}: 3 processes x 4 workers, at most one job per household: no handler ever sees two of its household running, households run side by side, each job starts once`, async () => {
      const outcome = await run(enqueueHouseholds, { JT_SCOPE_CONCURRENCY: '1' })
      expectEachStartedOnce(outcome)
      expect(Math.max(...outcome.seen.map((r) => r.scope_running))).toBe(1)
      expect(Math.max(...outcome.seen.map((r) => r.running))).toBeGreaterThan(1)
    }, 60_000)
  }
})
