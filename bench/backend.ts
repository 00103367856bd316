import type { Driver } from 'jobtable'

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
}

/** An isolated store (a fresh SQLite file, a fresh PostgreSQL schema). */
export interface Store {
  /** Opens a driver on the store, as a process would. */
  driver(): Driver
  /** Inserts `rows` finished jobs with raw SQL, as fast as the database allows. */
  seedFinished(rows: number): Promise<void>
  drop(): Promise<void>
}

/** One backend under one durability setting. */
export interface Backend {
  readonly name: 'sqlite' | 'postgres'
  readonly durability: string
  store(): Promise<Store>
  readonly floors: Floors
}
