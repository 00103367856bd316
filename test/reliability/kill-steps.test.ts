import { describe, expect, it } from 'vitest'
import { postgresSkipReason } from '../support/backends.js'
import { flaky, hold, idem, KILL_STEPS, plain, type KillStep } from './support/kills-kinds.js'
import { checkRecovered, type Recovered } from './support/kills-oracle.js'
import { retryTransient } from '../support/wait.js'
import { crashStore, exitOf, pool, waitFor } from './support/kills-store.js'
import { bound, FULL, size } from './sizes.js'

/*
 * Kill at every step (reliability suite, item 1): a worker process kills
 * itself with SIGKILL at one step of a job's life (kills-worker.ts), then
 * a fresh process starts on the same store and runs until nothing waits;
 * the oracle (kills-oracle.ts) compares every job as the crash left it with
 * what the restart made of it, against the handler starts in the ledger.
 * SQLite recovers a crashed process's jobs at the next start (its lock is
 * gone at once); PostgreSQL once its 1 s lease has lapsed.
 */

const ROUNDS = size('kill_steps_rounds', 1, 20)
/** Scenarios at once: each is two or three processes, mostly waiting. */
const PARALLEL = FULL ? 3 : 2
const BACKENDS = ['sqlite', 'postgres'] as const

/**
 * In `npm test` each step runs on one backend, alternately, so all nine
 * run within the budget; the full size runs every step on both.
 */
function runsOn(backend: (typeof BACKENDS)[number], step: KillStep): boolean {
  if (FULL || process.env['JT_RELIABILITY_KILL_STEPS_ROUNDS'] !== undefined) return true
  return KILL_STEPS.indexOf(step) % 2 === (backend === 'sqlite' ? 0 : 1)
}

/** One crash at `step` and one restart, on a fresh store; the oracle's figures, and the time from the crash to every job terminal. */
async function crashAndRestart(backend: (typeof BACKENDS)[number], step: KillStep): Promise<Recovered & { ms: number }> {
  const store = await crashStore(backend, { leaseMs: 1_000, sweepMs: 200, pollMs: 50 })
  try {
    const p = store.producer
    const holdId = step === 'cancel' ? await p.enqueue(hold.name, { ms: 0 }) : undefined
    // Claimed in this order by two workers: the idempotent job first, running for 300 ms, so a kill
    // at most steps finds it running; then the flaky job, whose retry comes before a plain job's kill.
    await p.enqueue(idem.name, { ms: 300 })
    await p.enqueue(flaky.name, { ms: 0 })
    for (let i = 0; i < 4; i++) await p.enqueue(plain.name, { ms: 20 })

    const crashed = store.spawn({ JT_KILL_AT: step === 'recovery' ? 'mid-handler' : step })
    if (holdId !== undefined) {
      await waitFor('the held job to start', () => store.ledger().some((l) => l.e === 'start' && l.id === holdId))
      expect(await retryTransient(() => p.cancel(holdId))).toBe('requested')
    }
    expect(await exitOf(crashed, `the process killed at ${step}`)).toBe('SIGKILL')
    if (step === 'recovery') {
      // PostgreSQL: a start recovers the dead runner's jobs only once its lease has lapsed.
      const deadId = store.ledger().find((l) => l.e === 'kill')!.runner
      await waitFor('the lease of the killed runner to lapse', async () => !(await store.registered(deadId)) || backend === 'sqlite')
      expect(await exitOf(store.spawn({ JT_KILL_AT: 'recovery' }), 'the process killed in its startup recovery')).toBe('SIGKILL')
    }
    const atCrash = await store.rows()
    const t0 = Date.now()

    const restarted = store.spawn()
    await restarted.ready
    await waitFor('every job to end after the restart', async () => (await store.unfinished()) === 0, 30_000, 50)
    const ms = Date.now() - t0
    restarted.child.kill('SIGTERM')
    expect(await exitOf(restarted, 'the restarted process')).toBe(0)

    const figures = checkRecovered(step, atCrash, await store.rows(), store.ledger())
    expect(await store.integrity()).toBe('ok')
    return { ...figures, ms }
  } finally {
    await store.drop()
  }
}

/** In `npm test` the nine scenarios run at once (each mostly waits for its processes); the full size runs one step at a time, its rounds PARALLEL at once. */
const steps = FULL ? describe : describe.concurrent

for (const backend of BACKENDS) {
  steps(`${backend}: kill at every step`, () => {
    if (backend === 'postgres' && postgresSkipReason !== undefined) {
      it.skip(`skipped: ${postgresSkipReason}`, () => {})
      return
    }
    for (const step of KILL_STEPS) {
      /** A SIGKILL at this step, then one restart: every job ends as the crash and the contract say, none started twice. */
      it.runIf(runsOn(backend, step))(
        `SIGKILL ${step}, ${ROUNDS}x: after one restart every job is terminal, none started twice, the interrupted failed as such, the committed unchanged`,
        async () => {
          const runs = await pool(PARALLEL, Array.from({ length: ROUNDS }, () => () => crashAndRestart(backend, step)))
          const sum = (f: (r: Recovered) => number) => runs.reduce((n, r) => n + f(r), 0)
          const statuses: Record<string, number> = {}
          for (const r of runs) for (const [s, n] of Object.entries(r.statuses)) statuses[s] = (statuses[s] ?? 0) + n
          const ms = runs.map((r) => r.ms).sort((a, b) => a - b)
          console.log(
            `kill-steps ${backend} ${step}: ${runs.length} rounds, ${sum((r) => r.kills)} kills, ${sum((r) => r.jobs)} jobs, ${sum((r) => r.starts)} starts ` +
              `(${sum((r) => r.idempotentRestarts)} idempotent restarts), statuses ${JSON.stringify(statuses)}, ` +
              `restart to all terminal: median ${ms[ms.length >> 1]} ms, max ${ms[ms.length - 1]} ms`,
          )
        },
        bound(60_000, 900_000),
      )
    }
  })
}
