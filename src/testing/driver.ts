import type { ClaimedJob, ClaimParams, Driver, FinishAndClaimParams, FinishAndClaimResult, InsertResult, JobFinish, NewJob } from '../driver.js'
import { isThenable } from '../payload.js'

/** What the kit knows of a job from its insert: what the driver's reads do not return. */
export interface Stored {
  /** The payload as JSON text. */
  readonly payload: string
  readonly scope: string | null
}

/**
 * The driver of a test kit: any jobtable driver (the kit's own SQLite
 * one, or PostgreSQL, or one a test wraps itself), every statement its
 * own, with one difference. Its claims take jobs only while the kit
 * drains, and at most the drain's budget of them in all; outside a drain
 * a claim finds nothing, so a test sees its jobs queued until it drains
 * them. Every write that can change what is queued or running tells the
 * kit (`changed`), so a drain waits for the database, not for a clock.
 * It also keeps, for each job stored through it, the payload and scope
 * it was stored with: the driver's reads return neither.
 *
 * `driver` is a Proxy of the real driver: every method and property not
 * named here is the real driver's own (its `database`, its `schema`), and
 * an optional method the real driver lacks stays absent.
 */
export class KitDriver<D extends Driver> {
  /** What the kit's runner is given: the real driver, gated. */
  readonly driver: D
  /** Called after every write that may change what is queued or running. */
  changed: () => void = () => undefined
  /** The payload and scope of each job stored through this driver, by id (a job inserted in a transaction later rolled back included: it is never read). */
  readonly stored = new Map<string, Stored>()
  #open = false
  #budget = 0
  #inFlight = 0
  #moves = 0
  #onClaim: (jobs: readonly ClaimedJob[]) => void = () => undefined

  constructor(real: D) {
    const overrides = this.#overrides(real)
    /** Each function handed out once, so `driver.x === driver.x` holds as on the real driver. */
    const bound = new Map<PropertyKey, unknown>()
    this.driver = new Proxy(real, {
      get: (target, prop) => {
        // The real driver as the receiver: its methods and getters read private fields, which the proxy has not.
        const value = Reflect.get(target, prop, target) as unknown
        if (typeof value !== 'function') return value
        let fn = bound.get(prop)
        if (fn === undefined) {
          fn = Object.hasOwn(overrides, prop) ? overrides[prop as keyof typeof overrides] : (value as (...args: unknown[]) => unknown).bind(target)
          bound.set(prop, fn)
        }
        return fn
      },
    })
  }

  /** Lets claims through, `budget` jobs at most in all, each reported to `onClaim`. */
  openClaims(budget: number, onClaim: (jobs: readonly ClaimedJob[]) => void): void {
    this.#open = true
    this.#budget = budget
    this.#onClaim = onClaim
  }

  /** Claims find nothing from now on. */
  closeClaims(): void {
    this.#open = false
    this.#budget = 0
    this.#onClaim = () => undefined
  }

  /** How many more jobs claims may take in this drain. */
  get budget(): number {
    return this.#budget
  }

  /** How many claims are on their way to the database. */
  get claimsInFlight(): number {
    return this.#inFlight
  }

  /**
   * Counts every claim sent and every claim answered: a reader of the
   * database that sees it unchanged across its read, and no claim in
   * flight after it, knows no claim moved a job while it read.
   */
  get claimMoves(): number {
    return this.#moves
  }

  /** Takes up to `limit` of the budget for one claim; 0 when claims are closed. */
  #reserve(limit: number): number {
    if (!this.#open) return 0
    const reserved = Math.max(0, Math.min(limit, this.#budget))
    this.#budget -= reserved
    return reserved
  }

  /** Gives back what a claim reserved and did not take, and reports what it took. */
  #settle(reserved: number, jobs: readonly ClaimedJob[]): void {
    if (this.#open) this.#budget += reserved - jobs.length
    if (jobs.length > 0) this.#onClaim(jobs)
  }

  /** Keeps the payload and scope of each job of an insert that was stored (not refused for a unique key another job held). */
  #remember(jobs: readonly NewJob[], result: InsertResult): void {
    jobs.forEach((job, i) => {
      if (result === undefined || result[i] === null || result[i] === undefined) this.stored.set(job.id, { payload: job.payload, scope: job.scope })
    })
  }

  /** The methods the kit changes, each calling the real driver's own. */
  #overrides(real: Driver) {
    /** Calls `write`, then tells the kit, however it ended. */
    const tell = async <T>(write: () => Promise<T>): Promise<T> => {
      try {
        return await write()
      } finally {
        this.changed()
      }
    }
    const overrides = {
      jobClaim: async (params: ClaimParams & { now: number }): Promise<ClaimedJob[]> => {
        const reserved = this.#reserve(params.limit)
        if (reserved === 0) return []
        this.#inFlight++
        this.#moves++
        let jobs: ClaimedJob[] = []
        try {
          jobs = await real.jobClaim({ ...params, limit: reserved })
          return jobs
        } finally {
          this.#inFlight--
          this.#moves++
          this.#settle(reserved, jobs)
          // A claim that took nothing changed nothing: telling the kit would only make it look, and wake the runner, again.
          if (jobs.length > 0) this.changed()
        }
      },
      jobFinishManyAndClaim: async (params: FinishAndClaimParams): Promise<FinishAndClaimResult> => {
        const reserved = this.#reserve(params.claim.limit)
        if (reserved === 0) {
          // The final writes still land, in the driver's own statement; only the claim is held back.
          const applied = await tell(() => real.jobFinishMany({ finishes: params.finishes, now: params.now, signal: params.signal }))
          return { applied, claimed: [] }
        }
        this.#inFlight++
        this.#moves++
        let claimed: ClaimedJob[] = []
        try {
          const result = await real.jobFinishManyAndClaim!({ ...params, claim: { ...params.claim, limit: reserved } })
          claimed = result.claimed
          return result
        } finally {
          this.#inFlight--
          this.#moves++
          this.#settle(reserved, claimed)
          this.changed()
        }
      },
      jobFinishMany: (params: { finishes: readonly JobFinish[]; now: number; signal?: AbortSignal }) => tell(() => real.jobFinishMany(params)),
      jobInsertMany: (params: { jobs: readonly NewJob[]; now: number }) =>
        tell(async () => {
          const result = await real.jobInsertMany(params)
          this.#remember(params.jobs, result)
          return result
        }),
      // Synchronous on SQLite (inside the application's transaction), a promise on PostgreSQL: kept as it is.
      jobInsertTx: (params: Parameters<Driver['jobInsertTx']>[0]): ReturnType<Driver['jobInsertTx']> => {
        let result: ReturnType<Driver['jobInsertTx']>
        try {
          result = real.jobInsertTx(params)
        } catch (err) {
          this.changed()
          throw err
        }
        if (!isThenable(result)) {
          this.#remember(params.jobs, result as InsertResult)
          this.changed()
          return result
        }
        return tell(async () => {
          const inserted = await (result as Promise<InsertResult>)
          this.#remember(params.jobs, inserted)
          return inserted
        })
      },
      scheduleAdvance: (params: Parameters<Driver['scheduleAdvance']>[0]) =>
        tell(async () => {
          const advanced = await real.scheduleAdvance(params)
          // Stored jobs are not told apart from those a live job's unique key refused: one never read is kept harmlessly.
          if (advanced.stored > 0) this.#remember(params.jobs, undefined)
          return advanced
        }),
      jobRelease: (params: Parameters<Driver['jobRelease']>[0]) => tell(() => real.jobRelease(params)),
      jobRequeueLost: (params: Parameters<Driver['jobRequeueLost']>[0]) => tell(() => real.jobRequeueLost(params)),
      jobPromoteDue: async (params: Parameters<Driver['jobPromoteDue']>[0]) => {
        const promoted = await real.jobPromoteDue(params)
        if (promoted > 0) this.changed()
        return promoted
      },
      jobCancelWaiting: (params: Parameters<Driver['jobCancelWaiting']>[0]) => tell(() => real.jobCancelWaiting(params)),
      jobRequestCancel: (params: Parameters<Driver['jobRequestCancel']>[0]) => tell(() => real.jobRequestCancel(params)),
      jobQueueNow: async (params: Parameters<Driver['jobQueueNow']>[0]) => {
        const result = await real.jobQueueNow(params)
        if (result === 'queued') this.changed()
        return result
      },
      // A resumed kind's queued jobs become runnable; a paused one's stop being so.
      kindPause: (params: Parameters<Driver['kindPause']>[0]) => tell(() => real.kindPause(params)),
      kindResume: (params: Parameters<Driver['kindResume']>[0]) => tell(() => real.kindResume(params)),
      // A cleared cooldown lets the jobs it held start. (The other reads of rate limits and cooldowns pass through as they are.)
      cooldownClear: (params: Parameters<Driver['cooldownClear']>[0]) => tell(() => real.cooldownClear(params)),
      jobFailInterrupted: (params: Parameters<Driver['jobFailInterrupted']>[0]) => tell(() => real.jobFailInterrupted(params)),
      jobFailUnserved: (params: Parameters<Driver['jobFailUnserved']>[0]) => tell(() => real.jobFailUnserved(params)),
    }
    return overrides
  }
}
