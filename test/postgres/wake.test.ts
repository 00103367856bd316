import { spawn } from 'node:child_process'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { postgres, type PostgresOptions } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'
import { eventually } from '../multiprocess/processes.js'

const skip = postgresBackend().skip
/** Long enough that within a test only a notification can wake a runner. */
const NO_POLL = 3_600_000

describe.skipIf(skip !== undefined)('postgres: wake across processes', () => {
  let schema: string
  let url: string
  let admin: pg.Pool
  let runners: Runner[] = []

  beforeEach(async () => {
    schema = testSchema()
    // The schema name as application_name marks this test's connections for pg_stat_activity.
    url = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}application_name=${schema}`
    admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    admin.on('error', () => undefined)
  })
  afterEach(async () => {
    for (const r of runners) await r.close().catch(() => undefined)
    runners = []
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
  })

  const runner = (options: Partial<PostgresOptions> = {}) => {
    const r = new Runner({ driver: postgres({ connectionString: url, schema, pollIntervalMs: NO_POLL, ...options }), workers: 2, logger: captureLogs() })
    runners.push(r)
    r.register('echo', { payload: echoPayload, handler: () => undefined })
    return r
  }

  /** Waits until this test's runners hold `n` listening connections. */
  const listening = (n: number) =>
    eventually(async () => {
      const rows = await admin.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [schema])
      return rows.rowCount === n
    }, 20)

  it('an enqueue in another process wakes an idle worker here through NOTIFY', async () => {
    const idle = runner()
    const seen = track(idle)
    await idle.start()
    await listening(1)
    const script = `
      import { Runner } from 'jobtable'
      import { postgres } from 'jobtable/postgres'
      import { z } from 'zod'
      const runner = new Runner({ driver: postgres({ connectionString: ${JSON.stringify(url)}, schema: ${JSON.stringify(schema)} }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
      const kind = runner.register('echo', { payload: z.strictObject({ n: z.number() }), handler: () => undefined })
      process.stdout.write(await kind.enqueue({ n: 1 }))
      await runner.close()`
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', '--input-type=module', '-e', script], {
      cwd: process.cwd(),
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    let id = ''
    child.stdout.on('data', (chunk: Buffer) => (id += chunk.toString()))
    await new Promise((resolve) => child.on('exit', resolve))
    expect(id).toMatch(/^[0-9a-f-]{36}$/)
    await seen.ends([id])
    expect((await idle.get(id)).status).toBe('succeeded')
  })

  it("a job enqueued in a user's transaction wakes an idle worker when it commits, with no wake() call", async () => {
    const idle = runner()
    const seen = track(idle)
    await idle.start()
    await listening(1)
    const enqueuer = new Runner({ driver: postgres({ connectionString: url, schema, listen: false, pollIntervalMs: NO_POLL }), logger: captureLogs() })
    runners.push(enqueuer)
    const echo = enqueuer.register('echo', { payload: echoPayload, handler: () => undefined })
    const client = await admin.connect()
    let id: string
    try {
      await client.query('BEGIN')
      id = await echo.enqueueTx(client, { n: 1 })
      await client.query('COMMIT')
    } finally {
      client.release()
    }
    await seen.ends([id])
    expect((await idle.get(id)).status).toBe('succeeded')
  })

  it('with listen: false (PgBouncer transaction mode), the fallback poll finds a job no one woke it for', async () => {
    const polling = runner({ listen: false, pollIntervalMs: 50 })
    const seen = track(polling)
    await polling.start()
    // A plain insert by another client: no runner of this process is told.
    const enqueuer = new Runner({ driver: postgres({ connectionString: url, schema, listen: false }), logger: captureLogs() })
    runners.push(enqueuer)
    const id = await enqueuer.register('echo', { payload: echoPayload, handler: () => undefined }).enqueue({ n: 1 })
    await seen.ends([id])
    const rows = await admin.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [schema])
    expect(rows.rowCount).toBe(0)
  })

  it('the listening connection reconnects after pg_terminate_backend and wakes again', async () => {
    const idle = runner()
    const seen = track(idle)
    await idle.start()
    await listening(1)
    const listeners = async () =>
      (await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [schema])).rows
    const [before] = await listeners()
    const killed = await admin.query(`SELECT pg_terminate_backend($1)`, [before!.pid])
    expect(killed.rowCount).toBe(1)
    // A new listening connection, not the one terminated.
    await eventually(async () => (await listeners()).some((l) => l.pid !== before!.pid), 20)
    await listening(1)
    const enqueuer = new Runner({ driver: postgres({ connectionString: url, schema, listen: false, pollIntervalMs: NO_POLL }), logger: captureLogs() })
    runners.push(enqueuer)
    const id = await enqueuer.register('echo', { payload: echoPayload, handler: () => undefined }).enqueue({ n: 2 })
    await seen.ends([id])
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL wake tests SKIPPED: ${skip}`)
