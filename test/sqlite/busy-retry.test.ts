import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { z } from 'zod'
import { ConfigError, DatabaseError, Runner } from 'jobtable'
import { sqlite, type SqliteDriver, type SqliteOptions } from 'jobtable/sqlite'
import { captureLogs } from '../support/logs.js'

const payload = z.strictObject({ n: z.number() })

/** Resolves once `ok()` holds, looking at every turn of the event loop. */
async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((resolve) => setImmediate(resolve))
}

/** A promise and whether it has settled yet. */
function watch<T>(promise: Promise<T>): { promise: Promise<T>; readonly settled: boolean } {
  let settled = false
  const watched = promise.finally(() => (settled = true))
  watched.catch(() => undefined)
  return {
    promise: watched,
    get settled() {
      return settled
    },
  }
}

describe('sqlite: writes a caller waits for, on a file another connection holds locked', () => {
  let dir: string
  let path: string
  const cleanup: (() => unknown)[] = []
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-busy-retry-'))
    path = join(dir, 'jobs.db')
  })
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn()
    rmSync(dir, { recursive: true, force: true })
  })

  function runner(options: Omit<SqliteOptions, 'path' | 'database'> = {}): Runner<SqliteDriver> {
    const r = new Runner({ driver: sqlite({ path, pollIntervalMs: 3_600_000, ...options }), workers: 1, logger: captureLogs() })
    cleanup.push(() => r.close())
    return r
  }

  /** Another connection to the file, holding its write lock (BEGIN IMMEDIATE) until `release()`. */
  function lock(): { release(): void; count(sql: string): number } {
    const other = new Database(path)
    other.exec('BEGIN IMMEDIATE')
    cleanup.push(() => {
      if (other.inTransaction) other.exec('ROLLBACK')
      other.close()
    })
    return {
      release: () => other.exec('COMMIT'),
      count: (sql) => (other.prepare(sql).pluck().get() as number),
    }
  }

  it('refuses a busyRetryMs that is not an integer >= 0', () => {
    expect(() => sqlite({ path, busyRetryMs: -1 })).toThrow(ConfigError)
    expect(() => sqlite({ path, busyRetryMs: 1.5 })).toThrow(/busyRetryMs must be an integer >= 0/)
  })

  it('enqueue, enqueueMany, pause, resume, cancel and retry wait for the lock with the event loop turning, and each lands once when it goes', async () => {
    // A bound far past anything this test waits for: on a loaded machine the seven callers' short blocking tries can
    // hold the loop long enough that 20 ticks take seconds, and the default 5 s must not run out before the release.
    // The bound running out is the next test's.
    const r = runner({ busyRetryMs: 600_000 })
    const kind = r.register('echo', { payload, handler: () => undefined })
    const waiting = await kind.enqueue({ n: 0 })
    const cancelled = await kind.enqueue({ n: -1 })
    await r.cancel(cancelled)
    await r.pause('paused_before')

    const held = lock()
    let ticks = 0
    const ticker = setInterval(() => ticks++, 1)
    cleanup.push(() => clearInterval(ticker))
    const calls = {
      enqueue: watch(kind.enqueue({ n: 1 })),
      enqueueMany: watch(kind.enqueueMany([{ n: 2 }, { n: 3 }])),
      concurrent: watch(Promise.all([kind.enqueue({ n: 4 }), kind.enqueue({ n: 5 })])),
      pause: watch(r.pause('echo_other')),
      resume: watch(r.resume('paused_before')),
      cancel: watch(r.cancel(waiting)),
      retry: watch(r.retry(cancelled)),
    }
    // Every first try was refused before any timer ran (microtasks first); the timer then ticks while they wait.
    await until(() => ticks >= 20)
    for (const [name, call] of Object.entries(calls)) expect(call.settled, name).toBe(false)
    expect(held.count('SELECT count(*) FROM jobtable_jobs')).toBe(2)
    held.release()

    const [one, many, concurrent] = await Promise.all([calls.enqueue.promise, calls.enqueueMany.promise, calls.concurrent.promise])
    expect(await calls.pause.promise).toBe(true)
    expect(await calls.resume.promise).toBe(true)
    expect(await calls.cancel.promise).toBe('cancelled')
    expect(await calls.retry.promise).toBe('queued')

    const rows = new Database(path, { readonly: true })
    cleanup.push(() => rows.close())
    // The retries are independent (and jittered): each call's jobs are stored once, in whichever order they landed.
    const stored = (rows.prepare('SELECT id, payload, status FROM jobtable_jobs').all() as { id: string; payload: string; status: string }[])
      .map((s) => ({ n: (JSON.parse(s.payload) as { n: number }).n, id: s.id, status: s.status }))
      .sort((a, b) => a.n - b.n)
    expect(stored.map((s) => s.n)).toEqual([-1, 0, 1, 2, 3, 4, 5])
    expect(stored.map((s) => s.id)).toEqual([cancelled, waiting, one, ...many, ...concurrent])
    expect(stored.map((s) => s.status)).toEqual(['queued', 'cancelled', 'queued', 'queued', 'queued', 'queued', 'queued'])
    expect(rows.prepare('SELECT kind FROM jobtable_paused_kinds ORDER BY kind').pluck().all()).toEqual(['echo_other'])
  })

  it('a lock held past busyRetryMs: the caller gets the transient DatabaseError SQLITE_BUSY, and nothing was stored', async () => {
    const r = runner({ busyRetryMs: 150 })
    const kind = r.register('echo', { payload, handler: () => undefined })
    const before = await kind.enqueue({ n: 0 })
    const held = lock()
    let ticks = 0
    const ticker = setInterval(() => ticks++, 1)
    cleanup.push(() => clearInterval(ticker))
    const refusals = await Promise.all(
      [kind.enqueue({ n: 1 }), kind.enqueueMany([{ n: 2 }, { n: 3 }]), r.pause('echo'), r.cancel(before), r.retry(before)].map((p) =>
        p.then(
          () => undefined,
          (err: unknown) => err,
        ),
      ),
    )
    for (const err of refusals) {
      expect(err).toBeInstanceOf(DatabaseError)
      expect(err).toMatchObject({ code: 'database_error', dbCode: 'SQLITE_BUSY', transient: true })
    }
    // The event loop turned while they waited.
    expect(ticks).toBeGreaterThan(0)
    held.release()
    const rows = new Database(path, { readonly: true })
    cleanup.push(() => rows.close())
    expect(rows.prepare('SELECT id FROM jobtable_jobs').pluck().all()).toEqual([before])
    expect(rows.prepare('SELECT count(*) FROM jobtable_paused_kinds').pluck().get()).toBe(0)
  })

  it('busyRetryMs 0 tries once: the first refusal is the caller’s', async () => {
    const r = runner({ busyRetryMs: 0 })
    const kind = r.register('echo', { payload, handler: () => undefined })
    const held = lock()
    const setTimeoutSpy = vi.spyOn(globalThis, 'setTimeout')
    cleanup.push(() => setTimeoutSpy.mockRestore())
    await expect(kind.enqueueMany([{ n: 1 }])).rejects.toMatchObject({ dbCode: 'SQLITE_BUSY', transient: true })
    expect(setTimeoutSpy).not.toHaveBeenCalled()
    held.release()
  })

  it('an uncontended write sets no timer: the retry costs nothing until a lock refuses the first try', async () => {
    const r = runner()
    const kind = r.register('echo', { payload, handler: () => undefined })
    await kind.enqueue({ n: 0 })
    const setTimeoutSpy = vi.spyOn(globalThis, 'setTimeout')
    cleanup.push(() => setTimeoutSpy.mockRestore())
    await kind.enqueue({ n: 1 })
    await kind.enqueueMany([{ n: 2 }, { n: 3 }])
    await r.pause('other')
    expect(setTimeoutSpy).not.toHaveBeenCalled()
  })
})
