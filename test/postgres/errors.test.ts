import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { CODE_INTERNAL, DatabaseError, Runner } from 'jobtable'
import { postgres, type PostgresDriver } from 'jobtable/postgres'
import { toDatabaseError } from '../../src/postgres/driver.js'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'
import { track } from '../support/wait.js'

const skip = postgresBackend().skip

describe('postgres: error classification', () => {
  const pgError = (code: string) => Object.assign(new pg.DatabaseError(`value "secret-marker" refused`, 1, 'error'), { code })

  it.each([
    ['40001', true],
    ['40P01', true],
    ['55P03', true],
    ['57P01', true],
    ['57P02', true],
    ['57P03', true],
    ['08006', true],
    ['53300', true],
    ['57014', true],
    ['22P05', false],
    ['23505', false],
    ['42P01', false],
    ['42501', false],
  ])('SQLSTATE %s is transient: %s, and the message never quotes the server', (code, transient) => {
    const err = toDatabaseError('finish jobs', pgError(code))
    expect(err).toBeInstanceOf(DatabaseError)
    expect(err).toMatchObject({ dbCode: code, transient })
    expect(err.message).not.toContain('secret-marker')
  })

  it('connection errors of the socket and of node-postgres are transient', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE']) {
      expect(toDatabaseError('claim jobs', Object.assign(new Error('x'), { code }))).toMatchObject({ dbCode: code, transient: true })
    }
    expect(toDatabaseError('claim jobs', new Error('Connection terminated unexpectedly'))).toMatchObject({ dbCode: 'connection_lost', transient: true })
    expect(toDatabaseError('claim jobs', new Error('something else: secret-marker'))).toMatchObject({ dbCode: 'unexpected', transient: false })
  })
})

describe.skipIf(skip !== undefined)('postgres: errors against the real server', () => {
  const t = pgSchemaPerTest()
  const driver = (): PostgresDriver => {
    const d = postgres({ connectionString: PG_URL, schema: t.schema })
    t.closeAfter(d)
    return d
  }

  it('a NUL character in a result, which jsonb refuses, fails the job with internal_error before any write, with no retry loop', async () => {
    const logs = captureLogs()
    const runner = new Runner({ driver: driver(), logger: logs })
    t.closeAfter(runner)
    const kind = runner.register('nul', {
      payload: echoPayload,
      result: (r: { text: string }) => r,
      handler: () => ({ text: 'before\u0000after' }),
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ id, kind: 'nul', status: 'failed', result: null, error: CODE_INTERNAL })
    // Refused as not public before it reached the server (as on SQLite, which would have stored it): no write refused with 22P05.
    const refused = logs.lines.filter((l) => l.fields.job_id === id && l.fields.error !== undefined)
    expect(refused.map((l) => l.fields.error)).not.toContain('22P05')
    expect(logs.lines.filter((l) => /retrying/.test(l.message))).toEqual([])
  })

  it('a server that refuses connections gives a transient DatabaseError naming only the code', async () => {
    const d = postgres({ connectionString: 'postgres://postgres@127.0.0.1:1/test', schema: t.schema })
    t.closeAfter(d)
    const err = await d.jobGet({ id: 'x' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(DatabaseError)
    expect(err).toMatchObject({ transient: true, dbCode: 'ECONNREFUSED' })
  })

  it('an aborted final write is cancelled on the server: it never lands after the caller was told it failed', async () => {
    const d = driver()
    await d.runnerRegister({ runnerId: 'r1', kinds: ['echo'], now: 1 })
    await d.jobInsertMany({ jobs: [{ id: 'j1', kind: 'echo', payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })
    const [claimed] = await d.jobClaim({ limit: 1, runnerId: 'r1', kinds: ['echo'], now: 2 })
    const locker = await t.admin.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM "${t.schema}".jobs WHERE id = 'j1' FOR UPDATE`)
      const abort = new AbortController()
      const write = d.jobFinishMany({
        finishes: [{ id: 'j1', attempt: claimed!.attempt, status: 'succeeded', result: '1', error: null, runAt: null }],
        now: 3,
        signal: abort.signal,
      })
      // Abort once the write is waiting for the row lock.
      for (;;) {
        const waiting = await t.admin.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%'`)
        if (waiting.rowCount) break
      }
      abort.abort()
      await expect(write).rejects.toMatchObject({ dbCode: 'timeout', transient: true })
      // The cancelled statement is gone before the lock is released.
      for (;;) {
        const waiting = await t.admin.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%'`)
        if (!waiting.rowCount) break
      }
      await locker.query('COMMIT')
    } finally {
      locker.release()
    }
    expect(await d.jobGet({ id: 'j1' })).toMatchObject({ status: 'running' })
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL error tests SKIPPED: ${skip}`)
