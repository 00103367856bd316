import type { ClaimedJob, ClaimParams, Driver, JobFinish } from '../driver.js'
import { JobFailure, JobNotRunningError, JobSnooze } from '../errors.js'
import { CODE_INTERNAL, CODE_TIMEOUT, finalWriteSignal } from '../job.js'
import type { JobContext, Outcome, RegisteredKind } from '../kind.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import type { ClaimGate } from './claim-gate.js'
import {
  claimErrorChannel,
  type ClaimErrorMessage,
  type EndStatus,
  jobEndChannel,
  type JobEndMessage,
  jobPublishChannel,
  type JobPublishMessage,
  jobStartChannel,
  type JobStartMessage,
} from './channels.js'
import { Completer, type Piggyback } from './completer.js'
import { endRun, startRun, withinRun, type RunEnd, type RunTrace } from './tracing.js'

/** How a run that recorded nothing ends its span: the next start fails the job as interrupted, or queues it again. */
const NOT_RECORDED: RunEnd = { outcome: 'interrupted' }
const SUCCEEDED: RunEnd = { outcome: 'succeeded' }

/** One job a worker runs: its own controller, so one job can be aborted without the others. */
interface Execution {
  readonly job: ClaimedJob
  /**
   * Made when the handler first reads its signal: an AbortController costs
   * about 3 µs, a tenth of a short job's whole cost in bench/ (drain).
   */
  controller: AbortController | undefined
  /** Set once its handler has returned or thrown (its final write may still be on its way). */
  returned: boolean
  /** Set when stop() gave up waiting for it: whatever it ends with is not recorded. */
  abandoned: boolean
  /** A handler recorded as timed out that has not returned yet: its slot is freed when this settles. */
  lingering: Promise<void> | undefined
  /** Set when its cancellation was requested: its signal is aborted, and its final write records it cancelled. */
  cancelled: boolean
  /** The runner's clock when its handler started, and when it ended (returned, threw, or passed its deadline). */
  startedAt: number
  endedAt: number | undefined
  done: Promise<void>
}

/** What a Producer needs from its runner. */
export interface ProducerOptions {
  readonly driver: Driver
  readonly runnerId: string
  readonly workers: number
  /** The kinds this runner has handlers for, by name; only these are claimed. */
  readonly kinds: ReadonlyMap<string, RegisteredKind>
  readonly gate: ClaimGate
  readonly logger: Logger
  readonly clock: () => number
  /** Called once when a claim fails with an error that can never succeed; the runner then stops. */
  readonly onFatal: (err: unknown) => void
  /** How long after a job's deadline its handler is waited for before the job is recorded as timed out. */
  readonly timeoutGraceMs: number
  /** Told the due time of a job this runner sent back to the queue (a retry, a snooze), so it runs then, not at the next poll. */
  readonly scheduled: (due: number) => void
}

/**
 * Owns the worker slots: claims queued jobs of its kinds for every idle
 * worker in one statement, runs each with its own AbortController, and
 * hands the outcome to its Completer, whose batched final writes claim
 * for the workers they free. An idle producer makes no queries: it sleeps
 * until a wake, a freed worker or a retry due.
 */
export class Producer implements Piggyback {
  readonly #driver: Driver
  readonly #runnerId: string
  readonly #kinds: ReadonlyMap<string, RegisteredKind>
  readonly #kindNames: readonly string[]
  /** The limits of the kinds that have one, passed with every claim; undefined when none has. */
  readonly #limits: ClaimParams['limits']
  /**
   * Set when a kind has a scopeConcurrency limit: a claim looks only at
   * the first jobs of the scopes with room (the drivers' scoped window),
   * so one that found some but fewer than asked for is followed by
   * another, which looks past the scopes it just filled.
   */
  readonly #claimsAgain: boolean
  /** The limit of the piggybacked claim in flight. */
  #requested = 0
  readonly #gate: ClaimGate
  readonly #logger: Logger
  readonly #clock: () => number
  readonly #onFatal: (err: unknown) => void
  readonly #timeoutGraceMs: number
  readonly #scheduled: (due: number) => void
  readonly #stopping = new AbortController()
  readonly #completer: Completer
  readonly #executions = new Map<string, Execution>()
  #idle: number
  /** Set when a claim may find work: a wake, a worker freed, a retry due. */
  #kicked = true
  #kick: (() => void) | undefined
  #loop: Promise<void> | undefined
  /** Jobs claimed together with final writes, for the workers those writes free; started before any new claim. */
  #prefetched: ClaimedJob[] = []
  /** How many workers about to be freed had a claim made for them with their final write, so need no claim of their own. */
  #lookedAfter = 0
  /** How many idle workers the claim loop's claim in flight is for. */
  #loopClaimFor = 0

  constructor(options: ProducerOptions) {
    this.#driver = options.driver
    this.#runnerId = options.runnerId
    this.#kinds = options.kinds
    this.#kindNames = [...options.kinds.keys()]
    const limited = [...options.kinds.values()].filter((k) => k.limit !== undefined).map((k) => [k.name, k.limit!] as const)
    this.#limits = limited.length > 0 ? new Map(limited) : undefined
    this.#claimsAgain = limited.some(([, limit]) => limit.scopeConcurrency !== null)
    this.#gate = options.gate
    this.#logger = options.logger
    this.#clock = options.clock
    this.#onFatal = options.onFatal
    this.#timeoutGraceMs = options.timeoutGraceMs
    this.#scheduled = options.scheduled
    this.#idle = options.workers
    this.#completer = new Completer(options.driver, options.runnerId, options.logger, options.clock, this.#stopping.signal, this)
  }

  /** Starts claiming; a producer without kinds claims nothing. */
  start(): void {
    if (this.#kindNames.length > 0) this.#loop ??= this.#claimLoop()
  }

  /** Tells an idle worker to look for a queued job. */
  wake(): void {
    this.#kicked = true
    this.#kick?.()
  }

  /** How many handlers are running now. */
  get running(): number {
    return this.#executions.size
  }

  /**
   * Aborts the signals of the jobs among `ids` running here, whose
   * cancellation the database holds: each ends `cancelled` when its
   * handler returns (the final write reads the request).
   */
  cancel(ids: readonly string[]): void {
    for (const id of ids) {
      const execution = this.#executions.get(id)
      if (execution === undefined || execution.cancelled) continue
      execution.cancelled = true
      execution.controller ??= new AbortController()
      execution.controller.abort()
      this.#logger.info({ job_id: id, kind: execution.job.kind }, 'job cancellation requested: its signal is aborted')
    }
  }

  /**
   * Stops claiming, aborts every job's signal, puts back the claimed jobs
   * no handler has seen, and resolves once every handler has ended and its
   * final write has landed or been given up, or once `timeoutMs` has
   * passed. Resolves to how many handlers were still running then: their
   * jobs stay running in the database, and nothing they end with is
   * recorded (a final write already on its way may still land).
   */
  async stop(timeoutMs: number): Promise<number> {
    this.#stopping.abort()
    for (const e of this.#executions.values()) e.controller?.abort()
    this.#kick?.()
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)))
    try {
      if ((await Promise.race([this.#drain(), deadline])) !== 'timeout') return 0
    } finally {
      clearTimeout(timer)
    }
    let running = 0
    for (const e of this.#executions.values()) {
      e.abandoned = true
      if (!e.returned) running++
    }
    await this.#release(this.#prefetched.splice(0))
    return running
  }

  async #drain(): Promise<void> {
    await this.#loop
    // Jobs claimed with the last final writes are not started with a
    // signal already aborted: they go back to the queue, for the next start.
    for (;;) {
      await this.#release(this.#prefetched.splice(0))
      if (this.#executions.size === 0) break
      await Promise.all([...this.#executions.values()].map((e) => e.done))
    }
    await this.#completer.idle()
    await this.#release(this.#prefetched.splice(0))
  }

  // Piggyback: the claim a batch of final writes carries.

  request(finishing: number): ClaimParams | undefined {
    if (this.#stopping.signal.aborted || !this.#gate.tryEnter()) return undefined
    const idle = Math.max(0, this.#idle - this.#prefetched.length - this.#loopClaimFor)
    // This claim looks for work for every idle worker: the wakes so far are answered.
    if (idle > 0) this.#kicked = false
    this.#requested = finishing + idle
    return { limit: finishing + idle, runnerId: this.#runnerId, kinds: this.#kindNames, limits: this.#limits }
  }

  take(jobs: ClaimedJob[], finishing: number): void {
    this.#gate.leave(jobs)
    for (const job of jobs) this.#prefetched.push(job)
    this.#lookedAfter += finishing
    if (this.#claimsAgain && jobs.length > 0 && jobs.length < this.#requested) this.wake()
  }

  missed(): void {
    this.#gate.leave(undefined)
    this.wake()
  }

  /**
   * Puts claimed jobs that no handler has seen back in the queue (a write
   * fenced on their claim). Should it fail, they stay running under this
   * runner, and the next start fails them as interrupted.
   */
  async #release(jobs: ClaimedJob[]): Promise<void> {
    if (jobs.length === 0) return
    try {
      await this.#driver.jobRelease({ jobs: jobs.map(({ id, attempt }) => ({ id, attempt })), now: this.#clock() })
      for (const job of jobs) this.#gate.held.delete(job.id)
    } catch (err) {
      this.#logger.error({ jobs: jobs.length, error: errorCode(err) }, 'release unstarted jobs failed; they fail at the next start')
    }
  }

  /**
   * Claims queued jobs for every idle worker in one statement and starts
   * them, then sleeps until a wake, a freed worker or a due retry. While
   * final writes are on their way, it leaves the claim to them: each
   * claims for the workers it frees and for the idle ones. A transient
   * claim error is retried with backoff, so a job queued during an outage
   * runs when it clears without a new wake; a permanent one stops the
   * runner (onFatal).
   */
  async #claimLoop(): Promise<void> {
    const backoff = new Backoff()
    const stopping = this.#stopping.signal
    while (!stopping.aborted) {
      if (this.#prefetched.length > 0 && this.#idle > 0) {
        for (const job of this.#prefetched.splice(0, this.#idle)) this.#start(job)
        continue
      }
      if (!this.#kicked || this.#idle === 0) {
        await new Promise<void>((resolve) => (this.#kick = resolve))
        this.#kick = undefined
        continue
      }
      const finishing = this.#completer.nextClaim()
      if (finishing !== undefined) {
        // The final writes about to land claim for the idle workers too: start what they find, then look again.
        await finishing
        continue
      }
      this.#kicked = false
      let jobs: ClaimedJob[]
      this.#loopClaimFor = this.#idle
      try {
        jobs = await this.#claim(this.#idle)
        backoff.reset()
      } catch (err) {
        this.#loopClaimFor = 0
        if (stopping.aborted) break
        const transient = isTransient(err)
        if (claimErrorChannel.hasSubscribers) claimErrorChannel.publish({ runnerId: this.#runnerId, error: errorCode(err), transient } satisfies ClaimErrorMessage)
        if (!transient) {
          this.#onFatal(err)
          break
        }
        const delay = backoff.next()
        this.#logger.error({ error: errorCode(err), retry_in_ms: delay }, 'claim jobs failed; retrying')
        await sleep(delay, stopping)
        this.#kicked = true
        continue
      }
      this.#loopClaimFor = 0
      // A stop that came during the claim: these jobs were never started.
      if (stopping.aborted) {
        await this.#release(jobs)
        break
      }
      for (const job of jobs) this.#start(job)
      if (this.#claimsAgain && jobs.length > 0 && this.#idle > 0) this.#kicked = true
    }
  }

  /** One claim through the gate, which first recovers what a lost claim may have taken. */
  async #claim(limit: number): Promise<ClaimedJob[]> {
    // The common case enters at once, without a turn of the event loop.
    if (!this.#gate.tryEnter()) await this.#gate.enter()
    let jobs: ClaimedJob[] | undefined
    try {
      jobs = await this.#driver.jobClaim({ limit, runnerId: this.#runnerId, kinds: this.#kindNames, limits: this.#limits, now: this.#clock() })
      return jobs
    } finally {
      this.#gate.leave(jobs)
    }
  }

  /** Starts a claimed job on an idle worker; when it ends, the worker looks for work again. */
  #start(job: ClaimedJob): void {
    this.#idle--
    const execution: Execution = {
      job,
      controller: undefined,
      returned: false,
      abandoned: false,
      lingering: undefined,
      cancelled: false,
      // One clock reading per start and end, whether or not anything listens: an end reports its duration even to a subscriber that came after the start.
      startedAt: this.#clock(),
      endedAt: undefined,
      done: Promise.resolve(),
    }
    execution.done = this.#run(execution)
      .catch(() => {
        // #run handles every outcome itself; reaching here is a jobtable bug, and its text may quote job data.
        this.#logger.error({ job_id: job.id, kind: job.kind, code: CODE_INTERNAL }, 'unexpected error running a job')
        return this.#finish(execution, { status: 'failed', result: null, error: CODE_INTERNAL, runAt: null, grant: 0 })
      })
      .finally(() => {
        this.#executions.delete(job.id)
        this.#idle++
        if (this.#lookedAfter > 0) {
          // A claim was made with this job's final write: start what it found, claim nothing new.
          this.#lookedAfter--
          this.#kick?.()
        } else {
          this.wake()
        }
      })
    this.#executions.set(job.id, execution)
  }

  /** Runs one claimed job to completion and makes its final write. */
  async #run(execution: Execution): Promise<void> {
    const { job } = execution
    const fields = { job_id: job.id, kind: job.kind }
    const kind = this.#kinds.get(job.kind)
    if (kind === undefined) {
      // Claims take only this runner's kinds; a driver that returned another is wrong, and the job waits for a runner that has it.
      this.#logger.error(fields, 'claimed a job of a kind this runner has no handler for; putting it back')
      return this.#release([job])
    }
    if (jobStartChannel.hasSubscribers) {
      const waitMs = Math.max(0, execution.startedAt - job.readyAt)
      jobStartChannel.publish({ runnerId: this.#runnerId, jobId: job.id, kind: job.kind, waitMs } satisfies JobStartMessage)
    }
    // Undefined without an OpenTelemetry SDK: no span, and the handler runs in the context it always did.
    const traced = startRun(job)
    let settled = false
    // Closures, not methods: a handler may destructure them (`{ publish, fail }`).
    const stopping = this.#stopping.signal
    const ctx: JobContext<unknown> = {
      id: job.id,
      kind: job.kind,
      get signal() {
        if (execution.controller === undefined) {
          execution.controller = new AbortController()
          // Asked for after stop() aborted the others: it starts aborted.
          if (stopping.aborted) execution.controller.abort()
        }
        return execution.controller.signal
      },
      publish: async (partial) => {
        if (settled || execution.abandoned) throw new JobNotRunningError('publish result')
        const result = kind.project(partial)
        const applied = await this.#driver.jobPublish({ id: job.id, attempt: job.attempt, result, now: this.#clock() })
        if (!applied) throw new JobNotRunningError('publish result')
        if (jobPublishChannel.hasSubscribers) jobPublishChannel.publish({ runnerId: this.#runnerId, jobId: job.id, kind: job.kind } satisfies JobPublishMessage)
      },
      fail: (code) => {
        throw new JobFailure<string>(code)
      },
      snooze: (ms) => {
        throw new JobSnooze(ms)
      },
      attempt: job.attempt,
      finalWriteSignal,
    }
    let end = NOT_RECORDED
    try {
      const outcome = await this.#runBounded(execution, kind, ctx, () => (settled = true), traced)
      execution.endedAt = this.#clock()
      settled = true
      end = await this.#record(execution, kind, outcome)
    } catch (err) {
      end = { outcome: 'failed', code: CODE_INTERNAL }
      throw err
    } finally {
      // The span ends when the job's end is decided, without the time a handler past its deadline lingers.
      if (traced !== undefined) endRun(traced, end)
      // A handler recorded as timed out keeps its worker slot until it returns (see #runBounded).
      if (execution.lingering !== undefined) await execution.lingering
    }
  }

  /** Makes the final write an outcome calls for; resolves to the end it recorded, for the run's span. */
  async #record(execution: Execution, kind: RegisteredKind, outcome: Outcome): Promise<RunEnd> {
    const { job } = execution
    const fields = { job_id: job.id, kind: job.kind }
    if (execution.abandoned) {
      this.#logger.warn(fields, 'job ended after stop stopped waiting for it; not recorded, it fails as interrupted')
      return NOT_RECORDED
    }
    if (execution.cancelled) {
      // Whatever the handler did, the final write records the job cancelled (keeping a result it returned).
      this.#logger.info(fields, 'job cancelled')
      const result = 'result' in outcome ? outcome.result : null
      await this.#finish(execution, { status: 'failed', result, error: null, runAt: null, grant: 0 }, 'cancelled')
      return { outcome: 'cancelled' }
    }
    if ('result' in outcome) {
      this.#logger.debug(fields, 'job succeeded')
      await this.#finish(execution, { status: 'succeeded', result: outcome.result, error: null, runAt: null, grant: 0 })
      return SUCCEEDED
    }
    if ('snoozeMs' in outcome) {
      this.#logger.debug({ ...fields, snooze_ms: outcome.snoozeMs }, 'job snoozed')
      await this.#finish(execution, { status: 'retry', result: null, error: null, runAt: this.#clock() + outcome.snoozeMs, grant: 1 }, 'snoozed')
      return { outcome: 'snoozed' }
    }
    if (this.#stopping.signal.aborted) {
      this.#logger.warn(fields, 'job interrupted by shutdown; it fails at the next start')
      return NOT_RECORDED
    }
    const logged = { ...fields, code: outcome.code, reason: outcome.reason, attempt: job.attempt, max_attempts: job.maxAttempts }
    if (kind.retries(outcome.code) && job.attempt < job.maxAttempts) {
      const runAt = this.#clock() + kind.backoffMs(job.attempt)
      this.#logger.info({ ...logged, run_at: runAt }, 'job failed; retrying')
      await this.#finish(execution, { status: 'retry', result: null, error: null, runAt, grant: 0 }, 'retry', outcome.code)
      return { outcome: 'retry', code: outcome.code }
    }
    if (outcome.code === CODE_INTERNAL || outcome.code === CODE_TIMEOUT) this.#logger.error(logged, 'job failed')
    else this.#logger.info(logged, 'job failed')
    await this.#finish(execution, { status: 'failed', result: null, error: outcome.code, runAt: null, grant: 0 })
    return { outcome: 'failed', code: outcome.code }
  }

  /** Calls the job's handler, within its run's trace context when it has a span. */
  #call(execution: Execution, kind: RegisteredKind, ctx: JobContext<unknown>, traced: RunTrace | undefined): Promise<Outcome> {
    // No closure without a span: this is the hot path.
    if (traced === undefined) return kind.run(execution.job.payload, ctx)
    return withinRun(traced, () => kind.run(execution.job.payload, ctx))
  }

  /**
   * Runs the handler, within the job's deadline when it has one: at the
   * deadline its signal aborts (and `expired` is called, so it can publish
   * no more), and the outcome is `timeout` whatever the handler then does.
   * A handler still running `timeoutGraceMs` after the deadline is not
   * waited for to record the job, but its worker slot stays taken until it
   * returns: the runner never runs more than `workers` handlers at once.
   */
  async #runBounded(execution: Execution, kind: RegisteredKind, ctx: JobContext<unknown>, expired: () => void, traced: RunTrace | undefined): Promise<Outcome> {
    const timeoutMs = execution.job.timeoutMs
    if (timeoutMs === null) {
      // No deadline: no promise beyond the handler's own (this is the hot path).
      const outcome = await this.#call(execution, kind, ctx, traced)
      execution.returned = true
      return outcome
    }
    const running = this.#call(execution, kind, ctx, traced).finally(() => (execution.returned = true))
    let deadline: NodeJS.Timeout | undefined
    let grace: NodeJS.Timeout | undefined
    let passed = false
    const graceOver = new Promise<'grace'>((resolve) => {
      deadline = setTimeout(() => {
        passed = true
        expired()
        if (execution.controller === undefined) execution.controller = new AbortController()
        execution.controller.abort()
        grace = setTimeout(() => resolve('grace'), this.#timeoutGraceMs)
      }, timeoutMs)
    })
    const first = await Promise.race([running, graceOver])
    clearTimeout(deadline)
    clearTimeout(grace)
    if (!passed) return first as Outcome
    if (first === 'grace') {
      this.#logger.warn({ job_id: execution.job.id, kind: execution.job.kind }, 'job passed its deadline and its handler did not return; recorded as timeout, its worker stays taken until it does')
      // Recorded now; the slot is freed when the handler returns (see #start).
      execution.lingering = running.then(() => undefined)
    }
    return { code: CODE_TIMEOUT, reason: 'deadline passed' }
  }

  /**
   * Makes the final write; `reported` is the status the end channel tells
   * (a cancelled job's write reads its request in the database), `code`
   * the failure behind it.
   */
  async #finish(execution: Execution, end: Omit<JobFinish, 'id' | 'attempt'>, reported: EndStatus = end.status, code: string | null = end.error): Promise<void> {
    const { job, lingering } = execution
    // A handler still running past its deadline keeps its slot (see #start): its final write claims nothing for it.
    const outcome = await this.#completer.finish({ id: job.id, attempt: job.attempt, ...end }, job.kind, lingering === undefined)
    // A write given up leaves the job running under this runner: still held, so a lost-claim recovery never queues it again.
    if (outcome !== 'given_up') this.#gate.held.delete(job.id)
    if (outcome === 'applied' && end.status === 'retry' && end.runAt !== null) this.#scheduled(end.runAt)
    if (jobEndChannel.hasSubscribers) {
      const durationMs = Math.max(0, (execution.endedAt ?? this.#clock()) - execution.startedAt)
      const message: JobEndMessage = { runnerId: this.#runnerId, jobId: job.id, kind: job.kind, status: reported, error: end.error, code, durationMs }
      jobEndChannel.publish(message)
    }
  }
}
