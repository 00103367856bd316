import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CODE_INTERRUPTED, CODE_UNKNOWN_KIND } from 'jobtable'
import { postgresSkipReason } from '../support/backends.js'
import type { WorkerProcess } from '../multiprocess/processes.js'
import { work, workV2 } from './support/kills-kinds.js'
import { retryTransient } from '../support/wait.js'
import { crashStore, exitOf, startsOf, waitFor } from './support/kills-store.js'
import { bound, FULL, size } from './sizes.js'

/*
 * Random kills (reliability suite, item 2): worker processes
 * (kills-worker.ts, no kill of their own) run jobs of 0-200 ms while the
 * test kills one of them, chosen at random, with SIGKILL at random
 * intervals of 0.2-2 s, and starts a fresh process in its place each
 * time. Then every job must end, none twice. The rolling deploy runs half
 * the processes on an older set of kinds, without `work_v2`.
 */

const JOBS = size('random_kills_jobs', 300, 10_000)
const KILLS = size('random_kills_kills', 2, 100)
/**
 * Workers per process: at the full size enough that, with processes down while they restart, the jobs are
 * done about when the kills end (with 4 and 6, 1,000-3,000 jobs were left then); in npm test few enough
 * that the kills fall while jobs run.
 */
const PG_WORKERS = size('random_kills_pg_workers', 4, 8)
const SQLITE_WORKERS = size('random_kills_sqlite_workers', 6, 16)
const LEASE_MS = 3_000
/** Jobs that run LONG_MS, enqueued first: the first kill waits for one to start and kills its process. */
const LONG = 2
const LONG_MS = 5_000
const BACKENDS = ['sqlite', 'postgres'] as const

const random = (from: number, to: number) => from + Math.floor(Math.random() * (to - from + 1))
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function randomKills(backend: (typeof BACKENDS)[number], rolling: boolean): Promise<void> {
  const [processes, workers] = backend === 'postgres' ? [4, PG_WORKERS] : [2, SQLITE_WORKERS]
  const store = await crashStore(backend, { leaseMs: LEASE_MS, sweepMs: 500, pollMs: 100 })
  const log = join(store.dir, 'workers.log')
  try {
    // Half of them (rounded down) on the older set of kinds in a rolling deploy; a killed one is replaced by one of its version.
    const old = (slot: number) => rolling && slot < Math.floor(processes / 2)
    const slots: WorkerProcess[] = []
    const ready = new Set<WorkerProcess>()
    const spawn = (slot: number) => {
      const proc = store.spawn({ JT_KINDS: old(slot) ? work.name : `${work.name},${workV2.name}`, JT_WORKERS: String(workers), JT_LOG: log })
      proc.ready.then(() => ready.add(proc), () => undefined)
      slots[slot] = proc
    }
    for (let slot = 0; slot < processes; slot++) spawn(slot)
    await Promise.all(slots.map((p) => p.ready))

    // Enqueued once every process is up, so the kills fall while the jobs run. The first LONG jobs run for
    // LONG_MS: the first kill falls on a process running one of them, so at least one kill lands on a running
    // handler however fast the short jobs drain (without them a run on a fast machine could drain between kills).
    const kinds = rolling ? [store.kinds.work, store.kinds.work_v2] : [store.kinds.work]
    const ids: string[] = []
    for (const [k, kind] of kinds.entries()) {
      const n = Math.floor(JOBS / kinds.length) + (k < JOBS % kinds.length ? 1 : 0)
      ids.push(...(await retryTransient(() => kind.enqueueMany(Array.from({ length: n }, (_, i) => ({ ms: k === 0 && i < LONG ? LONG_MS : random(0, 200) }))), 50)))
    }
    expect(ids).toHaveLength(JOBS)
    const longIds = new Set(ids.slice(0, LONG))

    const t0 = Date.now()
    for (let k = 0; k < KILLS; k++) {
      await sleep(random(200, 2_000))
      // A process chosen at random among those up (one still starting has no job to lose).
      await waitFor('a worker to be up', () => slots.some((p) => ready.has(p)))
      let up = slots.flatMap((p, slot) => (ready.has(p) ? [slot] : []))
      if (k === 0) {
        // The first kill: among the processes running a long job, which has LONG_MS to go.
        const runningLong = (slot: number) => {
          let ledger: ReturnType<typeof store.ledger>
          try {
            ledger = store.ledger()
          } catch {
            return false // a line read while it was being written: read again at the next look
          }
          const lines = ledger.filter((l) => l.pid === slots[slot]!.child.pid && l.id !== null && longIds.has(l.id))
          return lines.some((l) => l.e === 'start' && !lines.some((e) => e.e === 'end' && e.id === l.id))
        }
        await waitFor('a long job to start', () => up.some(runningLong))
        up = up.filter(runningLong)
      }
      const slot = up[random(0, up.length - 1)]!
      slots[slot]!.child.kill('SIGKILL')
      expect(await exitOf(slots[slot]!, 'a killed worker')).toBe('SIGKILL')
      spawn(slot)
    }
    const lastKill = Date.now()
    const leftAtLastKill = await store.unfinished()
    await waitFor('every job to end', async () => (await store.unfinished()) === 0, bound(60_000, 300_000), 100)
    const settledMs = Date.now() - lastKill
    for (const proc of slots) proc.child.kill('SIGTERM')
    for (const proc of slots) await exitOf(proc, 'a worker stopping')

    const rows = await store.rows()
    const ledger = store.ledger()
    const starts = startsOf(ledger)
    // Every process wrote its runner id and kinds before its first claim, killed or not.
    const newRunners = new Set(ledger.filter((l) => l.e === 'runner' && l.kinds!.includes(workV2.name)).map((l) => l.runner))
    const statuses: Record<string, number> = {}
    for (const r of rows) {
      const key = r.error === null ? r.status : `${r.status} (${r.error})`
      statuses[key] = (statuses[key] ?? 0) + 1
    }
    const totalStarts = [...starts.values()].reduce((n, a) => n + a.length, 0)
    console.log(
      `random-kills ${backend}${rolling ? ' rolling deploy' : ''}: ${JOBS} jobs, ${KILLS} kills over ${lastKill - t0} ms, ${totalStarts} starts, ` +
        `statuses ${JSON.stringify(statuses)}, ${leftAtLastKill} unfinished at the last kill, all terminal ${settledMs} ms after it`,
    )

    // Every id accounted for, each exactly once, and the counts sum to exactly the jobs enqueued.
    expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort())
    expect(Object.values(statuses).reduce((a, b) => a + b, 0)).toBe(JOBS)
    for (const r of rows) {
      const n = starts.get(r.id)?.length ?? 0
      // Succeeded: started exactly once. Failed: only as interrupted by a kill, started at most once.
      if (r.status === 'succeeded') expect(n, r.id).toBe(1)
      else expect([r.status, r.error, n <= 1], r.id).toEqual(['failed', CODE_INTERRUPTED, true])
    }
    // The kills fell on running jobs: the test proved something.
    expect(statuses[`failed (${CODE_INTERRUPTED})`] ?? 0).toBeGreaterThan(0)
    if (rolling) {
      expect(rows.filter((r) => r.error === CODE_UNKNOWN_KIND)).toEqual([])
      // Each work_v2 job was claimed by a process of the new version only, and no process claimed a kind it lacks.
      for (const r of rows.filter((r) => r.kind === workV2.name && r.runnerId !== null)) expect(newRunners.has(r.runnerId!), r.id).toBe(true)
      expect(existsSync(log) ? readFileSync(log, 'utf8') : '').not.toContain('no handler for')
    }
    expect(await store.integrity()).toBe('ok')
    // Recovery by the lease (PostgreSQL) or the lock at the next start (SQLite), then 10 s at most.
    if (FULL) expect(settledMs).toBeLessThanOrEqual((backend === 'postgres' ? LEASE_MS : 0) + 10_000)
  } finally {
    await store.drop()
  }
}

for (const backend of BACKENDS) {
  describe(`${backend}: random kills`, () => {
    if (backend === 'postgres' && postgresSkipReason !== undefined) {
      it.skip(`skipped: ${postgresSkipReason}`, () => {})
      return
    }
    /** SIGKILLs at random moments, each killed process replaced: every job ends once, none started twice, every id accounted for. */
    // In `npm test` only the rolling deploy runs, which does all this one does and more: the budget.
    it.runIf(FULL || process.env['JT_RELIABILITY_RANDOM_KILLS_JOBS'] !== undefined)(`${JOBS} jobs, ${KILLS} SIGKILLs at random 0.2-2 s intervals: all terminal, none started twice, the counts sum to ${JOBS}`, () => randomKills(backend, false), bound(60_000, 900_000))

    /** The same in a rolling deploy: half the processes lack work_v2, which waits for the others and never fails unknown_kind. */
    it(`a rolling deploy (half the processes lack a kind) under the same kills: no job fails unknown_kind, each runs on a process that has its kind`, () => randomKills(backend, true), bound(60_000, 900_000))
  })
}
