/**
 * A rolling deploy across a schema migration: the previous release of
 * jobtable (schema 12, built from this project's history and kept as
 * test/fixtures/jobtable-schema-12.tgz: `git worktree add <dir> 1d0aec3`,
 * `tsc -p tsconfig.build.json`, then `tar czf` of package.json and the
 * built .js files) runs in its own processes beside the newest runner, on
 * one database the newest runner migrated past it. Both run jobs, none
 * fails, and the old one restarts: its own check (the highest version in
 * the migrations table) still reads 12, since migrations inside its window
 * are recorded elsewhere. A migration outside its window is written where
 * it reads, and its next start refuses the schema, as it always did.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import pg from 'pg'
import Database from 'better-sqlite3'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, Runner, type Driver } from 'jobtable'
import { postgres, SCHEMA_VERSION as PG_SCHEMA_VERSION } from 'jobtable/postgres'
import { sqlite, SCHEMA_VERSION } from 'jobtable/sqlite'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'
import { JOBTABLE_VERSION } from '../../src/version.js'
import { eventually } from './processes.js'

const REPO = resolve(import.meta.dirname, '../..')
const FIXTURE = join(REPO, 'test/fixtures/jobtable-schema-12.tgz')
/** What the old release needs from node_modules, besides itself. */
const DEPENDENCIES = ['@standard-schema/spec', 'hono', '@hono/node-server', 'pino', 'croner', '@opentelemetry/api', 'better-sqlite3', 'bindings', 'file-uri-to-path', 'pg', 'zod']

/** The old release's worker: runs `old_work` and `shared`, each job's result naming it. */
const OLD_WORKER = `
import { z } from 'zod'
import { Runner } from 'jobtable'
const payload = z.strictObject({ n: z.number() })
let runner
try {
  // SQLite opens (and checks the schema) here, PostgreSQL at start.
  const driver = process.env.JT_BACKEND === 'postgres'
    ? (await import('jobtable/postgres')).postgres({ connectionString: process.env.JT_PG_URL, schema: process.env.JT_SCHEMA, leaseMs: 3000 })
    : (await import('jobtable/sqlite')).sqlite({ path: process.env.JT_SQLITE_PATH, pollIntervalMs: 50 })
  runner = new Runner({ driver, workers: 2, logger: { debug() {}, info() {}, warn() {}, error() {} } })
  for (const kind of ['old_work', 'shared']) runner.register(kind, { payload, result: (r) => r, handler: async () => ({ by: 'old' }) })
  await runner.start()
} catch (err) {
  process.stderr.write('start failed: ' + (err && err.name) + ' ' + (err && err.message) + '\\n')
  process.exit(3)
}
process.stdout.write('ready ' + runner.id + '\\n')
process.on('SIGTERM', () => void runner.close().then(() => process.exit(0)))
`

let project: string

beforeAll(() => {
  project = realpathSync(mkdtempSync(join(tmpdir(), 'jobtable-mixed-')))
  const own = join(project, 'node_modules/jobtable')
  mkdirSync(own, { recursive: true })
  execFileSync('tar', ['xzf', FIXTURE, '-C', own])
  for (const dep of DEPENDENCIES) {
    const link = join(project, 'node_modules', dep)
    mkdirSync(join(link, '..'), { recursive: true })
    try {
      symlinkSync(join(REPO, 'node_modules', dep), link, 'dir')
    } catch {
      // A package npm did not hoist (bindings, file-uri-to-path nested under better-sqlite3): it resolves from there.
    }
  }
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'old-release', private: true, type: 'module' }))
  writeFileSync(join(project, 'worker.mjs'), OLD_WORKER)
})

afterAll(() => {
  if (project) rmSync(project, { recursive: true, force: true })
})

interface OldWorker {
  readonly child: ChildProcess
  readonly ready: Promise<void>
  readonly exited: Promise<number | string | null>
  stderr(): string
}

/** Starts the old release's worker with plain Node (the fixture has no sources to load). */
function startOld(env: Record<string, string>): OldWorker {
  const child = spawn(process.execPath, ['worker.mjs'], { cwd: project, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
  const exited = new Promise<number | string | null>((r) => child.on('exit', (code, signal) => r(signal ?? code)))
  const ready = new Promise<void>((res, rej) => {
    let out = ''
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      if (/ready \S+\n/.test(out)) res()
    })
    void exited.then((how) => rej(new Error(`the old worker exited (${how}) before it was ready: ${stderr}`)))
  })
  ready.catch(() => undefined)
  return { child, ready, exited, stderr: () => stderr }
}

const payload = z.strictObject({ n: z.number() })

interface Backend {
  readonly name: 'sqlite' | 'postgres'
  readonly skip: string | undefined
  /** A fresh database: the old worker's environment, a driver of the newest code on it, raw reads, and its removal. */
  make(): Promise<{ env: Record<string, string>; driver: () => Driver; legacyMax: () => Promise<number>; runnerVersions: () => Promise<(string | null)[]>; writeLegacy: (v: number) => Promise<void>; drop: () => Promise<void> }>
}

const BACKENDS: Backend[] = [
  {
    name: 'sqlite',
    skip: undefined,
    async make() {
      const dir = mkdtempSync(join(tmpdir(), 'jobtable-mixed-db-'))
      const path = join(dir, 'jobs.db')
      const raw = <R>(f: (db: Database.Database) => R): R => {
        const db = new Database(path)
        try {
          return f(db)
        } finally {
          db.close()
        }
      }
      return {
        env: { JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path },
        driver: () => sqlite({ path, pollIntervalMs: 50 }),
        legacyMax: async () => raw((db) => (db.prepare('SELECT max(version) AS v FROM jobtable_migrations').get() as { v: number }).v),
        runnerVersions: async () => raw((db) => (db.prepare('SELECT version FROM jobtable_runners').all() as { version: string | null }[]).map((r) => r.version)),
        writeLegacy: async (v) => void raw((db) => db.prepare('INSERT INTO jobtable_migrations (version, applied_at) VALUES (?, 0)').run(v)),
        drop: async () => rmSync(dir, { recursive: true, force: true }),
      }
    },
  },
  {
    name: 'postgres',
    skip: postgresSkipReason,
    async make() {
      const schema = testSchema()
      const admin = new pg.Pool({ connectionString: PG_URL, max: 1 })
      return {
        env: { JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema },
        driver: () => postgres({ connectionString: PG_URL, schema, leaseMs: 3_000 }),
        legacyMax: async () => (await admin.query<{ v: number }>(`SELECT max(version) AS v FROM "${schema}".migrations`)).rows[0]!.v,
        runnerVersions: async () => (await admin.query<{ version: string | null }>(`SELECT version FROM "${schema}".runners`)).rows.map((r) => r.version),
        writeLegacy: async (v) => void (await admin.query(`INSERT INTO "${schema}".migrations (version) VALUES ($1)`, [v])),
        drop: async () => {
          await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
          await admin.end()
        },
      }
    },
  },
]

for (const backend of BACKENDS) {
  describe(`${backend.name}: the previous release beside the newest, across a migration`, () => {
    if (backend.skip !== undefined) {
      it.skip(`skipped: ${backend.skip}`, () => {})
      return
    }

    it('both run their jobs on the migrated schema, none fails, the old one restarts; a migration outside its window makes it refuse at its next start', async () => {
      expect(backend.name === 'sqlite' ? SCHEMA_VERSION : PG_SCHEMA_VERSION).toBeGreaterThan(12)
      const db = await backend.make()
      const olds: OldWorker[] = []
      const runner = new Runner({ driver: db.driver(), workers: 2, logger: { debug() {}, info() {}, warn() {}, error() {} } })
      try {
        // The old release made the database (schema 12) and runs on it.
        const first = startOld(db.env)
        olds.push(first)
        await first.ready
        expect(await db.legacyMax()).toBe(12)

        // The newest runner opens it, migrates it past 12, and runs its own kinds and the shared one.
        const [newWork, shared] = ['new_work', 'shared'].map((kind) => runner.register(kind, { payload, result: (r: { by: string }) => r, handler: async () => ({ by: 'new' }) }))
        // Known here without a handler: only the old release runs it.
        const oldWork = runner.register(defineKind('old_work', { payload, result: (r: { by: string }) => r }))
        await runner.start()
        const settle = async (ids: string[]) => {
          await eventually(async () => (await Promise.all(ids.map((id) => runner.get(id)))).every((j) => ['succeeded', 'failed', 'cancelled'].includes(j.status)), 50)
          return Promise.all(ids.map((id) => runner.get(id)))
        }
        const round = async () => {
          const ids = [
            ...(await oldWork.enqueueMany(Array.from({ length: 10 }, (_, n) => ({ n })))),
            ...(await newWork!.enqueueMany(Array.from({ length: 10 }, (_, n) => ({ n })))),
            ...(await shared!.enqueueMany(Array.from({ length: 10 }, (_, n) => ({ n })))),
          ]
          const jobs = await settle(ids)
          expect(jobs.map((j) => j.status)).toEqual(ids.map(() => 'succeeded'))
          // Each kind ran on a release that has it: old_work on the old one, new_work on the newest.
          expect(new Set(jobs.filter((j) => j.kind === 'old_work').map((j) => (j.result as { by: string }).by))).toEqual(new Set(['old']))
          expect(new Set(jobs.filter((j) => j.kind === 'new_work').map((j) => (j.result as { by: string }).by))).toEqual(new Set(['new']))
        }
        await round()
        expect(await db.legacyMax()).toBe(12) // migrations inside the window are recorded where the old release does not read
        // Each runner's release, as an operator reads a rolling deploy: the newest records its own, the old one none.
        expect((await db.runnerVersions()).sort()).toEqual([null, JOBTABLE_VERSION].sort())

        // The old release restarts on the migrated schema: after a crash, and after a graceful stop.
        first.child.kill('SIGKILL')
        await first.exited
        const second = startOld(db.env)
        olds.push(second)
        await second.ready
        await round()
        second.child.kill('SIGTERM')
        expect(await second.exited).toBe(0)
        const third = startOld(db.env)
        olds.push(third)
        await third.ready
        await round()
        third.child.kill('SIGTERM')
        await third.exited

        // A migration that closes the window to it is recorded where it reads: its next start refuses the schema.
        await db.writeLegacy(SCHEMA_VERSION + 1)
        const refused = startOld(db.env)
        olds.push(refused)
        expect(await refused.exited).toBe(3)
        expect(refused.stderr()).toContain('SchemaVersionError')
      } finally {
        for (const o of olds) o.child.kill('SIGKILL')
        await Promise.all(olds.map((o) => o.exited))
        await runner.close()
        await db.drop()
      }
    }, 120_000)
  })
}
