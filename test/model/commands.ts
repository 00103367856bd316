import fc from 'fast-check'
import { retryTransient } from '../support/wait.js'
import {
  describeAction,
  type Status,
  KIND_NAMES,
  KINDS,
  TIMEOUT_MS,
  type DeclaredCode,
  type HandlerAction,
  type KindName,
  type Model,
  type OnAbort,
  type Snapshot,
} from './model.js'
import type { System } from './system.js'

/**
 * The operations of the model-based tests, one class each, and their
 * arbitraries. Each command acts on the real system, checks the answer
 * against the model's prediction and applies its effect (`act`); the
 * shared `run` then settles the step and absorbs it into the model. A
 * command's toString is the call that makes it (`enqueue({ kind:
 * 'capped', timed: true })`), so a counterexample pastes into
 * regressions.test.ts as it is printed.
 */

export type Via = 'web' | 'r0' | 'r1'

/** Runs `act`, then waits until the runners are quiescent and the model has absorbed what happened; throws on a violation. */
export abstract class Step implements fc.AsyncCommand<Model, System> {
  abstract check(m: Readonly<Model>): boolean
  protected abstract act(m: Model, s: System): Promise<void>
  abstract toString(): string

  async run(m: Model, s: System): Promise<void> {
    m.beginStep(this.toString())
    try {
      await this.act(m, s)
    } catch (err) {
      m.violate(`${this.toString()} threw: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`)
    }
    m.assertClean(s)
    const snap = await settle(m, s)
    m.absorb(snap, s)
    m.assertClean(s)
  }
}

/**
 * Wakes the runners (as their poll would) until nothing the contract says
 * must happen is left and the store, the ledger and the runners have not
 * changed for the model's dwell; bounded by the model's settleLimitMs
 * (SETTLE_LIMIT_MS), past which what is still pending is a violation.
 * Real time only bounds the wait (and lets real deadlines pass): no
 * assertion depends on how long anything took.
 */
export async function settle(m: Model, s: System): Promise<Snapshot> {
  const began = performance.now()
  let lastKey = ''
  let since = began
  for (let i = 0; ; i++) {
    await s.wakeAll()
    await new Promise((resolve) => setTimeout(resolve, i < 2 ? 1 : 4))
    const snap = await s.snapshot()
    if (m.failed(s)) return snap
    const pending = m.pending(snap, s)
    const now = performance.now()
    if (snap.key !== lastKey) {
      lastKey = snap.key
      since = now
    } else if (pending.length === 0 && now - since >= m.dwellMs(snap)) {
      return snap
    }
    if (now - began > m.settleLimitMs) {
      m.violate(`the step did not settle within ${m.settleLimitMs} ms: ${pending.length > 0 ? pending.join('; ') : 'the store kept changing'}`)
      return snap
    }
  }
}

function viaLive(m: Readonly<Model>, via: Via): boolean {
  if (via === 'web') return true
  const state = m.runners[via === 'r0' ? 0 : 1]!.state
  return state === 'started' || state === 'stopping'
}

function viaGen(m: Readonly<Model>, via: Via): number | undefined {
  return via === 'web' ? undefined : m.runners[via === 'r0' ? 0 : 1]!.gen
}

/** `name({ a: 1, b: 'x' })`, leaving out the fields equal to their defaults. */
function call(name: string, params: object, defaults: object): string {
  const fields = Object.entries(params)
    .filter(([k, v]) => JSON.stringify(v) !== JSON.stringify((defaults as Record<string, unknown>)[k]))
    .map(([k, v]) => `${k}: ${literal(v)}`)
  return `${name}(${fields.length > 0 ? `{ ${fields.join(', ')} }` : ''})`
}

function literal(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`
  if (Array.isArray(v)) return `[${v.map(literal).join(', ')}]`
  return JSON.stringify(v)
}

// ---- enqueue ------------------------------------------------------------------------------------

export interface EnqueueParams {
  readonly kind: KindName
  readonly priority: number
  /** Due this many ms after the clock (runAt), or null for no runAt. */
  readonly delay: number | null
  readonly key: string | null
  readonly scope: string | null
  /** A deadline of TIMEOUT_MS on each start. */
  readonly timed: boolean
  /** What its handlers do when their signal aborts. */
  readonly onAbort: OnAbort
  readonly via: Via
}

const ENQUEUE: EnqueueParams = { kind: 'plain', priority: 0, delay: null, key: null, scope: null, timed: false, onAbort: 'return', via: 'web' }

export class Enqueue extends Step {
  readonly p: EnqueueParams
  constructor(p: Partial<EnqueueParams>) {
    super()
    this.p = { ...ENQUEUE, ...p }
  }
  check(m: Readonly<Model>): boolean {
    return viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const p = this.p
    const { kinds } = s.route(p.via)
    const { payload, options, spec } = placement(m, p, m.jobs.length)
    const holder = m.uniqueHolder(p.kind, p.scope, p.key)
    const answer =
      p.key === null
        ? { id: await retryTransient(() => kinds[p.kind].enqueue(payload, options)), created: true }
        : await retryTransient(() => kinds[p.kind].enqueueUnique(payload, { ...options, uniqueKey: p.key! }))
    noteEnqueued(m, m.enqueued(spec, holder, answer), answer)
  }
  toString(): string {
    return call('enqueue', this.p, ENQUEUE)
  }
}

/** An enqueue's payload and options, and the model's view of them. */
function placement(m: Model, p: Omit<EnqueueParams, 'via'>, n: number) {
  const runAt = p.delay === null ? undefined : m.now + p.delay
  const payload = { n, onAbort: p.onAbort, scope: p.scope, timed: p.timed }
  const options = {
    priority: p.priority,
    ...(p.scope !== null ? { scope: p.scope } : {}),
    ...(runAt !== undefined ? { runAt } : {}),
    ...(p.timed ? { timeoutMs: TIMEOUT_MS } : {}),
  }
  const spec = { kind: p.kind, scope: p.scope, priority: p.priority, runAt, uniqueKey: p.key, timed: p.timed, onAbort: p.onAbort }
  return { payload, options, spec }
}

function noteEnqueued(m: Model, job: ReturnType<Model['enqueued']>, answer: { id: string; created: boolean }): void {
  m.note(answer.created ? `stored ${job?.label ?? answer.id} (${job?.state.status})` : `not stored: ${job?.label ?? answer.id} holds the key`)
}

export type BatchJob = Omit<EnqueueParams, 'via'>

/** runner.enqueueMany: jobs of any kinds with their own options, in one transaction; unique keys hold within the batch too. */
export class Batch extends Step {
  readonly p: { readonly jobs: readonly BatchJob[]; readonly via: Via }
  constructor(p: { jobs: readonly Partial<BatchJob>[]; via?: Via }) {
    super()
    this.p = { jobs: p.jobs.map((j) => ({ ...ENQUEUE, ...j, via: undefined }) as BatchJob), via: p.via ?? 'web' }
  }
  check(m: Readonly<Model>): boolean {
    return viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const { runner, kinds } = s.route(this.p.via)
    const placed = this.p.jobs.map((j, i) => ({ j, ...placement(m, j, m.jobs.length + i) }))
    const specs = placed.map(({ j, payload, options }) => kinds[j.kind].job(payload, j.key === null ? options : { ...options, uniqueKey: j.key }))
    const answers = await retryTransient(() => runner.enqueueMany(specs))
    placed.forEach(({ j, spec }, i) => {
      // In batch order: a later job of the batch finds an earlier one holding its key.
      const holder = m.uniqueHolder(j.kind, j.scope, j.key)
      noteEnqueued(m, m.enqueued(spec, holder, answers[i]!), answers[i]!)
    })
  }
  toString(): string {
    const jobs = this.p.jobs.map((j) => call('', j, { ...ENQUEUE, via: undefined }).slice(1, -1) || '{}')
    return `batch({ jobs: [${jobs.join(', ')}]${this.p.via !== 'web' ? `, via: '${this.p.via}'` : ''} })`
  }
}

// ---- cancel, retry now --------------------------------------------------------------------------

export interface JobParams {
  /** The job: the `job`th (modulo their number) of the jobs in `status` (of all jobs when none is, or for 'any'). */
  readonly job: number
  readonly status: Status | 'any'
  readonly via: Via
}

const JOB: JobParams = { job: 0, status: 'any', via: 'web' }

function pick(m: Readonly<Model>, p: JobParams) {
  const inStatus = p.status === 'any' ? [] : m.jobs.filter((j) => j.state.status === p.status)
  const among = inStatus.length > 0 ? inStatus : m.jobs
  return among[p.job % among.length]!
}

export class Cancel extends Step {
  readonly p: JobParams
  constructor(p: Partial<JobParams>) {
    super()
    this.p = { ...JOB, ...p }
  }
  check(m: Readonly<Model>): boolean {
    return m.jobs.length > 0 && viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const job = pick(m, this.p)
    const { runner } = s.route(this.p.via)
    const answer = await retryTransient(() => runner.cancel(job.id))
    m.note(`cancel(${job.label}) -> '${answer}'`)
    m.cancelAnswered(job, answer, viaGen(m, this.p.via))
  }
  toString(): string {
    return call('cancel', this.p, JOB)
  }
}

export class RetryNow extends Step {
  readonly p: JobParams
  constructor(p: Partial<JobParams>) {
    super()
    this.p = { ...JOB, ...p }
  }
  check(m: Readonly<Model>): boolean {
    return m.jobs.length > 0 && viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const job = pick(m, this.p)
    const { runner } = s.route(this.p.via)
    const answer = await retryTransient(() => runner.retry(job.id))
    m.note(`retry(${job.label}) -> '${answer}'`)
    m.retryAnswered(job, answer)
  }
  toString(): string {
    return call('retryNow', this.p, JOB)
  }
}

// ---- pause, resume ------------------------------------------------------------------------------

export interface KindParams {
  readonly kind: KindName
  readonly via: Via
}

export class Pause extends Step {
  readonly p: KindParams
  constructor(p: Partial<KindParams>) {
    super()
    this.p = { kind: 'plain', via: 'web', ...p }
  }
  check(m: Readonly<Model>): boolean {
    return viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const answer = await retryTransient(() => s.route(this.p.via).runner.pause(this.p.kind))
    m.note(`pause(${this.p.kind}) -> ${answer}`)
    m.pauseAnswered(this.p.kind, answer)
  }
  toString(): string {
    return call('pause', this.p, { kind: 'plain', via: 'web' })
  }
}

export class Resume extends Step {
  readonly p: KindParams
  constructor(p: Partial<KindParams>) {
    super()
    this.p = { kind: 'plain', via: 'web', ...p }
  }
  check(m: Readonly<Model>): boolean {
    return viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const expected = m.resuming(this.p.kind)
    const answer = await retryTransient(() => s.route(this.p.via).runner.resume(this.p.kind))
    m.note(`resume(${this.p.kind}) -> ${answer}`)
    m.resumeAnswered(this.p.kind, expected, answer)
  }
  toString(): string {
    return call('resume', this.p, { kind: 'plain', via: 'web' })
  }
}

// ---- the clock ----------------------------------------------------------------------------------

export class Advance extends Step {
  readonly p: { readonly ms: number }
  constructor(p: { ms: number }) {
    super()
    this.p = p
  }
  check(): boolean {
    return true
  }
  protected async act(m: Model, s: System): Promise<void> {
    m.advanced(this.p.ms)
    s.clock.now = m.now
  }
  toString(): string {
    return `advance({ ms: ${this.p.ms} })`
  }
}

// ---- handlers -----------------------------------------------------------------------------------

export type OutcomeName =
  | 'return'
  | 'fail:provider_unavailable'
  | 'fail:bad_input'
  | 'throw'
  | 'snooze:0'
  | 'snooze:600'
  | 'snooze:1500'
  /** `job.rateLimited(ms)`: its own bucket cools down (the kind's name for a kind without a rate limit). */
  | 'rateLimited:700'
  | 'rateLimited:1500'
  /** `job.rateLimited(700, { key: 'provider' })`: the `rated` kind's shared bucket cools down, whatever kind calls it. */
  | 'rateLimited:700@provider'

export function actionOf(name: OutcomeName): HandlerAction {
  if (name.startsWith('fail:')) return { type: 'fail', code: name.slice(5) as DeclaredCode }
  if (name.startsWith('snooze:')) return { type: 'snooze', ms: Number(name.slice(7)) }
  if (name.startsWith('rateLimited:')) {
    const [ms, key] = name.slice(12).split('@')
    return { type: 'rateLimited', ms: Number(ms), ...(key !== undefined ? { key } : {}) }
  }
  return { type: name as 'return' | 'throw' }
}

export interface FinishParams {
  /** The handler, by index into those executing now, in start order (modulo their number). */
  readonly handler: number
  readonly outcome: OutcomeName
}

/** Ends a handler the test holds (one running, or one lingering past its deadline) as `outcome` says. */
export class Finish extends Step {
  readonly p: FinishParams
  constructor(p: Partial<FinishParams>) {
    super()
    this.p = { handler: 0, outcome: 'return', ...p }
  }
  check(m: Readonly<Model>): boolean {
    return m.ledger.executing().length > 0
  }
  protected async act(m: Model): Promise<void> {
    const runs = m.ledger.executing()
    const run = runs[this.p.handler % runs.length]!
    const action = actionOf(this.p.outcome)
    m.note(`the test ends ${m.runLabel(run)}: ${describeAction(action)}`)
    run.release(action)
  }
  toString(): string {
    return call('finish', this.p, { handler: 0, outcome: 'return' })
  }
}

// ---- cooldowns ----------------------------------------------------------------------------------

/** The keys a cooldown may have here: the `provider` bucket, each `household` scope's, and the kinds without a rate limit. */
export const COOLDOWN_KEYS = ['provider', 'household@h1', 'household@h2', 'household@', 'plain', 'capped', 'scoped', 'fair'] as const

export interface ClearParams {
  readonly key: string
  readonly via: Via
}

/** runner.clearCooldown(key): the key's jobs may start at once. */
export class ClearCooldown extends Step {
  readonly p: ClearParams
  constructor(p: Partial<ClearParams>) {
    super()
    this.p = { key: 'provider', via: 'web', ...p }
  }
  check(m: Readonly<Model>): boolean {
    return viaLive(m, this.p.via)
  }
  protected async act(m: Model, s: System): Promise<void> {
    const expected = m.clearing(this.p.key)
    const answer = await retryTransient(() => s.route(this.p.via).runner.clearCooldown(this.p.key))
    m.note(`clearCooldown(${this.p.key}) -> ${answer}`)
    m.clearAnswered(this.p.key, expected, answer)
  }
  toString(): string {
    return call('clearCooldown', this.p, { key: 'provider', via: 'web' })
  }
}

// ---- runners ------------------------------------------------------------------------------------

export interface StartParams {
  readonly slot: 0 | 1
  readonly workers: number
  readonly kinds: readonly KindName[]
}

const START: StartParams = { slot: 0, workers: 2, kinds: KIND_NAMES }

/** Starts a new runner in a slot whose runner is absent or stopped: a restart, or a second runner on the same store. */
export class Start extends Step {
  readonly p: StartParams
  constructor(p: Partial<StartParams>) {
    super()
    this.p = { ...START, ...p }
  }
  check(m: Readonly<Model>): boolean {
    const state = m.runners[this.p.slot]!.state
    return state === 'absent' || state === 'stopped'
  }
  protected async act(m: Model, s: System): Promise<void> {
    const kinds = new Set(this.p.kinds)
    const gen = s.prepareSlot(this.p.slot, kinds, this.p.workers)
    m.started(this.p.slot, gen, kinds, this.p.workers)
    await s.startSlot(this.p.slot)
    m.note(`${m.slotName(gen)} started: ${this.p.workers} worker(s), kinds ${[...kinds].join(', ')}`)
  }
  toString(): string {
    return call('start', this.p, START)
  }
}

/** Calls stop() on a started runner; it resolves (and the model sees it stopped) once its handlers have ended. */
export class Stop extends Step {
  readonly p: { readonly slot: 0 | 1 }
  constructor(p: Partial<{ slot: 0 | 1 }>) {
    super()
    this.p = { slot: 0, ...p }
  }
  check(m: Readonly<Model>): boolean {
    return m.runners[this.p.slot]!.state === 'started'
  }
  protected async act(m: Model, s: System): Promise<void> {
    m.stopCalled(this.p.slot)
    s.stopSlot(this.p.slot)
  }
  toString(): string {
    return call('stop', this.p, { slot: 0 })
  }
}

// ---- a race -------------------------------------------------------------------------------------

export interface RaceParams {
  readonly slot: 0 | 1
  readonly kind: KindName
  readonly priority: number
  readonly timed: boolean
  readonly onAbort: OnAbort
  /** Turns of the microtask queue before the first call, and between the two. */
  readonly micro1: number
  readonly micro2: number
  /** Whether stop() comes before cancel() rather than after. */
  readonly stopFirst: boolean
}

const RACE: RaceParams = { slot: 0, kind: 'plain', priority: 0, timed: false, onAbort: 'return', micro1: 0, micro2: 0, stopFirst: false }

/**
 * Enqueues a job through a started runner (which it wakes), then cancels
 * it and stops that runner with no settling in between, a few turns of
 * the microtask queue apart: the cancel may land before the claim, on a
 * job claimed and not yet started, or on a running one.
 */
export class Race extends Step {
  readonly p: RaceParams
  constructor(p: Partial<RaceParams>) {
    super()
    this.p = { ...RACE, ...p }
  }
  check(m: Readonly<Model>): boolean {
    return m.runners[this.p.slot]!.state === 'started'
  }
  protected async act(m: Model, s: System): Promise<void> {
    const p = this.p
    const via: Via = p.slot === 0 ? 'r0' : 'r1'
    const { runner, kinds } = s.route(via)
    const gen = m.runners[p.slot]!.gen
    const payload = { n: m.jobs.length, onAbort: p.onAbort, scope: null, timed: p.timed }
    const id = await retryTransient(() => kinds[p.kind].enqueue(payload, { priority: p.priority, ...(p.timed ? { timeoutMs: TIMEOUT_MS } : {}) }))
    const job = m.enqueued({ kind: p.kind, scope: null, priority: p.priority, runAt: undefined, uniqueKey: null, timed: p.timed, onAbort: p.onAbort }, undefined, { id, created: true })!
    await turns(p.micro1)
    let cancel: Promise<string>
    if (p.stopFirst) {
      m.stopCalled(p.slot)
      s.stopSlot(p.slot)
      await turns(p.micro2)
      cancel = retryTransient(() => runner.cancel(id))
    } else {
      cancel = retryTransient(() => runner.cancel(id))
      await turns(p.micro2)
      m.stopCalled(p.slot)
      s.stopSlot(p.slot)
    }
    const answer = await cancel
    m.note(`stored ${job.label}; cancel(${job.label}) -> '${answer}'; stop() of ${m.slotName(gen)} called`)
    m.raced(job, gen, answer)
  }
  toString(): string {
    return call('race', this.p, RACE)
  }
}

async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await Promise.resolve()
}

// ---- factories, for regressions written by hand ------------------------------------------------

export const enqueue = (p: Partial<EnqueueParams> = {}) => new Enqueue(p)
export const batch = (p: { jobs: readonly Partial<BatchJob>[]; via?: Via }) => new Batch(p)
export const cancel = (p: Partial<JobParams> = {}) => new Cancel(p)
export const retryNow = (p: Partial<JobParams> = {}) => new RetryNow(p)
export const pause = (p: Partial<KindParams> = {}) => new Pause(p)
export const resume = (p: Partial<KindParams> = {}) => new Resume(p)
export const advance = (p: { ms: number }) => new Advance(p)
export const finish = (p: Partial<FinishParams> = {}) => new Finish(p)
export const start = (p: Partial<StartParams> = {}) => new Start(p)
export const stop = (p: Partial<{ slot: 0 | 1 }> = {}) => new Stop(p)
export const race = (p: Partial<RaceParams> = {}) => new Race(p)
export const clearCooldown = (p: Partial<ClearParams> = {}) => new ClearCooldown(p)

// ---- arbitraries --------------------------------------------------------------------------------

const kindArb = fc.constantFrom<KindName>(...KIND_NAMES)
const viaArb = fc.constantFrom<Via>('web', 'r0', 'r1')
const slotArb = fc.constantFrom<0 | 1>(0, 1)
const onAbortArb = fc.constantFrom<OnAbort>('return', 'throw', 'ignore')

const jobArb = fc.record({
  kind: kindArb,
  priority: fc.constantFrom(0, 1, 5, -1),
  delay: fc.constantFrom<number | null>(null, 0, -200, 300, 700, 1500),
  key: fc.constantFrom<string | null>(null, null, 'k1', 'k2'),
  scope: fc.constantFrom<string | null>(null, 'h1', 'h2'),
  timed: fc.constantFrom(false, false, true),
  onAbort: onAbortArb,
})
const enqueueArb = fc.tuple(jobArb, viaArb).map(([p, via]) => new Enqueue({ ...p, via }))
const batchArb = fc.record({ jobs: fc.array(jobArb, { minLength: 2, maxLength: 5 }), via: viaArb }).map((p) => new Batch(p))

const finishArb = fc
  .record({
    handler: fc.nat(5),
    outcome: fc.constantFrom<OutcomeName>(
      'return',
      'fail:provider_unavailable',
      'fail:bad_input',
      'throw',
      'snooze:0',
      'snooze:600',
      'snooze:1500',
      'rateLimited:700',
      'rateLimited:1500',
      'rateLimited:700@provider',
    ),
  })
  .map((p) => new Finish(p))

const advanceArb = fc.constantFrom(1000, 100, 500, 1500, 3000).map((ms) => new Advance({ ms }))
const cancelArb = fc
  .record({ job: fc.nat(5), status: fc.constantFrom<Status | 'any'>('running', 'queued', 'scheduled', 'any'), via: viaArb })
  .map((p) => new Cancel(p))
const retryArb = fc
  .record({ job: fc.nat(5), status: fc.constantFrom<Status | 'any'>('failed', 'cancelled', 'scheduled', 'any'), via: viaArb })
  .map((p) => new RetryNow(p))
const pauseArb = fc.record({ kind: kindArb, via: viaArb }).map((p) => new Pause(p))
const resumeArb = fc.record({ kind: kindArb, via: viaArb }).map((p) => new Resume(p))
const startArb = fc
  .record({ slot: slotArb, workers: fc.integer({ min: 1, max: 3 }), kinds: fc.subarray([...KIND_NAMES], { minLength: 1 }) })
  .map((p) => new Start(p))
const stopArb = fc.record({ slot: slotArb }).map((p) => new Stop(p))
const clearArb = fc.record({ key: fc.constantFrom<string>(...COOLDOWN_KEYS), via: viaArb }).map((p) => new ClearCooldown(p))
/**
 * A race's kinds: those without a rate limit. A race is about where a
 * cancel lands in a claim's life; a rate limit only delays the claim, and
 * a claim the stop gives back would still count in its bucket, unseen by
 * the ledger.
 */
const raceKindArb = fc.constantFrom<KindName>(...KIND_NAMES.filter((k) => KINDS[k].rate === null))
const raceArb = fc
  .record({
    slot: slotArb,
    kind: raceKindArb,
    priority: fc.constantFrom(0, 10),
    timed: fc.constantFrom(false, true),
    onAbort: onAbortArb,
    micro1: fc.nat(40),
    micro2: fc.nat(40),
    stopFirst: fc.boolean(),
  })
  .map((p) => new Race(p))

/** Every command's arbitrary, repeated by weight (fc.commands picks among them evenly). */
export const commandArbitraries: fc.Arbitrary<Step>[] = [
  enqueueArb,
  enqueueArb,
  enqueueArb,
  enqueueArb,
  batchArb,
  finishArb,
  finishArb,
  finishArb,
  finishArb,
  finishArb,
  finishArb,
  advanceArb,
  cancelArb,
  cancelArb,
  retryArb,
  pauseArb,
  resumeArb,
  startArb,
  stopArb,
  raceArb,
  clearArb,
]
