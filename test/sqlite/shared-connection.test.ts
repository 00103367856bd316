import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { Kysely, SqliteDialect, sql } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { captureLogs } from '../support/logs.js'
import { gate, track } from '../support/wait.js'

/**
 * A database handed in is the application's: it may hold a transaction
 * open across awaits (a bare BEGIN, Kysely's SQLite dialect). jobtable's
 * claims and final writes must never join it, or a rollback undoes a
 * claim whose handler already runs, and the handler starts again.
 */
describe('sqlite: a handed-in database in the middle of the application’s transaction', () => {
  let dir: string
  let db: Database.Database
  let runner: Runner
  const ledger = new Map<string, number>()
  let finish = gate()

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-shared-'))
    db = new Database(join(dir, 'app.db'))
    db.exec('CREATE TABLE bookmarks (url TEXT NOT NULL)')
    ledger.clear()
    finish = gate()
  })
  afterEach(async () => {
    await runner?.close()
    db.close()
    rmSync(dir, { recursive: true, force: true })
  })

  function start(database: Database.Database): { kind: ReturnType<Runner['register']>; done: ReturnType<typeof track> } {
    runner = new Runner({ driver: sqlite({ database, pollIntervalMs: 3_600_000 }), workers: 2, logger: captureLogs() })
    const kind = runner.register('import', {
      payload: z.strictObject({ url: z.string() }),
      handler: async (_p, job) => {
        ledger.set(job.id, (ledger.get(job.id) ?? 0) + 1)
        await finish.promise
      },
    })
    return { kind, done: track(runner) }
  }

  it('a bare BEGIN … ROLLBACK around start() undoes nothing of the claim: the handler starts once and the job succeeds', async () => {
    const { kind, done } = start(db)
    const id = await kind.enqueue({ url: 'https://recipes.example/soup' })
    db.exec('BEGIN')
    await runner.start()
    await done.starts(1)
    await new Promise((r) => setTimeout(r, 20))
    db.exec('ROLLBACK')
    runner.wake()
    finish.open()
    await done.ends([id])
    expect(ledger.get(id)).toBe(1)
    expect(ledger.size).toBe(1)
    expect((await runner.get(id)).status).toBe('succeeded')
    const running = db.prepare("SELECT count(*) AS n FROM jobtable_jobs WHERE status = 'running'").get() as { n: number }
    expect(running.n).toBe(0)
  })

  it('Kysely’s SQLite dialect holding a transaction across awaits, then rolling back: one start, nothing left running, its own write undone', async () => {
    const { kind, done } = start(db)
    const kysely = new Kysely<{ bookmarks: { url: string } }>({ dialect: new SqliteDialect({ database: db }) })
    const id = await kind.enqueue({ url: 'https://recipes.example/bread' })
    let started: Promise<void> | undefined
    const rolledBack = await kysely
      .transaction()
      .execute(async (trx) => {
        await trx.insertInto('bookmarks').values({ url: 'https://recipes.example/bread' }).execute()
        // The runner starts while the application keeps its transaction (and its write lock) across awaits.
        started = runner.start()
        await new Promise((r) => setTimeout(r, 50))
        throw new Error('the application changes its mind')
      })
      .catch(() => 'rolled back')
    expect(rolledBack).toBe('rolled back')
    await started
    await done.starts(1)
    finish.open()
    await done.ends([id])
    expect(ledger.get(id)).toBe(1)
    expect((await runner.get(id)).status).toBe('succeeded')
    const count = await sql<{ n: number }>`SELECT count(*) AS n FROM bookmarks`.execute(kysely)
    expect(count.rows[0]!.n).toBe(0)
    const running = db.prepare("SELECT count(*) AS n FROM jobtable_jobs WHERE status = 'running'").get() as { n: number }
    expect(running.n).toBe(0)
    await kysely.destroy().catch(() => undefined)
  })

  it('a job enqueued with enqueueTx exists exactly when the application’s transaction commits', async () => {
    const { kind, done } = start(db)
    const save = db.transaction((url: string) => {
      db.prepare('INSERT INTO bookmarks (url) VALUES (?)').run(url)
      return kind.enqueueTx(db, { url }) as unknown as string
    })
    const id = save('https://recipes.example/stew')
    await runner.start()
    finish.open()
    await done.ends([id])
    expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('a database in memory, which has no file for a second connection: jobtable waits while the application is in a transaction', async () => {
    db.close()
    db = new Database(':memory:')
    const { kind, done } = start(db)
    const id = await kind.enqueue({ url: 'https://recipes.example/soup' })
    await runner.start()
    db.exec('BEGIN')
    runner.wake()
    await new Promise((r) => setTimeout(r, 30))
    finish.open()
    db.exec('ROLLBACK')
    runner.wake()
    await done.ends([id])
    expect(ledger.get(id)).toBe(1)
    expect((await runner.get(id)).status).toBe('succeeded')
  })
})
