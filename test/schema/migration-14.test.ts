/**
 * Schema version 14 (rate limits, cooldowns, fair claims) only adds, on
 * both backends: code of schema 12 and 13 keeps running on it. On
 * PostgreSQL a runner of an earlier release keeps calling claim_jobs with
 * six arguments, through a statement it prepared before the upgrade, and
 * that claim now honours cooldowns; `migrate --sql`'s script of version
 * 14, applied by psql, gives the schema the driver gives, and the drift
 * check names what is missing from it.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { postgres, SCHEMA_VERSION as PG_VERSION } from 'jobtable/postgres'
import { SCHEMA_VERSION as SQLITE_VERSION } from 'jobtable/sqlite'
import { migrateSchema, migrationScripts, readSchema as readPgSchema, schemaDrift } from '../../src/postgres/migrations.js'
import { migrate as migrateSqlite, readSchema as readSqliteSchema, schemaDrift as sqliteDrift } from '../../src/sqlite/migrations.js'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'

describe('sqlite: schema version 14', () => {
  let dir: string
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-v14-'))
  })
  afterEach(() => rmSync(dir, { recursive: true, force: true }))

  it('migrates a database of version 13 forward, keeping its jobs, and stays in the window of code of version 12', () => {
    const db = new Database(join(dir, 'jobs.db'))
    try {
      migrateSqlite(db, 13)
      db.prepare("INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES ('kept', 'echo', '{}', 1, 1)").run()
      migrateSqlite(db)
      expect(SQLITE_VERSION).toBe(14)
      expect(readSqliteSchema(db)).toEqual({ version: 14, compatibleFrom: 12 })
      expect(db.prepare("SELECT status FROM jobtable_jobs WHERE id = 'kept'").get()).toEqual({ status: 'queued' })
      expect(sqliteDrift(db)).toEqual([])
    } finally {
      db.close()
    }
  })
})

describe.skipIf(postgresSkipReason !== undefined)('postgres: schema version 14', () => {
  let schema: string
  let admin: pg.Pool
  beforeEach(() => {
    schema = testSchema()
    admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
  })
  afterEach(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
  })

  it("a runner of version 13 keeps its prepared six-argument claim across the migration, and that claim honours a cooldown on its kind's name", async () => {
    const client = await admin.connect()
    try {
      await migrateSchema(client, `"${schema}"`, 13)
      await client.query(`INSERT INTO "${schema}".jobs (id, kind, payload, created_at, updated_at) VALUES ('j1', 'echo', '{}', 1, 1), ('j2', 'echo', '{}', 2, 2)`)
      // Version 13's claim statement, prepared on this connection before the migration, as a runner left running through a rolling deploy holds it.
      const old = {
        name: 'claim_v13',
        text: `SELECT c_seq AS seq, c_id AS id, c_kind AS kind, c_payload AS payload, c_attempt AS attempt,
                      c_max_attempts AS "maxAttempts", c_timeout_ms AS "timeoutMs", c_trace_context AS "traceContext", c_ready_at::float8 AS "readyAt"
                 FROM "${schema}".claim_jobs($1::text[], $2::integer[], $3::integer[], $4::integer, $5::text, $6::bigint)`,
      }
      await client.query({ ...old, values: [['none'], [null], [null], 1, 'r0', 10] })
      await migrateSchema(client, `"${schema}"`)
      expect(await readPgSchema(client, `"${schema}"`)).toEqual({ version: PG_VERSION, compatibleFrom: 12 })
      await client.query(`INSERT INTO "${schema}".cooldowns (key, until, set_at) VALUES ('echo', 100, 5)`)
      expect((await client.query({ ...old, values: [['echo'], [null], [null], 5, 'r1', 99] })).rows).toEqual([])
      const claimed = await client.query({ ...old, values: [['echo'], [null], [null], 1, 'r1', 100] })
      expect(claimed.rows.map((r) => r.id)).toEqual(['j1'])
      // Its result is the nine columns it had: the scope comes only from the new overload.
      expect(claimed.fields.map((f) => f.name)).toEqual(['seq', 'id', 'kind', 'payload', 'attempt', 'maxAttempts', 'timeoutMs', 'traceContext', 'readyAt'])
      const columns = await client.query<{ name: string }>(
        `SELECT unnest(proargnames) AS name FROM pg_proc WHERE oid = to_regprocedure($1)`,
        [`"${schema}".claim_jobs(text[], integer[], integer[], integer, text, bigint)`],
      )
      expect(columns.rows.map((r) => r.name)).not.toContain('c_scope')
    } finally {
      client.release()
    }
    // The jobs left queued by the old claim are claimed by this release's, with their scope.
    const driver = postgres({ connectionString: PG_URL, schema })
    try {
      expect((await driver.jobClaim({ limit: 5, runnerId: 'r2', kinds: ['echo'], now: 200 })).map((j) => [j.id, j.scope])).toEqual([['j2', null]])
    } finally {
      await driver.close()
    }
  })

  it("migrate --sql's script of version 14 alone, applied by psql to a schema of version 13, gives no drift; --check names a missing index or claim overload", async () => {
    const client = await admin.connect()
    try {
      await migrateSchema(client, `"${schema}"`, 13)
      const scripts = migrationScripts(`"${schema}"`, 13)
      expect(scripts.map((s) => s.version)).toEqual([14])
      execFileSync('psql', ['-q', '-v', 'ON_ERROR_STOP=1', PG_URL], { input: scripts[0]!.sql, stdio: ['pipe', 'ignore', 'pipe'] })
      expect(await readPgSchema(client, `"${schema}"`)).toEqual({ version: 14, compatibleFrom: 12 })
      expect(await schemaDrift(client, `"${schema}"`, schema)).toEqual([])
      await client.query(`DROP INDEX "${schema}".jobs_fair`)
      await client.query(`DROP FUNCTION "${schema}".claim_jobs(text[], integer[], integer[], boolean[], integer, text, bigint)`)
      const drift = await schemaDrift(client, `"${schema}"`, schema)
      expect(drift).toContain('missing index jobs_fair')
      expect(drift.filter((d) => d.startsWith('missing function claim_jobs('))).toHaveLength(1)
    } finally {
      client.release()
    }
  })
})
