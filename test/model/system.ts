import { defineKind, Runner, type Driver, type JobContext, type Kind, type Logger } from 'jobtable'
import { z } from 'zod'
import type { Backend, Store } from '../support/backends.js'
import { retryTransient } from '../support/wait.js'
import {
  BACKOFF_MS,
  bucketOf,
  KIND_NAMES,
  KINDS,
  POLL_MS,
  STOP_TIMEOUT_MS,
  SWEEP_MS,
  T0,
  TIMEOUT_GRACE_MS,
  UNKNOWN_KIND_GRACE_MS,
  type HandlerAction,
  type KindName,
  type KindSpec,
  type OnAbort,
  type Row,
  type Snapshot,
  type Status,
} from './model.js'

/**
 * The real side of the model-based tests: runners on one isolated store
 * (two slots, each holding at most one runner at a time, and a "web"
 * runner that never starts), a clock the commands move, and handlers the
 * test controls. Every handler records its start and end in the Ledger
 * and then waits for the test to say how it ends (`Run.release`), or for
 * its signal, as its job's `onAbort` says.
 */

/** Each job's payload carries what its handler must know before the enqueue that stored it has even returned. */
export const modelPayload = z.strictObject({
  n: z.number().int(),
  onAbort: z.enum(['return', 'throw', 'ignore']),
  scope: z.string().nullable(),
  timed: z.boolean(),
})
export type ModelPayload = z.infer<typeof modelPayload>

function definition(spec: KindSpec) {
  return defineKind(spec.name, {
    payload: modelPayload,
    result: (r: { attempt: number }) => r,
    failures: ['provider_unavailable', 'bad_input'],
    ...(spec.concurrency !== null ? { concurrency: spec.concurrency } : {}),
    ...(spec.scopeConcurrency !== null ? { scopeConcurrency: spec.scopeConcurrency } : {}),
    ...(spec.rate !== null ? { rateLimit: { limit: spec.rate.limit, periodMs: spec.rate.periodMs, key: spec.rate.bucket ?? 'scope' } } : {}),
    ...(spec.fair ? { fairness: 'scope' as const } : {}),
    ...(spec.maxAttempts > 1
      ? { retry: { maxAttempts: spec.maxAttempts, codes: spec.retried as ('provider_unavailable' | 'timeout')[], backoff: { baseMs: BACKOFF_MS, maxMs: BACKOFF_MS } } }
      : {}),
  })
}

const DEFINITIONS = Object.fromEntries(KIND_NAMES.map((name) => [name, definition(KINDS[name])])) as Record<KindName, ReturnType<typeof definition>>

/** One handler invocation: an attempt of a job on a runner. */
export interface Run {
  readonly index: number
  readonly jobId: string
  readonly attempt: number
  readonly slot: number
  /** The runner's generation: a slot's runner stopped and started again is another runner. */
  readonly gen: number
  readonly kind: KindName
  readonly scope: string | null
  /** Its job's rate bucket and default cooldown key (bucketOf). */
  readonly bucket: string
  /** The runners' clock at its start: the time its claim used (the clock stands still within a step). */
  readonly at: number
  readonly timed: boolean
  readonly onAbort: OnAbort
  readonly signal: AbortSignal
  /** Its signal was already aborted when the handler first read it: its runner was stopping. */
  readonly abortedAtStart: boolean
  readonly startTick: number
  readonly startReal: number
  abortedTick: number | undefined
  /** What the handler did (set as it ends). */
  action: HandlerAction | undefined
  endTick: number | undefined
  endReal: number | undefined
  /** Ends the handler with `action`, unless its signal already made it end. */
  release(action: HandlerAction): void
}

export interface LedgerEvent {
  readonly tick: number
  readonly type: 'start' | 'end'
  readonly run: Run
}

/**
 * Every handler start and end, in the order they happened, on one tick
 * counter that the commands share (so "after this cancel answered" is a
 * comparison of ticks). `onStart` lets the model check its invariants
 * synchronously, as each handler starts.
 */
export class Ledger {
  #tick = 0
  readonly runs: Run[] = []
  readonly events: LedgerEvent[] = []
  readonly #starts = new Map<string, number>()
  onStart: ((run: Run) => void) | undefined

  tick(): number {
    return ++this.#tick
  }

  /** How many times the attempt `attempt` of the job `jobId` has started. */
  startsOf(jobId: string, attempt: number): number {
    return this.#starts.get(`${jobId}#${attempt}`) ?? 0
  }

  /** The handlers executing now: started, not yet returned (lingering past a deadline included). */
  executing(): Run[] {
    return this.runs.filter((r) => r.endTick === undefined)
  }

  begin(fields: Omit<Run, 'index' | 'startTick' | 'startReal' | 'abortedTick' | 'action' | 'endTick' | 'endReal' | 'release' | 'abortedAtStart'>): Run & { readonly action$: Promise<HandlerAction> } {
    let resolve!: (action: HandlerAction) => void
    const action$ = new Promise<HandlerAction>((r) => (resolve = r))
    let settled = false
    const run: Run & { action$: Promise<HandlerAction> } = {
      ...fields,
      index: this.runs.length,
      abortedAtStart: fields.signal.aborted,
      startTick: this.tick(),
      startReal: performance.now(),
      abortedTick: undefined,
      action: undefined,
      endTick: undefined,
      endReal: undefined,
      action$,
      release: (action) => {
        if (settled) return
        settled = true
        resolve(action)
      },
    }
    const key = `${run.jobId}#${run.attempt}`
    this.#starts.set(key, (this.#starts.get(key) ?? 0) + 1)
    this.runs.push(run)
    this.events.push({ tick: run.startTick, type: 'start', run })
    const onAbort = () => {
      run.abortedTick ??= this.tick()
      if (run.onAbort === 'return') run.release({ type: 'return' })
      if (run.onAbort === 'throw') run.release({ type: 'throw' })
    }
    if (fields.signal.aborted) onAbort()
    else fields.signal.addEventListener('abort', onAbort, { once: true })
    this.onStart?.(run)
    return run
  }

  end(run: Run, action: HandlerAction): void {
    run.action = action
    run.endTick = this.tick()
    run.endReal = performance.now()
    this.events.push({ tick: run.endTick, type: 'end', run })
  }
}

interface Slot {
  runner: Runner | undefined
  gen: number
  handles: Record<KindName, Kind<ModelPayload>> | undefined
  stopping: Promise<void> | undefined
  stopResolved: boolean
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} }

/** What the model reads of the real system besides the store. */
export interface SystemView {
  readonly ledger: Ledger
  /** Whether stop() of the runner of generation `gen` has resolved. */
  stopResolved(gen: number): boolean
  /** Invariant violations seen by the system itself (a stop that resolved with a handler still executing). */
  readonly violations: string[]
  /** What the runner of generation `gen` says of its workers, while it is the slot's runner; undefined once replaced. */
  workerCounts(gen: number): { readonly busy: number; readonly idle: number } | undefined
}

export interface SystemOptions {
  /** Wraps every driver the runners use: a deliberately broken driver proves an invariant catches the bug (mutations.test.ts). */
  readonly mutate?: (driver: Driver) => Driver
  /**
   * The drivers' poll interval (default POLL_MS): how soon a runner finds
   * another process's writes, a cancellation requested elsewhere among
   * them. Long, a cancellation through another runner reaches a handler
   * only by a notification (PostgreSQL's, unless its backend is made with
   * `listen: false`).
   */
  readonly pollIntervalMs?: number
}

export class System implements SystemView {
  readonly clock = { now: T0 }
  readonly ledger = new Ledger()
  readonly slots: Slot[] = [emptySlot(), emptySlot()]
  readonly violations: string[] = []
  readonly #store: Store
  readonly #options: SystemOptions
  readonly #resolvedGens = new Set<number>()
  readonly #runners: Runner[] = []
  #nextGen = 1
  web!: Runner
  webKinds!: Record<KindName, Kind<ModelPayload>>

  private constructor(store: Store, options: SystemOptions) {
    this.#store = store
    this.#options = options
  }

  static async create(backend: Backend, options: SystemOptions = {}): Promise<System> {
    const system = new System(await backend.store(), options)
    // The web process: registers every kind without a handler and never starts.
    system.web = system.#runner()
    system.webKinds = registerAll(system.web, new Set())
    await system.web.driver.migrate?.()
    return system
  }

  #driver(): Driver {
    const driver = this.#store.driver({ sweepIntervalMs: SWEEP_MS, pollIntervalMs: this.#options.pollIntervalMs ?? POLL_MS })
    return this.#options.mutate ? this.#options.mutate(driver) : driver
  }

  #runner(workers = 1): Runner {
    const runner = new Runner({
      driver: this.#driver(),
      workers,
      logger: silent,
      clock: () => this.clock.now,
      stopTimeoutMs: STOP_TIMEOUT_MS,
      unknownKindGraceMs: UNKNOWN_KIND_GRACE_MS,
      timeoutGraceMs: TIMEOUT_GRACE_MS,
      retention: false,
    })
    this.#runners.push(runner)
    return runner
  }

  stopResolved(gen: number): boolean {
    return this.#resolvedGens.has(gen)
  }

  workerCounts(gen: number): { readonly busy: number; readonly idle: number } | undefined {
    const slot = this.slots.find((s) => s.gen === gen)
    // Optional: a runner from before workerCounts() existed (replaying an older tree) has none.
    return slot?.runner?.workerCounts?.()
  }

  /** Makes a new runner in `slot` with handlers for `kinds`, not yet started; returns its generation. */
  prepareSlot(slot: number, kinds: ReadonlySet<KindName>, workers: number): number {
    const s = this.slots[slot]!
    if (s.runner !== undefined && !s.stopResolved) throw new Error(`slot ${slot} still has a live runner`)
    const gen = this.#nextGen++
    const runner = this.#runner(workers)
    const handles = registerAll(runner, kinds, (kind) => this.#handler(slot, gen, kind))
    Object.assign(s, { runner, gen, handles, stopping: undefined, stopResolved: false })
    return gen
  }

  /** Starts the runner prepareSlot made. */
  async startSlot(slot: number): Promise<void> {
    await this.slots[slot]!.runner!.start()
  }

  /** Calls stop() on the slot's runner without waiting for it: the model waits for it (it resolves once its handlers end). */
  stopSlot(slot: number): void {
    const s = this.slots[slot]!
    const runner = s.runner
    if (runner === undefined || s.stopping !== undefined) throw new Error(`slot ${slot} has no started runner`)
    const gen = s.gen
    s.stopping = runner.stop().then(async () => {
      // The contract: stop() resolves once every handler has ended (its timeout is far away here).
      const still = this.ledger.executing().filter((r) => r.gen === gen)
      if (still.length > 0) {
        this.violations.push(
          `stop() of r${slot} resolved while ${still.length} of its handlers still executed (${still.map((r) => `job ${r.jobId.slice(0, 8)} attempt ${r.attempt}`).join(', ')})`,
        )
      }
      this.#resolvedGens.add(gen)
      if (this.slots[slot]!.gen === gen) this.slots[slot]!.stopResolved = true
      // Its driver stays open until dispose(): a cancel racing the stop may still go through it.
    })
  }

  /** The runner a command goes through: `web`, or a slot's runner while it is live. */
  route(via: 'web' | 'r0' | 'r1'): { runner: Runner; kinds: Record<KindName, Kind<ModelPayload>> } {
    if (via === 'web') return { runner: this.web, kinds: this.webKinds }
    const s = this.slots[via === 'r0' ? 0 : 1]!
    if (s.runner === undefined || s.handles === undefined || s.stopResolved) throw new Error(`${via} is not live`)
    return { runner: s.runner, kinds: s.handles }
  }

  /** Wakes every live runner, as their poll would, and waits for their schedulers' passes. */
  async wakeAll(): Promise<void> {
    await Promise.all(this.slots.filter((s) => s.runner !== undefined && s.stopping === undefined).map((s) => s.runner!.wake()))
  }

  async snapshot(): Promise<Snapshot> {
    const jobs = []
    for (let cursor: string | undefined, more = true; more; ) {
      const page = await retryTransient(() => this.web.list({ limit: 1000, ...(cursor !== undefined ? { cursor } : {}) }))
      jobs.push(...page.jobs)
      more = page.nextCursor !== null
      cursor = page.nextCursor ?? undefined
    }
    const rows = new Map<string, Row>()
    for (const job of jobs) {
      const result = job.result as { attempt?: unknown } | null
      rows.set(job.id, {
        status: job.status as Status,
        attempt: job.attempt,
        maxAttempts: job.maxAttempts,
        runAt: job.runAt === null ? null : Number(job.runAt),
        error: job.error,
        result: result !== null && typeof result === 'object' && typeof result.attempt === 'number' ? result.attempt : null,
      })
    }
    const cooldowns = new Map((await retryTransient(() => this.web.cooldowns())).map((c) => [c.key, c.until]))
    // Per-scope buckets one by one (`<kind>@<scope>`, unscoped jobs `<kind>@`), as claims count them.
    const rateUsed = new Map<string, number>()
    for (const limit of await retryTransient(() => this.web.rateLimits())) {
      if (!limit.perScope) rateUsed.set(limit.key, limit.used)
      else for (const s of limit.scopes ?? []) rateUsed.set(`${limit.key.slice(0, -1)}${s.scope}`, s.used)
    }
    const aborted = this.ledger.runs.filter((r) => r.abortedTick !== undefined).length
    const key = JSON.stringify([
      [...rows].sort(([a], [b]) => (a < b ? -1 : 1)),
      [...cooldowns].sort(),
      [...rateUsed].sort(),
      this.ledger.events.length,
      aborted,
      this.slots.map((s) => [s.gen, s.stopResolved]),
    ])
    return { rows, cooldowns, rateUsed, key }
  }

  #handler(slot: number, gen: number, kind: KindName) {
    return async (p: ModelPayload, job: JobContext<{ attempt: number }, 'provider_unavailable' | 'bad_input'>) => {
      const run = this.ledger.begin({
        jobId: job.id,
        attempt: job.attempt,
        slot,
        gen,
        kind,
        scope: p.scope,
        bucket: bucketOf(kind, p.scope),
        at: this.clock.now,
        timed: p.timed,
        onAbort: p.onAbort,
        signal: job.signal,
      })
      let action: HandlerAction = { type: 'throw' }
      try {
        action = await run.action$
        switch (action.type) {
          case 'return':
            return { attempt: job.attempt }
          case 'fail':
            return job.fail(action.code)
          case 'snooze':
            return job.snooze(action.ms)
          case 'rateLimited':
            return job.rateLimited(action.ms, action.key !== undefined ? { key: action.key } : undefined)
          case 'throw':
            throw new Error('model handler: thrown')
        }
      } finally {
        this.ledger.end(run, action)
      }
    }
  }

  /** Ends every handler still held, stops and closes every runner, and drops the store. Never throws. */
  async dispose(): Promise<void> {
    for (const run of this.ledger.executing()) run.release({ type: 'throw' })
    for (const runner of this.#runners) await runner.stop({ timeoutMs: 2_000 }).catch(() => undefined)
    for (const runner of this.#runners) await runner.close().catch(() => undefined)
    await this.#store.drop().catch(() => undefined)
  }
}

function emptySlot(): Slot {
  return { runner: undefined, gen: 0, handles: undefined, stopping: undefined, stopResolved: true }
}

function registerAll(
  runner: Runner,
  handled: ReadonlySet<KindName>,
  handler?: (kind: KindName) => (p: ModelPayload, job: JobContext<{ attempt: number }, 'provider_unavailable' | 'bad_input'>) => Promise<{ attempt: number }>,
): Record<KindName, Kind<ModelPayload>> {
  const handles = {} as Record<KindName, Kind<ModelPayload>>
  for (const name of KIND_NAMES) {
    handles[name] = handled.has(name) && handler !== undefined ? runner.register(DEFINITIONS[name], handler(name)) : runner.register(DEFINITIONS[name])
  }
  return handles
}
