import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { ConfigError, DatabaseError, Runner, type WakeReason } from 'jobtable'
import { postgres, type PostgresDriver, type PostgresOptions } from 'jobtable/postgres'
import { PG_URL, PGBOUNCER_URL, pgbouncerSkipReason, testSchema } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'
import { track } from '../support/wait.js'
import { eventually } from '../multiprocess/processes.js'

/** Never connected to: the option checks run before anything is sent. */
const NOWHERE = 'postgres://nobody@127.0.0.1:1/none'

/** Long enough that within a test only a notification can wake a runner. */
const NO_POLL = 3_600_000

describe("postgres: the pooler options (pooler: 'transaction', listenUrl)", () => {
  const refusal = (options: PostgresOptions, text: RegExp) => {
    let err: unknown
    try {
      postgres(options)
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(ConfigError)
    expect((err as Error).message).toMatch(text)
  }

  it('refuses what cannot work behind a transaction pooler, and a pooler or listenUrl of the wrong shape, each with a ConfigError naming it', () => {
    refusal({ connectionString: NOWHERE, pooler: 'session' as never }, /pooler must be 'none' or 'transaction'/)
    refusal({ connectionString: NOWHERE, pooler: 'transaction', preparedStatements: true }, /preparedStatements: true cannot work under pooler: 'transaction'/)
    refusal({ connectionString: NOWHERE, pooler: 'transaction', listen: true }, /listen: true needs listenUrl under pooler: 'transaction'/)
    refusal({ connectionString: NOWHERE, listenUrl: '' }, /listenUrl must be a non-empty connection string/)
    refusal({ connectionString: NOWHERE, listenUrl: 5 as never }, /listenUrl must be a non-empty connection string/)
    // listenUrl from an unset variable is none: with listen: true, refused rather than silently polling.
    refusal({ connectionString: NOWHERE, pooler: 'transaction', listenUrl: process.env['JOBTABLE_UNSET_VARIABLE'], listen: true }, /listen: true needs listenUrl/)
    refusal({ connectionString: NOWHERE, pooler: 'transaction', listenUrl: NOWHERE, listen: false }, /listenUrl is for the listening connection, and listen is false/)
  })

  it('accepts the settings that can work: the pooler alone (poll only, also with listenUrl from an unset variable), with listenUrl, with listen or prepared statements off, and listenUrl without a pooler', async () => {
    const drivers = [
      postgres({ connectionString: NOWHERE, pooler: 'transaction' }),
      postgres({ connectionString: NOWHERE, pooler: 'transaction', listenUrl: process.env['JOBTABLE_UNSET_VARIABLE'] }),
      postgres({ connectionString: NOWHERE, pooler: 'transaction', listenUrl: NOWHERE }),
      postgres({ connectionString: NOWHERE, pooler: 'transaction', listenUrl: NOWHERE, listen: true, preparedStatements: false }),
      postgres({ connectionString: NOWHERE, pooler: 'transaction', listen: false }),
      postgres({ connectionString: NOWHERE, pooler: 'none', listenUrl: NOWHERE }),
    ]
    for (const d of drivers) await d.close()
  })
})

/**
 * Through a real PgBouncer in transaction mode (.ci/pgbouncer.sh; 1.18 in
 * CI, which keeps no prepared statements across transactions): what the
 * `pooler` setting changes. No clock is asserted on: each test waits for
 * the event it is about.
 */
describe.skipIf(pgbouncerSkipReason !== undefined)('postgres behind PgBouncer in transaction mode', () => {
  const t = pgSchemaPerTest()
  const url = PGBOUNCER_URL!
  let runners: Runner[] = []
  afterEach(async () => {
    for (const r of runners) await r.close().catch(() => undefined)
    runners = []
  })

  const driver = (options: Partial<PostgresOptions> = {}): PostgresDriver => t.closeAfter(postgres({ connectionString: url, schema: t.schema, ...options }))

  /** A runner of the `echo` kind on `d`, closed after the test. */
  const runnerOn = (d: PostgresDriver) => {
    const r = new Runner({ driver: d, workers: 2, logger: captureLogs() })
    runners.push(r)
    return { runner: r, echo: r.register('echo', { payload: echoPayload, handler: () => undefined }) }
  }

  /** Every wake `d` calls back with, in order. */
  const wakesOf = (d: PostgresDriver) => {
    const seen: WakeReason[] = []
    const stop = d.onWake((what) => seen.push(what))
    t.closeAfter({ close: async () => stop() })
    return seen
  }

  /** Rounds of concurrent reads on `d` (every one a statement prepared by name unless told not to); the errors they failed with. */
  async function concurrentReads(d: PostgresDriver, stopAtFirstError: boolean): Promise<unknown[]> {
    const errors: unknown[] = []
    for (let round = 0; round < 20 && !(stopAtFirstError && errors.length > 0); round++) {
      const results = await Promise.allSettled(
        Array.from({ length: 30 }, (_, i) => (i % 3 === 0 ? d.jobGet({ id: randomUUID() }) : i % 3 === 1 ? d.queueNextDue({ now: 0 }) : d.kindsPaused())),
      )
      for (const r of results) if (r.status === 'rejected') errors.push(r.reason)
    }
    return errors
  }

  it("with named prepared statements, statements fail as a prepared statement lost between server connections (the error says to set pooler: 'transaction'); with pooler: 'transaction' the same load succeeds", async () => {
    const prepared = driver({ listen: false })
    await prepared.migrate()
    const errors = await concurrentReads(prepared, true)
    expect(errors.length).toBeGreaterThan(0)
    const [first] = errors
    expect(first).toBeInstanceOf(DatabaseError)
    // 26000: prepared on another server connection; 42P05: prepared there by another client's statement of the same name.
    expect(['26000', '42P05']).toContain((first as DatabaseError).dbCode)
    expect((first as Error).message).toMatch(/behind a pooler in transaction mode such as PgBouncer, set pooler: 'transaction'/)

    expect(await concurrentReads(driver({ pooler: 'transaction' }), false)).toEqual([])
  })

  it('processes migrating one new schema at once through the pooler all succeed (rounds of three)', async () => {
    // Behind the pooler the version check before the migration lock runs on another server connection than the
    // migration; the one that waited for the lock must not trip over the schema the other created meanwhile.
    for (let round = 0; round < 4; round++) {
      const schema = testSchema()
      const drivers = [0, 1, 2].map(() => postgres({ connectionString: url, schema, pooler: 'transaction' }))
      try {
        const results = await Promise.allSettled(drivers.map((d) => d.migrate()))
        expect(results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason)).toEqual([])
      } finally {
        for (const d of drivers) await d.close()
        await t.admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      }
    }
  })

  it("without listenUrl nothing listens, and a job another process enqueued through the pooler runs by the fallback poll", async () => {
    const d = driver({ pooler: 'transaction', pollIntervalMs: 50 })
    const wakes = wakesOf(d)
    const { runner } = runnerOn(d)
    const seen = track(runner)
    await runner.start()
    // Another process: a runner of its own on its own driver, never started, so its enqueue wakes no worker here.
    const { echo } = runnerOn(driver({ pooler: 'transaction' }))
    const id = await echo.enqueue({ n: 1 })
    await seen.ends([id])
    expect((await runner.get(id)).status).toBe('succeeded')
    // A listening connection calls back once it listens: none was opened.
    expect(wakes).toEqual([])
  })

  it('with listenUrl, the listening connection goes direct, and a job enqueued through the pooler wakes an idle worker by NOTIFY', async () => {
    const app = `jt_pooler_${randomUUID().slice(0, 8)}`
    const direct = new URL(PG_URL)
    direct.searchParams.set('application_name', app)
    const d = driver({ pooler: 'transaction', listenUrl: direct.toString(), pollIntervalMs: NO_POLL })
    const wakes = wakesOf(d)
    const { runner } = runnerOn(d)
    const seen = track(runner)
    await runner.start()
    // Once listening, the listener calls back 'jobs' then 'cancel' (for what it may have missed); then only a notification wakes.
    await eventually(async () => wakes.includes('cancel'), 10)
    const listening = await t.admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [app])
    expect(listening.rowCount).toBe(1)
    const mark = wakes.length
    const { echo } = runnerOn(driver({ pooler: 'transaction' }))
    const id = await echo.enqueue({ n: 1 })
    await seen.ends([id])
    expect(wakes.slice(mark)).toContain('jobs')
  })

  it('a statement that times out behind the pooler is cancelled on the server (by a cancel request through PgBouncer): it never lands after the caller was told it failed', async () => {
    const d = driver({ pooler: 'transaction' })
    await d.runnerRegister({ runnerId: 'r1', kinds: ['echo'], now: 1 })
    await d.jobInsertMany({ jobs: [{ id: 'j1', kind: 'echo', payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })
    const [claimed] = await d.jobClaim({ limit: 1, runnerId: 'r1', kinds: ['echo'], now: 2 })
    const waitingWrites = async () =>
      (await t.admin.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%' AND query LIKE $1`, [`%"${t.schema}"%`])).rowCount ?? 0
    const locker = await t.admin.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM "${t.schema}".jobs WHERE id = 'j1' FOR UPDATE`)
      const abort = new AbortController()
      const write = d.jobFinishMany({ finishes: [{ id: 'j1', attempt: claimed!.attempt, status: 'succeeded', result: '1', error: null, runAt: null }], now: 3, signal: abort.signal })
      await eventually(async () => (await waitingWrites()) > 0, 10)
      abort.abort()
      await expect(write).rejects.toMatchObject({ dbCode: 'timeout', transient: true })
      // The cancelled statement is gone while the lock is still held: pg_cancel_backend with the pid PgBouncer gave would not have reached it.
      await eventually(async () => (await waitingWrites()) === 0, 10)
      await locker.query('COMMIT')
    } finally {
      locker.release()
    }
    expect(await d.jobGet({ id: 'j1' })).toMatchObject({ status: 'running' })
  })
})

if (pgbouncerSkipReason !== undefined) console.warn(`jobtable tests: the PgBouncer (transaction mode) tests were SKIPPED: ${pgbouncerSkipReason}`)
