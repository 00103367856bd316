import type { ClaimedJob, ClaimParams, FinishAndClaimParams, FinishAndClaimResult, InsertResult, JobFinish, NewJob } from '../driver.js'
import { SqliteDriver } from '../sqlite/driver.js'

/**
 * The SQLite driver of a test kit: the production driver, every statement
 * its own, with one difference. Its claims take jobs only while the kit
 * drains, and at most the drain's budget of them in all; outside a drain
 * a claim finds nothing, so a test sees its jobs queued until it drains
 * them. Every write that can change what is queued or running tells the
 * kit (`changed`), so a drain waits for the database, not for a clock.
 */
export class KitDriver extends SqliteDriver {
  #open = false
  #budget = 0
  #inFlight = 0
  #onClaim: (jobs: readonly ClaimedJob[]) => void = () => undefined
  /** Called after every write that may change what is queued or running. */
  changed: () => void = () => undefined

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

  override async jobClaim(params: ClaimParams & { now: number }): Promise<ClaimedJob[]> {
    const reserved = this.#reserve(params.limit)
    if (reserved === 0) return []
    this.#inFlight++
    let jobs: ClaimedJob[] = []
    try {
      jobs = await super.jobClaim({ ...params, limit: reserved })
      return jobs
    } finally {
      this.#inFlight--
      this.#settle(reserved, jobs)
      // A claim that took nothing changed nothing: telling the kit would only make it look, and wake the runner, again.
      if (jobs.length > 0) this.changed()
    }
  }

  override async jobFinishManyAndClaim(params: FinishAndClaimParams): Promise<FinishAndClaimResult> {
    const reserved = this.#reserve(params.claim.limit)
    if (reserved === 0) {
      // The final writes still land, in the driver's own statement; only the claim is held back.
      const applied = await this.jobFinishMany({ finishes: params.finishes, now: params.now, signal: params.signal })
      return { applied, claimed: [] }
    }
    this.#inFlight++
    let claimed: ClaimedJob[] = []
    try {
      const result = await super.jobFinishManyAndClaim({ ...params, claim: { ...params.claim, limit: reserved } })
      claimed = result.claimed
      return result
    } finally {
      this.#inFlight--
      this.#settle(reserved, claimed)
      this.changed()
    }
  }

  override async jobFinishMany(params: { finishes: readonly JobFinish[]; now: number; signal?: AbortSignal }): Promise<boolean[]> {
    try {
      return await super.jobFinishMany(params)
    } finally {
      this.changed()
    }
  }

  override async jobInsertMany(params: { jobs: readonly NewJob[]; now: number }): Promise<InsertResult> {
    try {
      return await super.jobInsertMany(params)
    } finally {
      this.changed()
    }
  }

  override async jobRelease(params: { jobs: readonly { id: string; attempt: number }[]; now: number }): Promise<void> {
    try {
      return await super.jobRelease(params)
    } finally {
      this.changed()
    }
  }

  override async jobRequeueLost(params: { runnerId: string; keep: readonly string[]; now: number }): Promise<number> {
    try {
      return await super.jobRequeueLost(params)
    } finally {
      this.changed()
    }
  }

  override async jobPromoteDue(params: { now: number; limit: number }): Promise<number> {
    const promoted = await super.jobPromoteDue(params)
    if (promoted > 0) this.changed()
    return promoted
  }

  override async jobCancel(params: { id: string; scope?: string | null; now: number }): ReturnType<SqliteDriver['jobCancel']> {
    try {
      return await super.jobCancel(params)
    } finally {
      this.changed()
    }
  }

  override async jobRetryNow(params: { id: string; scope?: string | null; now: number }): ReturnType<SqliteDriver['jobRetryNow']> {
    const result = await super.jobRetryNow(params)
    if (result === 'queued') this.changed()
    return result
  }

  override async jobFailInterrupted(params: { runnerId: string; error: string; now: number }): Promise<{ failed: number; requeued: number }> {
    try {
      return await super.jobFailInterrupted(params)
    } finally {
      this.changed()
    }
  }

  override async jobFailUnserved(params: { createdBefore: number; error: string; now: number }): Promise<number> {
    try {
      return await super.jobFailUnserved(params)
    } finally {
      this.changed()
    }
  }
}
