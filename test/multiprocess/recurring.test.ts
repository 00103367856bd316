import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { readSqlite } from './processes.js'

const PROCESS = fileURLToPath(new URL('./cron-process.ts', import.meta.url))
const PROCESSES = 3
/** A schedule minute every 100 real ms. */
const SPEED = 600
const MINUTE = 60_000
const V0 = Date.UTC(2026, 0, 5, 10, 30)

/** Runs PROCESSES schedule processes at once on one database for about four real seconds. */
async function runProcesses(env: Record<string, string>, log: string): Promise<void> {
  const startAt = Date.now() + 4_000
  const runs = Array.from({ length: PROCESSES }, () => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', PROCESS], {
      env: { ...process.env, ...env, JT_START_AT: String(startAt), JT_STOP_AT: String(startAt + 4_000), JT_SPEED: String(SPEED), JT_LOG: log },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let err = ''
    child.stderr.on('data', (c: Buffer) => (err += c.toString()))
    return new Promise<void>((resolve, reject) => child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`schedule process exited ${code}: ${err}`)))))
  })
  await Promise.all(runs)
}

/**
 * The ledger of stored jobs: one per tick, two for one tick is a failure.
 * Missed ticks are `all`, so the ticks also run without a gap from the
 * first after the schedule was first seen to the last one stored.
 */
function expectEachTickOnce(runAts: number[]): void {
  const sorted = [...runAts].sort((a, b) => a - b)
  expect(new Set(sorted).size).toBe(sorted.length)
  // About 40 schedule minutes passed; a loaded machine starts its processes late and has fewer, but never none.
  expect(sorted.length).toBeGreaterThanOrEqual(3)
  // The first tick is the one after the first process's first pass, which a slow start puts a few schedule minutes on.
  const first = sorted[0]!
  expect((first - V0) % MINUTE).toBe(0)
  expect(sorted).toEqual(Array.from({ length: sorted.length }, (_, i) => first + i * MINUTE))
}

describe('recurring jobs across processes', () => {
  it('sqlite: 3 processes declaring one every-minute schedule on fast clocks store exactly one job per tick, with no tick missed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-recurring-'))
    try {
      const path = join(dir, 'jobs.db')
      await new Runner({ driver: sqlite({ path }) }).close()
      await runProcesses({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path }, join(dir, 'log'))
      expectEachTickOnce(readSqlite<{ run_at: number }>(path, "SELECT run_at FROM jobtable_jobs WHERE kind = 'tick'").map((r) => r.run_at))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)

  it.skipIf(postgresBackend().skip !== undefined)('postgres: 3 processes declaring one every-minute schedule on fast clocks store exactly one job per tick, with no tick missed', async () => {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-recurring-'))
    try {
      const driver = postgres({ connectionString: PG_URL, schema })
      await driver.migrate()
      await driver.close()
      await runProcesses({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema }, join(dir, 'log'))
      expectEachTickOnce((await admin.query<{ run_at: string }>(`SELECT run_at FROM "${schema}".jobs WHERE kind = 'tick'`)).rows.map((r) => Number(r.run_at)))
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})
