import type Database from 'better-sqlite3'
import type { Driver, Kind, Runner } from 'jobtable'
import type { PostgresDriver } from 'jobtable/postgres'
import type { SqliteDriver } from 'jobtable/sqlite'
import type { Store } from './backends.js'

/**
 * Oracles of the rate-limit tests, read from the jobs table itself: when
 * each job was last claimed (jobs.started_at, the `now` of the claim that
 * started it), never a time the test or a handler measured.
 */

/** A job's last claim as the store recorded it. */
export interface StartRow {
  readonly id: string
  readonly kind: string
  readonly scope: string | null
  readonly status: string
  readonly attempt: number
  /** jobs.started_at: the claim's time (epoch ms), null while it has none. */
  readonly startedAt: number | null
}

/** Every job of `kinds` with its started_at, read beside the driver (the public API does not return it). */
export async function startRows(store: Store, driver: Driver, kinds: readonly string[]): Promise<StartRow[]> {
  const columns = 'id, kind, scope, status, attempt'
  if (store.sql !== undefined) {
    const schema = (driver as unknown as PostgresDriver).schema
    const rows = await store.sql(`SELECT ${columns}, started_at::float8 AS started_at FROM "${schema}".jobs WHERE kind = ANY($1::text[])`, [[...kinds]])
    return rows.map(toRow)
  }
  const db = (driver as unknown as SqliteDriver).database as Database.Database
  const rows = db.prepare(`SELECT ${columns}, started_at FROM jobtable_jobs WHERE kind IN (SELECT value FROM json_each(?))`).all(JSON.stringify(kinds)) as Record<string, unknown>[]
  return rows.map(toRow)
}

function toRow(r: Record<string, unknown>): StartRow {
  return {
    id: String(r['id']),
    kind: String(r['kind']),
    scope: (r['scope'] as string | null) ?? null,
    status: String(r['status']),
    attempt: Number(r['attempt']),
    startedAt: r['started_at'] === null || r['started_at'] === undefined ? null : Number(r['started_at']),
  }
}

/**
 * The windows that break a sliding-window limit: a claim at `now` counts
 * the claims after `now - periodMs`, so no window of `periodMs` holds
 * more than `limit` starts: any `limit + 1` of them span at least
 * `periodMs`. Returns each offending run of starts (sorted times), empty
 * when the limit held.
 */
export function overfullWindows(times: readonly number[], limit: number, periodMs: number): number[][] {
  const sorted = [...times].sort((a, b) => a - b)
  const bad: number[][] = []
  for (let i = 0; i + limit < sorted.length; i++) {
    if (sorted[i + limit]! - sorted[i]! < periodMs) bad.push(sorted.slice(i, i + limit + 1))
  }
  return bad
}

/** How many of `values` are each distinct value, for exact expectations: `{ [T0]: 3, [T0 + 1001]: 3 }`. */
export function tally(times: readonly (string | number | null)[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const v of times) out[String(v)] = (out[String(v)] ?? 0) + 1
  return out
}

/**
 * Gives every claimable job the chance to start (many wakes, each with a
 * read round trip), then runs one job of `sentinel`, a kind without
 * limits handled by this runner alone, enqueued last, to its end:
 * whatever was claimable had its claim by then. Proves that a job is held
 * back without waiting on a clock.
 */
export async function settled(runner: Runner, done: { ends(ids: readonly string[]): Promise<void> }, sentinel: Kind<{ n: number }>): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await runner.wake()
    await runner.list({ limit: 1 })
  }
  await done.ends([await sentinel.enqueue({ n: -1 })])
}
