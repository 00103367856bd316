/**
 * Indexes on the jobs table that a migration adds are built after its
 * transaction, with CREATE INDEX CONCURRENTLY (migration 14's jobs_fair):
 * claims and enqueues go on while one is built; an interrupted build (an
 * invalid index) is dropped and built again by the next migrator, a missing
 * one by the next process that opens the schema; migrators racing on one
 * schema take turns (two builds on one table may deadlock: PostgreSQL breaks
 * it and the loser looks again); a table of fewer than 10,000 jobs gets
 * its indexes inside the migration's transaction; `migrate --sql` prints the build after the
 * migration's COMMIT. The oracles are the catalog (pg_index, the progress
 * view) and statements that must complete, never durations.
 */
import { execFileSync } from 'node:child_process'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { migrateSchema, migrationScripts, readSchema, schemaDrift } from '../../src/postgres/migrations.js'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: indexes built concurrently by migrations', () => {
  const t = pgSchemaPerTest()

  async function indexState(): Promise<{ valid: boolean } | undefined> {
    const { rows } = await t.admin.query<{ valid: boolean }>(
      `SELECT x.indisvalid AS valid FROM pg_class c JOIN pg_index x ON x.indexrelid = c.oid
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND c.relname = 'jobs_fair'`,
      [t.schema],
    )
    return rows[0]
  }

  async function withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: PG_URL })
    await client.connect()
    try {
      return await fn(client)
    } finally {
      await client.end()
    }
  }

  /** A schema at version 13 holding `rows` jobs, as a deployment of the previous release leaves it. */
  async function previousRelease(rows: number): Promise<string> {
    const quoted = `"${t.schema}"`
    for (const script of migrationScripts(quoted, 0, 13)) await t.admin.query(script.sql)
    await t.admin.query(
      `INSERT INTO ${quoted}.jobs (id, kind, payload, created_at, updated_at) SELECT 'j' || g, 'k', '{}', g, g FROM generate_series(1, ${rows}) g`,
    )
    return quoted
  }

  it('an upgrade builds jobs_fair valid, outside its transaction, and the version is recorded', async () => {
    // Past the size below which a migration builds its indexes in place (10,000 jobs).
    const quoted = await previousRelease(20_000)
    await withClient((client) => migrateSchema(client, quoted))
    expect(await indexState()).toEqual({ valid: true })
    await withClient(async (client) => {
      expect(await readSchema(client, quoted)).toEqual({ version: 14, compatibleFrom: 12 })
      expect(await schemaDrift(client, quoted, t.schema)).toEqual([])
    })
  })

  it('writes to the jobs table go on while the index is built: an insert completes while the build waits for an open transaction', async () => {
    const quoted = await previousRelease(100)
    await withClient((client) => migrateSchema(client, quoted))
    await t.admin.query(`DROP INDEX ${quoted}.jobs_fair`)
    const holder = new pg.Client({ connectionString: PG_URL })
    await holder.connect()
    const migrator = new pg.Client({ connectionString: PG_URL })
    await migrator.connect()
    try {
      // An application's transaction left open: a concurrent build waits for it to end before it can finish.
      await holder.query('BEGIN')
      await holder.query(`INSERT INTO ${quoted}.jobs (id, kind, payload, created_at, updated_at) VALUES ('held', 'k', '{}', 1, 1)`)
      const migrating = migrateSchema(migrator, quoted)
      // Until the build is under way (bounded by the test's own timeout).
      for (;;) {
        const { rows } = await t.admin.query(
          `SELECT 1 FROM pg_stat_progress_create_index p JOIN pg_class c ON c.oid = p.relid WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)`,
          [t.schema],
        )
        if (rows.length > 0) break
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      // With the build under way, another session inserts and claims: neither waits for the build.
      await withClient(async (client) => {
        await client.query(`SET statement_timeout = '15s'`)
        await client.query(`INSERT INTO ${quoted}.jobs (id, kind, payload, created_at, updated_at) VALUES ('during', 'k', '{}', 2, 2)`)
        const claimed = await client.query(`SELECT c_id FROM ${quoted}.claim_jobs(ARRAY['k'], ARRAY[NULL]::integer[], ARRAY[NULL]::integer[], 1, 'r', 3)`)
        expect(claimed.rows).toHaveLength(1)
      })
      // The build still waits for the open transaction: what went through did so during it.
      expect(await indexState()).toEqual({ valid: false })
      await holder.query('COMMIT')
      await migrating
      expect(await indexState()).toEqual({ valid: true })
    } finally {
      await holder.end().catch(() => undefined)
      await migrator.end().catch(() => undefined)
    }
  })

  it('an interrupted build (an invalid index) is reported as drift, then dropped and built again by the next migrator', async () => {
    const quoted = await previousRelease(10)
    await withClient((client) => migrateSchema(client, quoted))
    // What a build cut off by a crash or a cancel leaves: the index in the catalog, marked invalid.
    await t.admin.query(`UPDATE pg_index SET indisvalid = false WHERE indexrelid = '${quoted}.jobs_fair'::regclass`)
    await withClient(async (client) => {
      expect(await schemaDrift(client, quoted, t.schema)).toEqual([expect.stringMatching(/jobs_fair/)])
      await migrateSchema(client, quoted)
      expect(await schemaDrift(client, quoted, t.schema)).toEqual([])
    })
    expect(await indexState()).toEqual({ valid: true })
  })

  it('a missing index is built by the next process that opens the schema, and verify mode builds nothing', async () => {
    const quoted = await previousRelease(10)
    await withClient((client) => migrateSchema(client, quoted))
    await t.admin.query(`DROP INDEX ${quoted}.jobs_fair`)
    await withClient((client) => migrateSchema(client, quoted, undefined, 'verify'))
    expect(await indexState()).toBeUndefined()
    await withClient((client) => migrateSchema(client, quoted))
    expect(await indexState()).toEqual({ valid: true })
  })

  it('five migrators racing on one schema of version 13 all finish, with the version recorded once and the index valid', async () => {
    const quoted = await previousRelease(20_000)
    await Promise.all(Array.from({ length: 5 }, () => withClient((client) => migrateSchema(client, quoted))))
    expect(await indexState()).toEqual({ valid: true })
    const { rows } = await t.admin.query(`SELECT count(*)::int AS n FROM ${quoted}.schema_versions WHERE version = 14`)
    expect(rows[0]).toEqual({ n: 1 })
  })

  it('migrate --sql prints the build after the COMMIT of its version, and the scripts applied by psql give a valid index', async () => {
    const scripts = migrationScripts(`"${t.schema}"`, 0, 14)
    const v14 = scripts.at(-1)!.sql
    expect(v14.indexOf('CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_fair')).toBeGreaterThan(v14.lastIndexOf('COMMIT;'))
    // Applied by psql, which sends statements one by one: the build runs outside any transaction.
    execFileSync('psql', ['-q', '-v', 'ON_ERROR_STOP=1', PG_URL], { input: scripts.map((s) => s.sql).join(''), stdio: ['pipe', 'ignore', 'pipe'] })
    expect(await indexState()).toEqual({ valid: true })
  })
})
