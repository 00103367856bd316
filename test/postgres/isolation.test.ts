import { describe, expect, it } from 'vitest'
import pg from 'pg'
import { DatabaseError, Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'
import { track } from '../support/wait.js'

const skip = postgresBackend().skip

/**
 * Concurrency limits count running jobs with a snapshot taken after the
 * kind's advisory lock, which only READ COMMITTED gives a statement inside
 * claim_jobs. Under a stricter default isolation a limited claim is
 * refused, loudly, rather than counted wrong.
 */
describe.skipIf(skip !== undefined)('postgres: isolation level of the claim', () => {
  const t = pgSchemaPerTest()

  function repeatableReadPool(): pg.Pool {
    const pool = new pg.Pool({ connectionString: PG_URL, options: '-c default_transaction_isolation=repeatable\\ read' })
    t.closeAfter({ close: () => pool.end() })
    return pool
  }

  it('a runner with a limited kind stops with a DatabaseError under REPEATABLE READ, leaving its jobs queued', async () => {
    const pool = repeatableReadPool()
    expect((await pool.query('SHOW transaction_isolation')).rows[0].transaction_isolation).toBe('repeatable read')
    const runner = new Runner({ driver: t.closeAfter(postgres({ pool, schema: t.schema })), workers: 2, logger: captureLogs() })
    const kind = runner.register('limited', { payload: echoPayload, concurrency: 1, handler: () => undefined })
    const id = await kind.enqueue({ n: 1 })
    await runner.start()
    const err = await runner.wait().then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(DatabaseError)
    expect((err as DatabaseError).dbCode).toBe('55000')
    const row = await t.admin.query(`SELECT status FROM "${t.schema}".jobs WHERE id = $1`, [id])
    expect(row.rows[0].status).toBe('queued')
    await runner.close()
  })

  it('a runner without limits claims and runs its jobs under REPEATABLE READ', async () => {
    const pool = repeatableReadPool()
    const runner = new Runner({ driver: t.closeAfter(postgres({ pool, schema: t.schema })), workers: 2, logger: captureLogs() })
    const kind = runner.register('free', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }])
    await runner.start()
    await done.ends(ids)
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
    await runner.close()
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL isolation tests SKIPPED: ${skip}`)
