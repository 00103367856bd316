import { performance } from 'node:perf_hooks'
import type { ClaimedJob, DriverAdmin, DriverHotPath } from '../driver.js'
import { JobFailure, JobNotRunningError, JobRateLimited, JobSnooze } from '../errors.js'
import { CODE_INTERNAL, CODE_TIMEOUT, finalWriteSignal } from '../job.js'
import type { HandlerErrorHook, JobContext, Outcome, RegisteredKind } from '../kind.js'
import type { Logger } from '../logger.js'
import { errorCode } from './backoff.js'
import type { ClaimGate } from './claim-gate.js'
import { type EndStatus, jobEndChannel, type JobEndMessage, jobPublishChannel, type JobPublishMessage, jobStartChannel, type JobStartMessage } from './channels.js'
import type { Completer, FinishOutcome } from './completer.js'
import { decideEnd, finishOf, type RunEnd } from './outcome.js'
import { endRun, type SpanEnd, startRun, withinRun, type RunTrace } from './tracing.js'

/** What every run of a worker pool shares: made once per pool. */
export interface RunServices {
  readonly driver: Pick<DriverHotPath, 'jobPublish' | 'jobRelease'> & Pick<DriverAdmin, 'jobGet'>
  readonly runnerId: string
  readonly completer: Completer
  readonly gate: ClaimGate
  readonly logger: Logger
  readonly clock: () => number
  /** Aborted when the runner stops. */
  readonly stopping: AbortSignal
  /** How long after a job's deadline its handler is waited for before the job is recorded as timed out. */
  readonly timeoutGraceMs: number
  /**
   * How long (ms, real time) a claim may wait for its handler's start
   * before the run first checks that the database still holds the job
   * under its claim; null when nothing can take a claim away from a live
   * runner (a driver proving death by an operating-system lock).
   */
  readonly confirmAfterMs: number | null
  /** Told the due time of a job this run sent back to the queue (a retry, a snooze), so it runs then, not at the next poll. */
  readonly scheduled: (due: number) => void
  /** Told the end of a cooldown this run recorded (`job.rateLimited`), so the jobs it held start then, not at the next poll. */
  readonly cooled?: ((until: number) => void) | undefined
  /** Told in this process of what a handler threw that was not a declared failure; never stored or logged by jobtable. */
  readonly onHandlerError: HandlerErrorHook | undefined
}

/** A claimed job with the real time (performance.now()) its claim was sent. */
export interface Claimed {
  readonly job: ClaimedJob
  readonly sentAt: number
}

/** The span's end of a run that recorded nothing: the next start fails the job as interrupted, or queues it again. */
const SPAN_INTERRUPTED: SpanEnd = { outcome: 'interrupted' }

/**
 * One run: one execution of one attempt of one job, with its own
 * AbortController, so it can be aborted alone. Two runs of one job may be
 * alive at once in one process (a handler that ignored its deadline while
 * the job's next attempt starts), so runs are tracked one by one, never
 * by the job id alone. A run decides its end with decideEnd (outcome.ts)
 * and makes that final write through the completer.
 */
export class Run {
  readonly job: ClaimedJob
  readonly #kind: RegisteredKind
  readonly #s: RunServices
  readonly #sentAt: number
  /** Made when the handler first reads its signal: an AbortController costs about 3 µs, a tenth of a short job's whole cost in bench/ (drain). */
  #controller: AbortController | undefined
  /** Set once its handler has returned or thrown (its final write may still be on its way). */
  returned = false
  /** Set when stop() gave up waiting for it: whatever it ends with is not recorded. */
  abandoned = false
  /** Set when its cancellation was requested: its signal is aborted, and its end is `cancelled`. */
  #cancelled = false
  /** Set once the job's end is decided (or its deadline passed): publish is refused from then on. */
  #settled = false
  /**
   * A handler recorded as timed out that has not returned yet: its worker
   * stays taken until this settles. Its final write claims nothing for
   * that worker.
   */
  #lingering: Promise<void> | undefined
  /** The runner's clock when its handler started, and when it ended (returned, threw, or passed its deadline). */
  readonly #startedAt: number
  #endedAt: number | undefined

  constructor(claimed: Claimed, kind: RegisteredKind, services: RunServices) {
    this.job = claimed.job
    this.#kind = kind
    this.#s = services
    this.#sentAt = claimed.sentAt
    // One clock reading per start and end, whether or not anything listens: an end reports its duration even to a subscriber that came after the start.
    this.#startedAt = services.clock()
  }

  /** Aborts this run's signal: its end is recorded `cancelled`. False when it was already. */
  cancel(): boolean {
    if (this.#cancelled) return false
    this.#cancelled = true
    this.#abort()
    return true
  }

  /** Aborts this run's signal (the runner is stopping). */
  abortForStop(): void {
    this.#controller?.abort()
  }

  #abort(): void {
    this.#controller ??= new AbortController()
    this.#controller.abort()
  }

  /**
   * Runs the handler and makes the final write; resolves once both are
   * done and, for a handler that outlived its deadline, once it returns.
   */
  async execute(): Promise<void> {
    const { job } = this
    // Awaited only for a late claim: this is the hot path.
    if (this.#late() && !(await this.#stillOurs())) return
    if (jobStartChannel.hasSubscribers) {
      const waitMs = Math.max(0, this.#startedAt - job.readyAt)
      jobStartChannel.publish({ runnerId: this.#s.runnerId, jobId: job.id, kind: job.kind, waitMs } satisfies JobStartMessage)
    }
    // Undefined without an OpenTelemetry SDK: no span, and the handler runs in the context it always did.
    const traced = startRun(job)
    let end: RunEnd | undefined
    try {
      const outcome = await this.#runBounded(traced)
      this.#endedAt = this.#s.clock()
      this.#settled = true
      end = await this.#record(outcome)
    } catch (err) {
      end = { type: 'failed', code: CODE_INTERNAL, reason: 'jobtable error' }
      throw err
    } finally {
      // The span ends when the job's end is decided, without the time a handler past its deadline lingers.
      if (traced !== undefined) endRun(traced, end === undefined ? SPAN_INTERRUPTED : spanEnd(end))
      if (this.#lingering !== undefined) await this.#lingering
    }
  }

  /** Whether its claim waited for its start longer than the driver's heartbeat (see #stillOurs). */
  #late(): boolean {
    const { confirmAfterMs } = this.#s
    return confirmAfterMs !== null && performance.now() - this.#sentAt > confirmAfterMs
  }

  /**
   * Whether the job is still running under this claim, checked only when
   * the claim waited long for its start (the process was stalled: a
   * SIGSTOP, a paused VM): past its lease, another runner may have failed
   * the job as interrupted, and this run must not start its handler then.
   * A claim that cannot be checked is given back unstarted.
   */
  async #stillOurs(): Promise<boolean> {
    const { job } = this
    const fields = { job_id: job.id, kind: job.kind }
    try {
      const row = await this.#s.driver.jobGet({ id: job.id })
      if (row !== undefined && row.status === 'running' && row.attempt === job.attempt) return true
      this.#s.logger.warn(fields, 'claim lost before its handler started (the runner was stalled past its lease); not started')
    } catch (err) {
      this.#s.logger.error({ ...fields, error: errorCode(err) }, 'checking a late claim failed; putting the job back unstarted')
      try {
        await this.#s.driver.jobRelease({ jobs: [{ id: job.id, attempt: job.attempt }], now: this.#s.clock() })
      } catch {
        // It stays running under this runner: the next start fails it as interrupted.
        return false
      }
    }
    this.#s.gate.held.delete(job.id)
    return false
  }

  /** What the handler receives: closures, not methods, for a handler may destructure them (`{ publish, fail }`). */
  #context(): JobContext<unknown> {
    const { job } = this
    const run = this
    return {
      id: job.id,
      kind: job.kind,
      get signal() {
        if (run.#controller === undefined) {
          run.#controller = new AbortController()
          // Asked for after stop() aborted the others, or after a cancel: it starts aborted.
          if (run.#s.stopping.aborted || run.#cancelled) run.#controller.abort()
        }
        return run.#controller.signal
      },
      publish: async (partial) => {
        if (this.#settled || this.abandoned) throw new JobNotRunningError('publish result')
        const result = this.#kind.project(partial)
        const applied = await this.#s.driver.jobPublish({ id: job.id, attempt: job.attempt, result, now: this.#s.clock() })
        if (!applied) throw new JobNotRunningError('publish result')
        if (jobPublishChannel.hasSubscribers) jobPublishChannel.publish({ runnerId: this.#s.runnerId, jobId: job.id, kind: job.kind } satisfies JobPublishMessage)
      },
      fail: (code) => {
        throw new JobFailure<string>(code)
      },
      snooze: (ms) => {
        throw new JobSnooze(ms)
      },
      // Checked when the attempt is recorded (kind.ts): a bad time, key or option fails the job with internal_error.
      rateLimited: (untilOrMs, options) => {
        throw new JobRateLimited(untilOrMs, options)
      },
      scope: job.scope,
      attempt: job.attempt,
      finalWriteSignal,
    }
  }

  /** Calls the job's handler, within its run's trace context when it has a span. */
  #call(traced: RunTrace | undefined): Promise<Outcome> {
    const ctx = this.#context()
    const hook = this.#s.onHandlerError
    const thrown = hook === undefined ? undefined : (error: unknown, code: string) => reportHandlerError(hook, error, code, this.job, this.#s.logger)
    // No closure without a span: this is the hot path.
    if (traced === undefined) return this.#kind.run(this.job.payload, ctx, thrown, this.#s.clock)
    return withinRun(traced, () => this.#kind.run(this.job.payload, ctx, thrown, this.#s.clock))
  }

  /**
   * Runs the handler, within the job's deadline when it has one: at the
   * deadline its signal aborts (and publish is refused from then on), and
   * the outcome is `timeout` whatever the handler then does. A handler
   * still running `timeoutGraceMs` after the deadline keeps its worker
   * until it returns: the runner never runs more than `workers` handlers
   * at once. Its job is recorded then, without waiting for it, unless its
   * kind has a concurrency limit: then the job stays running until the
   * handler returns, since the limit counts running jobs in the database,
   * and at most N handlers of the kind may execute at once anywhere.
   */
  async #runBounded(traced: RunTrace | undefined): Promise<Outcome> {
    const timeoutMs = this.job.timeoutMs
    if (timeoutMs === null) {
      // No deadline: no promise beyond the handler's own (this is the hot path).
      const outcome = await this.#call(traced)
      this.returned = true
      return outcome
    }
    const running = this.#call(traced).finally(() => (this.returned = true))
    let deadline: NodeJS.Timeout | undefined
    let grace: NodeJS.Timeout | undefined
    let passed = false
    const graceOver = new Promise<'grace'>((resolve) => {
      deadline = setTimeout(() => {
        passed = true
        this.#settled = true
        this.#abort()
        grace = setTimeout(() => resolve('grace'), this.#s.timeoutGraceMs)
      }, timeoutMs)
    })
    const first = await Promise.race([running, graceOver])
    clearTimeout(deadline)
    clearTimeout(grace)
    if (!passed) return first as Outcome
    if (first === 'grace') {
      const fields = { job_id: this.job.id, kind: this.job.kind }
      if (this.#kind.capsRunning) {
        this.#s.logger.warn(fields, 'job passed its deadline and its handler did not return; it stays running, holding its kind’s concurrency, until it does')
        await running.catch(() => undefined)
      } else {
        this.#s.logger.warn(fields, 'job passed its deadline and its handler did not return; recorded as timeout, its worker stays taken until it does')
        this.#lingering = running.then(() => undefined)
      }
    }
    return { code: CODE_TIMEOUT, reason: 'deadline passed' }
  }

  /** Decides the run's end and makes its final write; resolves to that end, for the run's span. */
  async #record(outcome: Outcome): Promise<RunEnd> {
    const { job } = this
    const asked = { cancelled: this.#cancelled, stopping: this.#s.stopping.aborted, abandoned: this.abandoned }
    const end = decideEnd(outcome, asked, { attempt: job.attempt, maxAttempts: job.maxAttempts, kind: this.#kind, now: this.#s.clock() })
    this.#log(end)
    await this.#finish(end)
    return end
  }

  #log(end: RunEnd): void {
    const { job } = this
    const fields = { job_id: job.id, kind: job.kind }
    const logger = this.#s.logger
    switch (end.type) {
      case 'interrupted':
        if (end.why === 'abandoned') logger.warn(fields, 'job ended after stop stopped waiting for it; not recorded, it fails as interrupted')
        else logger.warn(fields, 'job interrupted by shutdown; it fails at the next start')
        return
      case 'cancelled':
        return logger.info(fields, 'job cancelled')
      case 'succeeded':
        return logger.debug(fields, 'job succeeded')
      case 'snoozed':
        // The key is left out: a per-scope key names the owner.
        if (end.cooldown !== undefined) return logger.info({ ...fields, run_at: end.runAt }, 'job rate limited; its key cools down until run_at')
        return logger.debug({ ...fields, run_at: end.runAt }, 'job snoozed')
      case 'retry':
        return logger.info({ ...fields, code: end.code, reason: end.reason, attempt: job.attempt, max_attempts: job.maxAttempts, run_at: end.runAt }, 'job failed; retrying')
      case 'failed': {
        const logged = { ...fields, code: end.code, reason: end.reason, attempt: job.attempt, max_attempts: job.maxAttempts }
        if (end.code === CODE_INTERNAL || end.code === CODE_TIMEOUT) logger.error(logged, 'job failed')
        else logger.info(logged, 'job failed')
      }
    }
  }

  /** Makes the final write of `end` (none for interrupted), then tells the scheduler and the end channel. */
  async #finish(end: RunEnd): Promise<void> {
    const { job } = this
    const finish = finishOf(end, job.id, job.attempt)
    if (finish === undefined) return
    // A handler still running past its deadline keeps its worker: its final write claims nothing for it.
    const outcome: FinishOutcome = await this.#s.completer.finish(finish, job.kind, this.#lingering === undefined)
    // A write given up leaves the job running under this runner: still held, so a lost-claim recovery never queues it again.
    if (outcome !== 'given_up') this.#s.gate.held.delete(job.id)
    if (outcome === 'applied' && finish.runAt !== null) this.#s.scheduled(finish.runAt)
    if (outcome === 'applied' && finish.cooldown) this.#s.cooled?.(finish.cooldown.until)
    if (jobEndChannel.hasSubscribers) {
      const durationMs = Math.max(0, (this.#endedAt ?? this.#s.clock()) - this.#startedAt)
      const code = end.type === 'failed' || end.type === 'retry' ? end.code : null
      const message: JobEndMessage = { runnerId: this.#s.runnerId, jobId: job.id, kind: job.kind, status: end.type as EndStatus, error: finish.error, code, durationMs }
      jobEndChannel.publish(message)
    }
  }

  /** Records an internal error for a run whose own code failed unexpectedly (a jobtable bug). */
  async failInternal(): Promise<void> {
    this.#s.logger.error({ job_id: this.job.id, kind: this.job.kind, code: CODE_INTERNAL }, 'unexpected error running a job')
    await this.#finish({ type: 'failed', code: CODE_INTERNAL, reason: 'jobtable error' })
  }
}

function spanEnd(end: RunEnd): SpanEnd {
  switch (end.type) {
    case 'failed':
    case 'retry':
      return { outcome: end.type, code: end.code }
    case 'interrupted':
      return SPAN_INTERRUPTED
    default:
      return { outcome: end.type }
  }
}

/** Calls the application's handler-error hook; a hook that throws is logged by its class only. */
function reportHandlerError(hook: HandlerErrorHook, error: unknown, code: string, job: ClaimedJob, logger: Logger): void {
  try {
    hook(error, { id: job.id, kind: job.kind, attempt: job.attempt, code })
  } catch {
    logger.error({ job_id: job.id, kind: job.kind }, 'onHandlerError threw; ignored')
  }
}
