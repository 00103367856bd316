import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ConfigError, Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: prepared statements', () => {
  let schema: string
  let pool: pg.Pool
  beforeEach(() => {
    schema = testSchema()
    // One connection: the statements the runner prepares are then visible to the test's own query on it.
    pool = new pg.Pool({ connectionString: PG_URL, max: 1 })
  })
  afterEach(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await pool.end()
  })

  /** Runs two jobs through a runner on the one-connection pool; returns the names prepared on that connection. */
  async function preparedAfterJobs(preparedStatements?: boolean): Promise<string[]> {
    const driver = postgres({ pool, schema, listen: false, ...(preparedStatements === undefined ? {} : { preparedStatements }) })
    const runner = new Runner({ driver, logger: captureLogs(), workers: 2 })
    const kind = runner.register('echo', { payload: echoPayload, handler: ({ n }) => n })
    const done = track(runner)
    await runner.start()
    const ids = [await kind.enqueue({ n: 1 }), ...(await kind.enqueueMany([{ n: 2 }]))]
    await done.ends(ids)
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
    await runner.close()
    const { rows } = await pool.query<{ name: string; statement: string }>(`SELECT name, statement FROM pg_prepared_statements`)
    return rows.filter((r) => r.statement.includes(`"${schema}".`)).map((r) => r.name)
  }

  it('prepares each statement once per connection by default, under a name of its own', async () => {
    const names = await preparedAfterJobs()
    // At least the insert, a claim and the final write; each name from the statement's text, never an application's.
    expect(names.length).toBeGreaterThanOrEqual(3)
    for (const name of names) expect(name).toMatch(/^jobtable_[0-9a-f]{32}$/)
    expect(new Set(names).size).toBe(names.length)
  })

  it('prepares nothing with preparedStatements: false (PgBouncer in transaction mode)', async () => {
    expect(await preparedAfterJobs(false)).toEqual([])
  })

  it('refuses a preparedStatements that is not a boolean', () => {
    expect(() => postgres({ pool, schema, preparedStatements: 'yes' as never })).toThrow(ConfigError)
  })
})
