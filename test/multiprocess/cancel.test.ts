import { existsSync, mkdtempSync, rmSync } from 'node:fs'
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
/** The kind the child runs: its handler records its start, then returns once its signal aborts (worker-process.ts, JT_SIGNAL_KINDS). */
const awaitsSignal = defineKind('awaits_signal', { payload: z.strictObject({ ms: z.number().int() }) })
/** Longer than any test's budget: a poll of this interval never comes. */
const NEVER_MS = '3600000'

describe('sqlite: a cancellation from another process reaches the child running the job', () => {
  let dir: string
  let path: string
  let children: WorkerProcess[] = []
  const opened: Runner[] = []

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-mp-cancel-'))
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

  it("the test process (never started) cancels a job a child runs: the child's default poll aborts its signal, and the job ends cancelled", async () => {
    // The file is created and migrated before the child opens it; this runner is never started.
    const web = new Runner({ driver: sqlite({ path }), logger: silent })
    opened.push(web)
    const kind = web.register(awaitsSignal)
    const log = join(dir, 'child.log')
    // The driver's default pollIntervalMs: no JT_POLL_MS.
    const child = spawnWorker({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_WORKERS: '2', JT_KINDS: 'ledgered', JT_SIGNAL_KINDS: awaitsSignal.name, JT_LOG: log })
    children.push(child)
    const childId = await child.ready
    const id = await kind.enqueue({ ms: 0 })
    // The child learns of the insert from the file's change counter, and records its start before waiting on its signal.
    await eventually(async () => ledger().get(id) === 1, 50)
    expect(read(`SELECT status, runner_id FROM jobtable_jobs WHERE id = ?`, id)).toEqual([{ status: 'running', runner_id: childId }])

    expect(await web.cancel(id)).toBe('requested')
    expect((await web.get(id)).status).toBe('running')
    // Only the child can end it: its handler returns once the signal aborts, and its final write records it cancelled.
    await eventually(async () => (await web.get(id)).status !== 'running', 50)
    expect(await web.get(id)).toMatchObject({ id, status: 'cancelled', error: null, result: null, attempt: 1 })
    expect(read(`SELECT runner_id FROM jobtable_jobs WHERE id = ?`, id)).toEqual([{ runner_id: childId }])
    expect(ledger().get(id)).toBe(1)
    expect(existsSync(log) ? 'logged' : 'silent', 'the child logged a warning or an error').toBe('silent')
  }, 60_000)
})

describe.skipIf(postgresBackend().skip !== undefined)('postgres: a cancellation from another process reaches the child running the job', () => {
  let schema: string
  let admin: pg.Pool
  let dir: string
  let children: WorkerProcess[] = []
  const opened: Runner[] = []
  const q = async <R extends object>(text: string, values: unknown[] = []) => (await admin.query<R>(text, values)).rows

  beforeEach(async () => {
    schema = testSchema()
    dir = mkdtempSync(join(tmpdir(), 'jobtable-mp-cancel-'))
    admin = new pg.Pool({ connectionString: PG_URL, max: 3 })
    admin.on('error', () => undefined)
    await postgres({ connectionString: PG_URL, schema }).migrate()
    await q(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
  })
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const r of opened.splice(0)) await r.close().catch(() => undefined)
    await q(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
    rmSync(dir, { recursive: true, force: true })
  })

  /** Job id → handler starts, from the ledger table. */
  const ledger = async () =>
    new Map((await q<{ job_id: string; n: string }>(`SELECT job_id, count(*) AS n FROM "${schema}".ledger GROUP BY job_id`)).map((r) => [r.job_id, Number(r.n)]))

  it("the test process (never started) cancels a job a child runs: with the child's poll an hour apart, only the notification channel can abort its signal, and the job ends cancelled", async () => {
    const log = join(dir, 'child.log')
    const child = spawnWorker({
      JT_BACKEND: 'postgres',
      JT_PG_URL: PG_URL,
      JT_SCHEMA: schema,
      JT_WORKERS: '2',
      JT_KINDS: 'ledgered',
      JT_SIGNAL_KINDS: awaitsSignal.name,
      // Neither its fallback poll nor its cancellation watch's own interval comes within the test.
      JT_POLL_MS: NEVER_MS,
      JT_LOG: log,
    })
    children.push(child)
    const childId = await child.ready
    // A web process: its own driver, never started.
    const web = new Runner({ driver: postgres({ connectionString: PG_URL, schema }), logger: silent })
    opened.push(web)
    const kind = web.register(awaitsSignal)
    const id = await kind.enqueue({ ms: 0 })
    // The insert's notification wakes the child, which records the start before waiting on its signal.
    await eventually(async () => (await ledger()).get(id) === 1, 50)
    expect(await q(`SELECT status, runner_id FROM "${schema}".jobs WHERE id = $1`, [id])).toEqual([{ status: 'running', runner_id: childId }])

    expect(await web.cancel(id)).toBe('requested')
    expect((await web.get(id)).status).toBe('running')
    await eventually(async () => (await web.get(id)).status !== 'running', 50)
    expect(await web.get(id)).toMatchObject({ id, status: 'cancelled', error: null, result: null, attempt: 1 })
    expect(await q(`SELECT runner_id FROM "${schema}".jobs WHERE id = $1`, [id])).toEqual([{ runner_id: childId }])
    expect((await ledger()).get(id)).toBe(1)
    expect(existsSync(log) ? 'logged' : 'silent', 'the child logged a warning or an error').toBe('silent')
  }, 60_000)
})
