import { expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { bound, FULL, size } from './sizes.js'
import { shutdownRun, type RunOutcome, type RunPlan } from './support/secrets-shutdown.js'
import { postgresSecretStore, sqliteSecretStore } from './support/secrets-stores.js'

const JOBS = size('graceful_shutdown_jobs', 200, 2000)
const WORKERS = size('graceful_shutdown_workers', 50, 50)
const MAX_HANDLER_MS = size('graceful_shutdown_max_handler_ms', 1000, 3000)
const RUNS = { sqlite: size('graceful_shutdown_runs', 3, 50), postgres: size('graceful_shutdown_pg_runs', 1, 10) }
/** The latest first signal, after the worker is up. */
const LATEST_SIGNAL_MS = size('graceful_shutdown_latest_signal_ms', 600, 8000)
/**
 * Around the stop deadline a handler's end may or may not be recorded: its
 * final write may be on its way. Wider at the fast size, which runs beside
 * other work on a loaded machine, where a final write can take longer.
 */
const NEAR_DEADLINE_MS = FULL ? 250 : 1_000

/**
 * Checks one run against the contract: no handler starts after the first
 * SIGTERM, none starts twice, every handler that finished before the stop
 * deadline is recorded succeeded, every job whose handler was still
 * running at the deadline is left running (nothing it ends with is
 * recorded) and the next start fails it as interrupted, every job never
 * started is queued, and the process exits 0 however many signals came.
 */
function check(run: string, plan: RunPlan, out: RunOutcome): { runningAtSignal: number; leftRunning: number; started: number } {
  expect(out.exit, `${run}: exit\n${out.stderr.slice(-3000)}`).toBe(0)
  expect(out.stderr, run).not.toContain('second signal: exiting at once')
  const signal = out.ledger.find((r) => r.what === 'signal')
  expect(signal, `${run}: the worker saw a SIGTERM`).toBeDefined()
  expect(out.ledger.filter((r) => r.what === 'start' && r.seq > signal!.seq), `${run}: handlers started after the signal`).toEqual([])
  const starts = new Map<string, number>()
  const finishes = new Map<string, { seq: number; at: number }>()
  for (const r of out.ledger) {
    if (r.what === 'start') starts.set(r.job_id!, (starts.get(r.job_id!) ?? 0) + 1)
    if (r.what === 'finish') finishes.set(r.job_id!, r)
  }
  expect([...starts].filter(([, n]) => n !== 1), `${run}: jobs started more than once`).toEqual([])
  expect(out.after.size, run).toBe(plan.jobs)
  const wrong: string[] = []
  let runningAtSignal = 0
  let leftRunning = 0
  for (const [id, job] of out.after) {
    const finish = finishes.get(id)
    const restarted = out.afterRestart.get(id)!
    if (starts.has(id) && (finish === undefined || finish.seq > signal!.seq)) runningAtSignal++
    let ok: boolean
    if (!starts.has(id)) ok = job.status === 'queued'
    else if (finish === undefined) ok = job.status === 'running'
    else {
      const sinceSignal = finish.at - signal!.at
      if (sinceSignal < plan.stopTimeoutMs - NEAR_DEADLINE_MS) ok = job.status === 'succeeded'
      else if (sinceSignal > plan.stopTimeoutMs + NEAR_DEADLINE_MS) ok = job.status === 'running'
      else ok = job.status === 'succeeded' || job.status === 'running'
    }
    if (job.status === 'running') {
      leftRunning++
      ok &&= restarted.status === 'failed' && restarted.error === 'interrupted by restart'
    } else ok &&= restarted.status === job.status
    if (!ok) wrong.push(`${id}: started ${starts.has(id)}, finished ${finish ? Math.round(finish.at - signal!.at) + ' ms after the signal' : 'no'}; ${job.status}, then ${restarted.status} ${restarted.error}`)
  }
  expect(wrong, `${run}: jobs not as the contract says`).toEqual([])
  if (FULL) expect(out.exitMs, `${run}: exit within the stop timeout plus 0.5 s`).toBeLessThanOrEqual(plan.stopTimeoutMs + 500)
  return { runningAtSignal, leftRunning, started: starts.size }
}

describeEachBackend('graceful shutdown under load', (backend) => {
  /**
   * Proves the SIGTERM handling of jobtable worker and serve
   * (src/cli/signals.ts, serve.ts) under load: 50 workers, handlers of
   * 10 ms to 3 s, SIGTERM at a random moment, once or five times 10 ms
   * apart; every other pair of runs with a stop timeout shorter than the
   * longest handler, so some are still running at the deadline; every
   * third run `serve`, with an upload still arriving. See check() for
   * what each run must show.
   */
  it('stops taking jobs at the first SIGTERM, records every handler that finished, leaves those past the stop timeout for the next start, and takes five signals as one', async () => {
    const runs = RUNS[backend.name as 'sqlite' | 'postgres']
    const figures: string[] = []
    let worstOverMs = -Infinity
    for (let i = 0; i < runs; i++) {
      const store = backend.name === 'sqlite' ? sqliteSecretStore() : postgresSecretStore()
      try {
        const short = i % 4 >= 2
        const plan: RunPlan = {
          mode: i % 3 === 2 ? 'serve' : 'worker',
          database: store.database,
          driver: () => store.driver(),
          jobs: JOBS,
          workers: WORKERS,
          maxHandlerMs: MAX_HANDLER_MS,
          stopTimeoutMs: short ? Math.round(MAX_HANDLER_MS / 2) : MAX_HANDLER_MS + 2000,
          signalAfterMs: Math.round(100 + Math.random() * (LATEST_SIGNAL_MS - 100)),
          signals: i % 2 === 1 ? 5 : 1,
        }
        const out = await shutdownRun(plan)
        const run = `run ${i + 1}/${runs} (${plan.mode}, ${plan.signals} signal(s), stop timeout ${plan.stopTimeoutMs} ms, signal at ${plan.signalAfterMs} ms)`
        const seen = check(run, plan, out)
        worstOverMs = Math.max(worstOverMs, out.exitMs - plan.stopTimeoutMs)
        figures.push(`${run}: ${seen.started} started, ${seen.runningAtSignal} running at the signal, ${seen.leftRunning} left running, ${out.signalsSeen} signals seen, exit after ${Math.round(out.exitMs)} ms`)
      } finally {
        await store.drop()
      }
    }
    console.info(`graceful shutdown (${backend.name}), ${JOBS} jobs, ${WORKERS} workers, handlers 10-${MAX_HANDLER_MS} ms:\n${figures.join('\n')}\nlatest exit relative to the stop timeout: ${Math.round(worstOverMs)} ms`)
  }, bound(90_000, 900_000))
})
