import type pg from 'pg'
import type { ClaimParams, KindRule, RateRule } from '../driver.js'
import { bucketLocks, type FullBuckets, ledgerKeepMs, pickWithinRates, ratedKinds, type RateCandidate } from '../rate-limit.js'
import type { Queries } from './queries.js'

/** Runs one statement in the caller's transaction (see PostgresDriver's #transaction). */
export type Query = <R extends object>(text: string, values: unknown[]) => Promise<pg.QueryResult<R>>

/** A row of a claim's result, as claimJobs and claimRated name its columns. */
export interface ClaimedRow {
  readonly seq: string
  readonly id: string
  readonly kind: string
  readonly payload: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly timeoutMs: number | null
  readonly traceContext: string | null
  readonly readyAt: number
  readonly scope: string | null
}

/**
 * How a runner's claims split its kinds, made once per kinds array and
 * limits: the kinds without a rate rule, with claim_jobs' arrays (each
 * one's concurrency and scopeConcurrency, null for none, and fair flag),
 * and the rated kinds, which a rated claim takes (see claimRated).
 */
export interface ClaimPlan {
  readonly limits: ClaimParams['limits']
  readonly unrated: readonly [string[], (number | null)[], (number | null)[], boolean[]]
  readonly rated: readonly { kind: string; rate: RateRule }[]
}

export function claimPlan(kinds: readonly string[], limits: ClaimParams['limits']): ClaimPlan {
  const rated = ratedKinds(kinds, limits)
  const ratedNames = new Set(rated.map((r) => r.kind))
  const unrated = kinds.filter((k) => !ratedNames.has(k))
  return {
    limits,
    rated,
    unrated: [
      unrated,
      unrated.map((k) => limits?.get(k)?.concurrency ?? null),
      unrated.map((k) => limits?.get(k)?.scopeConcurrency ?? null),
      unrated.map((k) => limits?.get(k)?.fair === true),
    ],
  }
}

/** A rated claim's request: `open`, the plan's rated kinds whose bucket is not known full. */
export interface RatedClaim {
  readonly limit: number
  readonly runnerId: string
  readonly now: number
  readonly plan: ClaimPlan
  readonly open: readonly { kind: string; rate: RateRule }[]
}

/** A row of ratedCandidates (see there): part 'u' a bucket's use, 'k' a bucket cooling down, 'j' a rated kind's candidate, 'o' another kind's. */
interface CandidateRow {
  readonly part: 'u' | 'k' | 'j' | 'o'
  readonly bucket: string | null
  readonly used: number | null
  readonly oldest: number | null
  readonly seq: string | null
  readonly kind: string | null
  readonly scope: string | null
  readonly priority: number | null
  readonly age: number | null
}

/**
 * Claims in the caller's transaction (READ COMMITTED, on one connection):
 * the open rated kinds within their rate limits and the unrated kinds of
 * the plan, `limit` jobs at most in all, by priority then age across them all. Takes the
 * advisory locks of the rated kinds' buckets in bucketLocks' order and
 * then those of its capped rated kinds (lockRated), reads the buckets' use,
 * the cooldowns and the candidates after them (ratedCandidates), picks
 * within the rates (pickWithinRates), and marks, records and claims the
 * rest in one statement (claimRated). A named bucket left with no room is
 * recorded in `full`, so the next claims leave its kinds out without a
 * transaction until its oldest claim leaves the window.
 */
export async function claimRated(query: Query, q: Queries, full: FullBuckets, claim: RatedClaim): Promise<ClaimedRow[]> {
  const { limit, runnerId, now, plan, open } = claim
  const rules = plan.limits!
  const rule = (kind: string): KindRule => rules.get(kind)!
  const capped = open.filter(({ kind }) => rule(kind).concurrency !== null || rule(kind).scopeConcurrency !== null).map(({ kind }) => kind)
  await query(q.lockRated, [bucketLocks(open), capped])
  const { rows } = await query<CandidateRow>(q.ratedCandidates, [
    open.map(({ kind }) => kind),
    open.map(({ kind }) => rule(kind).concurrency),
    open.map(({ kind }) => rule(kind).scopeConcurrency),
    open.map(({ kind }) => rule(kind).fair === true),
    open.map(({ rate }) => rate.bucket),
    open.map(({ rate }) => rate.limit),
    open.map(({ rate }) => rate.periodMs),
    limit,
    now,
    plan.unrated[0],
  ])
  const used = new Map<string, number>()
  const oldest = new Map<string, number>()
  const cooling = new Set<string>()
  const candidates: (RateCandidate<string> & { age: number })[] = []
  for (const r of rows) {
    if (r.part === 'o') candidates.push({ seq: r.seq!, kind: r.kind!, scope: r.scope, priority: r.priority!, age: r.age! })
    else if (r.part === 'u') {
      used.set(r.bucket!, r.used!)
      oldest.set(r.bucket!, r.oldest!)
    } else if (r.part === 'k') cooling.add(r.bucket!)
    else candidates.push({ seq: r.seq!, kind: r.kind!, scope: r.scope, priority: r.priority!, age: r.age! })
  }
  // Claim order across all the claim's kinds, read in one snapshot: priority, then age (each kind's own order is kept in its ages).
  candidates.sort((a, b) => b.priority - a.priority || a.age - b.age || Number(a.seq) - Number(b.seq))
  const chosen = pickWithinRates({ candidates, rules, used, cooling, limit })
  // The rated picks are marked by seq; the other kinds' are claimed by claim_jobs, as many as were picked (their own
  // rules, caps and fair order applied there, so it may take fewer).
  const rated = new Set(open.map(({ kind }) => kind))
  const kindOf = new Map(candidates.map((c) => [c.seq, c.kind]))
  const picks = chosen.filter((p) => rated.has(kindOf.get(p.seq)!))
  const others = chosen.length - picks.length
  const named = new Map<string, number>()
  const perScope = new Map<string, number>()
  for (const { kind, rate } of open) {
    if (rate.bucket === null) perScope.set(kind, now - ledgerKeepMs(rate.periodMs))
    else named.set(rate.bucket, now - ledgerKeepMs(rate.periodMs))
  }
  const [unrated, caps, scopeCaps, fair] = plan.unrated
  const claimed = (
    await query<ClaimedRow>(q.claimRated, [
      picks.map((p) => p.seq),
      picks.map((p) => p.bucket),
      runnerId,
      now,
      [...named.keys()],
      [...named.values()],
      [...perScope.keys()],
      [...perScope.values()],
      unrated,
      caps,
      scopeCaps,
      fair,
      others,
    ])
  ).rows
  recordFull(full, open, rows, picks, claimed, now)
  return claimed
}

/** Records in `full` each named bucket this claim read that has no room left: until its oldest claim in the window leaves it. */
function recordFull(
  full: FullBuckets,
  open: readonly { kind: string; rate: RateRule }[],
  rows: readonly CandidateRow[],
  picks: readonly { seq: string; bucket: string }[],
  claimed: readonly ClaimedRow[],
  now: number,
): void {
  const cooling = new Set(rows.filter((r) => r.part === 'k').map((r) => r.bucket!))
  const use = new Map(rows.filter((r) => r.part === 'u').map((r) => [r.bucket!, { used: r.used!, oldest: r.oldest! }]))
  const marked = new Set(claimed.map((c) => c.seq))
  const taken = new Map<string, number>()
  for (const p of picks) if (marked.has(p.seq)) taken.set(p.bucket, (taken.get(p.bucket) ?? 0) + 1)
  const seen = new Set<string>()
  for (const { rate } of open) {
    const bucket = rate.bucket
    if (bucket === null || seen.has(bucket) || cooling.has(bucket)) continue
    seen.add(bucket)
    const read = use.get(bucket)
    const took = taken.get(bucket) ?? 0
    if ((read?.used ?? 0) + took < rate.limit) continue
    const first = read === undefined ? now : took > 0 ? Math.min(read.oldest, now) : read.oldest
    full.full(bucket, first + rate.periodMs)
  }
}
