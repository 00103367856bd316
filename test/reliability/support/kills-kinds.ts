import { z } from 'zod'
import { defineKind } from 'jobtable'

/*
 * The kinds of the crash tests (kill-steps, random-kills, stale-worker),
 * defined once: the test process enqueues them, kills-worker.ts runs them.
 * Every handler records its start in the worker's ledger first.
 */

const payload = z.strictObject({ ms: z.number().int() })

/** Publishes a partial result, waits `ms`, succeeds with `{ ok: true }`. The target of most kill steps. */
export const plain = defineKind('plain', { payload, result: (r: { ok: boolean }) => r })

/** Fails with `flaky` at its first attempt, retried once after 20 ms; succeeds at its second. */
export const flaky = defineKind('flaky', {
  payload,
  failures: ['flaky'],
  retry: { maxAttempts: 2, codes: ['flaky'], backoff: { baseMs: 20, maxMs: 20 } },
})

/** Idempotent: a crash queues it again (3 attempts) instead of failing it. Waits `ms`, succeeds. */
export const idem = defineKind('idem', { payload, idempotent: true })

/** Runs until its signal aborts (a cancellation), then returns. */
export const hold = defineKind('hold', { payload })

/** The stale worker's kind: publishes a partial result (its refusal is recorded), succeeds. */
export const stale = defineKind('stale', { payload, result: (r: { ok: boolean }) => r })

/** The random kills' kinds: wait `ms`, succeed. `work_v2` is the kind an older deploy lacks. */
export const work = defineKind('work', { payload })
export const workV2 = defineKind('work_v2', { payload })

export const KINDS = { plain, flaky, idem, hold, stale, work, work_v2: workV2 } as const
export type KindName = keyof typeof KINDS

/** Where kills-worker.ts kills itself (JT_KILL_AT), in a job's life. */
export const KILL_STEPS = [
  'claimed',
  'before-handler',
  'mid-handler',
  'after-handler',
  'in-final-write',
  'after-commit',
  'recovery',
  'retry',
  'cancel',
] as const
export type KillStep = (typeof KILL_STEPS)[number]
