import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { postgresBackend } from '../support/backends.js'
import { privatePostgresUnavailable, startPrivatePostgres, type PrivatePostgres } from '../support/private-postgres.js'
import { eventually, spawnWorker, type WorkerProcess } from './processes.js'

const why = postgresBackend().skip ?? privatePostgresUnavailable()
if (why !== undefined && process.env['JOBTABLE_REQUIRE_POSTGRES'] === '1') {
  throw new Error(`the PostgreSQL fault tests are required (JOBTABLE_REQUIRE_POSTGRES=1) but cannot run: ${why}`)
}
if (why !== undefined) console.warn(`jobtable tests: PostgreSQL fault tests SKIPPED: ${why}`)

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const SCHEMA = 'jobtable_faults'

describe.skipIf(why !== undefined)('postgres: a server restart and killed connections during a drain', () => {
  // A server of this test's own: restarting the shared one would break the test files running beside this one.
  let server: PrivatePostgres
  let admin: pg.Pool
  const children: WorkerProcess[] = []

  beforeAll(async () => {
    server = await startPrivatePostgres()
    admin = new pg.Pool({ connectionString: server.url, max: 2 })
    admin.on('error', () => undefined)
  }, 60_000)
  afterAll(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    await admin?.end()
    await server?.destroy()
  }, 60_000)

  /** The count a query returns, or undefined while the server is down. */
  const count = async (text: string): Promise<number | undefined> => {
    try {
      return Number((await admin.query<{ n: string }>(text)).rows[0]!.n)
    } catch {
      return undefined
    }
  }

  it('every job ends in exactly one terminal state and no handler starts twice', async () => {
    const driver = postgres({ connectionString: server.url, schema: SCHEMA })
    await driver.migrate()
    await admin.query(`CREATE TABLE ${SCHEMA}.ledger (job_id text NOT NULL, token text PRIMARY KEY)`)
    for (let i = 0; i < 2; i++) {
      children.push(
        spawnWorker({ JT_BACKEND: 'postgres', JT_PG_URL: server.url, JT_SCHEMA: SCHEMA, JT_WORKERS: '8', JT_LEASE_MS: '60000' }),
      )
    }
    await Promise.all(children.map((c) => c.ready))
    const enqueuer = new Runner({ driver, logger: silent })
    const kind = enqueuer.register('ledgered', { payload: z.strictObject({ ms: z.number().int() }), handler: () => undefined })
    const ids: string[] = []
    for (let i = 0; i < 4; i++) ids.push(...(await kind.enqueueMany(Array.from({ length: 1000 }, () => ({ ms: 2 })))))
    await enqueuer.close()

    const started = () => count(`SELECT count(*) AS n FROM ${SCHEMA}.ledger`)
    await eventually(async () => ((await started()) ?? 0) >= 800)
    await server.restart()
    await eventually(async () => ((await started()) ?? 0) >= 2000)
    const terminated = await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`,
    )
    expect(terminated.rowCount).toBeGreaterThan(0)
    await eventually(async () => (await count(`SELECT count(*) AS n FROM ${SCHEMA}.jobs WHERE status IN ('queued', 'running')`)) === 0, 250)

    const statuses = await admin.query(`SELECT status, count(*)::int AS n FROM ${SCHEMA}.jobs GROUP BY status`)
    expect(statuses.rows).toEqual([{ status: 'succeeded', n: 4000 }])
    const starts = await admin.query<{ job_id: string; n: number }>(`SELECT job_id, count(*)::int AS n FROM ${SCHEMA}.ledger GROUP BY job_id`)
    const byId = new Map(starts.rows.map((r) => [r.job_id, r.n]))
    for (const id of ids) expect(byId.get(id)).toBe(1)
    // Both processes lived through it (a crash shows its standard error here).
    for (const c of children) expect(c.child.exitCode, c.stderr()).toBeNull()
  }, 180_000)
})
