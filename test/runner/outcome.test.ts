import { describe, expect, it } from 'vitest'
import { CODE_INTERNAL, CODE_TIMEOUT } from 'jobtable'
import type { Outcome } from '../../src/kind.js'
import { decideEnd, finishOf, type RunAsked, type RunEnd } from '../../src/runner/outcome.js'

/*
 * The outcome of a run, exhaustively: every handler outcome, every
 * combination of what was asked meanwhile (cancel, stop, abandon), with
 * and without a retried code and an attempt left. The oracle is written
 * out as the rules the README states, independently of decideEnd's order.
 */

const NOW = 1_000_000
const BACKOFF = 250

const outcomes: [string, Outcome][] = [
  ['returned', { result: '{"ok":true}' }],
  ['declared failure', { code: 'provider_unavailable', reason: 'handler failure' }],
  ['threw', { code: CODE_INTERNAL, reason: 'handler error' }],
  ['timed out (or lingered past its deadline)', { code: CODE_TIMEOUT, reason: 'deadline passed' }],
  ['snoozed', { snoozeMs: 5_000 }],
  ['rate limited', { rateLimited: { key: 'provider:openai', until: NOW + 7_000 } }],
]

const booleans = [false, true]

/** What the README promises, rule by rule. */
function expected(outcome: Outcome, asked: RunAsked, retried: boolean, attemptsLeft: boolean): RunEnd {
  // A run stop() stopped waiting for writes nothing: the job fails as interrupted at the next start.
  if (asked.abandoned) return { type: 'interrupted', why: 'abandoned' }
  // A cancelled job ends cancelled whatever its handler did, keeping a result it returned, and the provider's reset it reported.
  if (asked.cancelled) {
    if ('rateLimited' in outcome) return { type: 'cancelled', result: null, cooldown: outcome.rateLimited }
    return { type: 'cancelled', result: 'result' in outcome ? outcome.result : null }
  }
  if ('result' in outcome) return { type: 'succeeded', result: outcome.result }
  // A snooze gives its attempt back, even while stopping: it is the handler's own answer.
  if ('snoozeMs' in outcome) return { type: 'snoozed', runAt: NOW + outcome.snoozeMs }
  // So does a rate limit, due at the cooldown's end, which its write records.
  if ('rateLimited' in outcome) return { type: 'snoozed', runAt: outcome.rateLimited.until, cooldown: outcome.rateLimited }
  // A failure during shutdown is most likely the stop's own abort: it must not use up the job.
  if (asked.stopping) return { type: 'interrupted', why: 'stopping' }
  if (retried && attemptsLeft) return { type: 'retry', code: outcome.code, reason: outcome.reason, runAt: NOW + BACKOFF }
  return { type: 'failed', code: outcome.code, reason: outcome.reason }
}

describe('decideEnd: every outcome of a run', () => {
  const rows: [string, Outcome, RunAsked, boolean, boolean][] = []
  for (const [name, outcome] of outcomes)
    for (const cancelled of booleans)
      for (const stopping of booleans)
        for (const abandoned of booleans)
          for (const retried of booleans)
            for (const attemptsLeft of booleans) rows.push([name, outcome, { cancelled, stopping, abandoned }, retried, attemptsLeft])

  it(`covers ${rows.length} cases`, () => expect(rows).toHaveLength(outcomes.length * 32))

  it.each(rows)('%s, asked %j, retried %s, attempts left %s', (_name, outcome, asked, retried, attemptsLeft) => {
    const policy = { attempt: 2, maxAttempts: attemptsLeft ? 3 : 2, kind: { retries: () => retried, backoffMs: (a: number) => (a === 2 ? BACKOFF : -1) }, now: NOW }
    expect(decideEnd(outcome, asked, policy)).toEqual(expected(outcome, asked, retried, attemptsLeft))
  })
})

describe('finishOf: one final write per end, in the driver’s vocabulary', () => {
  it('names every end; interrupted writes nothing', () => {
    expect(finishOf({ type: 'succeeded', result: '1' }, 'j', 3)).toEqual({ id: 'j', attempt: 3, status: 'succeeded', result: '1', error: null, runAt: null })
    expect(finishOf({ type: 'failed', code: 'x', reason: 'r' }, 'j', 3)).toEqual({ id: 'j', attempt: 3, status: 'failed', result: null, error: 'x', runAt: null })
    expect(finishOf({ type: 'cancelled', result: null }, 'j', 3)).toEqual({ id: 'j', attempt: 3, status: 'cancelled', result: null, error: null, runAt: null })
    expect(finishOf({ type: 'retry', code: 'x', reason: 'r', runAt: 9 }, 'j', 3)).toEqual({ id: 'j', attempt: 3, status: 'retry', result: null, error: null, runAt: 9 })
    expect(finishOf({ type: 'snoozed', runAt: 9 }, 'j', 3)).toEqual({ id: 'j', attempt: 3, status: 'snoozed', result: null, error: null, runAt: 9 })
    expect(finishOf({ type: 'interrupted', why: 'stopping' }, 'j', 3)).toBeUndefined()
  })

  it('carries a rate limit’s cooldown in its snooze, or in the cancel that replaced it; no other write has one', () => {
    const cooldown = { key: 'provider:openai', until: 9 }
    expect(finishOf({ type: 'snoozed', runAt: 9, cooldown }, 'j', 3)).toStrictEqual({ id: 'j', attempt: 3, status: 'snoozed', result: null, error: null, runAt: 9, cooldown })
    expect(finishOf({ type: 'cancelled', result: null, cooldown }, 'j', 3)).toStrictEqual({ id: 'j', attempt: 3, status: 'cancelled', result: null, error: null, runAt: null, cooldown })
    expect(finishOf({ type: 'snoozed', runAt: 9 }, 'j', 3)).not.toHaveProperty('cooldown')
    expect(finishOf({ type: 'succeeded', result: '1' }, 'j', 3)).not.toHaveProperty('cooldown')
  })
})
