import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ConfigError, SchemaVersionError } from 'jobtable'
import { postgres, SCHEMA_VERSION } from 'jobtable/postgres'
import { MIGRATIONS, migrateSchema, readSchema } from '../../src/postgres/migrations.js'
import { LEGACY_VERSION } from '../../src/schema-window.js'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: schema and migrations', () => {
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

  it('ten processes starting at once migrate exactly once, under the advisory lock', async () => {
    const drivers = Array.from({ length: 10 }, () => postgres({ connectionString: PG_URL, schema }))
    try {
      // Without the lock, concurrent CREATE SCHEMA / CREATE TABLE fail with duplicate-object errors.
      await Promise.all(drivers.map((d) => d.migrate()))
    } finally {
      await Promise.all(drivers.map((d) => d.close()))
    }
    // Each version recorded once: up to 12 where releases before the version window read it, later ones with their window.
    const versions = await admin.query<{ version: number }>(`SELECT version FROM "${schema}".migrations ORDER BY version`)
    expect(versions.rows.map((r) => r.version)).toEqual(Array.from({ length: LEGACY_VERSION }, (_, i) => i + 1))
    const windowed = await admin.query<{ version: number }>(`SELECT version FROM "${schema}".schema_versions ORDER BY version`)
    expect(windowed.rows.map((r) => r.version)).toEqual(Array.from({ length: SCHEMA_VERSION - LEGACY_VERSION }, (_, i) => LEGACY_VERSION + i + 1))
    const tables = await admin.query<{ name: string }>(
      `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`,
      [schema],
    )
    expect(tables.rows.map((r) => r.name)).toEqual(['cooldowns', 'fair_lanes', 'jobs', 'migrations', 'paused_kinds', 'rate_starts', 'runners', 'schedules', 'schema_versions'])
  })

  it('refuses a schema made by a newer jobtable outside its window, naming both versions, and leaves it untouched', async () => {
    const first = postgres({ connectionString: PG_URL, schema })
    await first.migrate()
    await first.close()
    await admin.query(`INSERT INTO "${schema}".schema_versions (version, compatible_from) VALUES ($1, $1)`, [SCHEMA_VERSION + 1])
    const newer = postgres({ connectionString: PG_URL, schema })
    try {
      await expect(newer.migrate()).rejects.toBeInstanceOf(SchemaVersionError)
      await expect(newer.jobList({ limit: 1 })).rejects.toThrow(`schema version ${SCHEMA_VERSION + 1}, which runs with jobtable code of schema version ${SCHEMA_VERSION + 1} or newer; this jobtable has schema version ${SCHEMA_VERSION}`)
    } finally {
      await newer.close()
    }
    const versions = await admin.query(`SELECT version FROM "${schema}".schema_versions`)
    expect(versions.rowCount).toBe(SCHEMA_VERSION - LEGACY_VERSION + 1)
  })

  it('runs on a newer schema inside its window (a later migration that only adds), migrating nothing', async () => {
    const first = postgres({ connectionString: PG_URL, schema })
    await first.migrate()
    await first.close()
    // What a later release's additive migration leaves: a column, and its version with this one's window.
    await admin.query(`ALTER TABLE "${schema}".jobs ADD COLUMN later text`)
    await admin.query(`INSERT INTO "${schema}".schema_versions (version, compatible_from) VALUES ($1, $2)`, [SCHEMA_VERSION + 1, SCHEMA_VERSION - 1])
    const older = postgres({ connectionString: PG_URL, schema })
    try {
      await older.migrate()
      await older.jobInsertMany({ jobs: [{ id: 'j', kind: 'echo', payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })
      expect(await older.jobGet({ id: 'j' })).toMatchObject({ status: 'queued' })
    } finally {
      await older.close()
    }
    expect((await admin.query(`SELECT max(version) AS v FROM "${schema}".schema_versions`)).rows[0].v).toBe(SCHEMA_VERSION + 1)
  })

  it('migrates a schema left at an older version forward, keeping its jobs', async () => {
    // A schema made by a jobtable of version 2, with a queued job in it.
    const client = await admin.connect()
    try {
      await migrateSchema(client, `"${schema}"`, 2)
    } finally {
      client.release()
    }
    await admin.query(`INSERT INTO "${schema}".jobs (id, kind, payload, created_at, updated_at) VALUES ('kept', 'echo', '{}', 1, 1)`)
    const second = postgres({ connectionString: PG_URL, schema })
    try {
      await second.migrate()
      expect(await second.jobGet({ id: 'kept' })).toMatchObject({ id: 'kept', status: 'queued', priority: 0, runAt: null, attempt: 0 })
    } finally {
      await second.close()
    }
    expect((await readSchema(admin as never, `"${schema}"`))?.version).toBe(SCHEMA_VERSION)
    const runners = await admin.query(`SELECT to_regclass($1) AS t`, [`"${schema}".runners`])
    expect(runners.rows[0].t).not.toBeNull()
    const kinds = await admin.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'runners' AND column_name = 'kinds'`, [schema])
    expect(kinds.rowCount).toBe(1)
  })

  it('the retention migration takes the index an operator built ahead of it with CREATE INDEX CONCURRENTLY, and prunes the jobs of the version before', async () => {
    const retention = MIGRATIONS.find((m) => m.sql('"s"').includes('jobs_terminal'))!.version
    const client = await admin.connect()
    try {
      await migrateSchema(client, `"${schema}"`, retention - 1)
    } finally {
      client.release()
    }
    await admin.query(`INSERT INTO "${schema}".jobs (id, kind, status, payload, created_at, updated_at, finished_at) VALUES ('old', 'echo', 'succeeded', '{}', 1, 1, 1)`)
    // As docs/postgres.md says to build it without holding writes (outside a transaction).
    await admin.query(`CREATE INDEX CONCURRENTLY jobs_terminal ON "${schema}".jobs (kind, status, finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled')`)
    const driver = postgres({ connectionString: PG_URL, schema })
    try {
      await driver.migrate()
      expect(await driver.jobPrune({ kind: 'echo', statuses: ['succeeded'], finishedBefore: 2, limit: 10 })).toBe(1)
    } finally {
      await driver.close()
    }
    expect((await readSchema(admin as never, `"${schema}"`))?.version).toBe(SCHEMA_VERSION)
  })

  it("migration 12 makes claim_jobs return each job's trace context and ready time, the function otherwise as migration 10 made it", async () => {
    const client = await admin.connect()
    const definition = async () =>
      (await client.query<{ def: string }>(`SELECT pg_get_functiondef(to_regproc($1)) AS def`, [`"${schema}".claim_jobs`])).rows[0]!.def
    try {
      await migrateSchema(client, `"${schema}"`, 11)
      const before = await definition()
      await migrateSchema(client, `"${schema}"`, 12)
      const after = await definition()
      expect(after).not.toBe(before)
      expect(after).toBe(
        before
          .replace('c_timeout_ms integer)', 'c_timeout_ms integer, c_trace_context text, c_ready_at bigint)')
          .replace('j.max_attempts, j.timeout_ms\n', 'j.max_attempts, j.timeout_ms, j.trace_context, greatest(j.created_at, j.run_at)\n'),
      )
    } finally {
      client.release()
    }
  })

  it('migration 12 makes the claim return when each job became claimable, and a claim prepared by a runner of version 11 still runs across it', async () => {
    const client = await admin.connect()
    try {
      await migrateSchema(client, `"${schema}"`, 11)
      await client.query(`INSERT INTO "${schema}".jobs (id, kind, payload, created_at, updated_at, run_at) VALUES ('now', 'echo', '{}', 6, 6, NULL), ('late', 'echo', '{}', 5, 5, 9), ('early', 'echo', '{}', 7, 7, 3)`)
      // Version 11's claim statement, prepared on this connection before the migration, as a runner left running through a rolling deploy holds it.
      const old = {
        name: 'claim_v11',
        text: `SELECT c_seq AS seq, c_id AS id, c_kind AS kind, c_payload AS payload, c_attempt AS attempt,
                      c_max_attempts AS "maxAttempts", c_timeout_ms AS "timeoutMs"
                 FROM "${schema}".claim_jobs($1::text[], $2::integer[], $3::integer[], $4::integer, $5::text, $6::bigint)`,
      }
      await client.query({ ...old, values: [['none'], [null], [null], 1, 'r0', 10] })
      await migrateSchema(client, `"${schema}"`)
      const claimed = await client.query({ ...old, values: [['echo'], [null], [null], 1, 'r1', 10] })
      expect(claimed.rows.map((r) => r.id)).toEqual(['now'])
    } finally {
      client.release()
    }
    const driver = postgres({ connectionString: PG_URL, schema })
    try {
      const jobs = await driver.jobClaim({ limit: 10, runnerId: 'r2', kinds: ['echo'], now: 10 })
      // Its due time, or its enqueue when it had none or was due before it.
      expect(jobs.map((j) => [j.id, j.readyAt])).toEqual([['late', 9], ['early', 7]])
    } finally {
      await driver.close()
    }
  })

  it("works on the application's own pool and leaves it open on close", async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 3 })
    const d = postgres({ pool, schema })
    await d.jobInsertMany({ jobs: [{ id: 'j', kind: 'echo', payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }], now: 1 })
    await d.close()
    expect(pool.ending).toBe(false)
    expect((await pool.query(`SELECT status FROM "${schema}".jobs WHERE id = 'j'`)).rows).toEqual([{ status: 'queued' }])
    await pool.end()
  })

  it('refuses a schema name that is not a plain identifier, and options that are not given right', () => {
    for (const bad of ['', 'a-b', 'a"; DROP SCHEMA public; --', '1abc', 'x'.repeat(64)]) {
      expect(() => postgres({ connectionString: PG_URL, schema: bad })).toThrow(ConfigError)
    }
    expect(() => postgres({} as never)).toThrow(ConfigError)
    // An unset environment variable compiles (the type takes undefined) and is named at run time.
    const unset: string | undefined = process.env['JOBTABLE_TEST_UNSET_URL']
    expect(() => postgres({ connectionString: unset })).toThrow(/connectionString is undefined \(is the environment variable/)
    expect(() => postgres({ connectionString: PG_URL, pool: new pg.Pool() })).toThrow(ConfigError)
    expect(() => postgres({ connectionString: PG_URL, leaseMs: 0 })).toThrow(ConfigError)
    expect(() => postgres({ connectionString: PG_URL, pollIntervalMs: 1.5 })).toThrow(ConfigError)
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL schema tests SKIPPED: ${skip}`)
