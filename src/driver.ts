import type { JobStatus, TerminalStatus } from './job.js'

/**
 * The seam between the runner and a database. The runner never issues SQL;
 * a driver does, one method per operation, each taking one params object.
 * A driver maps its database's errors to DatabaseError (with `transient`
 * set) and its rows to these types. Where databases differ, the driver
 * says so through `capabilities`; the runner never asks which database it
 * is on.
 *
 * The methods are grouped by role, each a small interface (DriverHotPath,
 * DriverMaintenance, DriverPresence, DriverAdmin, DriverWakeups): a
 * service asks only for the role it uses, and `Driver` is their
 * intersection with the driver's identity and lifecycle (DriverBase).
 *
 * `Tx` is the type of the user's own transaction handle that
 * `jobInsertTx` writes through; `TxSync` says whether that write is
 * synchronous (SQLite through better-sqlite3, whose transactions must not
 * await) or returns a promise (PostgreSQL).
 */
export interface Driver<Tx = unknown, TxSync extends boolean = boolean>
  extends DriverBase<TxSync>,
    DriverHotPath<Tx, TxSync>,
    DriverMaintenance,
    DriverPresence,
    DriverAdmin,
    DriverWakeups {}

/** What every driver is besides its roles: its name, capabilities, migrations and close. */
export interface DriverBase<TxSync extends boolean = boolean> {
  /** A short name for logs and errors, e.g. `sqlite`. */
  readonly name: string
  readonly capabilities: DriverCapabilities<TxSync>
  /**
   * Applies any pending migrations now. Optional: a driver that migrates
   * when it opens (SQLite) has nothing left to do; one that migrates on
   * first use (PostgreSQL) does it here, for a deploy step.
   */
  migrate?(): Promise<void>
  /** Closes the connections the driver opened itself; a database handed in by the user stays open. */
  close(): Promise<void>
}

/** The hot path: what every job costs (insert, claim, publish, final write, release). Used by the enqueuer, the worker pool, the completer and the claim gate. */
export interface DriverHotPath<Tx = unknown, TxSync extends boolean = boolean> {
  /**
   * Stores queued jobs, all in one transaction. A job with a `uniqueKey`
   * is not stored while a job of its kind, scope and key is scheduled,
   * queued or running: the result then holds that job's id at its index
   * (null where the job was stored). Without unique keys in the batch it
   * may return nothing.
   */
  jobInsertMany(params: { jobs: readonly NewJob[]; now: number }): Promise<InsertResult>
  /** Stores queued jobs through the caller's own transaction handle, unique keys as in jobInsertMany. */
  jobInsertTx(params: { tx: Tx; jobs: readonly NewJob[]; now: number }): TxSync extends true ? InsertResult : Promise<InsertResult>
  /**
   * Marks up to `limit` of the oldest queued jobs (insertion order) whose
   * kind is one of `kinds` running under a new claim by `runnerId`, and
   * returns them oldest first. Each queued job is claimed by exactly one
   * call, whatever runs concurrently. A job of another kind is never
   * taken: it waits for a runner that has its handler. On a database whose
   * claims take row locks without waiting (PostgreSQL), a claim running
   * beside one of several kinds may pass over queue heads that claim
   * locked but did not take; they stay queued for the next claim.
   *
   * The claim follows the kinds' rules (ClaimParams.limits, KindRule):
   * concurrency caps, rate limits (a job whose bucket has no room left is
   * passed over, and stays queued with its attempt unused), and fair
   * order for fair kinds. No job is taken while a cooldown of its bucket
   * (rateBucket: the kind's name for a kind without a rate rule) is in
   * force: until > now.
   */
  jobClaim(params: ClaimParams & { now: number }): Promise<ClaimedJob[]>
  /** Replaces a running job's result; false when the job is not running under that claim. */
  jobPublish(params: { id: string; attempt: number; result: string; now: number }): Promise<boolean>
  /**
   * Makes final writes (retries and snoozes included), all in one transaction; for each, true when it
   * applied, false when its job was not running under that claim. `signal`
   * bounds the attempt: a driver that can cancel a statement does so.
   */
  jobFinishMany(params: { finishes: readonly JobFinish[]; now: number; signal?: AbortSignal }): Promise<boolean[]>
  /**
   * Optional: makes final writes as jobFinishMany does and, in the same
   * transaction, claims as jobClaim does up to `claim.limit` queued jobs
   * for the workers those writes free. One transaction per batch instead
   * of two: the runner uses it when present.
   */
  jobFinishManyAndClaim?(params: FinishAndClaimParams): Promise<FinishAndClaimResult>
  /**
   * Puts claimed jobs that no handler has started back, each only while it
   * is still running under that claim, in one statement.
   *
   * Putting back an unstarted claim (this rule is stated here only;
   * jobRequeueLost follows it too): the job gets back the attempt the
   * claim took (attempt - 1) and loses its runner, and is `queued` again,
   * unless its cancellation was requested, in which case it ends
   * `cancelled`, finished at `now`, as a cancelled queued job does. No
   * caller reads the job first: the statement decides, so a request that
   * lands meanwhile is never lost.
   */
  jobRelease(params: { jobs: readonly { id: string; attempt: number }[]; now: number }): Promise<void>
  /**
   * Puts back, as jobRelease puts back an unstarted claim, every job
   * running under `runnerId` whose id is not in `keep`: the jobs a claim
   * whose answer was lost (a dropped connection, a timeout) may have
   * marked running for that runner. The runner calls it with every job it
   * holds, while none of its claims is in flight, so no job a handler saw
   * is put back. One statement; returns how many it put back (queued
   * again or cancelled).
   */
  jobRequeueLost(params: { runnerId: string; keep: readonly string[]; now: number }): Promise<number>
}

/** Maintenance: the chores a started runner does on timers (promote due jobs, prune, recover the jobs of gone runners, fail unserved kinds, recurring schedules). */
export interface DriverMaintenance {
  /**
   * Makes up to `limit` scheduled jobs due at `now` queued (earliest due
   * first), so claims find them; returns how many. Each is promoted by
   * exactly one call, whatever runs concurrently.
   */
  jobPromoteDue(params: { now: number; limit: number }): Promise<number>
  /** The earliest due time of any scheduled job, or null when none is scheduled. */
  queueNextDue(params: { now: number }): Promise<number | null>
  /**
   * Deletes up to `limit` terminal jobs of `kind` whose status is one of
   * `statuses` and that finished before `finishedBefore` (epoch ms), in
   * one statement; returns how many. A job that is not terminal is never
   * deleted, whatever its times say. Calls from any number of processes
   * at once each delete other jobs (or none), and never fail for it.
   */
  jobPrune(params: { kind: string; statuses: readonly TerminalStatus[]; finishedBefore: number; limit: number }): Promise<number>
  /** The kinds that have terminal jobs, each once: what a prune visits. */
  kindsFinished(): Promise<string[]>
  /**
   * The kinds of queued jobs that no live runner registered (see
   * runnerRegister): work that nothing running now can do. A paused kind
   * is never unserved: its jobs wait for kindResume whether or not a live
   * runner has it.
   */
  queueUnservedKinds(params: { now: number }): Promise<string[]>
  /**
   * Fails with `error` the queued jobs that became due (enqueued, or due
   * if scheduled: the later of the two) before `createdBefore` and whose
   * kind no live runner registered, never those of a paused kind.
   * Returns how many.
   */
  jobFailUnserved(params: { createdBefore: number; error: string; now: number }): Promise<number>
  /**
   * Fails with `error` (or, for a job that requeues after a crash and has
   * an attempt left, queues again) every running job whose runner is proven gone: one
   * whose liveness signal (see DriverCapabilities.liveness) is lost, or
   * that is not registered at all (it stopped, leaving a job it could not
   * finish). Never touches the jobs of `runnerId` or of any live runner.
   * A job whose cancellation was requested ends `cancelled`, never queued
   * again. Forgets the gone runners; returns how many jobs it ended
   * (`failed`, counting those it ended `cancelled`) and how many it queued
   * again (`requeued`).
   */
  jobFailInterrupted(params: { runnerId: string; error: string; now: number }): Promise<{ failed: number; requeued: number }>
  /**
   * Moves the recurring schedule `name`'s last tick forward to `tickAt`
   * and stores `jobs` (that tick's job, or none for a tick passed over)
   * in the same transaction; a schedule not recorded yet is recorded at
   * `tickAt`. When the schedule is already at or past `tickAt` nothing is
   * written: `advanced` false, `stored` 0. Each tick moves it forward
   * once, whatever runs concurrently: that is what enqueues a tick exactly
   * once across processes. Unique keys in `jobs` work as in
   * jobInsertMany: a job whose key a live job holds is not stored, and
   * `stored` counts only those that were.
   */
  scheduleAdvance(params: { name: string; tickAt: number; jobs: readonly NewJob[]; now: number }): Promise<ScheduleAdvance>
  /** The last tick recorded for each of the schedules `names` that has one. */
  schedulesRead(params: { names: readonly string[] }): Promise<{ name: string; lastTickAt: number }[]>
}

/** Presence: a runner telling the database it is alive, so that others can tell when it is gone. */
export interface DriverPresence {
  /**
   * Records `runnerId` as a live runner of `kinds` (those it has handlers
   * for) and takes up its liveness signal; called by a runner before it
   * claims anything. Registering again updates its kinds.
   */
  runnerRegister(params: { runnerId: string; kinds: readonly string[]; now: number }): Promise<void>
  /**
   * Renews a live runner's lease. False when the runner was no longer
   * registered (its lease expired and another runner failed its jobs): the
   * caller registers again, its earlier claims being lost to the fence.
   */
  runnerHeartbeat(params: { runnerId: string; now: number }): Promise<boolean>
  /** Forgets a stopped runner and releases its liveness signal; a job it left running is then failed by the next sweep. */
  runnerUnregister(params: { runnerId: string }): Promise<void>
  /** The kinds the live runners on the database registered (handle), each once, sorted: what an operator's tools call known. */
  runnerKinds(): Promise<string[]>
}

/**
 * Admin: what an application, the HTTP API, the CLI and the dashboard read
 * and change (pause, counts, get, list), and the single statements the
 * runner's cancel and retry-now are made of (src/runner/job-commands.ts
 * combines them, once for every driver).
 */
export interface DriverAdmin {
  /**
   * One statement: makes the job `id` (within `scope` as in jobGet)
   * `cancelled`, finished at `now`, when it is `queued` or `scheduled`;
   * true when it did. Any other job (running, finished, missing, of
   * another scope) is left as it is: false.
   */
  jobCancelWaiting(params: { id: string; scope?: string | null; now: number }): Promise<boolean>
  /**
   * One statement: marks the job `id` (within `scope` as in jobGet), when
   * it is `running`, for its runner to abort (see jobCancelRequested and
   * JobFinish: whatever its final write says, it then ends `cancelled`);
   * true when it did. A driver that can tells every runner at once, in
   * the same statement (onWake 'cancel'). Any other job is left as it is:
   * false.
   */
  jobRequestCancel(params: { id: string; scope?: string | null; now: number }): Promise<boolean>
  /** The running jobs of `runnerId` whose cancellation was requested. */
  jobCancelRequested(params: { runnerId: string }): Promise<string[]>
  /**
   * One statement: makes the job `id` (within `scope` as in jobGet)
   * `queued`, due at `now`, when it is `scheduled` (waiting for its due
   * time or its next attempt), `failed` or `cancelled`: its attempt count
   * kept, max_attempts raised to allow one more attempt, its error, claim
   * and cancellation request cleared, its last result kept ('queued'). A
   * failed or cancelled job with a unique key that another live job now
   * holds is left as it is ('unique_key_held': the database's refusal,
   * mapped by the driver, never an error). Any other job (queued,
   * running, succeeded, missing, of another scope) is left as it is
   * ('unchanged'). A driver that can tells idle runners at once, as for
   * an insert, in the same statement.
   */
  jobQueueNow(params: { id: string; scope?: string | null; now: number }): Promise<QueueNowResult>
  /**
   * Pauses a kind for every process on the database, across restarts: no
   * claim takes its jobs until kindResume. Resolves true when it was not
   * paused before.
   */
  kindPause(params: { kind: string; now: number }): Promise<boolean>
  /** Lets claims take the kind's jobs again; true when it was paused. Idle runners of other processes find them within their poll. */
  kindResume(params: { kind: string }): Promise<boolean>
  /** The paused kinds, by name, with when each was paused (epoch ms). */
  kindsPaused(): Promise<{ kind: string; pausedAt: number }[]>
  /**
   * Counts the jobs of `scope` (as in jobGet: undefined counts every
   * scope) by kind and status: one entry per pair with at least one job,
   * in no particular order.
   */
  jobCounts(params: { scope?: string | null }): Promise<JobCount[]>
  /**
   * Reads one job through the reading connection. With `scope` set (a
   * string, or null for unscoped jobs), a job of another scope reads as
   * missing; with `scope` undefined, any job is found.
   */
  jobGet(params: { id: string; scope?: string | null }): Promise<JobRow | undefined>
  /**
   * Reads a page of jobs newest first (by insertion order), those inserted
   * before the job `beforeId` when it is set. Filters apply when set;
   * `scope` as in jobGet. A `beforeId` whose job is gone, or not visible
   * in `scope`, is placed by the enqueue time its version-7 id begins
   * with: the page holds the jobs of `scope` enqueued before that
   * millisecond and those within it (listed again rather than skipped);
   * an id without a time starts again from the newest.
   */
  jobList(params: JobListParams): Promise<JobRow[]>
  /**
   * How many jobs are live, for metrics: queued and running ones per kind,
   * and scheduled ones across kinds (`kind` null: no index leads with the
   * kind of a scheduled job, so counting them by kind would read every
   * one). Each count is exact up to `limit` and reads `limit` beyond it,
   * so the statement reads at most `limit` index entries per kind and
   * status, however big the backlog. A kind and status with no job is
   * left out.
   */
  queueCounts(params: { limit: number }): Promise<QueueCount[]>
  /** The cooldowns still in force at `now` (until > now), by key. */
  cooldownList(params: { now: number }): Promise<Cooldown[]>
  /** Ends the cooldown of `key` now; true when one was recorded (in force or not). */
  cooldownClear(params: { key: string }): Promise<boolean>
  /**
   * The use of rate buckets at `now`: for each window, its bucket's claims
   * after `now - periodMs` (the window). With `perScope` set, `bucket` is a
   * kind's name and the answer has one entry per `<kind>@<scope>` bucket
   * with claims in the window (none for a scope without). A bucket without
   * claims in its window is left out.
   */
  rateUsage(params: { now: number; windows: readonly { bucket: string; periodMs: number; perScope: boolean }[] }): Promise<RateUse[]>
  /**
   * How many jobs (of `scope`, as in jobGet) finished at or after `since`
   * in each minute, by status: the dashboard's chart of the last hour,
   * read from the jobs table. A minute and status with none is left out.
   */
  jobActivity(params: { since: number; scope?: string | null }): Promise<JobActivity[]>
}

/**
 * Wake-ups: how a runner learns that another process wrote something it
 * should look at. A database that pushes (PostgreSQL's LISTEN/NOTIFY)
 * does so through onWake; the fallback poll is the runner's own (the
 * WakePoll maintenance service, every `capabilities.pollMs`), which reads
 * changeToken when the driver has one and wakes only when it moved.
 */
export interface DriverWakeups {
  /**
   * Calls `callback` when the database pushes word that another process
   * or connection may have queued a job ('jobs'), requested a
   * cancellation ('cancel') or published a result ('change'), and once
   * the push channel is (again) ready, since what was committed before
   * was not heard. Returns the function that stops the calls. It never
   * polls: a driver whose database cannot push omits it, and one that may
   * push but was told not to (PostgreSQL with `listen: false`) never
   * calls.
   */
  onWake?(callback: (what: WakeReason) => void): () => void
  /**
   * Optional, one cheap read that touches no table: a value that differs
   * from the last one read whenever a write has been committed to the
   * jobs since (by any process or connection, this driver's own
   * included), and stays equal while nothing was. The runner's fallback
   * poll and event streams look again only when it moved; without it,
   * they look at every poll.
   */
  changeToken?(): Promise<string>
}

/** What scheduleAdvance did: whether the schedule moved to the tick, and how many of the tick's jobs were stored. */
export interface ScheduleAdvance {
  readonly advanced: boolean
  /** The jobs stored: 0 when it did not advance, or when a live job held each job's unique key. */
  readonly stored: number
}

/** One count of queueCounts. */
export interface QueueCount {
  /** The kind, or null for a count across kinds (scheduled jobs). */
  readonly kind: string | null
  readonly status: 'scheduled' | 'queued' | 'running'
  readonly count: number
}

/** What an onWake call is about: jobs may have been queued, a cancellation requested, or a running job's result published. */
export type WakeReason = 'jobs' | 'cancel' | 'change'

/** What a cancel did (src/runner/job-commands.ts: cancelJob). */
export type CancelResult = 'cancelled' | 'requested' | 'terminal' | 'missing'

/** What a retry now did (src/runner/job-commands.ts: retryJobNow). */
export type RetryNowResult = 'queued' | 'not_retryable' | 'unique_key_held' | 'missing'

/** What jobQueueNow's one statement did: see there. */
export type QueueNowResult = 'queued' | 'unique_key_held' | 'unchanged'

/** How many jobs of one kind are in one status. */
export interface JobCount {
  readonly kind: string
  readonly status: JobStatus
  readonly count: number
}

/** What a driver can do; the runner adapts to these, never to the driver's name. */
export interface DriverCapabilities<TxSync extends boolean = boolean> {
  /** Whether `jobInsertTx` completes synchronously inside the caller's transaction. */
  readonly txSync: TxSync
  /** How this database tells live runners from gone ones; the runner's timers follow it. */
  readonly liveness: LivenessCapability
  /**
   * How often an idle runner looks again at what other processes wrote
   * (the runner's fallback poll, see DriverWakeups), in ms: the runner's
   * scheduler looks for due jobs another process scheduled at least this
   * often too.
   */
  readonly pollMs: number
}

/**
 * The timing of a driver's liveness signal. A driver that proves a runner
 * gone by an operating-system lock needs no heartbeat (`heartbeatMs`
 * null); one that relies on a lease renews it every `heartbeatMs`, well
 * within the lease.
 */
export interface LivenessCapability {
  /** How often a runner renews its lease, or null when the driver needs no heartbeat. */
  readonly heartbeatMs: number | null
  /** How often a runner looks for the running jobs of gone runners and fails them. */
  readonly sweepMs: number
}

/** What a claim takes: how many jobs at most, for which runner, of which kinds. */
export interface ClaimParams {
  readonly limit: number
  readonly runnerId: string
  /** The kinds the runner has handlers for; never empty. */
  readonly kinds: readonly string[]
  /**
   * Limits on running jobs for some of `kinds`: the claim takes a job of
   * such a kind only while fewer than `concurrency` of the kind (and fewer
   * than `scopeConcurrency` of the kind in the job's scope) are running,
   * counted race-free against every concurrent claim, and takes other
   * jobs past the ones it may not take.
   */
  readonly limits?: ReadonlyMap<string, KindRule>
}

/**
 * A kind's rules for claims (ClaimParams.limits): limits on running jobs,
 * a rate limit on starts, and fair order across scopes.
 */
export interface KindRule {
  readonly concurrency: number | null
  readonly scopeConcurrency: number | null
  /**
   * At most `rate.limit` claims per `rate.periodMs` in each of the kind's
   * buckets (see RateRule), counted over every process on the database in
   * the claim's own transaction. Absent or null: no rate limit.
   */
  readonly rate?: RateRule | null
  /**
   * Its jobs are claimed in turn across scopes (NewJob.fair positions)
   * within each priority, instead of oldest first. Absent or false: oldest
   * first.
   */
  readonly fair?: boolean
}

/**
 * A rate limit as a driver applies it: a sliding window. A claim at `now`
 * counts the claims recorded in the bucket after `now - periodMs`
 * (later ones included: another process's clock may run ahead) and takes
 * at most `limit` less that count of the bucket's jobs, recording each
 * one it takes, in the same transaction. What a limit counts is claims
 * (starts): a claim given back unstarted still counts.
 */
export interface RateRule {
  readonly limit: number
  readonly periodMs: number
  /**
   * The bucket its claims count in: a name (the kind's own, or one several
   * kinds share), or null for one bucket per scope, named
   * `<kind>@<scope>` (see rateBucket).
   */
  readonly bucket: string | null
}

/**
 * The bucket (and the cooldown key) a job of `kind` in `scope` draws on:
 * its rate rule's bucket, `<kind>@<scope>` for a per-scope rule (an
 * unscoped job: `<kind>@`), or the kind's name without a rule.
 */
export function rateBucket(kind: string, scope: string | null, rate: RateRule | null | undefined): string {
  if (rate === null || rate === undefined) return kind
  return rate.bucket ?? `${kind}@${scope ?? ''}`
}

/** A cooldown: no claim takes a job whose bucket (rateBucket) is `key` before `until` (epoch ms). */
export interface Cooldown {
  readonly key: string
  readonly until: number
}

/** How much of a rate bucket's window is used (DriverAdmin.rateUsage). */
export interface RateUse {
  readonly bucket: string
  /** Claims recorded in the window (after now - periodMs). */
  readonly used: number
  /** The earliest of them (epoch ms): the bucket has room again at oldest + periodMs. Null when none. */
  readonly oldest: number | null
}

/** Jobs that finished in one minute with one status (DriverAdmin.jobActivity). */
export interface JobActivity {
  /** The minute's start, epoch ms (a multiple of 60,000). */
  readonly minute: number
  readonly status: TerminalStatus
  readonly count: number
}

/** What jobFinishManyAndClaim takes. */
export interface FinishAndClaimParams {
  readonly finishes: readonly JobFinish[]
  readonly now: number
  readonly signal?: AbortSignal
  readonly claim: ClaimParams
}

/** What jobFinishManyAndClaim returns: `applied` as jobFinishMany, `claimed` as jobClaim. */
export interface FinishAndClaimResult {
  readonly applied: boolean[]
  readonly claimed: ClaimedJob[]
}

/** A job to insert, already validated and encoded. */
export interface NewJob {
  readonly id: string
  readonly kind: string
  /** The payload as JSON text. */
  readonly payload: string
  /** The owner scope it was enqueued under, or null. */
  readonly scope: string | null
  /** Higher is claimed first. */
  readonly priority: number
  /** When it is due (epoch ms), or null for at once. A job due after the insert's `now` is stored `scheduled`. */
  readonly runAt: number | null
  /** How many claims it may have: 1 unless its kind retries. */
  readonly maxAttempts: number
  /** Its deadline from each start, or null for none. */
  readonly timeoutMs: number | null
  /** Whether a crash queues it again (an idempotent kind) rather than failing it as interrupted. */
  readonly requeueInterrupted: boolean
  /** With its kind and scope, the key no other live job may hold (see jobInsertMany); null or absent for none. */
  readonly uniqueKey?: string | null
  /**
   * Its kind claims fairly across scopes (KindRule.fair): the driver gives
   * it a position in its scope's lane, so claims take the scopes in turn.
   * Absent or false: no position (claimed by age, as before).
   */
  readonly fair?: boolean
  /**
   * The trace context of the enqueue that made it, as JSON text (the
   * fields an OpenTelemetry propagator writes, such as `traceparent`),
   * stored so its runs join that trace; null or absent for none.
   */
  readonly traceContext?: string | null
}

/**
 * Per job of an insert, in order: null where it was stored, the id of the
 * live job holding its unique key where it was not. Nothing (void) when
 * the batch had no unique keys.
 */
export type InsertResult = readonly (string | null)[] | void

/** Whether any job of a batch has a unique key: the drivers' plain inserts serve a batch without. */
export function hasUniqueKey(jobs: readonly NewJob[]): boolean {
  for (const job of jobs) if (job.uniqueKey !== undefined && job.uniqueKey !== null) return true
  return false
}

/** What jobList filters on. */
export interface JobListParams {
  readonly scope?: string | null
  readonly status?: JobStatus
  readonly kind?: string
  readonly limit: number
  /** The id of the last job of the previous page. */
  readonly beforeId?: string
}

/** A job a runner has claimed: the claim is identified by `attempt`. */
export interface ClaimedJob {
  readonly id: string
  readonly kind: string
  readonly payload: string
  /** Incremented by every claim (one given back unstarted, released or lost, returns its number); every later write is fenced on it. */
  readonly attempt: number
  /** How many claims it may have in all. */
  readonly maxAttempts: number
  /** Its deadline from this start, or null. */
  readonly timeoutMs: number | null
  /** The owner scope it was enqueued under, or null: a handler's default cooldown key of a per-scope rate limit needs it. */
  readonly scope: string | null
  /** The trace context stored with it at its enqueue (see NewJob), or null; absent from a driver that stores none. */
  readonly traceContext?: string | null
  /**
   * When it became claimable (epoch ms): its due time, or its enqueue time
   * when it had none or was due before it. The runner reports the wait
   * from then to its start.
   */
  readonly readyAt: number
}

/**
 * The final write of a claimed job, in the runner's vocabulary (see
 * src/runner/outcome.ts, which decides it). Fenced on `attempt`: it
 * applies only while the job is running under that claim. A job whose
 * cancellation was requested in the database ends `cancelled` whatever
 * the write says (the runner may not have seen the request yet); a
 * result it carries is kept.
 */
export interface JobFinish {
  readonly id: string
  readonly attempt: number
  /**
   * `succeeded`, `failed` (with `error`, its failure code) and
   * `cancelled` are terminal. `retry` sends the job back for another
   * attempt, due at `runAt` (stored `scheduled` until then, or `queued`
   * when already due); `snoozed` does the same and gives back the
   * attempt this claim used (max_attempts + 1).
   */
  readonly status: 'succeeded' | 'failed' | 'cancelled' | 'retry' | 'snoozed'
  /** The public result as JSON text: set on success, kept from the last partial result when null. */
  readonly result: string | null
  /** The failure code of a `failed` write; null otherwise. */
  readonly error: string | null
  /** For a retry or a snooze: when it runs next (epoch ms); null otherwise. */
  readonly runAt: number | null
  /**
   * For a snooze that a handler's `job.rateLimited` ended: the cooldown
   * to record in the same transaction, only when the write applied. A
   * cooldown already recorded for the key ends at the later of the two:
   * a cooldown is extended, never shortened, by another.
   */
  readonly cooldown?: Cooldown | null
}

/** Whether a final write sends its job back to the queue (a retry or a snooze) rather than ending it. */
export function sendsBack(finish: JobFinish): boolean {
  return finish.status === 'retry' || finish.status === 'snoozed'
}

/** A job as stored, with its result still JSON text. */
export interface JobRow {
  readonly id: string
  readonly kind: string
  readonly status: JobStatus
  readonly result: string | null
  readonly error: string | null
  readonly attempt: number
  readonly maxAttempts: number
  readonly priority: number
  readonly runAt: number | null
}
