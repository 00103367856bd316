/**
 * The commands of an upgrade, run in this process through the command's
 * own entry (run()): `migrate --sql` applied by the database's own shell
 * (sqlite3, psql) gives a schema that `migrate --check` accepts and a
 * driver with `migrate: 'verify'` runs on; `--check` names a drifted
 * schema; `doctor` reports runners, unhandled and paused kinds and late
 * jobs, and exits 1 exactly when a person is needed.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import Database from 'better-sqlite3'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner, SchemaBehindError } from 'jobtable'
import { postgres, SCHEMA_VERSION as PG_VERSION } from 'jobtable/postgres'
import { sqlite, SCHEMA_VERSION } from 'jobtable/sqlite'
import { run } from '../../src/cli/run.js'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = ''
  let stderr = ''
  const sink = (append: (s: string) => void) => new Writable({ write: (chunk, _e, done) => (append(String(chunk)), done()) })
  const code = await run(args, { stdout: sink((s) => (stdout += s)), stderr: sink((s) => (stderr += s)), env: {} })
  return { code, stdout, stderr }
}

let dir: string
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'jobtable-upgrade-'))
})
afterEach(() => rmSync(dir, { recursive: true, force: true }))

const payload = z.strictObject({ n: z.number() })

describe('sqlite: migrations a team owns, and the operator check', () => {
  it('migrate --sql --out, applied by the sqlite3 shell, gives a schema --check accepts and a verify driver runs on', async () => {
    const out = join(dir, 'sql')
    const sql = await cli(['migrate', '--sql', '--out', out])
    expect(sql.code).toBe(0)
    const files = readdirSync(out).sort()
    expect(files).toHaveLength(SCHEMA_VERSION)
    expect(files[0]).toBe('0001_jobtable_sqlite.sql')
    const path = join(dir, 'app.db')
    // Only the first half first: a verify driver refuses a schema behind it, and --check says so.
    for (const f of files.slice(0, 5)) execFileSync('sqlite3', [path], { input: readFileSync(join(out, f)) })
    expect(() => sqlite({ path, migrate: 'verify' })).toThrow(SchemaBehindError)
    const behind = await cli(['migrate', '--check', '-d', path])
    expect(behind.code).toBe(1)
    expect(JSON.parse(behind.stdout)).toMatchObject({ version: 5, expected: SCHEMA_VERSION, state: 'behind', runs: false, drift: [] })
    for (const f of files.slice(5)) execFileSync('sqlite3', [path], { input: readFileSync(join(out, f)) })
    const check = await cli(['migrate', '--check', '-d', path])
    expect([check.code, JSON.parse(check.stdout)]).toEqual([0, { version: SCHEMA_VERSION, expected: SCHEMA_VERSION, compatibleFrom: 12, state: 'current', runs: true, drift: [], advice: '' }])
    const runner = new Runner({ driver: sqlite({ path, migrate: 'verify' }), logger: silent })
    const echo = runner.register('echo', { payload, handler: () => undefined })
    await runner.start()
    const id = await echo.enqueue({ n: 1 })
    for (;;) {
      if ((await runner.get(id)).status === 'succeeded') break
      await new Promise((r) => setTimeout(r, 10))
    }
    await runner.close()
  })

  it('--check names a drifted schema and exits 1; a missing database is refused and not created', async () => {
    const path = join(dir, 'app.db')
    expect((await cli(['migrate', '-d', path])).code).toBe(0)
    const db = new Database(path)
    db.exec('DROP INDEX jobtable_jobs_terminal')
    db.close()
    const drift = await cli(['migrate', '--check', '-d', path])
    expect(drift.code).toBe(1)
    expect(JSON.parse(drift.stdout)).toMatchObject({ state: 'current', drift: ['missing index jobtable_jobs_terminal'] })
    const missing = await cli(['migrate', '--check', '-d', join(dir, 'typo.db')])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toContain('no database at')
    expect(readdirSync(dir)).not.toContain('typo.db')
    expect((await cli(['migrate', '--from', '3'])).code).toBe(2)
  })

  it('doctor: the live runners with their releases, a kind no runner handles, a paused kind; exit 1 until the queue is served', async () => {
    const path = join(dir, 'app.db')
    const runner = new Runner({ driver: sqlite({ path }), logger: silent, workers: 1 })
    runner.register('echo', { payload, handler: () => new Promise(() => undefined) })
    const orphan = runner.register(defineKind('orphan', { payload }))
    const held = runner.register(defineKind('held', { payload }))
    await runner.start()
    try {
      // Healthy: one live runner, nothing queued.
      const healthy = await cli(['doctor', '-d', path])
      expect(healthy.code).toBe(0)
      const report = JSON.parse(healthy.stdout)
      expect(report.runners.map((r: { id: string; kinds: string[] }) => [r.id, r.kinds])).toEqual([[runner.id, ['echo']]])
      expect(report.problems).toEqual([])
      await orphan.enqueue({ n: 1 })
      await runner.pause('held')
      await held.enqueue({ n: 2 })
      const sick = await cli(['doctor', '-d', path])
      expect(sick.code).toBe(1)
      const found = JSON.parse(sick.stdout)
      expect(found.unhandledKinds).toEqual(['orphan'])
      expect(found.pausedKinds.map((p: { kind: string }) => p.kind)).toEqual(['held'])
      expect(found.problems).toHaveLength(1)
      expect(found.problems[0]).toContain('orphan')
    } finally {
      await runner.close()
    }
    // Once the runner is gone, its row is not a live runner (its lock is released).
    const after = JSON.parse((await cli(['doctor', '-d', path])).stdout)
    expect(after.runners).toEqual([])
  })
})

describe.skipIf(postgresSkipReason !== undefined)('postgres: migrations a team owns, and the operator check', () => {
  it('migrate --sql piped to psql gives a schema --check accepts and a verify driver runs on; doctor reads the live runner', async () => {
    const schema = testSchema()
    const url = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 })
    try {
      const sql = await cli(['migrate', '--sql', '-d', url])
      expect(sql.code).toBe(0)
      execFileSync('psql', ['-q', '-v', 'ON_ERROR_STOP=1', PG_URL], { input: sql.stdout, stdio: ['pipe', 'ignore', 'pipe'] })
      const check = await cli(['migrate', '--check', '-d', url])
      expect([check.code, JSON.parse(check.stdout).version, JSON.parse(check.stdout).drift]).toEqual([0, PG_VERSION, []])
      const runner = new Runner({ driver: postgres({ connectionString: PG_URL, schema, migrate: 'verify' }), logger: silent })
      runner.register('echo', { payload, handler: () => undefined })
      await runner.start()
      try {
        const doctor = await cli(['doctor', '-d', url])
        expect(doctor.code).toBe(0)
        expect(JSON.parse(doctor.stdout).runners.map((r: { id: string }) => r.id)).toEqual([runner.id])
      } finally {
        await runner.close()
      }
      await admin.query(`DROP INDEX "${schema}".jobs_terminal`)
      const drift = await cli(['migrate', '--check', '-d', url])
      expect([drift.code, JSON.parse(drift.stdout).drift]).toEqual([1, ['missing index jobs_terminal']])
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    }
  })
})
