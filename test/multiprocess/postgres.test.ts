import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, defineKind, Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { eventually, spawnWorker, type WorkerProcess } from './processes.js'

const skip = postgresBackend().skip
const silent = { debug() {}, info() {}, warn() {}, error() {} }

describe.skipIf(skip !== undefined)('postgres: many processes on one database', () => {
  let schema: string
  let admin: pg.Pool
  let children: WorkerProcess[] = []
  const q = async <R extends object>(text: string, values: unknown[] = []) => (await admin.query<R>(text, values)).rows

  beforeEach(async () => {
    schema = testSchema()
    admin = new pg.Pool({ connectionString: PG_URL, max: 3 })
    admin.on('error', () => undefined)
    await postgres({ connectionString: PG_URL, schema }).migrate()
    await q(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
  })
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    await q(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
  })

  const start = (n: number, env: Record<string, string> = {}) => {
    const started = Array.from({ length: n }, () =>
      spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_WORKERS: '8', ...env }),
    )
    children.push(...started)
    return started
  }

  /** Enqueues `count` jobs through a runner that is never started: only the other processes run them. */
  const enqueue = async (count: number, ms: number) => {
    const driver = postgres({ connectionString: PG_URL, schema })
    const runner = new Runner({ driver, logger: silent })
    const kind = runner.register('ledgered', { payload: z.strictObject({ ms: z.number().int() }), handler: () => undefined })
    const ids: string[] = []
    for (let i = 0; i < count; i += 1000) ids.push(...(await kind.enqueueMany(Array.from({ length: Math.min(1000, count - i) }, () => ({ ms })))))
    await runner.close()
    return ids
  }

  const unfinished = async () =>
    Number((await q<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".jobs WHERE status IN ('queued', 'running')`))[0]!.n)

  /** Job id → how many times its handler started, from the ledger. */
  const ledger = async () =>
    new Map((await q<{ job_id: string; n: string }>(`SELECT job_id, count(*) AS n FROM "${schema}".ledger GROUP BY job_id`)).map((r) => [r.job_id, Number(r.n)]))

  it('a rolling deploy: two processes of the old version (no new kind) beside two of the new; every job runs exactly once, on a process that has its kind, none fails', async () => {
    const olds = start(2, { JT_KINDS: 'ledgered' })
    const news = start(2, { JT_KINDS: 'ledgered,ledgered_v2' })
    const newIds = await Promise.all(news.map((p) => p.ready))
    await Promise.all(olds.map((p) => p.ready))
    const driver = postgres({ connectionString: PG_URL, schema })
    const web = new Runner({ driver, logger: silent })
    const payload = z.strictObject({ ms: z.number().int() })
    const added = await web.register(defineKind('ledgered_v2', { payload })).enqueueMany(Array.from({ length: 1000 }, () => ({ ms: 0 })))
    const old = await web.register(defineKind('ledgered', { payload })).enqueueMany(Array.from({ length: 1000 }, () => ({ ms: 0 })))
    await web.close()
    await eventually(async () => (await unfinished()) === 0)
    expect(await q(`SELECT status, error, count(*)::int AS n FROM "${schema}".jobs GROUP BY status, error`)).toEqual([{ status: 'succeeded', error: null, n: 2000 }])
    const ranBy = new Map((await q<{ id: string; runner_id: string }>(`SELECT id, runner_id FROM "${schema}".jobs`)).map((r) => [r.id, r.runner_id]))
    for (const id of added) expect(newIds).toContain(ranBy.get(id))
    const starts = await ledger()
    expect(starts.size).toBe(2000)
    for (const id of [...added, ...old]) expect(starts.get(id)).toBe(1)
  }, 60_000)

  it('4 processes x 8 workers run 20,000 jobs: every handler starts exactly once and every job succeeds', async () => {
    const procs = start(4)
    const runnerIds = await Promise.all(procs.map((p) => p.ready))
    const ids = await enqueue(20_000, 0)
    await eventually(async () => (await unfinished()) === 0, 250)

    const starts = await ledger()
    expect(starts.size).toBe(20_000)
    for (const id of ids) expect(starts.get(id)).toBe(1)
    const statuses = await q<{ status: string; n: string }>(`SELECT status, count(*) AS n FROM "${schema}".jobs GROUP BY status`)
    expect(statuses).toEqual([{ status: 'succeeded', n: '20000' }])
    // Every process took part: the work was shared, not run by one.
    const byRunner = await q<{ runner_id: string }>(`SELECT DISTINCT runner_id FROM "${schema}".jobs`)
    expect(byRunner.map((r) => r.runner_id).sort()).toEqual([...runnerIds].sort())
  }, 180_000)

  it('kill -9 of one process: its running jobs fail as interrupted once its lease lapses; no live job is touched, none left running', async () => {
    const procs = start(3, { JT_LEASE_MS: '1500', JT_SWEEP_MS: '300' })
    const runnerIds = await Promise.all(procs.map((p) => p.ready))
    const victim = runnerIds[0]!
    const ids = await enqueue(3_000, 20)
    // Mid-run: the victim is running jobs and has finished some.
    await eventually(async () => {
      const rows = await q<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".jobs WHERE runner_id = $1 AND status = 'succeeded'`, [victim])
      return Number(rows[0]!.n) >= 100
    })
    procs[0]!.child.kill('SIGKILL')
    await procs[0]!.exited
    await eventually(async () => (await unfinished()) === 0, 250)

    const jobs = await q<{ id: string; status: string; error: string | null; runner_id: string }>(
      `SELECT id, status, error, runner_id FROM "${schema}".jobs`,
    )
    const interrupted = jobs.filter((j) => j.status === 'failed')
    // The victim ran 8 workers: at most 8 jobs were running when it died.
    expect(interrupted.length).toBeGreaterThan(0)
    expect(interrupted.length).toBeLessThanOrEqual(8)
    for (const j of interrupted) expect(j).toMatchObject({ runner_id: victim, error: CODE_INTERRUPTED })
    // Every job of a live process succeeded: the sweep never touched one.
    for (const j of jobs.filter((j) => j.runner_id !== victim)) expect(j.status).toBe('succeeded')
    const starts = await ledger()
    for (const id of ids) expect(starts.get(id) ?? 0).toBeLessThanOrEqual(1)
    for (const j of jobs.filter((j) => j.status === 'succeeded')) expect(starts.get(j.id)).toBe(1)
    // The dead runner is forgotten; the live ones are still registered.
    const registered = await q<{ id: string }>(`SELECT id FROM "${schema}".runners`)
    expect(registered.map((r) => r.id).sort()).toEqual(runnerIds.slice(1).sort())
  }, 120_000)
})

if (skip !== undefined) console.warn(`jobtable tests: multi-process PostgreSQL tests SKIPPED: ${skip}`)
