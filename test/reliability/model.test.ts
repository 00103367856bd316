import { it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { checkModel } from '../model/run.js'
import { bound, FULL, size } from './sizes.js'

/**
 * The model-based lifecycle test (test/model/) at the reliability suite's
 * sizes: random sequences of enqueues, cancels, retry nows, pauses and
 * resumes, clock moves, handler endings (returns, declared failures,
 * throws, snoozes, deadlines passed or outlived), runner stops and
 * starts, a second runner and races of cancel with stop, every step
 * checked against the model (test/model/model.ts). Inside `npm test` it
 * is a smoke run of a few sequences (test/model/lifecycle.test.ts is the
 * short run proper); `npm run test:reliability` runs hundreds of longer
 * ones a backend. A new seed each run, printed; JT_MODEL_SEED=<seed>
 * replays one; JT_RELIABILITY_MODEL_RUNS and JT_RELIABILITY_MODEL_PG_RUNS
 * set the number of sequences on SQLite and on PostgreSQL.
 */
// Full: about 8 min on SQLite and 4 on PostgreSQL here (0.9 s and 1 s a sequence of up to 120 commands).
const RUNS = { sqlite: size('model_runs', 3, 500), postgres: size('model_pg_runs', 2, 250) }
const MAX_COMMANDS = FULL ? 120 : 40

describeEachBackend('model-based lifecycle, long run', (backend) => {
  const runs = backend.name === 'sqlite' ? RUNS.sqlite : RUNS.postgres
  it(`${runs} random sequences of up to ${MAX_COMMANDS} commands hold every invariant of the model`, { timeout: bound(120_000, 3_600_000) }, async () => {
    await checkModel({
      backend,
      numRuns: runs,
      maxCommands: MAX_COMMANDS,
      // A guard beside the number of runs: stop starting new ones past it, then give shrinking its own time.
      exploreMs: bound(30_000, 1_500_000),
      shrinkMs: bound(60_000, 900_000),
    })
  })
})
