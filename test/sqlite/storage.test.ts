import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, Runner, SchemaVersionError, claimErrorChannel } from 'jobtable'
import { SCHEMA_VERSION, migrate, sqlite, type SqliteDriver } from 'jobtable/sqlite'
import { readSchema } from '../../src/sqlite/migrations.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'
import * as sql from '../../src/sqlite/queries.js'

const payload = z.strictObject({ n: z.number() })

describe('sqlite: storage', () => {
  let dir: string
  let path: string
  const cleanup: (() => unknown)[] = []
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-sqlite-'))
    path = join(dir, 'jobs.db')
  })
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn()
    rmSync(dir, { recursive: true, force: true })
  })
  function runner(driver = sqlite({ path })): Runner<SqliteDriver> {
    const r = new Runner({ driver, workers: 2, logger: captureLogs() })
    cleanup.push(() => r.close())
    return r
  }

  it('refuses a missing or doubled store, and bad options', () => {
    expect(() => sqlite({})).toThrow(ConfigError)
    expect(() => sqlite(undefined as never)).toThrow(ConfigError)
    expect(() => sqlite({ path: '' })).toThrow(ConfigError)
    const db = new Database(':memory:')
    cleanup.push(() => db.close())
    expect(() => sqlite({ path, database: db })).toThrow(/either path/)
    expect(() => sqlite({ database: {} as never })).toThrow(/better-sqlite3 Database/)
    expect(() => sqlite({ path, synchronous: 'off' as never })).toThrow(/synchronous/)
    expect(() => sqlite({ path, busyTimeoutMs: -1 })).toThrow(/busyTimeoutMs/)
  })

  it('opens in WAL mode with the documented synchronous setting, and reads through a separate connection', async () => {
    const driver = sqlite({ path })
    const r = runner(driver)
    expect(driver.database.pragma('journal_mode', { simple: true })).toBe('wal')
    expect(driver.database.pragma('synchronous', { simple: true })).toBe(1) // NORMAL
    const kind = r.register('echo', { payload, handler: () => undefined })
    const id = await kind.enqueue({ n: 1 })
    // Another connection holds the write lock: reads still answer, from the reading connection.
    const other = new Database(path)
    cleanup.push(() => other.close())
    other.exec('BEGIN IMMEDIATE')
    expect((await r.get(id)).status).toBe('queued')
    other.exec('ROLLBACK')
    const full = sqlite({ path, synchronous: 'full' })
    cleanup.push(() => full.close())
    expect(full.database.pragma('synchronous', { simple: true })).toBe(2)
  })

  it('migrates a database made by an older jobtable, keeping its jobs', async () => {
    const old = new Database(path)
    migrate(old, 1)
    old.prepare("INSERT INTO jobtable_jobs (id, kind, payload, created_at, updated_at) VALUES ('old-job', 'echo', '{\"n\":1}', 1, 1)").run()
    old.close()

    const r = runner()
    r.register('echo', { payload, handler: () => undefined })
    const version = new Database(path, { readonly: true })
    cleanup.push(() => version.close())
    expect(readSchema(version)?.version).toBe(SCHEMA_VERSION)
    expect(SCHEMA_VERSION).toBeGreaterThan(1)
    const done = track(r)
    await r.start()
    await done.ends(['old-job'])
    expect(await r.get('old-job')).toMatchObject({ status: 'succeeded' })
  })

  it('refuses a database made by a newer jobtable outside its window and leaves it untouched', () => {
    const db = new Database(path)
    migrate(db)
    db.prepare('INSERT INTO jobtable_schema_versions (version, compatible_from, applied_at) VALUES (?, ?, 0)').run(SCHEMA_VERSION + 1, SCHEMA_VERSION + 1)
    db.close()
    expect(() => sqlite({ path })).toThrow(SchemaVersionError)
    const check = new Database(path, { readonly: true })
    cleanup.push(() => check.close())
    expect(readSchema(check)).toEqual({ version: SCHEMA_VERSION + 1, compatibleFrom: SCHEMA_VERSION + 1 })
  })

  it('runs on a newer database inside its window (a later migration that only adds), migrating nothing', async () => {
    const db = new Database(path)
    migrate(db)
    db.exec('ALTER TABLE jobtable_jobs ADD COLUMN later TEXT')
    db.prepare('INSERT INTO jobtable_schema_versions (version, compatible_from, applied_at) VALUES (?, ?, 0)').run(SCHEMA_VERSION + 1, SCHEMA_VERSION - 1)
    db.close()
    const r = runner()
    const echo = r.register('echo', { payload, handler: () => undefined })
    const done = track(r)
    await r.start()
    const id = await echo.enqueue({ n: 1 })
    await done.ends([id])
    expect(await r.get(id)).toMatchObject({ status: 'succeeded' })
    const check = new Database(path, { readonly: true })
    cleanup.push(() => check.close())
    expect(readSchema(check)?.version).toBe(SCHEMA_VERSION + 1)
  })

  it('retries a claim refused by a real lock held by another connection; the job runs when the lock goes, with no new wake', async () => {
    const r = runner()
    const kind = r.register('echo', { payload, handler: () => undefined })
    const done = track(r)
    await r.start()
    const other = new Database(path)
    cleanup.push(() => other.close())
    other.exec('BEGIN IMMEDIATE')
    // The job is inserted inside the lock holder's transaction, invisible until it commits.
    const id = kind.enqueueTx(other, { n: 1 })
    const busy = new Promise<unknown>((resolve) => {
      const on = (m: unknown) => {
        claimErrorChannel.unsubscribe(on)
        resolve(m)
      }
      claimErrorChannel.subscribe(on)
    })
    r.wake()
    expect(await busy).toMatchObject({ error: 'SQLITE_BUSY', transient: true })
    other.exec('COMMIT')
    await done.ends([id])
    expect((await r.get(id)).status).toBe('succeeded')
  })

  it('enqueues inside the application’s own database and transaction', async () => {
    const db = new Database(path)
    cleanup.push(() => db.close())
    db.exec('CREATE TABLE recipes (id INTEGER PRIMARY KEY, title TEXT)')
    const r = runner(sqlite({ database: db }))
    const kind = r.register('index_recipe', { payload, handler: () => undefined })
    const done = track(r)
    await r.start()
    const save = db.transaction((title: string, fail: boolean) => {
      const { lastInsertRowid } = db.prepare('INSERT INTO recipes (title) VALUES (?)').run(title)
      const id = kind.enqueueTx(db, { n: Number(lastInsertRowid) })
      if (fail) throw new Error('rolled back')
      return id
    })
    expect(() => save('burnt toast', true)).toThrow('rolled back')
    const id = save('soup', false)
    kind.wake()
    await done.ends([id])
    expect(db.prepare('SELECT title FROM recipes').all()).toEqual([{ title: 'soup' }])
    expect((await r.list()).jobs.map((j) => [j.id, j.status])).toEqual([[id, 'succeeded']])
    await r.close()
    expect(db.open).toBe(true) // a database handed in stays the application's
  })

  it('keeps an acknowledged enqueue when the process is killed right after', async () => {
    const script = `
      import { Runner } from 'jobtable'
      import { sqlite } from 'jobtable/sqlite'
      import { z } from 'zod'
      const runner = new Runner({ driver: sqlite({ path: process.argv[1] }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
      const kind = runner.register('echo', { payload: z.strictObject({ n: z.number() }), handler: () => undefined })
      for (let n = 0; n < 50; n++) process.stdout.write((await kind.enqueue({ n })) + '\\n')
      setInterval(() => {}, 1000)
    `
    const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', '--input-type=module', '-e', script, path], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const acknowledged: string[] = []
    await new Promise<void>((resolve) => {
      let buffer = ''
      child.stdout.on('data', (chunk: Buffer) => {
        buffer += chunk.toString()
        const lines = buffer.split('\n')
        buffer = lines.pop() ?? ''
        acknowledged.push(...lines)
        if (acknowledged.length >= 50) {
          child.kill('SIGKILL')
          resolve()
        }
      })
    })
    await new Promise((resolve) => child.once('exit', resolve))
    const r = runner()
    for (const id of acknowledged) expect((await r.get(id)).status).toBe('queued')
  })

  it('a prune reads only the index of terminal jobs, and its pages go to the free list, which later writes reuse; VACUUM returns them to the file system', async () => {
    const r = runner(sqlite({ path }))
    const kind = r.register('echo', { payload: z.strictObject({ n: z.number(), text: z.string() }), handler: () => undefined })
    const done = track(r)
    const batch = () => kind.enqueueMany(Array.from({ length: 1_000 }, (_, n) => ({ n, text: 'x'.repeat(500) })))
    const ids = [...(await batch()), ...(await batch()), ...(await batch())]
    await r.start()
    await done.ends(ids)
    const db = new Database(path)
    cleanup.push(() => db.close())
    for (const query of [sql.pruneJobs, sql.finishedKinds]) {
      const plan = (db.prepare(`EXPLAIN QUERY PLAN ${query}`).all({ kind: 'echo', statuses: '["succeeded"]', before: 0, limit: 1 }) as { detail: string }[]).map((p) => p.detail)
      expect(plan.filter((d) => /jobtable_jobs\b/.test(d) && !/INTEGER PRIMARY KEY/.test(d)).every((d) => d.includes('USING COVERING INDEX jobtable_jobs_terminal')), plan.join('; ')).toBe(true)
    }
    const pages = () => ({ free: db.pragma('freelist_count', { simple: true }) as number, total: db.pragma('page_count', { simple: true }) as number })
    const before = pages()
    const pruner = new Runner({ driver: sqlite({ path }), logger: captureLogs(), clock: () => Date.now() + 1 })
    cleanup.push(() => pruner.close())
    expect(await pruner.prune({ olderThanMs: 0 })).toBe(3_000)
    const pruned = pages()
    // The file keeps its size; the deleted rows' pages are free for the next writes.
    expect(pruned.total).toBe(before.total)
    expect(pruned.free).toBeGreaterThan(before.free + 100)
    await r.stop()
    await batch()
    expect(pages().free).toBeLessThan(pruned.free)
    expect(pages().total).toBe(before.total)
    db.pragma('wal_checkpoint(TRUNCATE)')
    db.exec('VACUUM')
    expect(pages().free).toBe(0)
    expect(pages().total).toBeLessThan(before.total)
  })
})

describe('sqlite: an idle runner', () => {
  it('makes no claim until an enqueue wakes it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-idle-'))
    const { FaultyDriver } = await import('../support/faults.js')
    const faulty = new FaultyDriver(sqlite({ path: join(dir, 'jobs.db') }))
    const r = new Runner({ driver: faulty.driver, workers: 4, logger: captureLogs() })
    const kind = r.register('echo', { payload, handler: () => undefined })
    const done = track(r)
    await r.start()
    const first = await kind.enqueue({ n: 1 })
    await done.ends([first])
    // The freed worker looks once more for work and finds none; then it is idle.
    await new Promise((resolve) => setTimeout(resolve, 100))
    const claims = faulty.calls.jobClaim
    // Idle now: whatever the event loop does meanwhile, no claim is made without a wake.
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(faulty.calls.jobClaim).toBe(claims)
    const second = await kind.enqueue({ n: 2 })
    await done.ends([second])
    expect(faulty.calls.jobClaim).toBeGreaterThan(claims ?? 0)
    await r.close()
    rmSync(dir, { recursive: true, force: true })
  })
})
