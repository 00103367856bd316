import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import type { Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, testSchema } from '../../support/backends.js'
import { faultyPool, hookSqlite } from './faults-native.js'

/** A job as the oracle reads it, from the table itself. */
export interface StoredJob {
  readonly id: string
  readonly kind: string
  readonly status: string
  readonly attempt: number
  readonly error: string | null
}

/**
 * A fresh store whose driver raises injected faults where the database
 * library would (faults-native.ts), with a reading path of the test's own
 * that no fault touches.
 */
export interface FaultStore {
  /** The driver, migrated already, so a run's first call is the runner's own. */
  readonly driver: Driver
  /** Every job in the store, read beside the driver. */
  jobs(): Promise<StoredJob[]>
  drop(): Promise<void>
}

/** Opens a fault store on `backend` (`sqlite` or `postgres`); chores run every `choreMs` so a short run sees them. */
export async function faultStore(backend: string, choreMs: number): Promise<FaultStore> {
  if (backend === 'sqlite') {
    hookSqlite()
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-nth-'))
    const path = join(dir, 'jobs.db')
    const driver = sqlite({ path, pollIntervalMs: choreMs, sweepIntervalMs: choreMs })
    const reader = new Database(path, { readonly: true })
    const read = reader.prepare('SELECT id, kind, status, attempt, error FROM jobtable_jobs ORDER BY seq')
    return {
      driver,
      jobs: async () => read.all() as StoredJob[],
      async drop() {
        reader.close()
        await driver.close().catch(() => undefined)
        rmSync(dir, { recursive: true, force: true })
      },
    }
  }
  const schema = testSchema()
  const pool = faultyPool(PG_URL)
  const admin = new pg.Pool({ connectionString: PG_URL, max: 1 })
  admin.on('error', () => undefined)
  // A slower fallback poll: on PostgreSQL each one wakes an idle runner's claim.
  const driver = postgres({ pool, schema, pollIntervalMs: 5 * choreMs, sweepIntervalMs: choreMs })
  await driver.migrate()
  return {
    driver,
    jobs: async () => (await admin.query<StoredJob>(`SELECT id, kind, status, attempt, error FROM "${schema}".jobs ORDER BY seq`)).rows,
    async drop() {
      await driver.close().catch(() => undefined)
      await pool.end().catch(() => undefined)
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined)
      await admin.end()
    },
  }
}
