import type { JobCount } from './driver.js'

/**
 * Counts by kind and status cost a read of every job counted: no index
 * the hot path could afford keeps them (an index on the status, or a
 * trigger keeping a summary row, made every claim and final write 15-45%
 * dearer in raw SQL; bench/counts.ts). So a scope (or, without one, the
 * whole table) of up to COUNTS_EXACT_MAX jobs is counted exactly at each
 * call, a read of at most a few milliseconds; a bigger one is answered
 * from a snapshot of its exact counts, taken by a read off the caller's
 * event loop where the backend has one (SQLite: a worker thread with its
 * own read-only connection) and kept for COUNTS_MAX_AGE_MS.
 */

/** A scope of at most this many jobs (every job, without a scope) is counted exactly at each call. */
export const COUNTS_EXACT_MAX = 10_000

/** A snapshot this young is answered as it is; an older one is answered while a new one is taken. */
export const COUNTS_FRESH_MS = 5_000

/** The oldest snapshot answered: a call finding only an older one waits for a new one. */
export const COUNTS_MAX_AGE_MS = 30_000

/** How many scopes' snapshots are kept; the one taken first is dropped first. */
const SNAPSHOTS_MAX = 256

/** A scope as the drivers take it: a name, null for jobs without one, undefined for every job. */
type Scope = string | null | undefined

/** Where a CountsCache reads from. */
export interface CountSources {
  /** How many jobs `scope` holds, counted up to `limit`: a read of at most `limit` index entries. */
  size(scope: Scope, limit: number): number | Promise<number>
  /** The exact counts, read now (called only for a scope of at most COUNTS_EXACT_MAX jobs). */
  exact(scope: Scope): JobCount[] | Promise<JobCount[]>
  /** The exact counts of a bigger scope, as of the snapshot the read took, read off the caller's event loop where the backend can. */
  snapshot(scope: Scope): Promise<JobCount[]>
}

interface Snapshot {
  /** The counts of the last snapshot taken; undefined until the first is in. */
  rows: readonly JobCount[] | undefined
  /** When (the cache's clock) the read of `rows` was started: its answer is no older than this. */
  takenAt: number
  /** The snapshot being taken, if any: every caller waiting for one shares it. */
  pending: Promise<readonly JobCount[]> | undefined
}

/**
 * Counts jobs by kind and status at a cost that does not grow with the
 * table (see the top of this file): exact for a scope of at most
 * COUNTS_EXACT_MAX jobs (a size probe of that many index entries, then
 * the count); for a bigger scope, the counts of a snapshot at most
 * COUNTS_MAX_AGE_MS old. A snapshot younger than COUNTS_FRESH_MS is
 * answered as it is; an older one is answered too while a new one is
 * taken in the background (one at a time per scope); a caller finding
 * none, or only one older than COUNTS_MAX_AGE_MS, waits for a new one.
 * The answer is then exact as of the moment its snapshot's read began.
 */
export class CountsCache {
  readonly #sources: CountSources
  readonly #clock: () => number
  readonly #snapshots = new Map<Scope, Snapshot>()

  /** `clock` reads milliseconds on a monotonic clock (tests pass their own). */
  constructor(sources: CountSources, clock: () => number = () => performance.now()) {
    this.#sources = sources
    this.#clock = clock
  }

  async read(scope: Scope): Promise<JobCount[]> {
    const known = this.#snapshots.get(scope)
    if (known !== undefined) {
      const age = this.#clock() - known.takenAt
      if (known.rows !== undefined && age <= COUNTS_MAX_AGE_MS) {
        // Answered at once; a failed background read leaves this one, which ages out.
        if (age > COUNTS_FRESH_MS) this.#take(scope).catch(() => undefined)
        return [...known.rows]
      }
      if (known.pending !== undefined) return [...(await known.pending)]
    }
    if ((await this.#sources.size(scope, COUNTS_EXACT_MAX + 1)) <= COUNTS_EXACT_MAX) {
      // Small (again, after a prune): counted exactly from now on.
      this.#snapshots.delete(scope)
      return this.#sources.exact(scope)
    }
    return [...(await this.#take(scope))]
  }

  /** Starts a snapshot of `scope` unless one is being taken; resolves to its counts. */
  #take(scope: Scope): Promise<readonly JobCount[]> {
    // Looked up again: another caller may have started one while this one probed the size.
    let entry = this.#snapshots.get(scope)
    if (entry?.pending !== undefined) return entry.pending
    if (entry === undefined) {
      entry = { rows: undefined, takenAt: -Infinity, pending: undefined }
      this.#snapshots.set(scope, entry)
      if (this.#snapshots.size > SNAPSHOTS_MAX) this.#snapshots.delete(this.#snapshots.keys().next().value)
    }
    const snapshot = entry
    const takenAt = this.#clock()
    const pending = this.#sources.snapshot(scope).then(
      (rows) => {
        snapshot.rows = rows
        snapshot.takenAt = takenAt
        snapshot.pending = undefined
        return rows
      },
      (err: unknown) => {
        snapshot.pending = undefined
        throw err
      },
    )
    snapshot.pending = pending
    return pending
  }
}
