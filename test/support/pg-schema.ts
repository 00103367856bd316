import pg from 'pg'
import { afterEach, beforeEach } from 'vitest'
import { PG_URL, testSchema } from './backends.js'

/** What a PostgreSQL test gets from pgSchemaPerTest. */
export interface PgSchemaPerTest {
  /** This test's own schema name (dropped after the test). */
  readonly schema: string
  /** A pool for the test's own reads and writes. */
  readonly admin: pg.Pool
  /** Closes `opened` after the test, before the schema is dropped; returns it. */
  closeAfter<T extends { close(): Promise<void> }>(opened: T): T
}

/**
 * Gives each test of the calling describe block a fresh schema and an
 * admin pool, and after it closes what the test opened, drops the schema
 * and ends the pool. Call it at the top of the describe block.
 */
export function pgSchemaPerTest(): PgSchemaPerTest {
  let schema = ''
  let admin: pg.Pool | undefined
  let opened: { close(): Promise<void> }[] = []
  beforeEach(() => {
    schema = testSchema()
    admin = new pg.Pool({ connectionString: PG_URL, max: 3 })
  })
  afterEach(async () => {
    for (const o of opened) await o.close().catch(() => undefined)
    opened = []
    await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin?.end()
  })
  return {
    get schema() {
      return schema
    },
    get admin() {
      if (admin === undefined) throw new Error('pgSchemaPerTest: the admin pool exists only while a test runs')
      return admin
    },
    closeAfter(o) {
      opened.push(o)
      return o
    },
  }
}
