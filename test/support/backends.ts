import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import type { Driver } from 'jobtable'
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
  /** Makes a fresh isolated store. */
  store(): Promise<Store>
}

export interface Store {
  /** Opens a new driver on this store, as a new process would. */
  driver(): Driver
  /**
   * Runs fn inside a transaction of the user's own, committed or rolled
   * back; fn receives the handle that enqueueTx takes.
   */
  transaction(fn: (tx: unknown) => unknown, outcome: 'commit' | 'rollback'): Promise<void>
  /** Everything the store holds on disk or in its tables, as text. */
  dump(): Promise<string>
  /** Removes the store. */
  drop(): Promise<void>
}

export const sqliteBackend: Backend = {
  name: 'sqlite',
  async store(): Promise<Store> {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-test-'))
    const path = join(dir, 'jobs.db')
    const opened: Driver[] = []
    return {
      driver() {
        const d = sqlite({ path })
        opened.push(d)
        return d
      },
      async transaction(fn, outcome) {
        const db = new Database(path)
        db.pragma('busy_timeout = 5000')
        try {
          db.exec('BEGIN IMMEDIATE')
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

export const backends: Backend[] = [sqliteBackend]
