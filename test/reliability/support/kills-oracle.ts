import { expect } from 'vitest'
import { CODE_INTERRUPTED } from 'jobtable'
import type { KillStep } from './kills-kinds.js'
import { startsOf, type JobState, type LedgerLine } from './kills-store.js'

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled'])

/** What one crash and restart came to, for the report. */
export interface Recovered {
  /** SIGKILLs: one, or two for `recovery` (the crash it recovers from, then the kill inside the recovery). */
  readonly kills: number
  readonly jobs: number
  readonly starts: number
  /** Starts of idempotent jobs beyond their first: allowed only after a crash. */
  readonly idempotentRestarts: number
  readonly statuses: Record<string, number>
}

/**
 * The oracle of one crash at `step` and one restart: `atCrash` is every
 * job as the killed process left it, `after` as the restart left it once
 * no job was waiting. Every job is terminal; no attempt started twice, and
 * a job that is not idempotent started at most once per attempt its kind
 * grants (so at most once, or twice for `flaky`'s one retry); a job
 * terminal at the crash kept its row exactly; a job running at the crash
 * failed `interrupted by restart` (cancelled, with its cancellation
 * requested) and never started again, but an idempotent one with an
 * attempt left ran again and succeeded; a job waiting at the crash ran
 * and succeeded. And the kill happened where it was asked, to the job the
 * step names, in the state that step leaves it.
 */
export function checkRecovered(step: KillStep, atCrash: readonly JobState[], after: readonly JobState[], ledger: readonly LedgerLine[]): Recovered {
  const starts = startsOf(ledger)
  const before = new Map(atCrash.map((j) => [j.id, j]))
  let idempotentRestarts = 0
  const statuses: Record<string, number> = {}
  for (const job of after) {
    const was = before.get(job.id)!
    const attempts = starts.get(job.id) ?? []
    const what = `${step}: ${job.kind} job ${job.id} (${was.status} at the crash)`
    statuses[job.status] = (statuses[job.status] ?? 0) + 1
    expect(TERMINAL.has(job.status), what).toBe(true)
    expect(new Set(attempts).size, `${what}: an attempt started twice`).toBe(attempts.length)
    if (job.kind === 'idem') {
      // Started again only after a crash: each start in a process of its own.
      const pids = ledger.filter((l) => l.e === 'start' && l.id === job.id).map((l) => l.pid)
      expect(new Set(pids).size, `${what}: started twice in one process`).toBe(pids.length)
      idempotentRestarts += Math.max(0, attempts.length - 1)
    }
    else expect(attempts.length, `${what}: started ${attempts.length} times`).toBeLessThanOrEqual(job.kind === 'flaky' ? 2 : 1)
    if (TERMINAL.has(was.status)) {
      expect(job, `${what}: a committed job changed`).toEqual(was)
    } else if (was.status === 'running') {
      if (job.kind === 'idem' && was.attempt < was.maxAttempts) {
        expect(job.status, what).toBe('succeeded')
      } else {
        expect({ status: job.status, error: job.error }, what).toEqual(was.cancelRequested ? { status: 'cancelled', error: null } : { status: 'failed', error: CODE_INTERRUPTED })
        expect(attempts.every((a) => a <= was.attempt), `${what}: started again after the crash`).toBe(true)
      }
    } else {
      expect(job.status, what).toBe('succeeded')
    }
  }
  checkKill(step, ledger, before, new Map(after.map((j) => [j.id, j])))
  return { kills: ledger.filter((l) => l.e === 'kill').length, jobs: after.length, starts: [...starts.values()].reduce((n, a) => n + a.length, 0), idempotentRestarts, statuses }
}

/** The kill itself: at the step asked for, of the job it names, which the crash left as that step should. */
function checkKill(step: KillStep, ledger: readonly LedgerLine[], before: Map<string, JobState>, after: Map<string, JobState>): void {
  const kills = ledger.filter((l) => l.e === 'kill')
  expect(kills.map((k) => k.step)).toEqual(step === 'recovery' ? expect.arrayContaining(['mid-handler', 'recovery']) : [step])
  expect(kills).toHaveLength(step === 'recovery' ? 2 : 1)
  const target = kills.find((k) => k.step !== 'recovery')!
  const was = before.get(target.id!)!
  const now = after.get(target.id!)!
  const started = startsOf(ledger).get(target.id!) ?? []
  const interrupted = { status: 'failed', error: CODE_INTERRUPTED }
  switch (step) {
    case 'claimed':
    case 'before-handler':
      expect([was.status, started]).toEqual(['running', []])
      expect(now).toMatchObject(interrupted)
      break
    case 'mid-handler':
    case 'after-handler':
    case 'in-final-write':
    case 'recovery':
      // In the final write and in the recovery, the kill came inside the transaction: it rolled back.
      expect([was.status, started]).toEqual(['running', [1]])
      expect(now).toMatchObject(interrupted)
      break
    case 'after-commit':
      expect([was.status, started]).toEqual(['succeeded', [1]])
      break
    case 'retry':
      expect([was.kind, was.status, was.attempt, started]).toEqual(['flaky', 'running', 1, [1]])
      expect(now).toMatchObject(interrupted)
      break
    case 'cancel':
      expect([was.kind, was.status, was.cancelRequested, started]).toEqual(['hold', 'running', true, [1]])
      expect(now).toMatchObject({ status: 'cancelled', error: null })
      break
  }
}
