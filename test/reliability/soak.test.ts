import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { jobEndChannel, Runner, type JobEndMessage } from 'jobtable'
import { sqlite, type SqliteDriver } from 'jobtable/sqlite'
import { bound, FULL, size } from './sizes.js'

/** Jobs through the runner in all; the first tenth warms it up. */
const JOBS = size('soak_jobs', 30_000, 1_000_000)
/** Jobs enqueued and not yet ended, at most: the producer waits while the backlog is this deep. */
const BACKLOG = 20_000
const WINDOWS = 10

interface Window {
  readonly ended: number
  readonly seconds: number
  readonly jobsPerSecond: number
  readonly rssMb: number
  readonly heapMb: number
  readonly fileMb: number
  readonly freePages: number
  readonly walMb: number
}

const mb = (bytes: number) => Math.round((bytes / 1048576) * 10) / 10
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

describe('sqlite: a soak with retention on', () => {
  let dir: string
  let runner: Runner<SqliteDriver> | undefined
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-soak-'))
  })
  afterEach(async () => {
    await runner?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it(`${JOBS} jobs through one runner while retention deletes them: each starts once and succeeds; memory, throughput, the file and its WAL stay level after warm-up`, { timeout: bound(120_000, 1_800_000) }, async () => {
    const path = join(dir, 'jobs.db')
    // A logger that keeps nothing (a million debug lines would be the growth measured), counting warnings and errors.
    const complaints: string[] = []
    const logger = { debug() {}, info() {}, warn: (_: object, m: string) => void complaints.push(m), error: (_: object, m: string) => void complaints.push(m) }
    runner = new Runner({ driver: sqlite({ path }), logger, workers: 10, retention: { maxAgeMs: 1_000, intervalMs: 500 } })
    // Starts by payload index, one byte a job: each job's own n, so a lost job and a duplicate cannot cancel out.
    const starts = new Uint8Array(JOBS)
    const kind = runner.register('soak', { payload: z.strictObject({ n: z.number().int() }), handler: ({ n }) => void starts[n]!++ })
    const db = runner.driver.database as Database.Database
    let ended = 0
    const notSucceeded: string[] = []
    let wake: (() => void) | undefined
    const onEnd = (m: unknown) => {
      const end = m as JobEndMessage
      if (end.runnerId !== runner!.id) return
      ended++
      if (end.status !== 'succeeded') notSucceeded.push(`${end.status} ${end.code ?? ''}`)
      wake?.()
    }
    jobEndChannel.subscribe(onEnd)
    const endedAtLeast = (n: number) => new Promise<void>((resolve) => {
      if (ended >= n) return resolve()
      wake = () => {
        if (ended >= n) {
          wake = undefined
          resolve()
        }
      }
    })
    const windows: Window[] = []
    try {
      await runner.start()
      const windowSize = Math.ceil(JOBS / WINDOWS)
      let windowStart = performance.now()
      let produced = 0
      let nextWindow = windowSize
      while (windows.length < WINDOWS) {
        // Feed the queue a thousand at a time while the backlog has room.
        while (produced < JOBS && produced - ended < BACKLOG) {
          const batch = Math.min(1_000, JOBS - produced)
          await kind.enqueueMany(Array.from({ length: batch }, (_, i) => ({ n: produced + i })))
          produced += batch
        }
        // Then wait for the window's end, or for room for the next thousand, whichever comes first.
        const windowEnd = Math.min(nextWindow, JOBS)
        await endedAtLeast(produced < JOBS ? Math.min(windowEnd, produced - BACKLOG + 1_000) : windowEnd)
        if (ended < windowEnd) continue
        const now = performance.now()
        // Collected first when the process allows it (NODE_OPTIONS=--expose-gc), so a heap that only has not been collected yet does not look like growth.
        ;(globalThis as { gc?: () => void }).gc?.()
        const memory = process.memoryUsage()
        const pageSize = db.pragma('page_size', { simple: true }) as number
        let walBytes = 0
        try {
          walBytes = statSync(`${path}-wal`).size
        } catch {}
        windows.push({
          ended,
          seconds: (now - windowStart) / 1000,
          jobsPerSecond: Math.round(windowSize / ((now - windowStart) / 1000)),
          rssMb: mb(memory.rss),
          heapMb: mb(memory.heapUsed),
          fileMb: mb((db.pragma('page_count', { simple: true }) as number) * pageSize),
          freePages: db.pragma('freelist_count', { simple: true }) as number,
          walMb: mb(walBytes),
        })
        windowStart = now
        nextWindow += windowSize
      }
    } finally {
      jobEndChannel.unsubscribe(onEnd)
    }
    console.log(`soak: ${JOBS} jobs, by tenths:\n${windows.map((w) => JSON.stringify(w)).join('\n')}`)

    expect(notSucceeded).toEqual([])
    expect(complaints).toEqual([])
    const counts = new Map<number, number>()
    for (const count of starts) counts.set(count, (counts.get(count) ?? 0) + 1)
    expect(Object.fromEntries(counts)).toEqual({ 1: JOBS })
    expect(db.prepare(`SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('queued', 'running')`).get()).toEqual({ n: 0 })
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok')

    // Retention kept the table to the backlog and about a second and a half of finished jobs: never all of them.
    const kept = (db.prepare('SELECT count(*) AS n FROM jobtable_jobs').get() as { n: number }).n
    if (FULL) {
      expect(kept).toBeLessThan(JOBS / 4)
      const [, ...steady] = windows
      const first = steady[0]!
      const last = steady[steady.length - 1]!
      // Memory: less than 10% growth from the end of the warm-up to the end.
      expect(last.rssMb).toBeLessThan(first.rssMb * 1.1)
      // Throughput: the later half as fast as the earlier half, within the machine's noise.
      const half = Math.floor(steady.length / 2)
      expect(median(steady.slice(half).map((w) => w.jobsPerSecond))).toBeGreaterThan(0.7 * median(steady.slice(0, half).map((w) => w.jobsPerSecond)))
      // The file reuses the pages retention frees, and the WAL is checkpointed as it goes.
      expect(Math.max(...steady.map((w) => w.fileMb))).toBeLessThan(first.fileMb * 1.25 + 4)
      expect(Math.max(...steady.map((w) => w.walMb))).toBeLessThan(64)
    }
  })
})
