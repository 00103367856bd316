import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CODE_INTERRUPTED, Runner } from 'jobtable'
import { postgresSkipReason } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { stale } from './support/kills-kinds.js'
import { crashStore, waitFor, type CrashStore, type JobState } from './support/kills-store.js'
import { bound, FULL, size } from './sizes.js'

/*
 * The stale worker (reliability suite, item 3): a worker process stops
 * itself with SIGSTOP just after a claim holding a `stale` job
 * (kills-worker.ts, JT_KILL_AT=stop-after-claim), and is continued with
 * SIGCONT once the test has seen what recovery makes of the job. One
 * process serves every round: after each SIGCONT it runs on, and claims
 * the next round's job.
 */

const ROUNDS = size('stale_worker_rounds', 2, 100)
const silent = { debug() {}, info() {}, warn() {}, error() {} }

const stops = (store: CrashStore, id: string) => store.ledger().some((l) => l.e === 'stop' && l.id === id)
const ended = (store: CrashStore, id: string) => store.ledger().some((l) => l.e === 'end' && l.id === id)
const rowOf = async (store: CrashStore, id: string): Promise<JobState> => (await store.rows()).find((j) => j.id === id)!

/** In `npm test` both backends' runs go at once; the full size runs one at a time. */
const backends = FULL ? describe : describe.concurrent

backends('stale worker', () => {
  describe.skipIf(postgresSkipReason !== undefined)('postgres: a stale worker', () => {
    /**
     * Stopped past its 1 s lease, the worker's job is failed as interrupted
     * by another runner's sweep; continued, the stale worker finds its claim
     * answered long after it was sent, reads the job before starting it,
     * sees the database gave it up, and never starts the handler (before,
     * it ran the handler the database had already failed, and a retry
     * pressed meanwhile would have run it twice). Its heartbeat finds its
     * lease gone and registers again: the failed row stays exactly as
     * recovery left it, every round.
     */
    it(`SIGSTOP after the claim until recovery fails the job, then SIGCONT: the handler never starts, and nothing the worker does changes the row (${ROUNDS} rounds, 0 overwrites)`, async () => {
      const store = await crashStore('postgres', { leaseMs: 1_000, sweepMs: 100, pollMs: 50 })
      const log = join(store.dir, 'worker.log')
      try {
        // The sweeper: a runner of this process with no handlers, sweeping every 100 ms.
        const sweeper = new Runner({ driver: store.driver({ sweepIntervalMs: 100, leaseMs: 1_000 }), logger: silent })
        await sweeper.start()
        const worker = store.spawn({ JT_KINDS: stale.name, JT_KILL_AT: 'stop-after-claim', JT_WORKERS: '1', JT_LOG: log })
        const workerId = await worker.ready
        let overwrites = 0
        let started = 0
        const t0 = Date.now()
        for (let round = 0; round < ROUNDS; round++) {
          const id = await store.producer.enqueue(stale.name, { ms: 0 })
          await waitFor('the worker to stop after its claim', () => stops(store, id))
          await waitFor('recovery to fail the stopped worker’s job', async () => (await rowOf(store, id)).status !== 'running')
          const recovered = await rowOf(store, id)
          expect(recovered).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED, runnerId: workerId, attempt: 1, result: null })
          expect(await store.registered(workerId)).toBe(false)

          worker.child.kill('SIGCONT')
          await waitFor('the stale worker to give up its late claim', () => claimLost(log, id))
          await waitFor('the stale worker to register again', () => store.registered(workerId))
          if (JSON.stringify(await rowOf(store, id)) !== JSON.stringify(recovered)) overwrites++
          const lines = store.ledger().filter((l) => l.id === id)
          started += lines.filter((l) => l.e === 'start').length
          expect(ended(store, id)).toBe(false)
        }
        console.log(`stale-worker postgres: ${ROUNDS} rounds in ${Date.now() - t0} ms, ${overwrites} overwrites, ${started} handlers started after their job was failed`)
        expect({ overwrites, started }).toEqual({ overwrites: 0, started: 0 })
        await sweeper.close()
      } finally {
        await store.drop()
      }
    }, bound(60_000, 900_000))
  })

  describe('sqlite: a stale worker', () => {
    /**
     * On SQLite a runner is proven gone only by its lock file's lock, which
     * a stopped process still holds (the kernel releases it when the process
     * dies, not when it stops): nothing recovers its job, which is right,
     * since the process may go on. What this proves instead: while it is
     * stopped, another runner of the same kind, sweeping every 20 ms, neither
     * fails nor runs the job, which stays running under the stopped
     * runner's claim, unchanged; continued, the worker runs it once and it
     * succeeds.
     */
    it(`SIGSTOP after the claim: its lock still proves it alive, so the job stays its own, untouched and run by nothing else; after SIGCONT it succeeds, started once (${ROUNDS} rounds)`, async () => {
      const store = await crashStore('sqlite', { sweepMs: 100, pollMs: 20 })
      try {
        const worker = store.spawn({ JT_KINDS: stale.name, JT_KILL_AT: 'stop-after-claim', JT_WORKERS: '1' })
        const workerId = await worker.ready
        let overwrites = 0
        let otherStarts = 0
        for (let round = 0; round < ROUNDS; round++) {
          const id = await store.producer.enqueue(stale.name, { ms: 0 })
          await waitFor('the worker to stop after its claim', () => stops(store, id))
          const stopped = await rowOf(store, id)
          expect(stopped).toMatchObject({ status: 'running', runnerId: workerId, attempt: 1 })

          const faulty = new FaultyDriver(store.driver({ sweepIntervalMs: 20 }))
          const other = new Runner({ driver: faulty.driver, logger: silent, workers: 1 })
          other.register(stale, () => {
            otherStarts++
            return { ok: true }
          })
          await other.start()
          // The start's sweep and ten periodic ones, each of which found the stopped runner alive.
          await waitFor('ten sweeps', () => (faulty.calls['jobFailInterrupted'] ?? 0) > 10)
          await other.close()
          if (JSON.stringify(await rowOf(store, id)) !== JSON.stringify(stopped)) overwrites++

          worker.child.kill('SIGCONT')
          await waitFor('the worker to finish the job', () => ended(store, id))
          expect(await rowOf(store, id)).toMatchObject({ status: 'succeeded', runnerId: workerId, attempt: 1, result: '{"ok":true}' })
          expect(store.ledger().filter((l) => l.id === id && l.e === 'start')).toHaveLength(1)
        }
        console.log(`stale-worker sqlite: ${ROUNDS} rounds, ${overwrites} overwrites, ${otherStarts} starts by another runner`)
        expect([overwrites, otherStarts]).toEqual([0, 0])
      } finally {
        await store.drop()
      }
    }, bound(30_000, 600_000))
  })
})

/** Whether the worker logged the final write of job `id` as refused by the fence. */
/** Whether the worker logged that it gave up the job's late claim unstarted. */
function claimLost(log: string, id: string): boolean {
  if (!existsSync(log)) return false
  return readFileSync(log, 'utf8')
    .split('\n')
    .some((l) => l.includes(id) && l.includes('claim lost before its handler started'))
}
