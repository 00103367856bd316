import type { Driver } from 'jobtable'

/** How far ahead the scheduled workload's jobs are due: next week. */
export const SCHEDULED_DELAY_MS = 7 * 24 * 60 * 60 * 1000

/**
 * Jobs per second of the raw-SQL floors: one transaction per write, 100
 * writes per statement, and the library's own statements in its own batch
 * shape ("shaped"; NaN where a workload has none).
 */
export interface FloorRate {
  readonly single: number
  readonly batched: number
  readonly shaped: number
}

/** How the enqueue workload calls the library, each with its own shaped floor. */
export type EnqueueShape = 'sequential' | 'concurrent' | 'many'

/** The insert floors: one shaped floor per enqueue shape. */
export interface InsertFloorRate {
  readonly single: number
  readonly batched: number
  readonly shaped: Readonly<Record<EnqueueShape, number>>
}

/** The library's prune statement alone, run until it comes back short: per-statement times and rows deleted per second. */
export interface PruneFloor {
  readonly rows_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly statements: number
}

/**
 * The raw-SQL floors of one backend, without the library's JavaScript:
 * "single" and "batched" are the least SQL a durable queue runs, "shaped"
 * is the library's own SQL in its own batch shape.
 */
export interface Floors {
  /** Claim and complete `jobs` pre-inserted jobs (on top of `finishedRows` finished ones). */
  drain(jobs: number, workers: number, finishedRows?: number): Promise<FloorRate>
  insert(jobs: number): Promise<InsertFloorRate>
  /** Insert, claim and complete each job (no shaped floor: NaN). */
  mixed(jobs: number, workers: number): Promise<FloorRate>
  /** Insert-to-claim time in ms, one job at a time. */
  latency(samples: number): Promise<{ p50: number; p99: number }>
  /**
   * The shaped drain floor alone (the library's own SQL in its own batch
   * shape) on `jobs` queued jobs beside `scheduledRows` jobs scheduled for
   * later (0: an empty table); jobs/s. The scheduled workload's floor.
   */
  drainShapedBesideScheduled(jobs: number, workers: number, scheduledRows: number): Promise<number>
  /**
   * The library's own prune statement (pruneJobs in its queries.ts) on a fresh table
   * of `rows` finished jobs, `batch` rows a statement, one after another
   * until a statement deletes fewer: how long each holds the database.
   */
  prune(rows: number, batch: number): Promise<PruneFloor>
}

/** An isolated store (a fresh SQLite file, a fresh PostgreSQL schema). */
export interface Store {
  /** Opens a driver on the store, as a process would. */
  driver(): Driver
  /** Inserts `rows` finished jobs with raw SQL, as fast as the database allows. */
  seedFinished(rows: number): Promise<void>
  /**
   * Inserts `rows` scheduled jobs with raw SQL, as if each had been
   * enqueued 1 ms after the last (ending just before now) with a delay of
   * `delayMs`: status 'scheduled', run_at = created_at + delayMs, ids by
   * newJobId at created_at. PostgreSQL ANALYZEs the table and checkpoints
   * afterwards.
   */
  seedScheduled(rows: number, delayMs: number): Promise<void>
  /** How many jobs the store holds in each status, read with raw SQL. */
  countByStatus(): Promise<Record<string, number>>
  /** How many jobs of each kind the store holds in each status (kind, then status), read with raw SQL. */
  countByKindAndStatus(): Promise<Record<string, Record<string, number>>>
  /**
   * When each job of `kind` started (jobs.started_at: its last claim's
   * time, by the claiming runner's clock) and its scope, read with raw SQL,
   * earliest first; jobs never started are left out. The rate and fairness
   * workloads' oracle: what the database recorded, not what a process saw.
   */
  starts(kind: string): Promise<{ scope: string | null; at: number }[]>
  /**
   * What the jobs table takes on disk, read with raw SQL: SQLite its pages
   * and free pages (PRAGMA page_count, freelist_count); PostgreSQL its live
   * and dead tuples (pg_stat_user_tables) and its size with indexes.
   */
  storage(): Promise<Record<string, number>>
  drop(): Promise<void>
}

/** One backend under one durability setting. */
export interface Backend {
  readonly name: 'sqlite' | 'postgres'
  readonly durability: string
  store(): Promise<Store>
  readonly floors: Floors
}
