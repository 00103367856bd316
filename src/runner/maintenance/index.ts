import type { Driver } from '../../driver.js'
import type { Logger } from '../../logger.js'
import type { ClaimGate } from '../claim-gate.js'
import { InterruptedSweep } from './interrupted.js'
import { LostClaimRecovery } from './lost-claims.js'
import { UnservedKinds } from './unserved-kinds.js'

/**
 * The runner's chores around the claim, independent of the driver: one
 * small service each (the interrupted sweep, lost-claim recovery, the
 * check for kinds no runner handles), each with its own timer. Later
 * chores (retention, scheduling, cron) join them here.
 */
export class Maintenance {
  readonly #interrupted: InterruptedSweep
  readonly #services: { start(): void; stop(): Promise<void> }[]

  constructor(options: { driver: Driver; runnerId: string; gate: ClaimGate; unknownKindGraceMs: number; logger: Logger; clock: () => number }) {
    const { driver, runnerId, gate, unknownKindGraceMs, logger, clock } = options
    this.#interrupted = new InterruptedSweep(driver, runnerId, logger, clock)
    this.#services = [
      this.#interrupted,
      new LostClaimRecovery(gate, driver.capabilities.liveness.sweepMs, logger),
      new UnservedKinds(driver, unknownKindGraceMs, logger, clock),
    ]
  }

  /** The first sweep, before any claim: its error fails start(). */
  sweepNow(): Promise<void> {
    return this.#interrupted.pass()
  }

  start(): void {
    for (const s of this.#services) s.start()
  }

  async stop(): Promise<void> {
    await Promise.all(this.#services.map((s) => s.stop()))
  }
}
