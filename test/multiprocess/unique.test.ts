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

const ENQUEUER = fileURLToPath(new URL('./unique-enqueuer.ts', import.meta.url))
const PROCESSES = 4
const KEYS = 60

interface Answer {
  key: string
  id: string
  created: boolean
}

/** Runs PROCESSES enqueuers at once on one database; resolves to every answer of every process. */
async function enqueueFromProcesses(env: Record<string, string>): Promise<Answer[]> {
  const startAt = String(Date.now() + 4_000)
  const runs = Array.from({ length: PROCESSES }, () => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', ENQUEUER], {
      env: { ...process.env, ...env, JT_KEYS: String(KEYS), JT_START_AT: startAt },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (c: Buffer) => (out += c.toString()))
    child.stderr.on('data', (c: Buffer) => (err += c.toString()))
    return new Promise<Answer[]>((resolve, reject) =>
      child.on('exit', (code) => (code === 0 ? resolve(out.trim().split('\n').map((l) => JSON.parse(l) as Answer)) : reject(new Error(`enqueuer exited ${code}: ${err}`)))),
    )
  })
  return (await Promise.all(runs)).flat()
}

/** Every key has exactly one stored job, which every process was answered with, and exactly one answer created it. */
function expectOneJobPerKey(answers: Answer[], rows: { id: string; unique_key: string }[]): void {
  expect(answers).toHaveLength(PROCESSES * KEYS)
  expect(rows).toHaveLength(KEYS)
  const storedFor = new Map(rows.map((r) => [r.unique_key, r.id]))
  expect(storedFor.size).toBe(KEYS)
  for (const a of answers) expect(a.id).toBe(storedFor.get(a.key))
  for (let i = 0; i < KEYS; i++) expect(answers.filter((a) => a.key === `k${i}` && a.created)).toHaveLength(1)
}

describe('unique jobs across processes', () => {
  it('sqlite: 4 processes enqueue the same 60 keys at once: one job per key, every answer names it, one created each', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-unique-'))
    try {
      const path = join(dir, 'jobs.db')
      // Made before the processes start, so none of them races to migrate.
      await new Runner({ driver: sqlite({ path }) }).close()
      const answers = await enqueueFromProcesses({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path })
      expectOneJobPerKey(answers, readSqlite<{ id: string; unique_key: string }>(path, 'SELECT id, unique_key FROM jobtable_jobs'))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)

  it.skipIf(postgresBackend().skip !== undefined)('postgres: 4 processes enqueue the same 60 keys at once: one job per key, every answer names it, one created each', async () => {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
    try {
      const driver = postgres({ connectionString: PG_URL, schema })
      await driver.migrate()
      await driver.close()
      const answers = await enqueueFromProcesses({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema })
      expectOneJobPerKey(answers, (await admin.query<{ id: string; unique_key: string }>(`SELECT id, unique_key FROM "${schema}".jobs`)).rows)
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    }
  }, 60_000)
})
