import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner, type Kind } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { overfullWindows } from '../support/rates.js'
import { eventually, readSqlite, spawnWorker, sqliteLedger, type WorkerProcess } from './processes.js'

/**
 * Rate limits, cooldowns and fair claims across processes: three worker
 * processes (rate-worker.ts) on one SQLite file or one PostgreSQL schema,
 * on real clocks, each handling three kinds, one per test (the processes
 * are shared: starting them is most of the time). The oracles are what
 * the database recorded: each job's jobs.started_at (the time its claim
 * used, by that process's clock; one machine, one clock), status and attempt, and a
 * ledger of handler starts (each job started once). No assertion depends
 * on how long anything took; the waits are bounded only by the timeouts.
 */

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const WORKER = fileURLToPath(new URL('./rate-worker.ts', import.meta.url))
const payload = z.strictObject({ ms: z.number().int(), cooldownMs: z.number().int() })
const PROCESSES = 3
const WORKERS = 2
/** The kinds every process handles, with their options. */
const KINDS = {
  rated: { rateLimit: { limit: 5, periodMs: 500 } },
  cooled: { rateLimit: { limit: 1_000, periodMs: 60_000 } },
  fair: { fairness: 'scope' as const },
}
type KindName = keyof typeof KINDS
type Payload = { ms: number; cooldownMs: number }

interface JobRecord {
  readonly id: string
  readonly scope: string | null
  readonly status: string
  readonly attempt: number
  readonly startedAt: number | null
}

/** One store, a producer runner on it (never started) and the worker processes. */
interface Db {
  readonly kinds: Record<KindName, Kind<Payload>>
  readonly web: Runner
  jobs(kind: KindName): Promise<JobRecord[]>
  /** Job id -> handler starts, from the workers' ledgers. */
  starts(): Promise<Map<string, number>>
  close(): Promise<void>
}

const toRecord = (r: Record<string, unknown>): JobRecord => ({
  id: String(r['id']),
  scope: (r['scope'] as string | null) ?? null,
  status: String(r['status']),
  attempt: Number(r['attempt']),
  startedAt: r['started_at'] === null ? null : Number(r['started_at']),
})

function producer(web: Runner): Record<KindName, Kind<Payload>> {
  const handles = {} as Record<KindName, Kind<Payload>>
  for (const [name, options] of Object.entries(KINDS)) handles[name as KindName] = web.register(defineKind(name, { payload, ...options }))
  return handles
}

/** Starts the worker processes with `env` and waits until each is ready. */
async function spawnAll(env: Record<string, string>, children: WorkerProcess[]): Promise<void> {
  const base = { JT_WORKERS: String(WORKERS), JT_POLL_MS: '25', JT_KINDS: JSON.stringify(KINDS) }
  for (let i = 0; i < PROCESSES; i++) children.push(spawnWorker({ ...base, ...env }, WORKER))
  await Promise.all(children.map((c) => c.ready))
}

async function onSqlite(children: WorkerProcess[]): Promise<Db> {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-rates-'))
  const path = join(dir, 'jobs.db')
  const web = new Runner({ driver: sqlite({ path }), logger: silent })
  const kinds = producer(web)
  await spawnAll({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger') }, children)
  return {
    kinds,
    web,
    jobs: async (kind) => readSqlite<Record<string, unknown>>(path, 'SELECT id, scope, status, attempt, started_at FROM jobtable_jobs WHERE kind = ?', kind).map(toRecord),
    starts: async () => sqliteLedger(dir),
    close: async () => {
      await web.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function onPostgres(children: WorkerProcess[]): Promise<Db> {
  const schema = testSchema()
  const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
  const web = new Runner({ driver: postgres({ connectionString: PG_URL, schema }), logger: silent })
  const kinds = producer(web)
  await web.driver.migrate?.()
  await admin.query(`CREATE TABLE "${schema}".ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
  await spawnAll({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema }, children)
  return {
    kinds,
    web,
    jobs: async (kind) =>
      (
        await admin.query(`SELECT id, scope, status, attempt, started_at::float8 AS started_at FROM "${schema}".jobs WHERE kind = $1`, [kind])
      ).rows.map(toRecord),
    starts: async () => {
      const rows = (await admin.query<{ job_id: string; n: number }>(`SELECT job_id, count(*)::int AS n FROM "${schema}".ledger GROUP BY job_id`)).rows
      return new Map(rows.map((r) => [r.job_id, r.n]))
    },
    close: async () => {
      await web.close()
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    },
  }
}

const backends = [
  { name: 'sqlite', open: onSqlite, skip: undefined },
  { name: 'postgres', open: onPostgres, skip: postgresBackend().skip },
]

for (const { name, open, skip } of backends) {
  describe.skipIf(skip !== undefined)(`${name}: rate limits, cooldowns and fair claims across ${PROCESSES} processes x ${WORKERS} workers`, () => {
    const children: WorkerProcess[] = []
    let db: Db
    beforeAll(async () => {
      db = await open(children)
    }, 60_000)
    afterAll(async () => {
      for (const c of children) c.child.kill('SIGKILL')
      await Promise.all(children.map((c) => c.exited))
      await db?.close()
    })

    const done = (kind: KindName, ids: readonly string[]) =>
      eventually(async () => {
        const byId = new Map((await db.jobs(kind)).map((j) => [j.id, j]))
        return ids.every((id) => byId.get(id)?.status === 'succeeded')
      }, 50)

    it('limit 5 per 500 ms, 15 jobs at once: no window of 500 ms holds more than 5 of their claims, and every job ran once', async () => {
      const ids = await db.kinds.rated.enqueueMany(Array.from({ length: 15 }, () => ({ ms: 0, cooldownMs: 0 })))
      await done('rated', ids)
      const jobs = await db.jobs('rated')
      expect(jobs.map((j) => j.attempt)).toEqual(ids.map(() => 1))
      expect(overfullWindows(jobs.map((j) => j.startedAt!), 5, 500)).toEqual([])
      const starts = await db.starts()
      for (const id of ids) expect(starts.get(id)).toBe(1)
    }, 60_000)

    it('a cooldown a handler sets in one process holds in every process until its end: no job of its key starts before it, and all start after', async () => {
      const trigger = await db.kinds.cooled.enqueue({ ms: 0, cooldownMs: 1_500 })
      // The trigger's first attempt records the cooldown and sends the job back due at its end, in one write.
      let until = 0
      await eventually(async () => {
        const job = await db.web.get(trigger)
        until = job.runAt ?? 0
        return job.attempt >= 1 && job.runAt !== null
      }, 20)
      const ids = await db.kinds.cooled.enqueueMany(Array.from({ length: 12 }, () => ({ ms: 0, cooldownMs: 0 })))
      await done('cooled', [trigger, ...ids])
      const jobs = await db.jobs('cooled')
      for (const job of jobs) expect(job.startedAt).toBeGreaterThanOrEqual(until)
      expect(jobs.find((j) => j.id === trigger)?.attempt).toBe(2)
      const starts = await db.starts()
      expect(starts.get(trigger)).toBe(2)
      for (const id of ids) expect(starts.get(id)).toBe(1)
    }, 60_000)

    it("fair claims under a skewed backlog: a household's one job, enqueued behind another's 300, starts within about one claim round", async () => {
      const backlog = await db.kinds.fair.enqueueMany(Array.from({ length: 300 }, () => ({ ms: 5, cooldownMs: 0 })), { scope: 'big' })
      await eventually(async () => (await db.jobs('fair')).filter((j) => j.status === 'succeeded').length >= 30, 20)
      const small = await db.kinds.fair.enqueue({ ms: 0, cooldownMs: 0 }, { scope: 'small' })
      // The insert has committed by now: a claim whose clock reads later began after it, and sees the small job.
      const committed = Date.now()
      await done('fair', [small, ...backlog])
      const jobs = await db.jobs('fair')
      const mine = jobs.find((j) => j.id === small)!
      const big = jobs.filter((j) => j.scope === 'big')
      // Claims of the big household that began after the insert and still came before the small job's: one claim
      // round at most (processes x workers). Oldest first, the whole backlog would.
      const jumped = big.filter((j) => j.startedAt! > committed && j.startedAt! < mine.startedAt!)
      expect(jumped.length).toBeLessThanOrEqual(PROCESSES * WORKERS)
      // The test meant something: most of the backlog still waited when the small job started.
      expect(big.filter((j) => j.startedAt! > mine.startedAt!).length).toBeGreaterThan(100)
      const starts = await db.starts()
      for (const id of [small, ...backlog]) expect(starts.get(id)).toBe(1)
    }, 60_000)
  })
}
