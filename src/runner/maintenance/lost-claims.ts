import type { Logger } from '../../logger.js'
import type { ClaimGate } from '../claim-gate.js'
import { Periodic } from './periodic.js'

/**
 * Recovers the jobs of a claim whose answer was lost (see ClaimGate): the
 * next claim does it first, and this chore tries again every sweep
 * interval while it has not succeeded, so an idle runner does not leave
 * lost jobs marked running under it until its next claim.
 */
export class LostClaimRecovery extends Periodic {
  protected readonly what = 'recover lost claims'
  readonly #gate: ClaimGate

  constructor(gate: ClaimGate, intervalMs: number, logger: Logger, failed?: (err: unknown) => void) {
    super(intervalMs, logger, failed)
    this.#gate = gate
  }

  protected async pass(): Promise<void> {
    if (this.#gate.inDoubt) await this.#gate.recover()
  }
}
