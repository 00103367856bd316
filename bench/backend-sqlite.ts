import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sqlite } from 'jobtable/sqlite'
import type { Driver } from 'jobtable'
import { SCHEDULED_DELAY_MS, type Backend, type EnqueueShape, type Floors, type Store } from './backend.js'
import * as floor from './floor-sqlite.js'
import type { Sync } from './floor-sqlite.js'
import { percentile } from './stats.js'

/** SQLite on a temporary file, with jobtable's driver and better-sqlite3 for the floor. */
export function sqliteBackend(sync: Sync): Backend {
  return {
    name: 'sqlite',
    durability: `synchronous=${sync.toUpperCase()}`,
    store: async () => sqliteStore(sync),
    floors: sqliteFloors(sync),
  }
}

function tempPath(): { dir: string; path: string } {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-bench-'))
  return { dir, path: join(dir, 'jobs.db') }
}

function sqliteStore(sync: Sync): Store {
  const { dir, path } = tempPath()
  const opened: Driver[] = []
  return {
    driver() {
      const d = sqlite({ path, synchronous: sync })
      opened.push(d)
      return d
    },
    async seedFinished(rows) {
      const db = floor.openFloorDb(path, sync)
      try {
        floor.seedFinished(db, rows)
      } finally {
        db.close()
      }
    },
    async seedScheduled(rows, delayMs) {
      const db = floor.openFloorDb(path, sync)
      try {
        floor.seedScheduled(db, rows, delayMs)
      } finally {
        db.close()
      }
    },
    async countByStatus() {
      const db = floor.openFloorDb(path, sync)
      try {
        return floor.countByStatus(db)
      } finally {
        db.close()
      }
    },
    async countByKindAndStatus() {
      const db = floor.openFloorDb(path, sync)
      try {
        return floor.countByKindAndStatus(db)
      } finally {
        db.close()
      }
    },
    async starts(kind) {
      const db = floor.openFloorDb(path, sync)
      try {
        return floor.starts(db, kind)
      } finally {
        db.close()
      }
    },
    async storage() {
      const db = floor.openFloorDb(path, sync)
      try {
        return floor.storage(db)
      } finally {
        db.close()
      }
    },
    async drop() {
      for (const d of opened) await d.close().catch(() => undefined)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Runs fn on a fresh floor database, then removes it. */
function withDb<T>(sync: Sync, fn: (db: ReturnType<typeof floor.openFloorDb>) => T): T {
  const { dir, path } = tempPath()
  const db = floor.openFloorDb(path, sync)
  try {
    return fn(db)
  } finally {
    db.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

function sqliteFloors(sync: Sync): Floors {
  // One connection: SQLite has one writer, so more connections in one process add only lock waits.
  return {
    async drain(jobs, workers, finishedRows = 0) {
      const run = (drain: (db: ReturnType<typeof floor.openFloorDb>) => number): number =>
        withDb(sync, (db) => {
          if (finishedRows > 0) floor.seedFinished(db, finishedRows)
          floor.seedQueued(db, jobs)
          return drain(db)
        })
      return {
        single: run(floor.drainSingle),
        batched: run(floor.drainBatched),
        shaped: run((db) => floor.drainShaped(db, workers)),
      }
    },
    async insert(jobs) {
      const shaped = (shape: EnqueueShape): number => withDb(sync, (db) => floor.insertShaped(db, jobs, floor.ENQUEUE_SHAPES[shape]))
      return {
        single: withDb(sync, (db) => floor.insertSingle(db, jobs)),
        batched: withDb(sync, (db) => floor.insertBatched(db, jobs)),
        shaped: { sequential: shaped('sequential'), concurrent: shaped('concurrent'), many: shaped('many') },
      }
    },
    async mixed(jobs) {
      return {
        single: withDb(sync, (db) => floor.mixedSingle(db, jobs)),
        batched: withDb(sync, (db) => floor.mixedBatched(db, jobs)),
        shaped: Number.NaN,
      }
    },
    async latency(samples) {
      return withDb(sync, (db) => floor.latencyFloor(db, samples))
    },
    async prune(rows, batch) {
      return withDb(sync, (db) => {
        floor.seedFinished(db, rows)
        const { rows_per_s, times } = floor.pruneShaped(db, batch)
        if ((floor.countByStatus(db)['succeeded'] ?? 0) !== 0) throw new Error('prune floor: finished jobs left')
        return { rows_per_s, p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), statements: times.length }
      })
    },
    async drainShapedBesideScheduled(jobs, workers, scheduledRows) {
      return withDb(sync, (db) => {
        if (scheduledRows > 0) floor.seedScheduled(db, scheduledRows, SCHEDULED_DELAY_MS)
        floor.seedQueued(db, jobs)
        const rate = floor.drainShaped(db, workers)
        const left = floor.countByStatus(db)['scheduled'] ?? 0
        if (left !== scheduledRows) throw new Error(`shaped drain floor: ${left} of ${scheduledRows} scheduled jobs still scheduled`)
        return rate
      })
    },
  }
}
