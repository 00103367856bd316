import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import pg from 'pg'
import type { Driver } from 'jobtable'
import { postgres, type PostgresOptions } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

/**
 * The backends every contract test runs against, from one source. Each
 * gives an isolated store per test (a temporary SQLite file, a PostgreSQL
 * schema) and the few backend-specific acts a test needs: a user's own
 * transaction, and everything the store holds as text to scan for secrets.
 */
export interface Backend {
  readonly name: string
  /** Why this backend's tests are skipped here; undefined when they run. */
  readonly skip?: string
  /**
   * Whether a commit on another connection wakes an idle runner by itself
   * (PostgreSQL's NOTIFY trigger), so a job may start before the test looks
   * at it. The SQLite stores here poll too rarely to do so within a test.
   */
  readonly wakesOnCommit: boolean
  /** Makes a fresh isolated store. */
  store(): Promise<Store>
}

export interface Store {
  /**
   * Opens a new driver on this store, as a new process would;
   * `sweepIntervalMs` shortens its maintenance interval, `pollIntervalMs`
   * sets its fallback poll (the SQLite stores poll hourly unless told).
   */
  driver(options?: { sweepIntervalMs?: number; pollIntervalMs?: number }): Driver
  /**
   * Runs fn inside a transaction of the user's own, committed or rolled
   * back; fn receives the handle that enqueueTx takes.
   */
  transaction(fn: (tx: unknown) => unknown, outcome: 'commit' | 'rollback'): Promise<void>
  /** Runs a SQL statement on the store directly (PostgreSQL text with $n parameters, or SQLite), for test oracles. */
  sql?(text: string, values?: unknown[]): Promise<Record<string, unknown>[]>
  /** Everything the store holds on disk or in its tables, as text. */
  dump(): Promise<string>
  /** Removes the store. */
  drop(): Promise<void>
}

export const sqliteBackend: Backend = {
  name: 'sqlite',
  wakesOnCommit: false,
  async store(): Promise<Store> {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-test-'))
    const path = join(dir, 'jobs.db')
    const opened: Driver[] = []
    return {
      driver(options = {}) {
        // No data_version poll within a test: only an enqueue's or wake()'s own wake may start a job here.
        const d = sqlite({ path, pollIntervalMs: 3_600_000, ...options })
        opened.push(d)
        return d
      },
      async transaction(fn, outcome) {
        const db = new Database(path)
        db.pragma('busy_timeout = 5000')
        try {
          db.exec('BEGIN IMMEDIATE')
          // better-sqlite3 transactions are synchronous: fn must not await.
          fn(db)
          db.exec(outcome === 'commit' ? 'COMMIT' : 'ROLLBACK')
        } finally {
          db.close()
        }
      },
      async dump() {
        return ['', '-wal', '-shm', '-journal']
          .map((suffix) => path + suffix)
          .filter((file) => existsSync(file))
          .map((file) => readFileSync(file).toString('latin1'))
          .join('\n')
      },
      async drop() {
        for (const d of opened) await d.close().catch(() => undefined)
        rmSync(dir, { recursive: true, force: true })
      },
    }
  },
}

/** The PostgreSQL the tests use; trust auth on this machine. */
export const PG_URL = process.env['JOBTABLE_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test'

/**
 * A PgBouncer in transaction mode in front of that PostgreSQL's `test`
 * database (.ci/pgbouncer.sh starts one at 127.0.0.1:6432), or undefined:
 * the suites behind it are then skipped, saying so.
 */
export const PGBOUNCER_URL: string | undefined = process.env['JOBTABLE_PGBOUNCER_URL'] || undefined

/** Why the server at `url` (`what`: PostgreSQL or PgBouncer) cannot be reached, or undefined when it can. */
async function unreachable(what: string, url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 })
  client.on('error', () => undefined)
  try {
    await client.connect()
    await client.query('SELECT 1')
    return undefined
  } catch (err) {
    return `${what} at ${url} is unreachable (${(err as { code?: string }).code ?? 'no connection'})`
  } finally {
    await client.end().catch(() => undefined)
  }
}

const [pgDown, pgbouncerDown] = await Promise.all([
  unreachable('PostgreSQL', PG_URL),
  PGBOUNCER_URL === undefined ? 'JOBTABLE_PGBOUNCER_URL is not set (.ci/pgbouncer.sh starts a PgBouncer in transaction mode at 127.0.0.1:6432)' : unreachable('PgBouncer', PGBOUNCER_URL),
])
/** Why the PostgreSQL tests are skipped here, or undefined when they run. */
export const postgresSkipReason: string | undefined = pgDown
if (pgDown !== undefined) {
  if (process.env['JOBTABLE_REQUIRE_POSTGRES'] === '1') {
    throw new Error(`${pgDown}, and JOBTABLE_REQUIRE_POSTGRES=1 makes the PostgreSQL suite required`)
  }
  console.warn(`jobtable tests: the PostgreSQL suite was SKIPPED: ${pgDown}; set JOBTABLE_PG_URL, or start it with pg_ctlcluster`)
}

/** Why the tests behind PgBouncer in transaction mode are skipped here, or undefined when they run. */
export const pgbouncerSkipReason: string | undefined = pgDown ?? pgbouncerDown
if (pgbouncerSkipReason !== undefined && process.env['JOBTABLE_REQUIRE_PGBOUNCER'] === '1') {
  throw new Error(`${pgbouncerSkipReason}, and JOBTABLE_REQUIRE_PGBOUNCER=1 makes the suites behind PgBouncer required`)
}
// Unset is said by the skipped tests' names; set but unreachable is said here too.
if (pgDown === undefined && PGBOUNCER_URL !== undefined && pgbouncerDown !== undefined) {
  console.warn(`jobtable tests: the suites behind PgBouncer were SKIPPED: ${pgbouncerDown}; run .ci/pgbouncer.sh`)
}

/** A fresh schema name for one test store. */
export function testSchema(): string {
  return `jt_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`
}

/**
 * One PostgreSQL schema per store, dropped after. `options` reach every
 * driver the store opens (a short lease, poll-only mode).
 */
export function postgresBackend(options: Partial<PostgresOptions> = {}): Backend {
  return pgBackend('postgres', pgDown, PG_URL, options)
}

/**
 * PostgreSQL behind PgBouncer in transaction mode (PGBOUNCER_URL): every
 * driver the store opens connects through it with `pooler: 'transaction'`
 * and `options`, which replace the default `{ listenUrl: PG_URL }` (listen
 * on the direct address); without a listenUrl, drivers find jobs by the
 * poll alone, and `wakesOnCommit` is false. The user's own transactions
 * (enqueueTx) go through PgBouncer too; the test oracles (sql, dump, drop)
 * go direct.
 */
export function pgbouncerBackend(options: Partial<PostgresOptions> = { listenUrl: PG_URL }): Backend {
  return pgBackend('postgres-pgbouncer', pgbouncerSkipReason, PGBOUNCER_URL ?? PG_URL, { pooler: 'transaction', ...options }, options.listenUrl !== undefined)
}

function pgBackend(name: string, skip: string | undefined, url: string, options: Partial<PostgresOptions>, wakesOnCommit = true): Backend {
  return {
    name,
    skip,
    wakesOnCommit,
    async store(): Promise<Store> {
      const schema = testSchema()
      const opened: Driver[] = []
      const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
      admin.on('error', () => undefined)
      // The user's own transactions take the driver's way in: through PgBouncer behind it.
      const users = url === PG_URL ? admin : new pg.Pool({ connectionString: url, max: 2 })
      users.on('error', () => undefined)
      const quoted = `"${schema}"`
      return {
        driver(driverOptions = {}) {
          const d = postgres({ connectionString: url, schema, ...options, ...driverOptions })
          opened.push(d)
          return d
        },
        async transaction(fn, outcome) {
          const client = await users.connect()
          try {
            await client.query('BEGIN')
            await fn(client)
            await client.query(outcome === 'commit' ? 'COMMIT' : 'ROLLBACK')
          } catch (err) {
            await client.query('ROLLBACK').catch(() => undefined)
            throw err
          } finally {
            client.release()
          }
        },
        async sql(text, values = []) {
          return (await admin.query(text, values)).rows as Record<string, unknown>[]
        },
        async dump() {
          const tables = await admin.query<{ name: string }>('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1', [
            schema,
          ])
          const parts: string[] = []
          for (const { name } of tables.rows) {
            // Each column's value as its own text, so JSON reads as JSON rather than quoted inside a row literal.
            const rows = await admin.query<{ row: string }>(
              `SELECT string_agg(coalesce(c.value, 'NULL'), ' | ') AS row FROM ${quoted}."${name}" t, jsonb_each_text(to_jsonb(t)) c GROUP BY ctid`,
            )
            parts.push(...rows.rows.map((r) => r.row))
          }
          return parts.join('\n')
        },
        async drop() {
          for (const d of opened) await d.close().catch(() => undefined)
          await admin.query(`DROP SCHEMA IF EXISTS ${quoted} CASCADE`).catch(() => undefined)
          await admin.end()
          if (users !== admin) await users.end()
        },
      }
    },
  }
}

export const backends: Backend[] = [sqliteBackend, postgresBackend()]

/**
 * The test files whose describeEachBackend also runs behind PgBouncer in
 * transaction mode (pgbouncerBackend), relative to test/. Not every file:
 * the whole conformance and driver suites there would add about 100 s of
 * test time to CI; these add about 45 s (about 25 s of wall time on two
 * cores). They are the suites that touch what a transaction pooler can
 * break: claims and final writes (lifecycle, concurrency, retries,
 * retry-now, faults), pause, unique keys and idempotency, recurring
 * schedules (a transaction of their own, and two processes migrating one
 * new schema at once), the user's transactions (enqueueTx through the
 * pooler), counts, and wake-ups (retry-wakeup); and of the driver contract
 * suite, the hot path (every claim and final write statement, unprepared),
 * admin (cancellation among it; conformance/cancel.test.ts runs quiet
 * backends of its own), presence and wake-ups. Left out: the driver's
 * maintenance suite (single statements like the hot path's; its schedule
 * transaction is conformance/recurring's). The poll path without
 * listenUrl, named prepared statements through the pooler, concurrent
 * migrations and cancelling a timed-out statement are in
 * test/postgres/pooler.test.ts.
 */
const BEHIND_PGBOUNCER = new Set([
  'conformance/lifecycle.test.ts',
  'conformance/concurrency.test.ts',
  'conformance/retries.test.ts',
  'conformance/retry-now.test.ts',
  'conformance/faults.test.ts',
  'conformance/pause.test.ts',
  'conformance/pause-unserved.test.ts',
  'conformance/unique.test.ts',
  'conformance/idempotent.test.ts',
  'conformance/recurring.test.ts',
  'conformance/transactions.test.ts',
  'conformance/counts.test.ts',
  'conformance/retry-wakeup.test.ts',
  'conformance/rate-limits.test.ts',
  'conformance/cooldowns.test.ts',
  'driver/admin.test.ts',
  'driver/hot-path.test.ts',
  'driver/presence.test.ts',
  'driver/rate-limits.test.ts',
  'driver/wakeups.test.ts',
])

/** The backends the calling test file runs: `backends`, and PgBouncer's for the files in BEHIND_PGBOUNCER. */
function backendsOfThisFile(): Backend[] {
  const file = expect.getState().testPath?.replaceAll('\\', '/')
  const behind = file !== undefined && [...BEHIND_PGBOUNCER].some((f) => file.endsWith(`/test/${f}`))
  return behind ? [...backends, pgbouncerBackend()] : backends
}

/**
 * Runs `body` once per backend, as its own describe block named
 * `<backend>: <title>`. A backend that cannot run here gets one skipped
 * test whose name says why, instead of its tests.
 */
export function describeEachBackend(title: string, body: (backend: Backend) => void): void {
  describe.each(backendsOfThisFile())(`$name: ${title}`, (backend) => {
    if (backend.skip !== undefined) {
      it.skip(`skipped: ${backend.skip}`, () => {})
      return
    }
    body(backend)
  })
}
