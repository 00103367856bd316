import type { Driver } from 'jobtable'

/** Jobs per second with one transaction per write, and with 100 per statement. */
export interface FloorRate {
  readonly single: number
  readonly batched: number
}

/** The raw-SQL floor of one backend: no library, the least SQL a durable queue runs. */
export interface Floors {
  /** Claim and complete `jobs` pre-inserted jobs (on top of `finishedRows` finished ones). */
  drain(jobs: number, workers: number, finishedRows?: number): Promise<FloorRate>
  insert(jobs: number): Promise<FloorRate>
  /** Insert, claim and complete each job. */
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
