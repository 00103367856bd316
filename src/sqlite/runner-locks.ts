import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'

/** Runner ids are UUIDs; anything else read from the table cannot name a lock file of ours. */
const RUNNER_ID = /^[A-Za-z0-9-]{1,64}$/

/**
 * Proves a SQLite runner alive or gone with an operating-system lock, so a
 * process starting on a shared file fails only the jobs of processes that
 * are really gone, without waiting for a lease to lapse.
 *
 * Each live runner holds an exclusive lock on its own small lock file,
 * `<database>-runners/<runner id>.lock`, by keeping a `BEGIN EXCLUSIVE`
 * transaction open on it. Why a SQLite file rather than a plain lock
 * file: Node has no flock, but SQLite's POSIX advisory locks are reachable
 * through better-sqlite3, the kernel drops them the instant the process
 * dies however it dies (kill -9 included), and SQLite keeps them correct
 * between two connections of one process too (its per-inode lock table),
 * so two runners in one process see each other alive. A checker proves a
 * runner gone when it can take a write lock on that file at once; a
 * runner whose lock file is missing cannot prove itself alive either.
 *
 * A database in memory is never shared with another process, so every
 * registered runner of it is alive.
 */
export class RunnerLocks {
  readonly #dir: string | null
  readonly #held = new Map<string, Database.Database>()

  /** `databasePath` is the database file's path, or null for a database in memory. */
  constructor(databasePath: string | null) {
    this.#dir = databasePath === null ? null : `${databasePath}-runners`
  }

  /** Takes the lock of `runnerId`, creating its file; held until release or the process ends. */
  acquire(runnerId: string): void {
    if (this.#dir === null || this.#held.has(runnerId)) return
    if (!RUNNER_ID.test(runnerId)) throw new TypeError('runner id must be a UUID')
    mkdirSync(this.#dir, { recursive: true })
    const lock = new Database(join(this.#dir, `${runnerId}.lock`))
    try {
      lock.exec('BEGIN EXCLUSIVE')
    } catch (err) {
      lock.close()
      throw err
    }
    this.#held.set(runnerId, lock)
  }

  /** Whether the runner's lock is held, by this process or another. */
  isAlive(runnerId: string): boolean {
    if (this.#dir === null) return true
    if (this.#held.has(runnerId)) return true
    if (!RUNNER_ID.test(runnerId)) return false
    let probe: Database.Database
    try {
      probe = new Database(join(this.#dir, `${runnerId}.lock`), { fileMustExist: true })
    } catch {
      return false // no lock file: nothing can prove this runner alive
    }
    try {
      probe.pragma('busy_timeout = 0')
      probe.exec('BEGIN IMMEDIATE')
      probe.exec('ROLLBACK')
      return false
    } catch (err) {
      if (err instanceof Database.SqliteError && /^SQLITE_(BUSY|LOCKED)/.test(err.code)) return true
      throw err
    } finally {
      probe.close()
    }
  }

  /** Releases a lock this process holds and removes its file. */
  release(runnerId: string): void {
    const lock = this.#held.get(runnerId)
    if (lock === undefined) return
    this.#held.delete(runnerId)
    lock.close()
    this.forget(runnerId)
  }

  /** Removes the lock file of a runner proven gone. */
  forget(runnerId: string): void {
    if (this.#dir === null || !RUNNER_ID.test(runnerId)) return
    rmSync(join(this.#dir, `${runnerId}.lock`), { force: true })
  }

  /** Releases every lock this process holds. */
  releaseAll(): void {
    for (const id of [...this.#held.keys()]) this.release(id)
  }
}
