import type { ClaimedJob, DriverHotPath } from '../driver.js'

/**
 * Every claim a runner makes passes through here, so that a claim whose
 * answer was lost can never start a job twice, on any driver.
 *
 * A claim that fails may still have committed (the connection dropped
 * after the database marked the jobs running, or the client gave up
 * waiting): its jobs are then running under this runner, and no handler
 * has seen them. The gate marks the runner in doubt; before the next
 * claim, and from the maintenance chore until it succeeds, it waits until
 * no claim is in flight and puts back in the queue every job running
 * under this runner that it does not hold (`held`: every job a claim
 * handed it that is not yet finished or released). Claims wait while it
 * does: a recovery racing a claim could put back, and so hand out twice,
 * a job that claim had just taken.
 */
export class ClaimGate {
  readonly #driver: DriverHotPath
  readonly #runnerId: string
  readonly #clock: () => number
  /** The jobs this runner holds: claimed, and not yet finished, released, or lost to the fence. */
  readonly held = new Set<string>()
  #inFlight = 0
  #quiet: (() => void)[] = []
  #inDoubt = false
  #recovering: Promise<void> | undefined

  constructor(driver: DriverHotPath, runnerId: string, clock: () => number) {
    this.#driver = driver
    this.#runnerId = runnerId
    this.#clock = clock
  }

  /** Whether a failed claim may have taken jobs this runner does not know of. */
  get inDoubt(): boolean {
    return this.#inDoubt
  }

  /** Enters for a claim now, or returns false while a recovery is needed or under way. */
  tryEnter(): boolean {
    if (this.#inDoubt || this.#recovering !== undefined) return false
    this.#inFlight++
    return true
  }

  /** Enters for a claim, first recovering when in doubt; rejects with the recovery's database error. */
  async enter(): Promise<void> {
    while (!this.tryEnter()) await this.recover()
  }

  /** Leaves after a claim: with its jobs, now held, or undefined when it failed (the runner is then in doubt). */
  leave(jobs: readonly ClaimedJob[] | undefined): void {
    if (jobs === undefined) this.#inDoubt = true
    else for (const job of jobs) this.held.add(job.id)
    if (--this.#inFlight === 0) for (const resolve of this.#quiet.splice(0)) resolve()
  }

  /** Puts back what a lost claim may have taken (see the class comment); joins a recovery under way. */
  recover(): Promise<void> {
    this.#recovering ??= this.#recover().finally(() => (this.#recovering = undefined))
    return this.#recovering
  }

  async #recover(): Promise<void> {
    if (this.#inFlight > 0) await new Promise<void>((resolve) => this.#quiet.push(resolve))
    if (!this.#inDoubt) return
    await this.#driver.jobRequeueLost({ runnerId: this.#runnerId, keep: [...this.held], now: this.#clock() })
    this.#inDoubt = false
  }
}
