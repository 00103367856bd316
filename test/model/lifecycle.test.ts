import { it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { checkModel } from './run.js'

/**
 * The short model run inside `npm test`: random sequences of enqueues
 * (priorities, due times, unique keys, scopes, deadlines, batches),
 * cancels, retry nows, pauses and resumes, clock moves, handler endings,
 * runner stops and starts, a second runner and races of cancel with stop,
 * rate-limited, per-scope and fair kinds, `job.rateLimited` endings and
 * clearCooldown, against the real runners on each backend, every step
 * checked against the model (model.ts). A new seed each run, printed;
 * under CI (the CI environment variable set) the fixed DEFAULT_SEED of
 * run.ts, 1816801227, so a CI run is the same sequences every time;
 * JT_MODEL_SEED=<seed> replays one either way (JT_MODEL_RUNS sets the
 * number of sequences, JT_MODEL_STATS=1 prints what they covered). A
 * failure is shrunk and reported with its seed and its steps, ready to
 * paste into regressions.test.ts. About 25 s a backend here; the long run
 * is test/reliability/model.test.ts.
 */
const RUNS: Record<string, number> = { sqlite: 50, postgres: 30 }

describeEachBackend('model-based lifecycle', (backend) => {
  const runs = Number(process.env['JT_MODEL_RUNS'] ?? RUNS[backend.name] ?? 20)
  it(`${runs} random command sequences hold every invariant of the model`, { timeout: 240_000 }, async () => {
    // numRuns is the budget; exploreMs only guards it on a slow machine (runs past it pass without running).
    await checkModel({ backend, numRuns: runs, maxCommands: 60, exploreMs: 25_000, shrinkMs: 120_000 })
  })
})
