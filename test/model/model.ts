/**
 * A reference model of jobtable's job lifecycle (README.md, "The
 * contract"), for the model-based tests in this folder: commands.ts makes
 * random sequences of operations, system.ts is the real side (runners on
 * one store, handlers the test ends), run.ts runs them with fast-check.
 *
 * How a step is checked. A command acts on the real runners, checks the
 * answer it got against this model's prediction (enqueue's id, cancel,
 * retry now, pause, resume) and applies its direct effect here. Then the
 * step settles: the runners are woken until nothing the contract says
 * must happen is left (`pending`: claims for idle workers, due jobs
 * promoted, final writes landed, deadlines passed, stop() resolved, ...)
 * and the store has stopped changing. Then `absorb` replays the step's
 * handler starts and ends (the Ledger) on each job's possible states,
 * adds what background chores may have done (promotion, unknown_kind, the
 * interrupted sweep), and requires the stored job to be one of those
 * states. What the contract leaves open (which runner claims, a retry's
 * jitter, the order of a race) is a set of candidate states, narrowed by
 * what the store shows. Invariants are checked as each handler starts
 * (`onStart`, synchronously) and after each settled step (`absorb`).
 *
 * How a feature adds to the model (each step names where):
 *  1. configuration: a field of KindSpec, or a kind in KINDS (system.ts
 *     turns each into a real definition); per-job state: a field of
 *     JobState, compared in `matches` and shown in `describe`;
 *  2. operations: a command class in commands.ts that acts on the real
 *     system, then calls a method of Model that checks the answer against
 *     the model's prediction and applies the effect (as `enqueued`,
 *     `cancelAnswered`, `retryAnswered` do); its arbitrary goes into
 *     `commandArbitraries`, and a factory beside `enqueue` lets
 *     regressions.test.ts replay it;
 *  3. what handlers and chores then do to a job: `#record` (how a
 *     handler's end is written), `#applyStart`, `#applyEnd`, and
 *     `#backgroundVariants` (what chores may do during a step);
 *  4. what must have happened before a step counts as settled: a line in
 *     `pending` (and `dwellMs` if a chore must be given time to misbehave);
 *  5. invariants: `onStart` (checked synchronously as each handler
 *     starts) or `#checkStep` (after each settled step), reporting through
 *     `violate`; then a deliberately broken driver in mutations.test.ts
 *     that the new invariant, and only it, catches.
 * A behaviour the contract leaves open is a set of candidate states, not
 * a guess: widen the set where the README allows a choice, never to make
 * a failing run pass.
 */

import type { Ledger, Run, SystemView } from './system.js'

/** The test clock starts here: behind real time, since PostgreSQL follows a test's clock only while it is behind its own. */
export const T0 = Date.UTC(2020, 0, 1)
/** A timed job's deadline; deadlines run on real timers whatever the clock says. */
export const TIMEOUT_MS = 25
/** The runner's timeoutGraceMs: how long a handler past its deadline is waited for before the job is recorded. */
export const TIMEOUT_GRACE_MS = 10
/** The runners' unknownKindGraceMs (clock time; also the real interval of that chore). */
export const UNKNOWN_KIND_GRACE_MS = 100
/** The drivers' maintenance sweep and poll intervals (real time). */
export const SWEEP_MS = 20
export const POLL_MS = 20
/** Far beyond any step: stop() resolves because its handlers ended, never by its timeout. */
export const STOP_TIMEOUT_MS = 60_000
/** Every retried kind backs off between BACKOFF_MS / 2 and BACKOFF_MS (baseMs = maxMs). */
export const BACKOFF_MS = 1_000
/** How long the store must stay unchanged, with nothing pending, before a step counts as settled. */
export const SETTLE_DWELL_MS = 12
/** A step that has not settled by then is a violation: something the contract says must happen did not. */
export const SETTLE_LIMIT_MS = 10_000

const CODE_INTERRUPTED = 'interrupted by restart'
const CODE_UNKNOWN_KIND = 'unknown_kind'
const CODE_TIMEOUT = 'timeout'
const CODE_INTERNAL = 'internal_error'

export const KIND_NAMES = ['plain', 'capped', 'scoped', 'rated', 'fair', 'household'] as const
export type KindName = (typeof KIND_NAMES)[number]

/** The rate-limit window of every rated kind (model clock). */
export const RATE_PERIOD_MS = 1_000

/** A kind's rate limit as the driver applies it (src/driver.ts, RateRule): its bucket, or null for one per scope. */
export interface RateSpec {
  readonly limit: number
  readonly periodMs: number
  readonly bucket: string | null
}

export interface KindSpec {
  readonly name: KindName
  readonly concurrency: number | null
  readonly scopeConcurrency: number | null
  readonly maxAttempts: number
  /** The failure codes it retries while attempts are left. */
  readonly retried: readonly string[]
  /** Its rate limit, or null. */
  readonly rate: RateSpec | null
  /** Claimed in turn across scopes (`fairness: 'scope'`). */
  readonly fair: boolean
}

/**
 * Whether the kind has a concurrency limit (either): a handler of such a
 * kind that lingers past its deadline keeps its job running until it
 * returns, and only then is it recorded `timeout` (README, "Timeouts").
 */
export function limited(kind: KindName): boolean {
  return KINDS[kind].concurrency !== null || KINDS[kind].scopeConcurrency !== null
}

/**
 * `plain` retries a declared failure and timeouts, with no limit; `capped`
 * the same with `concurrency: 1`; `scoped` is not retried and runs at most
 * one job per scope, two in all. `rated` starts at most 2 jobs per second
 * from the bucket `provider` (a shared key, which `plain` handlers may
 * also cool down); `fair` is claimed in turn across scopes; `household`
 * starts at most 1 job per second per scope (`key: 'scope'`), in turn
 * across scopes. None of the last three is retried.
 */
export const KINDS: Record<KindName, KindSpec> = {
  plain: { name: 'plain', concurrency: null, scopeConcurrency: null, maxAttempts: 2, retried: ['provider_unavailable', CODE_TIMEOUT], rate: null, fair: false },
  capped: { name: 'capped', concurrency: 1, scopeConcurrency: null, maxAttempts: 2, retried: ['provider_unavailable', CODE_TIMEOUT], rate: null, fair: false },
  scoped: { name: 'scoped', concurrency: 2, scopeConcurrency: 1, maxAttempts: 1, retried: [], rate: null, fair: false },
  rated: { name: 'rated', concurrency: null, scopeConcurrency: null, maxAttempts: 1, retried: [], rate: { limit: 2, periodMs: RATE_PERIOD_MS, bucket: 'provider' }, fair: false },
  fair: { name: 'fair', concurrency: null, scopeConcurrency: null, maxAttempts: 1, retried: [], rate: null, fair: true },
  household: { name: 'household', concurrency: null, scopeConcurrency: null, maxAttempts: 1, retried: [], rate: { limit: 1, periodMs: RATE_PERIOD_MS, bucket: null }, fair: true },
}

/** The bucket, and the default cooldown key, of a job (src/driver.ts, rateBucket): the rule's bucket, `<kind>@<scope>`, or the kind's name. */
export function bucketOf(kind: KindName, scope: string | null): string {
  const rate = KINDS[kind].rate
  if (rate === null) return kind
  return rate.bucket ?? `${kind}@${scope ?? ''}`
}

/** The kinds drawing on a bucket's rate limit, with it; none for a bucket no rate limit has (a kind's own name). */
function rateOfBucket(bucket: string): RateSpec | null {
  for (const spec of Object.values(KINDS)) {
    if (spec.rate === null) continue
    if (spec.rate.bucket === bucket || (spec.rate.bucket === null && bucket.startsWith(`${spec.name}@`))) return spec.rate
  }
  return null
}

export type DeclaredCode = 'provider_unavailable' | 'bad_input'
/** What a handler does when its signal aborts: return a result, throw, or go on until the test ends it. */
export type OnAbort = 'return' | 'throw' | 'ignore'
/** How a handler ends. */
export type HandlerAction =
  | { type: 'return' }
  | { type: 'fail'; code: DeclaredCode }
  | { type: 'throw' }
  | { type: 'snooze'; ms: number }
  /** `job.rateLimited(ms, { key })`: a snooze that also cools `key` (default: the job's bucket) down until then. */
  | { type: 'rateLimited'; ms: number; key?: string }

export type Status = 'scheduled' | 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled'
const TERMINAL: readonly Status[] = ['succeeded', 'failed', 'cancelled']
const LIVE: readonly string[] = ['scheduled', 'queued', 'running', 'claimed']

/** A job as the store shows it (Runner.list). */
export interface Row {
  readonly status: Status
  readonly attempt: number
  readonly maxAttempts: number
  readonly runAt: number | null
  readonly error: string | null
  /** The attempt whose returned result is the public result, or null. */
  readonly result: number | null
}

export interface Snapshot {
  readonly rows: ReadonlyMap<string, Row>
  /** The cooldowns in force (runner.cooldowns()): key -> until. */
  readonly cooldowns: ReadonlyMap<string, number>
  /** Claims in each rate bucket's window now (runner.rateLimits(), per-scope buckets one by one): bucket -> used. */
  readonly rateUsed: ReadonlyMap<string, number>
  /** Equal for two snapshots that show the same store, ledger and runners. */
  readonly key: string
}

export type RunAt = number | null | { readonly min: number; readonly max: number }

/** One state a job may be in: the model holds a set of them while a step leaves it open. */
export interface JobState {
  /** `claimed`: running in the store under a claim no handler has started yet (only a race leaves one). */
  readonly status: Status | 'claimed'
  readonly attempt: number
  readonly maxAttempts: number
  readonly runAt: RunAt
  readonly error: string | null
  readonly result: number | null
  /** The store's cancellation request of a running job. */
  readonly cancelRequested: boolean
  /** The ledger index of the handler running the current attempt. */
  readonly run?: number
  /** The runner (generation) holding a running or claimed job. */
  readonly owner?: number
  /** Running with no handler left to record it (it failed while its runner stopped): the interrupted sweep's to fail. */
  readonly orphan?: boolean
  /** The cooldown this step's final write of the job recorded (`job.rateLimited`); cleared once the step is absorbed. */
  readonly cooldown?: { readonly key: string; readonly until: number }
  /** How the model came to this state, for messages. */
  readonly why: string
}

export interface ModelJob {
  readonly index: number
  readonly label: string
  readonly id: string
  readonly kind: KindName
  readonly scope: string | null
  readonly priority: number
  /** Insertion order. */
  readonly seq: number
  readonly uniqueKey: string | null
  readonly timed: boolean
  readonly onAbort: OnAbort
  /** The clock when it was enqueued (created_at). */
  readonly createdAt: number
  state: JobState
  /** Candidates a command left for this step instead of `state` (a race). */
  seeds?: JobState[]
  /** The tick since which it has been queued, as far as the model knows for sure (for the order check). */
  queuedSince?: number
  /** When cancel() answered 'cancelled' (cleared by a retry now): it must never start again. */
  cancelledAt?: number
  /** A race's cancel answered 'terminal': the job must have ended by then. */
  mustBeTerminal?: boolean
}

export interface ModelRunner {
  readonly slot: number
  state: 'absent' | 'started' | 'stopping' | 'stopped'
  gen: number
}

/** What the model knows of each runner generation (a slot's runner started again is a new one). */
interface Generation {
  readonly slot: number
  readonly kinds: ReadonlySet<KindName>
  readonly workers: number
  /** The clock when it started (its unknown-kind check counts its own uptime from then). */
  readonly startedAt: number
  readonly startedInStep: number
  stopCalledTick?: number
  stopResolved: boolean
  /** The step in which its stop() was seen resolved. */
  stoppedInStep?: number
}

export class ModelViolation extends Error {
  override readonly name = 'ModelViolation'
}

export class Model {
  /** How long a step may take to settle before what is still pending is a violation. */
  readonly settleLimitMs: number
  constructor(options: { settleLimitMs?: number } = {}) {
    this.settleLimitMs = options.settleLimitMs ?? SETTLE_LIMIT_MS
  }

  now = T0
  readonly jobs: ModelJob[] = []
  readonly byId = new Map<string, ModelJob>()
  readonly runners: ModelRunner[] = [
    { slot: 0, state: 'absent', gen: 0 },
    { slot: 1, state: 'absent', gen: 0 },
  ]
  readonly gens = new Map<number, Generation>()
  /** Kinds paused now, with the tick from which the pause held. */
  readonly pausedSince = new Map<KindName, number>()
  /** Kinds whose pause changed during the current step (the order check leaves them out). */
  readonly #pauseTouched = new Set<KindName>()
  /** Runs whose cancellation their runner noticed (execution.cancelled), as far as the model can tell. */
  readonly #noticed = new Map<number, 'yes' | 'maybe'>()
  readonly violations: string[] = []
  /** Readable steps of this run, with what each did. */
  readonly trace: string[] = []
  /** How often each thing happened in this run (commands, answers, transitions), for coverage reports. */
  readonly stats = new Map<string, number>()
  #seq = 0
  stepNo = 0
  #stepStart = 0
  /** The race of this step: its job (the one whose order of events is open) and its runner generation. */
  #race: { jobId: string | undefined; gen: number } | undefined
  #ledger: Ledger | undefined
  #servedAtStepStart = new Set<KindName>()
  /**
   * What the model knows of each cooldown key: the ends it may have (null:
   * none recorded), narrowed by what cooldowns() shows after each step. A
   * key absent has none.
   */
  readonly cooldowns = new Map<string, Set<number | null>>()
  /** Keys whose cooldown may have been in force, or changed, during this step: the order check leaves their jobs out. */
  readonly #coolingTouched = new Set<string>()
  /** The clock when the current step began (before an advance moves it). */
  #nowAtStepStart = T0
  /**
   * The earliest time each run's claim may have recorded (by run index):
   * the clock when its step began. A claim reads the clock as it is sent
   * and may wait (for a lock) while a step moves the clock on; it records
   * that earlier time, and its window ends that much sooner. Assumed: no
   * claim waits across a whole settled step.
   */
  readonly #claimedFrom = new Map<number, number>()

  /** Hooks the model's start-time invariants to the ledger. */
  attach(ledger: Ledger): void {
    this.#ledger = ledger
    ledger.onStart = (run) => this.onStart(run)
  }

  get ledger(): Ledger {
    if (this.#ledger === undefined) throw new Error('model not attached to a ledger')
    return this.#ledger
  }

  count(what: string, n = 1): void {
    this.stats.set(what, (this.stats.get(what) ?? 0) + n)
  }

  violate(message: string): void {
    this.violations.push(`step ${this.stepNo}: ${message}`)
  }

  failed(view?: SystemView): boolean {
    return this.violations.length > 0 || (view?.violations.length ?? 0) > 0
  }

  // ---- steps ----------------------------------------------------------------------------------

  beginStep(text: string): void {
    this.#servedAtStepStart = this.#served()
    this.stepNo++
    this.#stepStart = this.ledger.tick()
    this.#race = undefined
    this.#pauseTouched.clear()
    this.#nowAtStepStart = this.now
    this.#coolingTouched.clear()
    for (const [key, ends] of this.cooldowns) if ([...ends].some((u) => u !== null && u > this.now)) this.#coolingTouched.add(key)
    this.trace.push(`#${this.stepNo} ${text}`)
    this.count(`command ${text.slice(0, text.indexOf('('))}`)
  }

  note(text: string): void {
    this.trace.push(`    ${text}`)
  }

  /** Throws the violations found so far, with the run's steps. */
  assertClean(view: SystemView): void {
    for (const v of view.violations.splice(0)) this.violate(v)
    if (this.violations.length === 0) return
    throw new ModelViolation(`${this.violations.join('\n')}\n\nsteps of this run:\n${this.trace.join('\n')}`)
  }

  // ---- labels ---------------------------------------------------------------------------------

  slotName(gen: number): string {
    const g = this.gens.get(gen)
    return g === undefined ? `runner#${gen}` : `r${g.slot}(#${gen})`
  }

  runLabel(run: Run): string {
    const job = this.byId.get(run.jobId)
    return `${job?.label ?? `job ${run.jobId.slice(0, 8)}`}.a${run.attempt}@${this.slotName(run.gen)}`
  }

  // ---- runners --------------------------------------------------------------------------------

  started(slot: number, gen: number, kinds: ReadonlySet<KindName>, workers: number): void {
    this.runners[slot] = { slot, state: 'started', gen }
    this.gens.set(gen, { slot, kinds, workers, startedAt: this.now, startedInStep: this.stepNo, stopResolved: false })
  }

  /** Marks a runner stopping: call right before calling its stop(). */
  stopCalled(slot: number): number {
    const r = this.runners[slot]!
    r.state = 'stopping'
    const tick = this.ledger.tick()
    this.gens.get(r.gen)!.stopCalledTick = tick
    return tick
  }

  #syncRunners(view: SystemView): void {
    for (const r of this.runners) {
      if (r.state === 'stopping' && view.stopResolved(r.gen)) {
        r.state = 'stopped'
        this.gens.get(r.gen)!.stopResolved = true
        this.gens.get(r.gen)!.stoppedInStep = this.stepNo
        this.note(`stop() of ${this.slotName(r.gen)} resolved`)
      }
    }
  }

  #live(): Generation[] {
    return this.runners.filter((r) => r.state === 'started' || r.state === 'stopping').map((r) => this.gens.get(r.gen)!)
  }

  #startedGens(): Generation[] {
    return this.runners.filter((r) => r.state === 'started').map((r) => this.gens.get(r.gen)!)
  }

  /**
   * The runners whose chores may have run during this step: started or
   * stopping at some point in it (a stopping runner keeps its maintenance
   * until its handlers have ended).
   */
  #choresDuringStep(): Generation[] {
    return [...this.gens.values()].filter((g) => g.startedInStep <= this.stepNo && (g.stoppedInStep === undefined || g.stoppedInStep >= this.stepNo))
  }

  // ---- command effects ------------------------------------------------------------------------

  /** The live job an enqueue with this kind, scope and key answers with, if any. */
  uniqueHolder(kind: KindName, scope: string | null, key: string | null, except?: ModelJob): ModelJob | undefined {
    if (key === null) return undefined
    return this.jobs.find((j) => j !== except && j.kind === kind && j.scope === scope && j.uniqueKey === key && LIVE.includes(j.state.status))
  }

  /**
   * An enqueue answered `{ id, created }`: checks it against the unique
   * key's holder, and adds the job when it was stored.
   */
  enqueued(
    spec: { kind: KindName; scope: string | null; priority: number; runAt: number | undefined; uniqueKey: string | null; timed: boolean; onAbort: OnAbort },
    holder: ModelJob | undefined,
    answer: { id: string; created: boolean },
  ): ModelJob | undefined {
    if (holder !== undefined) {
      this.count('enqueue answered by a unique key holder')
      if (answer.created || answer.id !== holder.id) {
        this.violate(`unique key: ${holder.label} (${holder.state.status}) holds ${spec.kind}/${spec.scope ?? '-'}/${spec.uniqueKey}, yet the enqueue answered ${JSON.stringify(answer)}`)
      }
      return holder
    }
    if (!answer.created) {
      this.violate(`unique key: no live job holds ${spec.kind}/${spec.scope ?? '-'}/${spec.uniqueKey}, yet the enqueue stored nothing and answered ${answer.id}`)
      return this.byId.get(answer.id)
    }
    if (this.byId.has(answer.id)) {
      this.violate(`enqueue answered created with the id of an existing job ${this.byId.get(answer.id)!.label}`)
      return undefined
    }
    const scheduled = spec.runAt !== undefined && spec.runAt > this.now
    const job: ModelJob = {
      index: this.jobs.length,
      label: `j${this.jobs.length}`,
      id: answer.id,
      kind: spec.kind,
      scope: spec.scope,
      priority: spec.priority,
      seq: this.#seq++,
      uniqueKey: spec.uniqueKey,
      timed: spec.timed,
      onAbort: spec.onAbort,
      createdAt: this.now,
      state: {
        status: scheduled ? 'scheduled' : 'queued',
        attempt: 0,
        maxAttempts: KINDS[spec.kind].maxAttempts,
        runAt: spec.runAt ?? null,
        error: null,
        result: null,
        cancelRequested: false,
        why: 'enqueued',
      },
      queuedSince: scheduled ? undefined : this.ledger.tick(),
    }
    this.jobs.push(job)
    this.byId.set(job.id, job)
    return job
  }

  /** What cancel() must answer for the job now. */
  predictCancel(job: ModelJob): 'cancelled' | 'requested' | 'terminal' {
    const s = job.state.status
    return s === 'queued' || s === 'scheduled' ? 'cancelled' : s === 'running' || s === 'claimed' ? 'requested' : 'terminal'
  }

  /** cancel() answered; `viaGen` is the runner generation it went through (undefined: the web runner). */
  cancelAnswered(job: ModelJob, answer: string, viaGen: number | undefined): void {
    const expected = this.predictCancel(job)
    this.count(`cancel '${answer}'`)
    if (answer !== expected) this.violate(`cancel(${job.label}) answered '${answer}' for a ${job.state.status} job; the contract says '${expected}'`)
    if (answer === 'cancelled') {
      job.state = { ...job.state, status: 'cancelled', why: "cancel() answered 'cancelled'" }
      job.cancelledAt = this.ledger.tick()
      job.queuedSince = undefined
    } else if (answer === 'requested') {
      job.state = { ...job.state, cancelRequested: true, why: `${job.state.why}; cancellation requested` }
      const run = job.state.run
      if (run !== undefined) {
        const r = this.ledger.runs[run]!
        const owner = this.gens.get(r.gen)
        // Through its own runner the request is noticed at once; through another, by that runner's watch as it aborts the
        // signal (the settle waits for that abort), unless the signal had aborted already (a deadline, a stop).
        const noticed = viaGen === r.gen || (owner !== undefined && owner.stopCalledTick === undefined && !r.signal.aborted) ? 'yes' : 'maybe'
        this.#noticed.set(run, noticed)
      }
    }
  }

  /** What retry now must answer for the job now. */
  predictRetry(job: ModelJob): 'queued' | 'not_retryable' | 'unique_key_held' {
    const s = job.state.status
    if (s === 'scheduled') return 'queued'
    if (s === 'failed' || s === 'cancelled') return this.uniqueHolder(job.kind, job.scope, job.uniqueKey, job) !== undefined ? 'unique_key_held' : 'queued'
    return 'not_retryable'
  }

  retryAnswered(job: ModelJob, answer: string): void {
    const expected = this.predictRetry(job)
    this.count(`retry '${answer}'`)
    if (answer !== expected) this.violate(`retry(${job.label}) answered '${answer}' for a ${job.state.status} job; the contract says '${expected}'`)
    if (answer !== 'queued') return
    const s = job.state
    job.state = {
      ...s,
      status: 'queued',
      runAt: this.now,
      maxAttempts: Math.max(s.maxAttempts, s.attempt + 1),
      error: null,
      cancelRequested: false,
      run: undefined,
      owner: undefined,
      orphan: false,
      why: 'retried now',
    }
    job.cancelledAt = undefined
    job.mustBeTerminal = undefined
    job.queuedSince = this.ledger.tick()
  }

  pauseAnswered(kind: KindName, answer: boolean): void {
    const expected = !this.pausedSince.has(kind)
    if (answer !== expected) this.violate(`pause(${kind}) answered ${answer}; it was ${expected ? 'not ' : ''}paused`)
    this.#pauseTouched.add(kind)
    if (!this.pausedSince.has(kind)) this.pausedSince.set(kind, this.ledger.tick())
  }

  /** Call before calling resume(): the kind's jobs may start from then on. */
  resuming(kind: KindName): boolean {
    this.#pauseTouched.add(kind)
    const was = this.pausedSince.has(kind)
    this.pausedSince.delete(kind)
    return was
  }

  resumeAnswered(kind: KindName, expected: boolean, answer: boolean): void {
    if (answer !== expected) this.violate(`resume(${kind}) answered ${answer}; it was ${expected ? '' : 'not '}paused`)
  }

  advanced(ms: number): void {
    this.now += ms
  }

  /**
   * Call before clearCooldown(key): from then on no cooldown of `key`
   * holds. Returns what it must answer: true while one is surely in
   * force, false when none was ever recorded, undefined when either may
   * be right (one that ended may be kept or not).
   */
  clearing(key: string): boolean | undefined {
    const ends = [...(this.cooldowns.get(key) ?? [null])]
    this.#coolingTouched.add(key)
    this.cooldowns.set(key, new Set([null]))
    if (ends.every((u) => u !== null && u > this.now)) return true
    if (ends.every((u) => u === null)) return false
    return undefined
  }

  clearAnswered(key: string, expected: boolean | undefined, answer: boolean): void {
    this.count(`clearCooldown ${answer}`)
    if (expected !== undefined && answer !== expected) {
      this.violate(`clearCooldown(${key}) answered ${answer}; ${expected ? 'a cooldown of it was in force' : 'none was ever recorded'}`)
    }
  }

  /**
   * A race enqueued `job` on runner `gen`, then cancelled it and stopped
   * that runner with no wait between: the cancel's answer says where in
   * the job's life it landed.
   */
  raced(job: ModelJob, gen: number, answer: string): void {
    this.#race = { jobId: job.id, gen }
    this.count(`race cancel '${answer}'`)
    if (answer === 'cancelled') {
      job.state = { ...job.state, status: 'cancelled', why: "cancel() answered 'cancelled' before any claim" }
      job.cancelledAt = this.ledger.tick()
      job.queuedSince = undefined
    } else if (answer === 'requested') {
      // Claimed by then (started or not): it must end cancelled, never go back to the queue.
      job.seeds = [{ ...job.state, status: 'claimed', attempt: 1, cancelRequested: true, owner: gen, why: "cancel() answered 'requested': claimed" }]
      job.queuedSince = undefined
    } else if (answer === 'terminal') {
      job.mustBeTerminal = true
    } else {
      this.violate(`cancel(${job.label}) answered '${answer}'`)
    }
  }

  // ---- invariants checked as each handler starts ----------------------------------------------

  onStart(run: Run): void {
    const label = this.runLabel(run)
    const ledger = this.ledger
    if (ledger.startsOf(run.jobId, run.attempt) > 1) this.violate(`${label}: attempt ${run.attempt} started a second time`)
    const executing = ledger.executing()
    const spec = KINDS[run.kind]
    if (spec.concurrency !== null) {
      const same = executing.filter((r) => r.kind === run.kind)
      if (same.length > spec.concurrency) {
        this.violate(`concurrency: ${same.length} handlers of ${run.kind} executing at once (limit ${spec.concurrency}): ${same.map((r) => this.#runState(r)).join(', ')}`)
      }
    }
    if (spec.scopeConcurrency !== null) {
      const same = executing.filter((r) => r.kind === run.kind && r.scope === run.scope)
      if (same.length > spec.scopeConcurrency) {
        this.violate(
          `scopeConcurrency: ${same.length} handlers of ${run.kind} in scope ${run.scope ?? '(none)'} executing at once (limit ${spec.scopeConcurrency}): ${same.map((r) => this.#runState(r)).join(', ')}`,
        )
      }
    }
    if (this.pausedSince.has(run.kind)) this.violate(`${label} started while ${run.kind} is paused (since tick ${this.pausedSince.get(run.kind)})`)
    // Rate limits: the claims of a bucket surely recorded after (this start - periodMs), this one included, are at most its limit.
    this.#claimedFrom.set(run.index, Math.min(this.#nowAtStepStart, run.at))
    const rate = spec.rate
    if (rate !== null) {
      const within = ledger.runs.filter((r) => r.bucket === run.bucket && KINDS[r.kind].rate !== null && this.#claimedAfter(r, run.at - rate.periodMs))
      if (within.length > rate.limit) {
        this.violate(
          `rate limit: ${within.length} starts in bucket ${run.bucket} within ${rate.periodMs} ms (limit ${rate.limit}): ${within.map((r) => `${this.runLabel(r)} at +${r.at - T0}`).join(', ')}`,
        )
      }
    }
    // Cooldowns: no job of a key starts while a cooldown of it is surely in force (as known when the step began, or cleared since).
    const cooling = [...(this.cooldowns.get(run.bucket) ?? [])]
    if (cooling.length > 0 && cooling.every((u) => u !== null && u > run.at)) {
      this.violate(`cooldown: ${label} started while its key ${run.bucket} cools down until +${Math.min(...(cooling as number[])) - run.at}`)
    }
    const job = this.byId.get(run.jobId)
    if (job?.cancelledAt !== undefined) this.violate(`${label} started after cancel() answered 'cancelled'`)
    else if (job !== undefined && job.state.cancelRequested && job.state.status !== 'claimed') {
      this.violate(`${label} started after cancel() answered 'requested' for attempt ${job.state.attempt}`)
    }
    // A run's signal starts aborted once its runner is stopping (or its cancellation came first: a race).
    const stopCalled = this.gens.get(run.gen)?.stopCalledTick
    const cancelFirst = job === undefined || job.state.cancelRequested || (job.seeds ?? []).some((c) => c.cancelRequested)
    if (run.abortedAtStart && stopCalled !== undefined && stopCalled < run.startTick && !cancelFirst) {
      this.violate(`${label} started after its runner began to stop (its signal was already aborted)`)
    }
    const gen = this.gens.get(run.gen)
    if (gen !== undefined && !gen.kinds.has(run.kind)) this.violate(`${label}: a runner without a handler for ${run.kind} ran it`)
  }

  /** Whether the run's claim surely recorded a time after `t` (see #claimedFrom). */
  #claimedAfter(run: Run, t: number): boolean {
    return (this.#claimedFrom.get(run.index) ?? run.at) > t
  }

  #runState(r: Run): string {
    const job = this.byId.get(r.jobId)
    const lingering = r.timed && performance.now() - r.startReal > TIMEOUT_MS ? ' (past its deadline)' : ''
    return `${this.runLabel(r)}${lingering}`
  }

  // ---- settling -------------------------------------------------------------------------------

  /** How many handlers of a kind (and of a kind and scope) occupy its limit now: the store's running jobs or the executing handlers, whichever is more. */
  #occupancy(snap: Snapshot, executing: readonly Run[]): (kind: KindName, scope: string | null) => boolean {
    const rowsOf = (kind: KindName, scope?: string | null) =>
      this.jobs.filter((j) => j.kind === kind && (scope === undefined || j.scope === scope) && snap.rows.get(j.id)?.status === 'running').length
    const runsOf = (kind: KindName, scope?: string | null) => executing.filter((r) => r.kind === kind && (scope === undefined || r.scope === scope)).length
    return (kind, scope) => {
      const spec = KINDS[kind]
      if (spec.concurrency !== null && Math.max(rowsOf(kind), runsOf(kind)) >= spec.concurrency) return true
      return spec.scopeConcurrency !== null && Math.max(rowsOf(kind, scope), runsOf(kind, scope)) >= spec.scopeConcurrency
    }
  }

  /**
   * Whether the store lets a claim take the job now as far as rate limits
   * and cooldowns go: no cooldown of its bucket in force, and room in the
   * bucket's window, as the store itself reports them (a claim given back
   * unstarted still counts there, unseen by the ledger).
   */
  #withinRate(job: ModelJob, snap: Snapshot): boolean {
    const bucket = bucketOf(job.kind, job.scope)
    if (snap.cooldowns.has(bucket)) return false
    const rate = KINDS[job.kind].rate
    return rate === null || (snap.rateUsed.get(bucket) ?? 0) < rate.limit
  }

  /** The queued time of a job as the unknown-kind check reads it: its enqueue, or its due time. */
  #readyAt(job: ModelJob, row: Row): number {
    return Math.max(job.createdAt, row.runAt ?? 0)
  }

  /** The kinds some live runner (started or stopping: still registered) has handlers for. */
  #served(): Set<KindName> {
    return new Set(this.#live().flatMap((g) => [...g.kinds]))
  }

  /** Whether a started runner (or, with `during`, any whose chores ran this step) has watched for unserved kinds for the grace. */
  #unknownKindSweeper(during = false): boolean {
    return (during ? this.#choresDuringStep() : this.#startedGens()).some((g) => this.now - g.startedAt >= UNKNOWN_KIND_GRACE_MS)
  }

  /**
   * What the contract says must still happen before the step counts as
   * settled; empty once nothing is left. The settle loop wakes the
   * runners until it is, and reports what is left if it never is.
   */
  pending(snap: Snapshot, view: SystemView): string[] {
    this.#syncRunners(view)
    const out: string[] = []
    const realNow = performance.now()
    const executing = view.ledger.executing()
    const full = this.#occupancy(snap, executing)
    const started = this.#startedGens()
    const genOf = new Map([...this.gens].map(([id, g]) => [g, id]))
    // A started runner with an idle worker claims every job it may: its kind, not paused, within the limits.
    for (const g of started) {
      const gen = genOf.get(g)!
      const idle = g.workers - executing.filter((r) => r.gen === gen).length
      if (idle <= 0) continue
      const claimable = this.jobs.find(
        (j) => snap.rows.get(j.id)?.status === 'queued' && g.kinds.has(j.kind) && !this.pausedSince.has(j.kind) && !full(j.kind, j.scope) && this.#withinRate(j, snap),
      )
      if (claimable !== undefined) out.push(`${this.slotName(gen)} has ${idle} idle worker(s) and ${claimable.label} (${claimable.kind}) is claimable`)
    }
    // A started runner's scheduler promotes what is due.
    if (started.length > 0) {
      for (const j of this.jobs) {
        const row = snap.rows.get(j.id)
        if (row?.status === 'scheduled' && row.runAt !== null && row.runAt <= this.now) out.push(`${j.label} is due and still scheduled`)
      }
    }
    for (const run of view.ledger.runs) {
      const row = snap.rows.get(run.jobId)
      const job = this.byId.get(run.jobId)
      const g = this.gens.get(run.gen)
      const runnerStarted = g !== undefined && g.stopCalledTick === undefined
      const current = row?.status === 'running' && row.attempt === run.attempt
      const label = this.runLabel(run)
      if (run.endTick === undefined) {
        if (run.timed && realNow < run.startReal + TIMEOUT_MS + TIMEOUT_GRACE_MS + 15) out.push(`${label} waits for its deadline`)
        else if (run.timed && current && runnerStarted && !limited(run.kind)) out.push(`${label} passed its deadline and its job is not recorded`)
        const requested = job !== undefined && (job.state.cancelRequested || (job.seeds ?? []).some((s) => s.cancelRequested))
        if (requested && current && g !== undefined && !g.stopResolved && !run.signal.aborted) out.push(`${label}: its cancellation was requested and its signal is not aborted`)
      } else if (current && runnerStarted) {
        out.push(`${label} ended and its final write has not landed`)
      } else if (current && g !== undefined && !g.stopResolved && !run.timed && (run.action?.type === 'return' || run.action?.type === 'snooze' || run.action?.type === 'rateLimited')) {
        // A handler that returns, snoozes or is rate limited while its runner stops still has its final write made (only a failure then writes nothing).
        out.push(`${label} ${run.action.type === 'return' ? 'returned' : run.action.type === 'snooze' ? 'snoozed' : 'was rate limited'} while its runner stopped and its final write has not landed`)
      }
    }
    for (const r of this.runners) {
      if (r.state === 'stopping' && !executing.some((x) => x.gen === r.gen)) out.push(`stop() of ${this.slotName(r.gen)} has not resolved, though its handlers have all ended`)
    }
    // The unknown-kind check fails a queued job no live runner handles once it waited past the grace, unless its kind is paused.
    if (this.#unknownKindSweeper()) {
      const served = this.#served()
      for (const j of this.jobs) {
        const row = snap.rows.get(j.id)
        if (row?.status !== 'queued' || served.has(j.kind) || this.pausedSince.has(j.kind)) continue
        if (this.#readyAt(j, row) < this.now - UNKNOWN_KIND_GRACE_MS) out.push(`${j.label}: no live runner handles ${j.kind}, and it waited past the grace without failing unknown_kind`)
      }
    }
    // A job left running by a runner that stopped is failed (or cancelled) by the interrupted sweep of a started runner.
    if (started.length > 0) {
      const stopping = this.runners.some((r) => r.state === 'stopping')
      for (const j of this.jobs) {
        const row = snap.rows.get(j.id)
        if (row?.status !== 'running' || executing.some((r) => r.jobId === j.id && r.attempt === row.attempt)) continue
        const runs = view.ledger.runs.filter((r) => r.jobId === j.id && r.attempt === row.attempt)
        const last = runs[runs.length - 1]
        if (last === undefined) {
          if (!stopping) out.push(`${j.label} is running (attempt ${row.attempt}) and no handler started it`)
        } else if (this.gens.get(last.gen)?.stopResolved) {
          out.push(`${j.label} was left running by ${this.slotName(last.gen)}, which stopped, and no sweep failed it`)
        }
      }
    }
    return out
  }

  /** How long the store must stay unchanged before the step counts as settled. */
  dwellMs(snap: Snapshot): number {
    // A paused kind's job the unknown-kind check would otherwise fail: give that chore (its interval is the grace) time to show it leaves it alone.
    if (this.#unknownKindSweeper()) {
      const served = this.#served()
      const exposed = this.jobs.some((j) => {
        const row = snap.rows.get(j.id)
        return row?.status === 'queued' && !served.has(j.kind) && this.pausedSince.has(j.kind) && this.#readyAt(j, row) < this.now - UNKNOWN_KIND_GRACE_MS
      })
      if (exposed) return 3 * Math.max(UNKNOWN_KIND_GRACE_MS, SWEEP_MS)
    }
    return SETTLE_DWELL_MS
  }

  // ---- absorbing a settled step ---------------------------------------------------------------

  /**
   * Replays the step's handler starts and ends on each job's candidate
   * states, adds the background chores' variants, and requires each
   * stored job to match one candidate; then checks the step's invariants.
   */
  absorb(snap: Snapshot, view: SystemView): void {
    this.#syncRunners(view)
    const ledger = view.ledger
    const events = ledger.events.filter((e) => e.tick > this.#stepStart)
    const before = new Map(this.jobs.map((j) => [j, j.state]))
    const cands = new Map<ModelJob, JobState[]>(this.jobs.map((j) => [j, j.seeds ?? [j.state]]))
    const starts: { run: Run; tick: number }[] = []
    /** Per job, the cooldown each stored-matching candidate recorded (undefined: none). */
    const learned: (JobState['cooldown'] | undefined)[][] = []
    for (const ev of events) {
      const job = this.byId.get(ev.run.jobId)
      if (job === undefined) {
        this.violate(`a handler ran job ${ev.run.jobId}, which no enqueue returned`)
        continue
      }
      const now = cands.get(job)!
      if (ev.type === 'start') {
        starts.push({ run: ev.run, tick: ev.tick })
        const next = now.flatMap((c) => this.#applyStart(job, c, ev.run))
        this.note(`${this.slotName(ev.run.gen)} started ${this.runLabel(ev.run)}`)
        if (next.length === 0) {
          this.violate(`${this.runLabel(ev.run)} started, but the job was ${now.map(describe).join(' | ')}`)
          cands.set(job, [{ ...now[0]!, status: 'running', attempt: ev.run.attempt, run: ev.run.index, owner: ev.run.gen, orphan: false, why: 'started (in violation)' }])
        } else {
          cands.set(job, next)
        }
      } else {
        this.note(`${this.runLabel(ev.run)} ended: ${describeAction(ev.run.action)}`)
        cands.set(job, dedupe(now.flatMap((c) => this.#applyEnd(job, c, ev.run))))
      }
    }
    for (const job of this.jobs) {
      const row = snap.rows.get(job.id)
      const options = dedupe(this.#backgroundVariants(job, cands.get(job)!))
      job.seeds = undefined
      if (row === undefined) {
        this.violate(`${job.label} is missing from the store`)
        continue
      }
      const found = options.filter((c) => matches(c, row))
      const match = found[0]
      if (match === undefined) {
        const was = before.get(job)!
        const terminal = TERMINAL.includes(was.status as Status) ? ' (it was terminal: a terminal job never changes)' : ''
        this.violate(`${job.label} (${job.kind}) is stored as ${describeRow(row, this.now)}; the model allows ${options.map((c) => describe(c, this.now)).join(' | ')}${terminal}`)
        continue
      }
      learned.push(found.map((c) => c.cooldown))
      const { cooldown: _recorded, ...kept } = match
      job.state = { ...kept, runAt: row.runAt }
      if (job.state.status !== 'queued') job.queuedSince = undefined
      else if (before.get(job)!.status !== 'queued' && job.queuedSince === undefined) job.queuedSince = undefined
      const was = before.get(job)!
      if (was.status !== job.state.status) this.count(`${was.status} -> ${job.state.status}${job.state.error !== null && job.state.status === 'failed' ? ` (${job.state.error})` : ''}`)
      if (match.orphan) this.count('left running by a stopping runner')
      if (describe(was, this.now) !== describe(job.state, this.now)) this.note(`${job.label}: ${describe(was, this.now)} -> ${describe(job.state, this.now)}  [${job.state.why}]`)
    }
    this.#learnCooldowns(learned)
    this.#observeCooldowns(snap)
    this.#checkRateUse(snap, ledger)
    for (const ev of events) {
      if (ev.type === 'start') this.count('handler starts')
      else if (ev.run.timed && elapsedOf(ev.run) > TIMEOUT_MS + TIMEOUT_GRACE_MS) this.count(`handler returned past its deadline (${limited(ev.run.kind) ? 'limited' : 'unlimited'} kind)`)
    }
    const lingering = view.ledger.executing().filter((r) => r.timed && elapsedOf(r) === Infinity).length
    if (lingering > 0) this.count('steps with a handler lingering past its deadline')
    this.#checkStep(snap, starts, view)
    // From now on, every queued job is known to be queued since at least this tick.
    const tick = ledger.tick()
    for (const job of this.jobs) if (job.state.status === 'queued') job.queuedSince ??= tick
  }

  /**
   * Adds the cooldowns this step's final writes recorded: surely, where
   * every candidate matching the stored job recorded the same one; maybe,
   * where only some did. A cooldown ends at the later of two ends.
   */
  #learnCooldowns(learned: readonly (JobState['cooldown'] | undefined)[][]): void {
    const later = (ends: Set<number | null>, until: number) => new Set([...ends].map((u) => (u === null ? until : Math.max(u, until))))
    const apply = (cd: { key: string; until: number }, sure: boolean) => {
      const ends = this.cooldowns.get(cd.key) ?? new Set([null])
      this.cooldowns.set(cd.key, sure ? later(ends, cd.until) : new Set([...ends, ...later(ends, cd.until)]))
      this.#coolingTouched.add(cd.key)
      this.count(`cooldown recorded${sure ? '' : ' (maybe)'}`)
      this.note(`cooldown of ${cd.key} until +${cd.until - this.now}${sure ? '' : ' (maybe)'}`)
    }
    for (const cds of learned) {
      const distinct = new Map(cds.map((cd) => [cd === undefined ? '' : `${cd.key}\u0000${cd.until}`, cd]))
      if (distinct.size === 1) {
        const only = [...distinct.values()][0]
        if (only !== undefined) apply(only, true)
      } else {
        for (const cd of distinct.values()) if (cd !== undefined) apply(cd, false)
      }
    }
  }

  /**
   * cooldowns() must show exactly the cooldowns the model allows in force
   * now (each key's possible ends); what it shows then narrows them.
   */
  #observeCooldowns(snap: Snapshot): void {
    const shown = (u: number | null | undefined) => (u === null || u === undefined || u <= this.now ? 'none in force' : `until +${u - this.now}`)
    for (const key of new Set([...this.cooldowns.keys(), ...snap.cooldowns.keys()])) {
      const ends = this.cooldowns.get(key) ?? new Set([null])
      const seen = snap.cooldowns.get(key) ?? null
      const allowed = [...ends].map((u) => (u !== null && u > this.now ? u : null))
      if (!allowed.includes(seen)) {
        this.violate(`cooldowns() shows ${key} ${shown(seen)}; the model allows ${[...new Set(allowed.map(shown))].join(' or ')}`)
        continue
      }
      this.cooldowns.set(key, seen !== null ? new Set([seen]) : new Set([...ends].filter((u) => u === null || u <= this.now)))
    }
  }

  /**
   * rateLimits() reports, for each bucket, the claims in its window now:
   * at least the handler starts of the bucket whose claims surely fall in
   * that window (a claim given back unstarted counts too), and never more
   * than its limit.
   */
  #checkRateUse(snap: Snapshot, ledger: Ledger): void {
    const buckets = new Set([...snap.rateUsed.keys(), ...ledger.runs.filter((r) => KINDS[r.kind].rate !== null).map((r) => r.bucket)])
    for (const bucket of buckets) {
      const rate = rateOfBucket(bucket)
      if (rate === null) {
        this.violate(`rateLimits() reports a bucket ${bucket} that no rate limit has`)
        continue
      }
      const used = snap.rateUsed.get(bucket) ?? 0
      const started = ledger.runs.filter((r) => r.bucket === bucket && KINDS[r.kind].rate !== null && this.#claimedAfter(r, this.now - rate.periodMs)).length
      if (used < started) this.violate(`rateLimits(): bucket ${bucket} has used ${used} in its window, yet ${started} of its handlers started in it`)
      if (used > rate.limit) this.violate(`rateLimits(): bucket ${bucket} has used ${used} in its window, over its limit ${rate.limit}`)
      if (started > 0) this.count('steps with a rate bucket in use')
      if (used >= rate.limit) this.count('steps with a rate bucket full')
    }
  }

  #applyStart(job: ModelJob, c: JobState, run: Run): JobState[] {
    const fresh = (c.status === 'queued' || (c.status === 'scheduled' && isDue(c.runAt, this.now))) && !c.cancelRequested && run.attempt === c.attempt + 1
    const claimed = c.status === 'claimed' && run.attempt === c.attempt
    if (!fresh && !claimed) return []
    const running: JobState = { ...c, status: 'running', attempt: run.attempt, run: run.index, owner: run.gen, orphan: false, why: `started by ${this.slotName(run.gen)}` }
    // A timed handler of a kind without a limit is recorded as timed out at its deadline (or its grace), whether or not it
    // returns, unless it ended before; one of a limited kind stays running until it returns (see #applyEnd).
    if (!run.timed || limited(job.kind)) return [running]
    const elapsed = elapsedOf(run)
    const out: JobState[] = []
    if (elapsed > TIMEOUT_MS - 3) out.push(...this.#record(job, running, run, { type: 'fail', code: CODE_TIMEOUT }, run.abortedTick ?? run.endTick ?? Infinity))
    if (elapsed < TIMEOUT_MS + 3) out.push(running)
    return out
  }

  #applyEnd(job: ModelJob, c: JobState, run: Run): JobState[] {
    // A handler returning after its job was recorded (past its deadline) changes nothing.
    if (c.status !== 'running' || c.run !== run.index) return [c]
    const action = run.action ?? { type: 'throw' }
    const outcomes: Outcome[] = []
    // What the handler did counts unless it ended past its deadline (then it is a timeout, whatever it did).
    if (!run.timed || elapsedOf(run) < TIMEOUT_MS + 3) {
      outcomes.push(
        action.type === 'return' ? { type: 'return' } : action.type === 'snooze' || action.type === 'rateLimited' ? action : { type: 'fail', code: action.type === 'fail' ? action.code : CODE_INTERNAL },
      )
    }
    if (run.timed && limited(job.kind) && elapsedOf(run) > TIMEOUT_MS - 3) outcomes.push({ type: 'fail', code: CODE_TIMEOUT })
    return outcomes.flatMap((o) => this.#record(job, c, run, o, run.endTick!))
  }

  /** Whether the run's runner was stopping when it recorded at `tick`. */
  #stopping(run: Run, tick: number): 'yes' | 'no' | 'maybe' {
    if (this.#race !== undefined && this.#race.jobId === run.jobId) return 'maybe'
    const called = this.gens.get(run.gen)?.stopCalledTick
    return called !== undefined && called < tick ? 'yes' : 'no'
  }

  /**
   * The states a handler's end (or its deadline) leaves its job in, as the
   * runner records it: a noticed cancellation first, then a result, a
   * snooze, a failure while stopping (not recorded), a retry, a failure.
   * The store turns any of these into `cancelled` once its cancellation
   * was requested.
   */
  #record(job: ModelJob, c: JobState, run: Run, outcome: Outcome, tick: number): JobState[] {
    const stopping = this.#stopping(run, tick)
    const noticed = !c.cancelRequested ? 'no' : this.#race?.jobId === job.id ? 'maybe' : (this.#noticed.get(run.index) ?? 'maybe')
    const base: JobState = { ...c, run: undefined, owner: undefined, orphan: false }
    const result = outcome.type === 'return' ? run.attempt : c.result
    // A rate-limited end records its cooldown with whatever the write makes of the job (a cancellation keeps the provider's reset).
    const cooldown = outcome.type === 'rateLimited' ? { key: outcome.key ?? bucketOf(job.kind, job.scope), until: this.now + outcome.ms } : undefined
    const cancelled = (why: string): JobState => ({ ...base, status: 'cancelled', error: null, result, why, ...(cooldown !== undefined ? { cooldown } : {}) })
    const out: JobState[] = []
    if (noticed !== 'no') out.push(cancelled('its runner noticed the cancellation and recorded it'))
    if (noticed === 'yes') return out
    const cancel = c.cancelRequested ? cancelled('the final write found the cancellation request') : undefined
    if (outcome.type === 'return') {
      out.push(cancel ?? { ...base, status: 'succeeded', error: null, result, why: `attempt ${run.attempt} returned` })
    } else if (outcome.type === 'snooze') {
      out.push(
        cancel ?? { ...base, status: outcome.ms > 0 ? 'scheduled' : 'queued', runAt: this.now + outcome.ms, maxAttempts: c.maxAttempts + 1, why: `snoozed ${outcome.ms} ms` },
      )
    } else if (outcome.type === 'rateLimited') {
      const until = this.now + outcome.ms
      out.push(cancel ?? { ...base, status: outcome.ms > 0 ? 'scheduled' : 'queued', runAt: until, maxAttempts: c.maxAttempts + 1, cooldown, why: `rate limited ${outcome.ms} ms` })
    } else {
      if (stopping !== 'no') out.push({ ...c, run: undefined, orphan: true, why: `${outcome.code} while its runner stopped: not recorded` })
      if (stopping !== 'yes') {
        const spec = KINDS[job.kind]
        if (spec.retried.includes(outcome.code) && c.attempt < c.maxAttempts) {
          out.push(cancel ?? { ...base, status: 'scheduled', runAt: { min: this.now + BACKOFF_MS / 2, max: this.now + BACKOFF_MS }, why: `${outcome.code}: retried` })
        } else {
          out.push(cancel ?? { ...base, status: 'failed', error: outcome.code, why: `failed ${outcome.code}` })
        }
      }
    }
    return out
  }

  /** What the runners' chores may have done to a job during the step, besides its own events. */
  #backgroundVariants(job: ModelJob, cs: JobState[]): JobState[] {
    const out = [...cs]
    const live = this.#choresDuringStep().length > 0
    // Promotion by a live runner's scheduler.
    for (const c of cs) if (c.status === 'scheduled' && live && isDue(c.runAt, this.now)) out.push({ ...c, status: 'queued', why: 'promoted when due' })
    // The unknown-kind check (the contract: never for a paused kind).
    const unserved = !this.#served().has(job.kind) || !this.#servedAtStepStart.has(job.kind)
    if (this.#unknownKindSweeper(true) && unserved && !this.pausedSince.has(job.kind)) {
      for (const c of [...out]) {
        if (c.status !== 'queued') continue
        const readyAt = Math.max(job.createdAt, typeof c.runAt === 'number' ? c.runAt : 0)
        if (readyAt < this.now - UNKNOWN_KIND_GRACE_MS) out.push({ ...c, status: 'failed', error: CODE_UNKNOWN_KIND, why: 'no live runner handles its kind' })
      }
    }
    // The interrupted sweep of a live runner, for a job whose runner stopped leaving it running.
    const sweeper = live
    for (const c of [...out]) {
      const held = (c.status === 'running' && c.orphan) || c.status === 'claimed'
      if (!held || c.owner === undefined || !this.gens.get(c.owner)?.stopResolved || !sweeper) continue
      out.push({
        ...c,
        status: c.cancelRequested ? 'cancelled' : 'failed',
        error: c.cancelRequested ? null : CODE_INTERRUPTED,
        run: undefined,
        owner: undefined,
        orphan: false,
        why: 'left running by a stopped runner: swept',
      })
    }
    // A claim no handler started, given back by its stopping runner: queued again, or, if its cancellation was requested, cancelled.
    for (const c of [...out]) {
      if (c.status !== 'claimed' || c.owner === undefined || this.gens.get(c.owner)?.stopCalledTick === undefined) continue
      if (c.cancelRequested) {
        for (const attempt of [c.attempt, c.attempt - 1]) out.push({ ...c, status: 'cancelled', attempt, owner: undefined, error: null, why: 'claimed, cancelled, given back at stop' })
      } else {
        out.push({ ...c, status: 'queued', attempt: c.attempt - 1, owner: undefined, why: 'claimed, given back at stop' })
      }
    }
    return out
  }

  /** The invariants of a settled step that the per-job replay does not cover. */
  #checkStep(snap: Snapshot, starts: readonly { run: Run; tick: number }[], view: SystemView): void {
    // Each live runner's own count of its workers: busy is every handler executing on it (one past its deadline
    // included: it keeps its worker), idle the rest while it is started, none once it stops.
    for (const r of this.runners) {
      if (r.state !== 'started' && r.state !== 'stopping') continue
      const counts = view.workerCounts(r.gen)
      const g = this.gens.get(r.gen)
      if (counts === undefined || g === undefined) continue
      const busy = view.ledger.executing().filter((x) => x.gen === r.gen).length
      const idle = r.state === 'started' ? Math.max(0, g.workers - busy) : 0
      if (counts.busy !== busy || counts.idle !== idle) {
        this.violate(`workerCounts() of ${this.slotName(r.gen)} says ${counts.busy} busy and ${counts.idle} idle; ${busy} of its handlers execute, so ${busy} busy and ${idle} idle`)
      }
    }
    // Unique keys: at most one live job per kind, scope and key.
    const holders = new Map<string, ModelJob[]>()
    for (const j of this.jobs) {
      const row = snap.rows.get(j.id)
      if (j.uniqueKey === null || row === undefined || !LIVE.includes(row.status)) continue
      const key = `${j.kind}/${j.scope ?? '-'}/${j.uniqueKey}`
      holders.set(key, [...(holders.get(key) ?? []), j])
    }
    for (const [key, js] of holders) if (js.length > 1) this.violate(`unique key ${key} held by ${js.length} live jobs at once: ${js.map((j) => j.label).join(', ')}`)
    for (const j of this.jobs) {
      if (j.mustBeTerminal && !TERMINAL.includes(j.state.status as Status)) this.violate(`cancel(${j.label}) answered 'terminal', yet the job is ${j.state.status}`)
      j.mustBeTerminal = undefined
    }
    this.#checkOrder(snap, starts)
  }

  /**
   * Among what a claim could take, priority then insertion order: a
   * runner that started J must not have left behind a job Y it could have
   * claimed that ranks before J. Only Y known queued before J started,
   * still queued after the step and never started in it, of a kind the
   * runner handles and whose pause did not change, and with room under
   * its limits counting every handler that may have held it then.
   */
  #checkOrder(snap: Snapshot, starts: readonly { run: Run; tick: number }[]): void {
    if (this.#race !== undefined) return
    const ledger = this.ledger
    const startedInStep = new Set(starts.map((s) => s.run.jobId))
    const heldAtStepStart = this.jobs.filter((j) => j.state.status === 'claimed' || (j.state.status === 'running' && j.state.orphan))
    for (const { run, tick } of starts) {
      const J = this.byId.get(run.jobId)
      const g = this.gens.get(run.gen)
      if (J === undefined || g === undefined) continue
      let competitors = 0
      for (const Y of this.jobs) {
        if (Y === J || Y.queuedSince === undefined || Y.queuedSince >= tick) continue
        if (snap.rows.get(Y.id)?.status !== 'queued' || startedInStep.has(Y.id)) continue
        if (!g.kinds.has(Y.kind) || this.pausedSince.has(Y.kind) || this.#pauseTouched.has(Y.kind)) continue
        // A fair kind's jobs of one priority are taken in turn across scopes, not by insertion order.
        if (Y.priority === J.priority && (KINDS[Y.kind].fair || KINDS[J.kind].fair)) {
          this.count('order: a fair kind at equal priority (turns, not insertion order)')
          continue
        }
        if (!(Y.priority > J.priority || (Y.priority === J.priority && Y.seq < J.seq))) {
          competitors++
          continue
        }
        this.count('order: a queued job ranked before one started')
        // Everything that may have occupied Y's limits when J was claimed: handlers executing then or ended during the step, handlers started later in the step (the same claim), jobs held without a handler.
        const occupying = ledger.runs.filter(
          (r) => r !== run && r.kind === Y.kind && ((r.startTick <= tick && (r.endTick === undefined || r.endTick > this.#stepStart)) || r.startTick > tick),
        )
        const held = heldAtStepStart.filter((h) => h.kind === Y.kind)
        const spec = KINDS[Y.kind]
        const blocked =
          (spec.concurrency !== null && occupying.length + held.length >= spec.concurrency) ||
          (spec.scopeConcurrency !== null && occupying.filter((r) => r.scope === Y.scope).length + held.filter((h) => h.scope === Y.scope).length >= spec.scopeConcurrency)
        if (blocked) {
          this.count('order: ... but its limit may have been full')
          continue
        }
        // Its bucket's cooldown, or its rate limit: the store's use at the step's end bounds the use at J's claim (the clock stood still).
        const bucket = bucketOf(Y.kind, Y.scope)
        if (this.#coolingTouched.has(bucket) || snap.cooldowns.has(bucket)) {
          this.count('order: ... but a cooldown may have held it')
          continue
        }
        if (spec.rate !== null && (snap.rateUsed.get(bucket) ?? 0) >= spec.rate.limit) {
          this.count('order: ... but its rate bucket may have been full')
          continue
        }
        this.count('order violations')
        this.violate(
          `order: ${this.slotName(run.gen)} started ${J.label} (${J.kind}, priority ${J.priority}, inserted #${J.seq}) while ${Y.label} (${Y.kind}, priority ${Y.priority}, inserted #${Y.seq}) was queued, claimable by it, and ranks first`,
        )
      }
      if (competitors > 0) this.count('order: starts that left lower-ranked jobs of the runner queued')
    }
  }
}

type Outcome = { type: 'return' } | { type: 'snooze'; ms: number } | { type: 'rateLimited'; ms: number; key?: string } | { type: 'fail'; code: string }

/** How long a handler ran (real time), Infinity while it runs. */
function elapsedOf(run: Run): number {
  return run.endReal === undefined ? Infinity : run.endReal - run.startReal
}

function isDue(runAt: RunAt, now: number): boolean {
  if (runAt === null) return true
  if (typeof runAt === 'number') return runAt <= now
  return runAt.min <= now
}

function matches(c: JobState, row: Row): boolean {
  const status = c.status === 'claimed' ? 'running' : c.status
  if (row.status !== status || row.attempt !== c.attempt || row.maxAttempts !== c.maxAttempts || row.error !== c.error || row.result !== c.result) return false
  if (c.runAt === null || typeof c.runAt === 'number') return row.runAt === c.runAt
  return row.runAt !== null && row.runAt >= c.runAt.min && row.runAt <= c.runAt.max
}

/** The distinct candidates, each with every way it came about. */
function dedupe(cs: JobState[]): JobState[] {
  const seen = new Map<string, JobState>()
  for (const c of cs) {
    const key = JSON.stringify({ ...c, why: undefined })
    const first = seen.get(key)
    if (first === undefined) seen.set(key, c)
    else if (!first.why.split(' or ').includes(c.why)) seen.set(key, { ...first, why: `${first.why} or ${c.why}` })
  }
  return [...seen.values()]
}

function relative(runAt: RunAt, now: number): string {
  if (runAt === null) return ''
  if (typeof runAt === 'number') return ` runAt ${runAt - now >= 0 ? '+' : ''}${runAt - now}`
  return ` runAt +${runAt.min - now}..+${runAt.max - now}`
}

/** A candidate state in a few words: `running a1 (cancel requested)`. */
export function describe(c: JobState, now = T0): string {
  const status = c.status === 'running' && c.orphan ? 'running (no handler)' : c.status
  const extras = [
    c.error !== null ? `error ${c.error}` : '',
    c.result !== null ? `result a${c.result}` : '',
    c.cancelRequested && LIVE.includes(c.status) ? 'cancel requested' : '',
  ].filter((s) => s !== '')
  return `${status} a${c.attempt}/${c.maxAttempts}${relative(c.runAt, now)}${extras.length > 0 ? ` (${extras.join(', ')})` : ''}`
}

export function describeRow(row: Row, now = T0): string {
  return describe({ ...row, cancelRequested: false, why: '' }, now)
}

export function describeAction(action: HandlerAction | undefined): string {
  if (action === undefined) return '?'
  if (action.type === 'fail') return `fail(${action.code})`
  if (action.type === 'snooze') return `snooze(${action.ms})`
  if (action.type === 'rateLimited') return `rateLimited(${action.ms}${action.key !== undefined ? `, { key: '${action.key}' }` : ''})`
  return action.type
}
