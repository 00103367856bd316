import { performance } from 'node:perf_hooks'
import type { ClaimedJob, ClaimParams, DriverAdmin, DriverHotPath } from '../driver.js'
import type { HandlerErrorHook, RegisteredKind } from '../kind.js'
import type { Logger } from '../logger.js'
import { Backoff, errorCode, isTransient, sleep } from './backoff.js'
import type { ClaimGate } from './claim-gate.js'
import { claimErrorChannel, type ClaimErrorMessage } from './channels.js'
import { Completer, type Piggyback } from './completer.js'
import { type Claimed, Run, type RunServices } from './run.js'

/** What a WorkerPool needs from its runner. */
export interface WorkerPoolOptions {
  readonly driver: DriverHotPath & Pick<DriverAdmin, 'jobGet'>
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
  /** The application's hook for what handlers throw (runner option onHandlerError). */
  readonly onHandlerError?: HandlerErrorHook | undefined
  /**
   * How long (real ms) a claim may wait for its handler's start before
   * the run checks the job is still its own (see Run); null when no
   * other runner can take a live runner's claim.
   */
  readonly confirmAfterMs: number | null
  /** Whether the runner's lease is fresh enough to claim (see Liveness.fresh); claims wait for wake() while it is not. */
  readonly mayClaim: () => boolean
  /** The driver's fallback poll interval (capabilities.pollMs): the longest a rated kind's held jobs wait for a look again. */
  readonly pollMs: number
}

/** The shortest wait before looking again for jobs a rate limit held back (real ms). */
const LOOK_AGAIN_MIN_MS = 25
/** The longest delay a timer takes. */
const MAX_TIMER_MS = 2 ** 31 - 1

/**
 * Owns the worker slots: claims queued jobs of its kinds for every idle
 * worker in one statement, starts a Run for each (run.ts: one attempt of
 * one job, with its own AbortController), and lets each run's final write
 * go through its Completer, whose batched writes claim for the workers
 * they free. An idle pool makes no queries: it sleeps until a wake, a
 * freed worker or a retry due. (Not "producer": in a job queue's docs,
 * that is a process that only enqueues.)
 */
export class WorkerPool implements Piggyback {
  readonly #driver: WorkerPoolOptions['driver']
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
  readonly #mayClaim: () => boolean
  readonly #stopping = new AbortController()
  readonly #completer: Completer
  /** What every run shares. */
  readonly #services: RunServices
  /**
   * The live runs, each with its end (its handler returned and its final
   * write landed or was given up). A run is its own entry, never keyed by
   * its job's id: two attempts of one job may be alive at once.
   */
  readonly #runs = new Map<Run, Promise<void>>()
  #idle: number
  /** Set when a claim may find work: a wake, a worker freed, a retry due. */
  #kicked = true
  #kick: (() => void) | undefined
  #loop: Promise<void> | undefined
  /** Jobs claimed together with final writes, for the workers those writes free; started before any new claim. */
  #prefetched: Claimed[] = []
  /** When the piggybacked claim in flight was sent (performance.now()). */
  #piggybackSentAt = 0
  /** How many workers about to be freed had a claim made for them with their final write, so need no claim of their own. */
  #lookedAfter = 0
  /** How many idle workers the claim loop's claim in flight is for. */
  #loopClaimFor = 0
  /**
   * With rated kinds: how long (real ms) after a claim that found fewer
   * jobs than it asked for the pool looks again, since a full bucket or a
   * cooldown holds jobs back without any write to wake it when it
   * reopens. Undefined without rated kinds: then nothing here costs.
   */
  readonly #lookAgainMs: number | undefined
  /** The longest window of the rated kinds: how long after the last activity held jobs may still be waiting. */
  readonly #horizonMs: number = 0
  /** Until when (runner clock) a claim that finds too few jobs is followed by another: activity pushes it on. */
  #activeUntil = Number.NEGATIVE_INFINITY
  /** The clock's reading at the last claim: a look again while it has not moved (a held test clock) would find the same. */
  #lookedAt = Number.NaN
  #again: NodeJS.Timeout | undefined
  /** The clock reading the claim loop's last claim was sent with. */
  #lastClaimAt = 0
  /** The ends of the cooldowns this runner's jobs recorded, still to come, and the timer for the earliest. */
  readonly #cooldownEnds = new Set<number>()
  #cooldownTimer: { readonly at: number; readonly timer: NodeJS.Timeout } | undefined

  constructor(options: WorkerPoolOptions) {
    this.#driver = options.driver
    this.#runnerId = options.runnerId
    this.#kinds = options.kinds
    this.#kindNames = [...options.kinds.keys()]
    const ruled = [...options.kinds.values()].filter((k) => k.rule !== undefined).map((k) => [k.name, k.rule!] as const)
    this.#limits = ruled.length > 0 ? new Map(ruled) : undefined
    this.#claimsAgain = ruled.some(([, rule]) => rule.scopeConcurrency !== null)
    const rated = [...options.kinds.values()].flatMap((k) => (k.rate === null ? [] : [k.rate]))
    if (rated.length > 0) {
      // About the time one start's room takes to come back in the tightest window: a look no later than that
      // finds a reopened bucket within about one start's share of it, never after the fallback poll.
      const slot = Math.min(...rated.map((r) => r.periodMs / r.limit))
      this.#lookAgainMs = Math.min(options.pollMs, Math.max(LOOK_AGAIN_MIN_MS, Math.floor(slot)))
      this.#horizonMs = Math.max(...rated.map((r) => r.periodMs))
    }
    this.#gate = options.gate
    this.#logger = options.logger
    this.#clock = options.clock
    this.#onFatal = options.onFatal
    this.#mayClaim = options.mayClaim
    this.#idle = options.workers
    this.#completer = new Completer(options.driver, options.runnerId, options.logger, options.clock, this.#stopping.signal, this)
    this.#services = {
      driver: options.driver,
      runnerId: options.runnerId,
      completer: this.#completer,
      gate: options.gate,
      logger: options.logger,
      clock: options.clock,
      stopping: this.#stopping.signal,
      timeoutGraceMs: options.timeoutGraceMs,
      confirmAfterMs: options.confirmAfterMs,
      scheduled: options.scheduled,
      cooled: (until) => this.#cooled(until),
      onHandlerError: options.onHandlerError,
    }
  }

  /** Starts claiming; a pool without kinds claims nothing. */
  start(): void {
    if (this.#kindNames.length > 0) this.#loop ??= this.#claimLoop()
  }

  /** Tells an idle worker to look for a queued job. */
  wake(): void {
    // Something happened (an enqueue, a finished job, a poll): jobs a rate limit holds may be waiting.
    if (this.#lookAgainMs !== undefined) this.#activeUntil = Math.max(this.#activeUntil, this.#clock() + this.#horizonMs)
    this.#kicked = true
    this.#kick?.()
  }

  /**
   * After a claim that found `found` of the `wanted` jobs at `now`: with
   * rated kinds, when it found fewer, look again after #lookAgainMs,
   * while there was activity within the longest window (a bucket filled
   * then has room again within it); a claim that found jobs is activity.
   */
  #claimed(found: number, wanted: number, now: number): void {
    if (this.#lookAgainMs === undefined) return
    this.#lookedAt = now
    if (found > 0) this.#activeUntil = Math.max(this.#activeUntil, now + this.#horizonMs)
    if (found < wanted && now < this.#activeUntil) this.#armLookAgain()
  }

  #armLookAgain(): void {
    if (this.#again !== undefined || this.#stopping.signal.aborted) return
    this.#again = setTimeout(() => {
      this.#again = undefined
      if (this.#stopping.signal.aborted) return
      // A clock that has not moved since the last claim (a test's, held still): a claim would find the same. Wait on.
      if (this.#clock() === this.#lookedAt) return this.#armLookAgain()
      this.#kicked = true
      this.#kick?.()
    }, this.#lookAgainMs)
    this.#again.unref()
  }

  /** A job of this runner recorded a cooldown ending at `until`: look again then, for the jobs it held back here. */
  #cooled(until: number): void {
    if (this.#stopping.signal.aborted) return
    this.#cooldownEnds.add(until)
    this.#armCooldown()
  }

  #armCooldown(): void {
    if (this.#cooldownEnds.size === 0 || this.#stopping.signal.aborted) return
    const at = Math.min(...this.#cooldownEnds)
    if (this.#cooldownTimer !== undefined) {
      if (this.#cooldownTimer.at <= at) return
      clearTimeout(this.#cooldownTimer.timer)
    }
    const timer = setTimeout(() => {
      this.#cooldownTimer = undefined
      const now = this.#clock()
      // Not there yet by the runner's clock (a test's, held still, or a timer a little early): wait on.
      if (now >= at) {
        for (const end of [...this.#cooldownEnds]) if (end <= now) this.#cooldownEnds.delete(end)
        this.wake()
      }
      this.#armCooldown()
    }, Math.min(MAX_TIMER_MS, Math.max(1, at - this.#clock())))
    timer.unref()
    this.#cooldownTimer = { at, timer }
  }

  /** How many handlers are running now (one past its deadline that has not returned included: it keeps its worker). */
  get running(): number {
    return this.#runs.size
  }

  /**
   * Aborts the signals of the runs of the jobs among `ids` running here,
   * whose cancellation the database holds: each ends `cancelled` when its
   * handler returns (the final write reads the request). Every live run
   * of such a job is aborted, an earlier attempt still lingering too.
   */
  cancel(ids: readonly string[]): void {
    const wanted = new Set(ids)
    for (const run of this.#runs.keys()) {
      if (!wanted.has(run.job.id) || !run.cancel()) continue
      this.#logger.info({ job_id: run.job.id, kind: run.job.kind }, 'job cancellation requested: its signal is aborted')
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
    clearTimeout(this.#again)
    clearTimeout(this.#cooldownTimer?.timer)
    this.#cooldownEnds.clear()
    for (const run of this.#runs.keys()) run.abortForStop()
    this.#kick?.()
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)))
    try {
      if ((await Promise.race([this.#drain(), deadline])) !== 'timeout') return 0
    } finally {
      clearTimeout(timer)
    }
    let running = 0
    for (const run of this.#runs.keys()) {
      run.abandoned = true
      if (!run.returned) running++
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
      if (this.#runs.size === 0) break
      await Promise.all([...this.#runs.values()])
    }
    await this.#completer.idle()
    await this.#release(this.#prefetched.splice(0))
  }

  // Piggyback: the claim a batch of final writes carries.

  request(finishing: number): ClaimParams | undefined {
    if (this.#stopping.signal.aborted || !this.#mayClaim() || !this.#gate.tryEnter()) return undefined
    const idle = Math.max(0, this.#idle - this.#prefetched.length - this.#loopClaimFor)
    // This claim looks for work for every idle worker: the wakes so far are answered.
    if (idle > 0) this.#kicked = false
    this.#requested = finishing + idle
    this.#piggybackSentAt = performance.now()
    return { limit: finishing + idle, runnerId: this.#runnerId, kinds: this.#kindNames, limits: this.#limits }
  }

  take(jobs: ClaimedJob[], finishing: number): void {
    this.#gate.leave(jobs)
    const sentAt = this.#piggybackSentAt
    for (const job of jobs) this.#prefetched.push({ job, sentAt })
    this.#lookedAfter += finishing
    this.#claimed(jobs.length, this.#requested, this.#clock())
    if (this.#claimsAgain && jobs.length > 0 && jobs.length < this.#requested) this.wake()
    // Some may be for workers already idle: the claim loop starts them now, not at the next wake (a loop asleep after a timed-out handler's write would miss them).
    else if (jobs.length > finishing) this.#kick?.()
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
  async #release(claimed: readonly Claimed[]): Promise<void> {
    if (claimed.length === 0) return
    const jobs = claimed.map((c) => c.job)
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
      if (!this.#kicked || this.#idle === 0 || !this.#mayClaim()) {
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
      let jobs: Claimed[]
      const wanted = (this.#loopClaimFor = this.#idle)
      try {
        jobs = await this.#claim(wanted)
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
      this.#claimed(jobs.length, wanted, this.#lastClaimAt)
      if (this.#claimsAgain && jobs.length > 0 && this.#idle > 0) this.#kicked = true
    }
  }

  /** One claim through the gate, which first recovers what a lost claim may have taken. */
  async #claim(limit: number): Promise<Claimed[]> {
    // The common case enters at once, without a turn of the event loop.
    if (!this.#gate.tryEnter()) await this.#gate.enter()
    let jobs: ClaimedJob[] | undefined
    try {
      const sentAt = performance.now()
      const now = (this.#lastClaimAt = this.#clock())
      jobs = await this.#driver.jobClaim({ limit, runnerId: this.#runnerId, kinds: this.#kindNames, limits: this.#limits, now })
      return jobs.map((job) => ({ job, sentAt }))
    } finally {
      this.#gate.leave(jobs)
    }
  }

  /** Starts a claimed job on an idle worker, as a run of its own; when it ends, the worker looks for work again. */
  #start(claimed: Claimed): void {
    const kind = this.#kinds.get(claimed.job.kind)
    if (kind === undefined) {
      // Claims take only this pool's kinds; a driver that returned another is wrong, and the job waits for a runner that has it.
      this.#logger.error({ job_id: claimed.job.id, kind: claimed.job.kind }, 'claimed a job of a kind this runner has no handler for; putting it back')
      void this.#release([claimed])
      return
    }
    this.#idle--
    const run = new Run(claimed, kind, this.#services)
    const done = run
      .execute()
      // execute() handles every outcome itself; reaching here is a jobtable bug, and its text may quote job data.
      .catch(() => run.failInternal())
      .finally(() => {
        this.#runs.delete(run)
        this.#idle++
        if (this.#lookedAfter > 0) {
          // A claim was made with this job's final write: start what it found, claim nothing new.
          this.#lookedAfter--
          this.#kick?.()
        } else {
          this.wake()
        }
      })
    this.#runs.set(run, done)
  }
}
