import { rateBucket, type KindRule, type RateRule } from './driver.js'

/**
 * The part of rate-limited claims both drivers share (one owner for the
 * rule): which buckets a claim must lock and read, and which of the
 * candidates a claim found it may take. A driver reads the buckets' use
 * and the cooldowns in force, fetches candidates past what it may not
 * take, and calls `pickWithinRates`, all in one transaction.
 */

/** How long past its window a claim record is kept: a claim whose clock lags (it waited for a lock) still counts it. */
export function ledgerKeepMs(periodMs: number): number {
  return 2 * periodMs + 60_000
}

/** The rated kinds among `kinds`, with their rules, in the order given. */
export function ratedKinds(kinds: readonly string[], rules: ReadonlyMap<string, KindRule> | undefined): { kind: string; rate: RateRule }[] {
  const rated: { kind: string; rate: RateRule }[] = []
  if (rules === undefined) return rated
  for (const kind of kinds) {
    const rate = rules.get(kind)?.rate
    if (rate !== null && rate !== undefined) rated.push({ kind, rate })
  }
  return rated
}

/**
 * The lock names a rated claim takes, sorted, each once: a named bucket's
 * name, or `<kind>@*` for a kind's per-scope buckets (one lock for all
 * its scopes). Taken before any other lock of the claim, always in this
 * order, so two rated claims never wait on each other in a cycle.
 */
export function bucketLocks(rated: readonly { kind: string; rate: RateRule }[]): string[] {
  const names = new Set<string>()
  for (const { kind, rate } of rated) names.add(rate.bucket ?? `${kind}@*`)
  return [...names].sort()
}

/** A job a rated claim may take, as the driver's candidate query found it. */
export interface RateCandidate<Seq> {
  readonly seq: Seq
  readonly kind: string
  readonly scope: string | null
  readonly priority: number
}

/**
 * Takes candidates best first (`candidates` already in claim order:
 * priority, then each kind's own order) while `limit` allows, skipping a
 * candidate whose bucket is cooling down or has no room left: room is the
 * bucket's rule limit less `used` (claims in its window, as read in the
 * claim's transaction) less what this pick took. Returns what it took, in
 * order, and the bucket of each (the ledger rows to record).
 */
export function pickWithinRates<Seq>(params: {
  readonly candidates: readonly RateCandidate<Seq>[]
  readonly rules: ReadonlyMap<string, KindRule>
  readonly used: ReadonlyMap<string, number>
  readonly cooling: ReadonlySet<string>
  readonly limit: number
}): { seq: Seq; bucket: string }[] {
  const taken: { seq: Seq; bucket: string }[] = []
  const room = new Map<string, number>()
  for (const c of params.candidates) {
    if (taken.length >= params.limit) break
    const rate = params.rules.get(c.kind)?.rate
    const bucket = rateBucket(c.kind, c.scope, rate)
    if (params.cooling.has(bucket)) continue
    if (rate === null || rate === undefined) {
      taken.push({ seq: c.seq, bucket })
      continue
    }
    const left = room.get(bucket) ?? rate.limit - (params.used.get(bucket) ?? 0)
    if (left <= 0) {
      room.set(bucket, 0)
      continue
    }
    room.set(bucket, left - 1)
    taken.push({ seq: c.seq, bucket })
  }
  return taken
}

/**
 * Per driver: until when each rated bucket is known to be full, so claims
 * leave its kinds out without reading the ledger again. Safe across
 * processes: other claims only use room up, and a claim record leaves the
 * window no sooner than its time plus the period. Cooldowns are not kept
 * here (an operator may clear one at any time).
 */
export class FullBuckets {
  readonly #until = new Map<string, number>()

  /** Records that `bucket` (a lock name of bucketLocks) has no room before `until`. */
  full(bucket: string, until: number): void {
    this.#until.set(bucket, until)
  }

  /** The rated kinds whose bucket is not known to be full at `now`. */
  open<T extends { kind: string; rate: RateRule }>(rated: readonly T[], now: number): T[] {
    if (this.#until.size === 0) return [...rated]
    return rated.filter(({ kind, rate }) => {
      const name = rate.bucket ?? `${kind}@*`
      const until = this.#until.get(name)
      if (until === undefined) return true
      if (until > now) return false
      this.#until.delete(name)
      return true
    })
  }
}
