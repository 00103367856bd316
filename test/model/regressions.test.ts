import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import type { KindRule, NewJob } from 'jobtable'
import { describeEachBackend, postgresBackend, sqliteBackend } from '../support/backends.js'
import { advance, batch, cancel, clearCooldown, enqueue, finish, pause, race, retryNow, start, stop } from './commands.js'
import { T0 } from './model.js'
import { replay } from './run.js'

/**
 * The counterexamples the model found, each replayed as a plain test on a
 * fresh store: the shrunk steps as fast-check printed them (the model's
 * config first), with the seed that found them. Each of the four known
 * defects was found against 9fb977b, the tree before their fixes, where
 * each of these tests fails; they pass since the fixes landed (defects 1
 * and 2 in 577e3e3; 3 and 4 in the drivers' queries, uncommitted when
 * these were written). Should one fail again, `it.fails` marks it known
 * while its fix is on the way.
 */
/** A failing replay reports what is still pending after 3 s rather than the random runs' 10. */
const FAST = { settleLimitMs: 3_000 }

describeEachBackend('model regressions', (backend) => {
  // Defect 1 (runs keyed by job id): a snooze(0) is claimed again by the same runner before the first run's
  // end is processed, and the runner forgot the second run: cancel() answered 'requested' and its signal was
  // never aborted (nor would stop() wait for it). Found with seed 798812524 (SQLite), no timeout involved. At
  // 9fb977b this fails every time on SQLite; on PostgreSQL the second claim rarely overlaps the first run's end.
  it('defect 1: a job snoozed for 0 ms and claimed again by the same runner is still its run: cancel() reaches it', async () => {
    await replay(backend, { workers: 2 }, [enqueue(), finish({ outcome: 'snooze:0' }), cancel({ status: 'running' })], FAST)
  })

  // Defect 1 as reported: attempt 2 of a kind retrying timeout starts while attempt 1 lingers; attempt 1
  // returns, and stop() resolved while attempt 2 still ran. The random search did not compose these steps
  // in 150 runs of a hunt without snoozes; replayed, the model reports it at 9fb977b.
  it('defect 1: stop() waits for attempt 2 after attempt 1, lingering past its deadline, returned', async () => {
    await replay(backend, { workers: 2 }, [enqueue({ timed: true, onAbort: 'ignore' }), advance({ ms: 1000 }), finish({ handler: 0 }), stop()], FAST)
  })

  // Defect 2: a concurrency-limited kind's job was recorded timed out while its handler lingered, freeing
  // its place under the limit. Found with seeds 1193398820 and 1965787405 (SQLite), shrunk to this batch.
  it('defect 2: a limited kind keeps a job whose handler lingers past its deadline running', async () => {
    await replay(backend, { workers: 1 }, [batch({ jobs: [{ kind: 'capped', timed: true, onAbort: 'ignore' }, {}, {}] })], FAST)
  })

  // Defect 2 as reported: with concurrency 1, a second handler of the kind started beside the lingering one.
  it('defect 2: concurrency 1 never runs a second handler beside one lingering past its deadline', async () => {
    // One batch, so the second job is claimed within the same step, as soon as the first is recorded.
    await replay(backend, { workers: 2 }, [batch({ jobs: [{ kind: 'capped', timed: true, onAbort: 'ignore' }, { kind: 'capped' }] })], FAST)
  })

  // Defect 3: cancel() answered 'requested' for a job claimed and not yet started; stop() gave the claim back
  // and the job was queued again. The window opens on PostgreSQL only (SQLite's claim and its start are one
  // turn of the event loop): the model's race hit it in 33 of 372 offsets there, e.g. race({ micro2: 2 }).
  // Timing decides which offsets hit it, so this replays the race at each of 52 offsets.
  it.skipIf(backend.name === 'sqlite')('defect 3: a cancel that lands between a claim and its start, then stop(): the job never goes back to the queue', { timeout: 120_000 }, async () => {
    for (let micro1 = 0; micro1 <= 12; micro1++) {
      for (const micro2 of [0, 1, 2, 3]) await replay(backend, { workers: 1 }, [race({ micro1, micro2 })], FAST)
    }
  })

  // Defect 4: a paused kind's queued job failed unknown_kind once no live runner handled the kind. Found
  // with seed 1439572076 (SQLite).
  it('defect 4: a paused kind that no live runner handles keeps its queued jobs queued', async () => {
    await replay(backend, { workers: 1 }, [enqueue(), enqueue(), stop(), start({ workers: 1, kinds: ['capped'] }), pause(), advance({ ms: 1000 })], FAST)
  })

  // Not a defect of jobtable: the model once forgot that a stopping runner (its stop() waiting for a handler)
  // still runs its maintenance, and refused its interrupted sweep of another runner's job. Found with seed
  // 1025165088 (SQLite); kept so the model stays right about it.
  it('model: a stopping runner still sweeps the jobs a stopped runner left running', async () => {
    await replay(backend, { workers: 1 }, [
      start({ slot: 1, workers: 1, kinds: ['scoped'] }),
      enqueue({ onAbort: 'throw' }),
      enqueue({ kind: 'scoped', onAbort: 'ignore' }),
      stop({ slot: 1 }),
      stop(),
    ], FAST)
  })
})

/**
 * Found by the model once rate limits, cooldowns and fair kinds joined it
 * (issue 23). The two `new:` ones fail on PostgreSQL at 1c94ab4 (its
 * rated claim, src/postgres/rated-claim.ts) and pass on SQLite.
 */
/** A job as a driver inserts it, for the regressions below that go to the driver directly. */
function newJob(kind: string, priority = 0): NewJob {
  return { id: randomUUID(), kind, payload: '{}', scope: null, priority, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }
}

describeEachBackend('model regressions: rate limits', (backend) => {
  // Not a defect of jobtable: the model once took a start's clock for the time its claim recorded. A claim reads
  // the clock as it is sent and may wait (PostgreSQL: for a bucket's lock) while a step moves the clock on; it
  // records the earlier time. Found with seed 999773944 (PostgreSQL); kept so the model stays right about it.
  it('model: a claim sent before the clock moved records the earlier time', async () => {
    await replay(backend, { workers: 1 }, [enqueue({ kind: 'rated', delay: 700 }), start({ slot: 1, workers: 1, kinds: ['rated', 'fair'] }), advance({ ms: 1000 })], FAST)
  })

  // PostgreSQL's rated claim took the rated kinds' picks first and left the other kinds only what remained of
  // the claim's limit: with one worker, a rated job of priority 0 started before a plain job of priority 1.
  // Found with seed 1816801227 (PostgreSQL, the CI seed), shrunk to this batch; the replay fails unless a claim
  // was already under way at the batch's commit, the driver's own claim every time.
  it('new: a claim with rated kinds keeps priority across kinds', async () => {
    const store = await backend.store()
    try {
      const driver = store.driver()
      await driver.migrate?.()
      const rule: KindRule = { concurrency: null, scopeConcurrency: null, rate: { limit: 2, periodMs: 1_000, bucket: null } }
      const plain = newJob('plain', 1)
      await driver.jobInsertMany({ jobs: [plain, newJob('household', 0)], now: T0 })
      const claimed = await driver.jobClaim({ limit: 1, runnerId: 'r', kinds: ['plain', 'household'], limits: new Map([['household', rule]]), now: T0 })
      expect(claimed.map((c) => c.id)).toEqual([plain.id])
    } finally {
      await store.drop()
    }
    await replay(backend, { workers: 1 }, [batch({ jobs: [{ priority: 1 }, { kind: 'household' }] })], FAST)
  })

  // PostgreSQL's rated claim read the rated candidates in one statement and claimed the other kinds' jobs in a
  // later one, each with its own snapshot (READ COMMITTED): a claim beside a commit of [rated j0, plain j1] took
  // j1 alone, j0 older and claimable. The model's counterexample (seed 1269265305, PostgreSQL):
  // batch({ jobs: [{ kind: 'rated' }, {}] }) with one worker, about 1 run in 5; here the claim and the insert
  // race directly, 100 times (about a third took j1 alone; never without a rated kind, nor on SQLite).
  it('new: a claim beside the commit of an older rated job and a newer plain one never takes the newer alone', { timeout: 60_000 }, async () => {
    const store = await backend.store()
    try {
      const writer = store.driver()
      const claimer = store.driver()
      await writer.migrate?.()
      const rule: KindRule = { concurrency: null, scopeConcurrency: null, rate: { limit: 1_000_000, periodMs: 1_000, bucket: 'rated' } }
      const claim = (limit: number) => claimer.jobClaim({ limit, runnerId: 'r', kinds: ['rated', 'plain'], limits: new Map([['rated', rule]]), now: T0 })
      let newerAlone = 0
      for (let i = 0; i < 100; i++) {
        const jobs = [newJob('rated'), newJob('plain')]
        const racing = claim(1)
        await writer.jobInsertMany({ jobs, now: T0 })
        const got = await racing
        if (got.length === 1 && got[0]!.id === jobs[1]!.id) newerAlone++
        const all = [...got, ...(await claim(10))]
        await claimer.jobFinishMany({ finishes: all.map((c) => ({ id: c.id, attempt: c.attempt, status: 'succeeded' as const, result: null, error: null, runAt: null })), now: T0 })
      }
      expect(newerAlone).toBe(0)
    } finally {
      await store.drop()
    }
  })
})

/**
 * Not counterexamples: fixed sequences through rate limits, cooldowns and
 * fair kinds, so the model's invariants for them (rate windows, no start
 * while a key cools down, cooldowns() and rateLimits() as the model
 * expects, clearCooldown's answer) run on both backends in every run,
 * whatever the random seed draws.
 */
describeEachBackend('model: rate limits, cooldowns and fair kinds, fixed sequences', (backend) => {
  it('a bucket of 2 per second: the third job waits until the first claims leave the window, periodMs after them, then starts', async () => {
    await replay(backend, { workers: 3 }, [batch({ jobs: [{ kind: 'rated' }, { kind: 'rated' }, { kind: 'rated' }] }), finish(), finish(), advance({ ms: 500 }), advance({ ms: 500 }), finish()], FAST)
  })

  it("a cooldown on the shared key from another kind's handler holds the rated kind until cleared; the rated job then starts", async () => {
    await replay(backend, { workers: 2 }, [
      enqueue(),
      finish({ outcome: 'rateLimited:700@provider' }),
      enqueue({ kind: 'rated' }),
      enqueue({ kind: 'rated', scope: 'h1' }),
      clearCooldown({ key: 'provider' }),
      finish(),
      finish(),
      advance({ ms: 1000 }),
    ], FAST)
  })

  it('per-scope buckets and a household cooldown: one household held, another runs; the held job starts once the clock passes the end', async () => {
    await replay(backend, { workers: 3 }, [
      batch({ jobs: [{ kind: 'household', scope: 'h1' }, { kind: 'household', scope: 'h1' }, { kind: 'household', scope: 'h2' }, { kind: 'household' }] }),
      finish({ outcome: 'rateLimited:1500' }),
      finish(),
      advance({ ms: 1500 }),
      enqueue({ kind: 'household', scope: 'h2' }),
      finish(),
      advance({ ms: 1500 }),
      finish(),
      finish(),
    ], FAST)
  })

  it('fair and rated kinds beside the others: cancels, a retry now and a stop keep every job in exactly one state', async () => {
    await replay(backend, { workers: 2 }, [
      batch({ jobs: [{ kind: 'fair', scope: 'h1' }, { kind: 'fair', scope: 'h1' }, { kind: 'fair', scope: 'h2' }, { kind: 'rated' }, { kind: 'rated' }, { kind: 'rated' }] }),
      cancel({ status: 'queued' }),
      finish({ outcome: 'rateLimited:700' }),
      finish(),
      retryNow({ status: 'cancelled' }),
      advance({ ms: 1500 }),
      stop(),
      start({ slot: 1 }),
      advance({ ms: 1500 }),
    ], FAST)
  })
})

/**
 * NEW defect, not among the four known: found by the long run on the
 * tree with the four fixes (seed 1816801227, SQLite, 120 commands; shrunk
 * to 7 steps, here to 4). A snoozing handler whose cancellation was
 * requested by another process, and not yet noticed by its runner, ends
 * its job `cancelled` with `maxAttempts` grown by one: the snooze's write
 * turns into `cancelled` in the database and still grants the attempt
 * back (max_attempts + grant in both drivers' retry statement), whereas
 * the same cancellation noticed in time is recorded without it (decideEnd,
 * outcome.ts: cancelled before snoozed, nothing granted). A retry now of
 * that job then has an attempt too many. Here the request cannot be
 * noticed (no poll, no notification), so the write decides every time.
 * It was already there at 9fb977b (the same statement); not brought in
 * by the rework of runs.
 */
describe.each([sqliteBackend, postgresBackend({ listen: false })])('$name (no poll, no notification): model regressions', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  // Fixed: the retry statements grant nothing to a job their write ends cancelled (both drivers).
  it('new: a snooze whose final write finds the cancellation request does not grow maxAttempts', async () => {
    await replay(backend, { workers: 1 }, [enqueue({ onAbort: 'ignore' }), stop(), cancel({ status: 'running' }), finish({ outcome: 'snooze:0' })], {
      ...FAST,
      pollIntervalMs: 3_600_000,
    })
  })
})
