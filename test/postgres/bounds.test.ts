import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { claimErrorChannel, DatabaseError, Runner } from 'jobtable'
import { postgres, type PostgresOptions } from 'jobtable/postgres'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'
import { gate, track } from '../support/wait.js'
import { eventually } from '../multiprocess/processes.js'

const skip = postgresBackend().skip

/**
 * Every statement the PostgreSQL driver sends is bounded on the client
 * (statementTimeoutMs): a statement stuck behind a lock fails as a
 * transient `timeout`, its server statement is cancelled, and the driver
 * carries on once the database answers again.
 */
describe.skipIf(skip !== undefined)('postgres: every statement has a client-side bound', () => {
  const t = pgSchemaPerTest()
  // Runs before pgSchemaPerTest's own afterEach (hooks run as a stack): a lock a failed test left
  // held is released before the drivers whose statements wait behind it are closed.
  let locks: (() => Promise<void>)[] = []
  afterEach(async () => {
    for (const release of locks) await release()
    locks = []
  })

  /** A driver whose connections carry their own application_name, so pg_stat_activity tells them apart. */
  function boundedDriver(options: Partial<PostgresOptions> = {}) {
    const app = `jt_bounds_${randomUUID().slice(0, 8)}`
    const url = new URL(PG_URL)
    url.searchParams.set('application_name', app)
    const driver = t.closeAfter(postgres({ connectionString: url.toString(), schema: t.schema, statementTimeoutMs: 200, ...options }))
    return { driver, app }
  }

  /** Holds ACCESS EXCLUSIVE locks on jobtable's tables in an open transaction until release(). */
  async function lockTables(tables: string[]): Promise<{ pid: number; release(): Promise<void> }> {
    const client = await t.admin.connect()
    await client.query('BEGIN')
    await client.query(`LOCK TABLE ${tables.map((name) => `"${t.schema}".${name}`).join(', ')} IN ACCESS EXCLUSIVE MODE`)
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
    let released = false
    const release = async () => {
      if (released) return
      released = true
      await client.query('COMMIT')
      client.release()
    }
    locks.push(release)
    return { pid, release }
  }

  /** The statements of `app`'s connections still waiting for a lock. */
  async function waiting(app: string): Promise<string[]> {
    const rows = await t.admin.query<{ query: string }>(
      `SELECT query FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
      [app],
    )
    return rows.rows.map((r) => r.query)
  }

  const timeout = { dbCode: 'timeout', transient: true }

  it('a read, a claim and a heartbeat blocked by a lock reject as a transient timeout, the server statements are cancelled, and the driver works once it clears', async () => {
    const { driver, app } = boundedDriver()
    await driver.migrate()
    await driver.runnerRegister({ runnerId: 'r', kinds: ['echo'], now: 1 })
    await driver.jobInsertMany({ jobs: [{ id: 'j1', kind: 'echo', payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })

    // The heartbeat writes the runners table, the read and the claim the jobs table.
    const lock = await lockTables(['jobs', 'runners'])
    const get = driver.jobGet({ id: 'j1' })
    const claim = driver.jobClaim({ limit: 1, runnerId: 'r', kinds: ['echo'], now: 1 })
    const beat = driver.runnerHeartbeat({ runnerId: 'r', now: 1 })
    for (const op of [get, claim, beat]) {
      const err: unknown = await op.then(
        () => new Error('resolved while the tables were locked'),
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(DatabaseError)
      expect(err).toMatchObject(timeout)
    }
    // The cancels reach the server: none of the three is still queued behind the lock (a closed
    // socket alone would leave them there, to run, the claim included, once the lock is released).
    await eventually(async () => (await waiting(app)).length === 0, 10)
    // And the lock holder is still there: the statements ended because they were cancelled, not because the lock went.
    const holder = await t.admin.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1`, [lock.pid])
    expect(holder.rowCount).toBe(1)

    await lock.release()
    // The same driver works again, and the cancelled claim took nothing: the job is still there to claim.
    expect(await driver.jobGet({ id: 'j1' })).toMatchObject({ id: 'j1', status: 'queued' })
    expect(await driver.runnerHeartbeat({ runnerId: 'r', now: 2 })).toBe(true)
    expect(await driver.jobClaim({ limit: 1, runnerId: 'r', kinds: ['echo'], now: 2 })).toEqual([
      { id: 'j1', kind: 'echo', payload: '{"n":1}', attempt: 1, maxAttempts: 1, timeoutMs: null, scope: null, traceContext: null, readyAt: 1 },
    ])
  })

  it('a runner whose claims time out keeps retrying, and runs the job once when the lock is released', async () => {
    // Neither a notification nor the fallback poll may wake the runner: only its own retry finds the job.
    const { driver } = boundedDriver({ listen: false, pollIntervalMs: 3_600_000, sweepIntervalMs: 3_600_000 })
    const faulty = new FaultyDriver(driver)
    const runner = t.closeAfter(new Runner({ driver: faulty.driver, workers: 1, logger: captureLogs() }))
    let runs = 0
    runner.register('echo', { payload: echoPayload, handler: () => void runs++ })
    const done = track(runner)
    t.closeAfter({ close: async () => done.stop() })
    // The claim a start makes at once waits until the job is stored and the table locked.
    const locked = gate()
    const firstClaim = faulty.holdNext('jobClaim', locked.promise)
    await runner.start()
    await firstClaim

    // A job stored behind the runner's back (no wake), then the table locked.
    await t.admin.query(
      `INSERT INTO "${t.schema}".jobs (id, kind, payload, status, created_at, updated_at) VALUES ('j1', 'echo', '{"n":1}', 'queued', 1, 1)`,
    )
    const lock = await lockTables(['jobs'])

    const errors: { error: string; transient: boolean }[] = []
    let seen: () => void = () => undefined
    const threeErrors = new Promise<void>((resolve) => (seen = resolve))
    const onError = (m: unknown) => {
      const message = m as { runnerId: string; error: string; transient: boolean }
      if (message.runnerId !== runner.id) return
      errors.push({ error: message.error, transient: message.transient })
      if (errors.length >= 3) seen()
    }
    claimErrorChannel.subscribe(onError)
    t.closeAfter({ close: async () => void claimErrorChannel.unsubscribe(onError) })
    locked.open()
    await threeErrors
    expect(errors.slice(0, 3)).toEqual([
      { error: 'timeout', transient: true },
      { error: 'timeout', transient: true },
      { error: 'timeout', transient: true },
    ])
    expect(done.started).toEqual([])

    await lock.release()
    await done.ends(['j1'])
    expect((await runner.get('j1')).status).toBe('succeeded')
    expect(runs).toBe(1)
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL statement bound tests SKIPPED: ${skip}`)
