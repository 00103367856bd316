import fc from 'fast-check'
import { KIND_NAMES, Model } from './model.js'
import { commandArbitraries, Start, Step } from './commands.js'
import { System, type SystemOptions } from './system.js'
import type { Backend } from '../support/backends.js'

/**
 * Runs the model: random command sequences against the real runners on
 * one backend (fast-check's `fc.commands` and `fc.asyncModelRun`), each
 * run on a fresh store, each failure shrunk to a minimal sequence. Also
 * `replay`, which runs a fixed sequence once: the regressions.
 */

/** What a run starts with: r0 started with every kind and this many workers. */
export interface ModelConfig {
  readonly workers: number
}

const configArb = fc.record({ workers: fc.integer({ min: 1, max: 3 }) })

/** A command left out by a filter: never runs (its precondition fails), so fast-check drops it. */
class Skip extends Step {
  check(): boolean {
    return false
  }
  protected async act(): Promise<void> {}
  toString(): string {
    return 'skip()'
  }
}
const SKIP = new Skip()

export interface CheckOptions extends RunOptions {
  readonly backend: Backend
  /** How many random sequences to run. */
  readonly numRuns: number
  readonly maxCommands: number
  /** Stop starting new runs after this long (runs that passed count as passed); a budget guard beside numRuns. */
  readonly exploreMs: number
  /** How long shrinking may take once a run failed; the smallest failure found by then is reported. */
  readonly shrinkMs: number
  /** Default: JT_MODEL_SEED when set, else a new one each time. */
  readonly seed?: number
  /** fast-check's path of one counterexample, to replay only it (with its seed); default JT_MODEL_PATH. */
  readonly path?: string
  /** Keeps only the commands it accepts: a hunt for one behaviour, with the triggers of others left out. */
  readonly filter?: (step: Step) => boolean
}

/** The seed CI runs with (see lifecycle.test.ts): a run there is the same sequences every time. */
export const DEFAULT_SEED = 1_816_801_227

/** The seed of a check: JT_MODEL_SEED when set; else DEFAULT_SEED under CI (the CI environment variable set), else a new one. */
export function modelSeed(): number {
  const set = process.env['JT_MODEL_SEED']
  if (set !== undefined && set !== '') {
    const n = Number(set)
    if (!Number.isSafeInteger(n)) throw new Error(`JT_MODEL_SEED must be an integer, not ${JSON.stringify(set)}`)
    return n
  }
  const ci = process.env['CI']
  if (ci !== undefined && ci !== '' && ci !== 'false' && ci !== '0') return DEFAULT_SEED
  return (Date.now() ^ Math.floor(Math.random() * 2 ** 31)) | 0
}

/** Options of the real system, and of the model's settling. */
export interface RunOptions extends SystemOptions {
  readonly settleLimitMs?: number
}

async function begin(backend: Backend, config: ModelConfig, options: RunOptions): Promise<{ model: Model; real: System }> {
  const real = await System.create(backend, options)
  const model = new Model({ settleLimitMs: options.settleLimitMs })
  model.attach(real.ledger)
  await new Start({ slot: 0, workers: config.workers, kinds: KIND_NAMES }).run(model, real)
  return { model, real }
}

/**
 * Runs `numRuns` random sequences (fewer if `exploreMs` runs out), and
 * throws fast-check's report of the smallest failing one: its seed, its
 * commands (each printed as the call that makes it) and, in the error,
 * every step of that run with what the runners did.
 */
export async function checkModel(options: CheckOptions): Promise<{ runs: number; ms: number; seed: number }> {
  const seed = options.seed ?? modelSeed()
  const path = options.path ?? process.env['JT_MODEL_PATH']
  const { backend, numRuns, maxCommands, exploreMs, shrinkMs } = options
  console.log(`jobtable model (${backend.name}): seed ${seed}, ${numRuns} runs of up to ${maxCommands} commands; JT_MODEL_SEED=${seed} replays it`)
  const began = Date.now()
  let failedAt: number | undefined
  let runs = 0
  const stats = new Map<string, number>()
  const property = fc.asyncProperty(configArb, fc.commands(options.filter === undefined ? commandArbitraries : commandArbitraries.map((a) => a.map((step) => (options.filter!(step) ? step : SKIP))), { maxCommands, size: 'max' }), async (config, commands) => {
    // Out of budget: pass without running (while exploring), or stop shrinking and keep the smallest failure found.
    if (failedAt === undefined && Date.now() - began > exploreMs) return
    if (failedAt !== undefined && Date.now() - failedAt > shrinkMs) return
    if (failedAt === undefined) runs++
    const setup = await begin(backend, config, options)
    try {
      await fc.asyncModelRun(() => setup, commands)
    } catch (err) {
      failedAt ??= Date.now()
      throw err
    } finally {
      if (failedAt === undefined) for (const [k, v] of setup.model.stats) stats.set(k, (stats.get(k) ?? 0) + v)
      await setup.real.dispose()
    }
  })
  await fc.assert(property, { seed, numRuns, ...(path !== undefined ? { path } : {}) })
  const ms = Date.now() - began
  console.log(`jobtable model (${backend.name}): ${runs} runs passed in ${(ms / 1000).toFixed(1)} s (seed ${seed})`)
  if (process.env['JT_MODEL_STATS'] !== undefined) {
    console.log([...stats].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => `  ${String(v).padStart(6)}  ${k}`).join('\n'))
  }
  return { runs, ms, seed }
}

/**
 * Runs one fixed sequence on a fresh store, as a deterministic test:
 * resolves when every step's invariants held, and rejects with the first
 * violation and the run's steps otherwise. A command whose precondition
 * does not hold is skipped, as fast-check does.
 */
export async function replay(backend: Backend, config: ModelConfig, commands: readonly Step[], options: RunOptions = {}): Promise<string[]> {
  const { model, real } = await begin(backend, config, options)
  try {
    for (const command of commands) if (command.check(model)) await command.run(model, real)
    return model.trace
  } finally {
    await real.dispose()
  }
}
