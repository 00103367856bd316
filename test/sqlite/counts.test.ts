import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { DatabaseError, type JobCount } from 'jobtable'
import { sqlite, type SqliteDriver } from 'jobtable/sqlite'
import { COUNTS_EXACT_MAX, COUNTS_FRESH_MS, COUNTS_MAX_AGE_MS, CountsCache, type CountSources } from '../../src/counts-cache.js'

const STATUSES = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled'] as const

/** Sorted for comparison: the driver promises no order. */
const sorted = (rows: readonly JobCount[]) => [...rows].sort((a, b) => `${a.kind}/${a.status}`.localeCompare(`${b.kind}/${b.status}`))

/** Inserts `n` jobs straight into the file: kinds k0-k2, every status, scopes cycling through `scopes` (null for none). */
function seed(db: Database.Database, n: number, scopes: readonly (string | null)[], from = 0): void {
  const insert = db.prepare(`INSERT INTO jobtable_jobs (id, kind, status, payload, created_at, updated_at, finished_at, run_at, scope) VALUES (?, ?, ?, '{}', 0, 0, ?, ?, ?)`)
  db.transaction(() => {
    for (let i = from; i < from + n; i++) {
      const status = STATUSES[i % 7 === 6 ? 3 : i % 6]!
      const terminal = status === 'succeeded' || status === 'failed' || status === 'cancelled'
      insert.run(`job-${i}`, `k${i % 3}`, status, terminal ? i : null, status === 'scheduled' ? 9e12 : null, scopes[i % scopes.length])
    }
  })()
}

/** The counts by a plain GROUP BY on a connection of the test's own: the oracle. */
function oracle(path: string, scope?: string | null): JobCount[] {
  const db = new Database(path, { readonly: true })
  try {
    const where = scope === undefined ? '' : 'WHERE scope IS ?'
    return db.prepare(`SELECT kind, status, count(*) AS count FROM jobtable_jobs ${where} GROUP BY kind, status`).all(...(scope === undefined ? [] : [scope])) as JobCount[]
  } finally {
    db.close()
  }
}

/** Counts loop iterations (a self-renewing setImmediate) until stopped: how often the event loop turned meanwhile. */
function loopTurns(): { readonly count: number; stop(): void } {
  let count = 0
  let timer = setImmediate(function turn() {
    count++
    timer = setImmediate(turn)
  })
  return {
    get count() {
      return count
    },
    stop: () => clearImmediate(timer),
  }
}

describe('sqlite: counts of a big file', () => {
  let dir: string
  let path: string
  const opened: SqliteDriver[] = []
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-counts-'))
    path = join(dir, 'jobs.db')
  })
  afterEach(async () => {
    for (const d of opened.splice(0)) await d.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const open = () => {
    const d = sqlite({ path })
    opened.push(d)
    return d
  }

  it('counts a file and scopes of more than COUNTS_EXACT_MAX jobs exactly, on the worker thread: the event loop turns while it counts', async () => {
    const driver = open()
    const db = new Database(path)
    // 16,000 jobs in 'big', 16,000 unscoped, 8,000 in 'small-1'.
    seed(db, 4 * COUNTS_EXACT_MAX, ['big', 'big', null, null, 'small-1'])
    db.close()
    for (const scope of [undefined, null, 'big']) {
      const turns = loopTurns()
      const counted = await driver.jobCounts(scope === undefined ? {} : { scope })
      turns.stop()
      expect(sorted(counted)).toEqual(sorted(oracle(path, scope)))
      // Read inline, the answer would come before the loop's first turn.
      expect(turns.count, String(scope)).toBeGreaterThan(0)
    }
    // A small scope of the same file is counted at once, exactly.
    expect(sorted(await driver.jobCounts({ scope: 'small-1' }))).toEqual(sorted(oracle(path, 'small-1')))
    expect(await driver.jobCounts({ scope: 'nobody' })).toEqual([])
  })

  it('a database in memory, which no other thread can open, is counted on its own connection', async () => {
    const db = new Database(':memory:')
    const driver = sqlite({ database: db })
    opened.push(driver)
    seed(db, COUNTS_EXACT_MAX + 500, [null])
    const expected = sorted(db.prepare('SELECT kind, status, count(*) AS count FROM jobtable_jobs GROUP BY kind, status').all() as JobCount[])
    expect(sorted(await driver.jobCounts({}))).toEqual(expected)
    await driver.close()
    db.close()
  })

  it('rejects once the driver is closed, as its other reads do', async () => {
    const driver = open()
    await driver.close()
    await expect(driver.jobCounts({})).rejects.toMatchObject({ dbCode: 'closed', transient: false })
    await expect(driver.jobCounts({})).rejects.toBeInstanceOf(DatabaseError)
  })
})

describe('CountsCache', () => {
  /** Sources over a counter the test moves, with a clock the test sets. */
  function fake(size: number) {
    const state = { size, reads: { size: 0, exact: 0, snapshot: 0 }, value: 1, now: 0, fail: false }
    let release: (() => void) | undefined
    const sources: CountSources = {
      size: (_scope, limit) => {
        state.reads.size++
        return Math.min(state.size, limit)
      },
      exact: () => {
        state.reads.exact++
        return [{ kind: 'k', status: 'succeeded', count: state.value }]
      },
      snapshot: async () => {
        state.reads.snapshot++
        const value = state.value
        await new Promise<void>((resolve) => (release = resolve))
        if (state.fail) throw new Error('read failed')
        return [{ kind: 'k', status: 'succeeded', count: value }]
      },
    }
    const cache = new CountsCache(sources, () => state.now)
    /** Lets the snapshot read under way answer, then the microtasks after it run. */
    const answer = async () => {
      while (release === undefined) await new Promise((r) => setImmediate(r))
      const r = release
      release = undefined
      r()
      await new Promise((r) => setImmediate(r))
    }
    return { state, cache, answer }
  }
  const count = (rows: readonly JobCount[]) => rows[0]!.count

  it('counts a scope of at most COUNTS_EXACT_MAX jobs exactly at every call, probing at most one more', async () => {
    const { state, cache } = fake(COUNTS_EXACT_MAX)
    expect(count(await cache.read(undefined))).toBe(1)
    state.value = 2
    expect(count(await cache.read(undefined))).toBe(2)
    expect(state.reads).toEqual({ size: 2, exact: 2, snapshot: 0 })
  })

  it('a bigger one: the first call waits for a snapshot, later ones get it while fresh, a stale one is answered while the next is taken, one too old is waited for', async () => {
    const { state, cache, answer } = fake(COUNTS_EXACT_MAX + 1)
    // Two callers at once share one read.
    const first = [cache.read('big'), cache.read('big')]
    await answer()
    expect((await Promise.all(first)).map(count)).toEqual([1, 1])
    expect(state.reads.snapshot).toBe(1)

    state.value = 2
    state.now = COUNTS_FRESH_MS
    expect(count(await cache.read('big'))).toBe(1)
    expect(state.reads.snapshot).toBe(1)

    // Stale: answered at once from the last snapshot, and one new read starts for the calls after it.
    state.now = COUNTS_FRESH_MS + 1
    expect(count(await cache.read('big'))).toBe(1)
    expect(count(await cache.read('big'))).toBe(1)
    expect(state.reads.snapshot).toBe(2)
    await answer()
    expect(count(await cache.read('big'))).toBe(2)

    // Too old: the caller waits for a new snapshot.
    state.value = 3
    state.now += COUNTS_MAX_AGE_MS + 1
    const late = cache.read('big')
    await answer()
    expect(count(await late)).toBe(3)
    // The size is probed only by a call finding no snapshot it may answer with (the two first callers, the late one).
    expect(state.reads).toEqual({ size: 3, exact: 0, snapshot: 3 })
  })

  it('a failed background read leaves the last snapshot until it is too old; then the caller gets the error', async () => {
    const { state, cache, answer } = fake(COUNTS_EXACT_MAX + 1)
    const first = cache.read(null)
    await answer()
    await first
    state.fail = true
    state.now = COUNTS_FRESH_MS + 1
    expect(count(await cache.read(null))).toBe(1)
    await answer()
    expect(count(await cache.read(null))).toBe(1)
    state.now = COUNTS_MAX_AGE_MS + 1
    const late = cache.read(null)
    const refused = expect(late).rejects.toThrow('read failed')
    await answer()
    await refused
  })

  it('a scope that shrank to COUNTS_EXACT_MAX is counted exactly again once its snapshot is too old', async () => {
    const { state, cache, answer } = fake(COUNTS_EXACT_MAX + 1)
    const first = cache.read('s')
    await answer()
    await first
    state.size = COUNTS_EXACT_MAX
    state.value = 7
    state.now = COUNTS_MAX_AGE_MS + 1
    expect(count(await cache.read('s'))).toBe(7)
    expect(state.reads.exact).toBe(1)
  })
})
