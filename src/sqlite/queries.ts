import { VERSION_SQL } from '../version.js'

/**
 * Every SQL statement the SQLite driver runs, in one place. Times are
 * milliseconds since the epoch, passed in from the runner's clock.
 */

/** The statuses a job ends in, as the partial index jobtable_jobs_terminal names them: a query repeats them word for word to use it. */
const TERMINAL = `status IN ('succeeded', 'failed', 'cancelled')`

/** A job due after @now is stored 'scheduled' (NULL > @now is NULL: queued). */
export const insertJob = `
  INSERT INTO jobtable_jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, trace_context)
  VALUES (@id, @kind, @payload, @scope, @now, @now, @priority, @runAt,
          CASE WHEN @runAt > @now THEN 'scheduled' ELSE 'queued' END,
          @maxAttempts, @timeoutMs, @requeueInterrupted, @traceContext)`

/**
 * `rows` jobs in one statement, fourteen positional parameters per row
 * (id, kind, payload, scope, now, now, priority, runAt, then runAt again
 * with now for the status as in insertJob, maxAttempts, timeoutMs,
 * requeueInterrupted, traceContext), inserted in the order given. Fewer
 * statements per batch: about a third more jobs per second for a batch of
 * 1,000 than one insertJob per row (bench/).
 */
export function insertJobs(rows: number): string {
  return `
  INSERT INTO jobtable_jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, trace_context)
  VALUES ${Array.from({ length: rows }, () => "(?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? > ? THEN 'scheduled' ELSE 'queued' END, ?, ?, ?, ?)").join(', ')}`
}

/**
 * insertJob for a job with a unique key (@uniqueKey): stores nothing when
 * a live job of its kind, scope and key holds it (the unique index
 * jobtable_jobs_unique), and then uniqueHolder names that job.
 */
export const insertUniqueJob = `
  INSERT INTO jobtable_jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, unique_key, trace_context)
  VALUES (@id, @kind, @payload, @scope, @now, @now, @priority, @runAt,
          CASE WHEN @runAt > @now THEN 'scheduled' ELSE 'queued' END,
          @maxAttempts, @timeoutMs, @requeueInterrupted, @uniqueKey, @traceContext)
  ON CONFLICT DO NOTHING`

/** The live job holding a unique key (read in the transaction whose insert it refused). */
export const uniqueHolder = `
  SELECT id FROM jobtable_jobs
   WHERE kind = @kind AND coalesce(scope, '') = coalesce(@scope, '') AND unique_key = @uniqueKey
     AND unique_key IS NOT NULL AND status IN ('scheduled', 'queued', 'running')`

/**
 * A fair job's position in its lane (@kind, scope @scope): `vnow`, the
 * position of the head of the kind's fair queue at the job's priority
 * (index jobtable_jobs_fair, 0 when none is queued: positions are only
 * compared within a priority, so a job of a higher one must not move a
 * newcomer behind the backlog of its own), for a lane that is idle
 * (no row, or its latest job no longer queued); otherwise the lane's
 * next position, never behind vnow. A lane that keeps jobs queued thus
 * takes one position per job, and one that comes back takes its turn
 * from the head, not from behind the backlog of the others.
 */
const FAIR_POSITION = `
  SELECT CASE WHEN l.last_seq IS NULL OR coalesce((SELECT j.status FROM jobtable_jobs j WHERE j.seq = l.last_seq), '') <> 'queued'
              THEN v.vnow ELSE max(l.next_pos, v.vnow) END
    FROM (SELECT coalesce((SELECT h.fair_pos FROM jobtable_jobs h
                            WHERE h.status = 'queued' AND h.kind = @kind AND h.priority = @priority AND h.fair_pos IS NOT NULL
                            ORDER BY h.fair_pos, h.seq LIMIT 1), 0) AS vnow) v
    LEFT JOIN jobtable_fair_lanes l ON l.kind = @kind AND l.scope = coalesce(@scope, '')`

/**
 * insertUniqueJob for a job of a fair kind (NewJob.fair), with its
 * position (FAIR_POSITION); @uniqueKey NULL for none. Returns the stored
 * job's seq and position, nothing when it was not stored (a unique key
 * held): the caller then moves its lane (advanceLane) only for a stored
 * one, in the same transaction.
 */
export const insertFairJob = `
  INSERT INTO jobtable_jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, unique_key, trace_context, fair_pos)
  VALUES (@id, @kind, @payload, @scope, @now, @now, @priority, @runAt,
          CASE WHEN @runAt > @now THEN 'scheduled' ELSE 'queued' END,
          @maxAttempts, @timeoutMs, @requeueInterrupted, @uniqueKey, @traceContext, (${FAIR_POSITION}))
  ON CONFLICT DO NOTHING
  RETURNING seq, fair_pos AS pos`

/** Moves a lane past the position @pos its job @seq took. */
export const advanceLane = `
  INSERT INTO jobtable_fair_lanes (kind, scope, next_pos, last_seq) VALUES (@kind, coalesce(@scope, ''), @pos + 1, @seq)
  ON CONFLICT (kind, scope) DO UPDATE SET next_pos = excluded.next_pos, last_seq = excluded.last_seq`

/** The most rows one insertJobs statement takes; a bigger batch is written in chunks. */
export const INSERT_ROWS_MAX = 50

/**
 * How one of a runner's kinds is claimed: `cap` is `free` (no limit),
 * `capped` (a `concurrency` limit) or `scoped` (a `scopeConcurrency`
 * limit, and a `concurrency` one when set); `fair` takes its jobs in fair
 * order (priority, then fair_pos, unpositioned first, then seq) instead
 * of oldest first. `rate` marks a rated kind's arm in a rated claim
 * (claimCandidates): `named`, one bucket with @room{i} claims left (read
 * by the driver, which leaves out a bucket cooling or spent); `scope`,
 * one bucket per scope of @rlim{i} claims per window from @since{i}, the
 * scopes cooling or spent passed over here.
 */
export interface ClaimArm {
  readonly cap: 'free' | 'capped' | 'scoped'
  readonly fair: boolean
  readonly rate?: 'named' | 'scope'
}

/** A name for an arm's shape, for caching statements by their arms. */
export function armShape(arm: ClaimArm): string {
  return `${arm.cap}${arm.fair ? '/fair' : ''}${arm.rate === undefined ? '' : `/${arm.rate}`}`
}

/**
 * How many queued jobs of a kind with a scope limit (or a rate limit per
 * scope) one claim looks at, past those of scopes already at their
 * limit. Bounds the claim's cost; a claim still takes at least one job
 * whenever some scope has room, so the scopes beyond this window are
 * reached by the claims after it.
 */
export const SCOPED_SCAN = 1000

/** Whether the kind `k` (a parameter) is not paused: a lookup by primary key, made once per claim (it does not depend on the row). */
function notPaused(k: string): string {
  return `NOT EXISTS (SELECT 1 FROM jobtable_paused_kinds WHERE kind = ${k})`
}

/** Whether no cooldown of `key` (a parameter: an unrated kind's name) is in force at @now: a lookup by primary key, as notPaused. */
function notCooling(key: string): string {
  return `NOT EXISTS (SELECT 1 FROM jobtable_cooldowns WHERE key = ${key} AND until > @now)`
}

/** The running jobs of kind @k{i}: the running index holds only running rows, as many as there are workers. */
function runningOf(i: number): string {
  return `(SELECT count(*) FROM jobtable_jobs WHERE status = 'running' AND kind = @k${i})`
}

/** The per-scope bucket of a job `c` of kind `k` (a parameter), as rateBucket names it: `<kind>@<scope>`. */
function scopeBucket(k: string, c: string): string {
  return `${k} || '@' || coalesce(${c}.scope, '')`
}

/** Keys from `<kind>@` up to, not including, `<kind>A` ('A' follows '@'): every per-scope bucket of the kind, a range of an index. */
function scopeBuckets(column: string, k: string): string {
  return `${column} >= ${k} || '@' AND ${column} < ${k} || 'A'`
}

/**
 * The queued jobs one kind may contribute to a claim, best first, as
 * rows (seq, priority, fair_pos, scope): the head of its queue in the
 * index jobtable_jobs_queued (kind, priority DESC, seq), or for a fair
 * kind in jobtable_jobs_fair (kind, priority DESC, fair_pos, seq) with
 * the unpositioned jobs among the first of the queued index (jobs
 * enqueued before the kind was fair, which are the oldest). A `capped`
 * kind contributes no more than its cap @cap{i} less its running jobs,
 * counted in the same statement. A `scoped` one (or one rated per scope)
 * skips the jobs of scopes at their cap @scap{i} (or cooling, or with no
 * room left in their window), ranks the rest within each scope, and
 * takes a job only while its rank plus its scope's running count (and
 * its claims in the window) stays within the limit.
 */
function claimArm(arm: ClaimArm, i: number, withScope: boolean): string {
  const k = `@k${i}`
  // Without the scope, the head of a free kind's queue is read from its index alone.
  const sc = withScope ? 'scope' : 'NULL AS scope'
  let take = arm.cap === 'free' ? '@limit' : `max(0, min(@limit, @cap${i} - ${runningOf(i)}))`
  if (arm.rate === 'named') take = `min(${take}, @room${i})`
  // A rated kind's cooldown is its bucket's, read by the driver (named) or below (per scope).
  const filter = (c: string) => `${c}status = 'queued' AND ${c}kind = ${k} AND ${notPaused(k)}${arm.rate === undefined ? ` AND ${notCooling(k)}` : ''}`
  const order = (c: string) => (arm.fair ? `${c}priority DESC, ${c}fair_pos, ${c}seq` : `${c}priority DESC, ${c}seq`)
  const fairPos = arm.fair ? 'fair_pos' : 'NULL AS fair_pos'
  if (arm.cap !== 'scoped' && arm.rate !== 'scope') {
    if (!arm.fair) return `SELECT seq, priority, ${fairPos}, ${sc} FROM jobtable_jobs WHERE ${filter('')} ORDER BY ${order('')} LIMIT ${take}`
    return `SELECT seq, priority, fair_pos, scope FROM (
              SELECT seq, priority, fair_pos, ${sc} FROM jobtable_jobs WHERE ${filter('')} AND fair_pos IS NOT NULL ORDER BY ${order('')} LIMIT ${take})
            UNION ALL
            SELECT seq, priority, fair_pos, scope FROM (
              SELECT seq, priority, fair_pos, ${sc} FROM jobtable_jobs WHERE ${filter('')} ORDER BY priority DESC, seq LIMIT ${take})
             WHERE fair_pos IS NULL
            ORDER BY ${order('')} LIMIT ${take}`
  }
  const scoped = arm.cap === 'scoped'
  const perScope = arm.rate === 'scope'
  const joins = [
    // INDEXED BY: left to itself, the planner reads the scope index, every job of the table, to save sorting a few running rows (300 ms for 200,000 jobs).
    scoped
      ? `LEFT JOIN (SELECT scope, count(*) AS n FROM jobtable_jobs INDEXED BY jobtable_jobs_running WHERE status = 'running' AND kind = ${k} GROUP BY scope) b
           ON b.scope IS c.scope`
      : '',
    perScope
      ? `LEFT JOIN (SELECT bucket, count(*) AS n FROM jobtable_rate_starts WHERE ${scopeBuckets('bucket', k)} AND at >= @since${i} GROUP BY bucket) u
           ON u.bucket = ${scopeBucket(k, 'c')}`
      : '',
  ].join(' ')
  const room = [
    scoped ? `coalesce(b.n, 0) < @scap${i}` : '',
    perScope
      ? `coalesce(u.n, 0) < @rlim${i} AND ${scopeBucket(k, 'c')} NOT IN (SELECT key FROM jobtable_cooldowns WHERE ${scopeBuckets('key', k)} AND until > @now)`
      : '',
  ]
    .filter((w) => w !== '')
    .join(' AND ')
  const columns = `c.seq, c.priority, ${arm.fair ? 'c.fair_pos' : 'NULL AS fair_pos'}, c.scope, ${scoped ? 'coalesce(b.n, 0)' : '0'} AS busy, ${perScope ? 'coalesce(u.n, 0)' : '0'} AS used`
  const window = arm.fair
    ? `SELECT * FROM (SELECT ${columns} FROM jobtable_jobs c ${joins} WHERE ${filter('c.')} AND c.fair_pos IS NOT NULL AND ${room} ORDER BY ${order('c.')} LIMIT ${SCOPED_SCAN})
       UNION ALL
       SELECT * FROM (SELECT ${columns} FROM jobtable_jobs c ${joins} WHERE ${filter('c.')} AND ${room} ORDER BY c.priority DESC, c.seq LIMIT @limit) WHERE fair_pos IS NULL`
    : `SELECT ${columns} FROM jobtable_jobs c ${joins} WHERE ${filter('c.')} AND ${room} ORDER BY ${order('c.')} LIMIT ${SCOPED_SCAN}`
  const within = [scoped ? `rank + busy <= @scap${i}` : '', perScope ? `rank + used <= @rlim${i}` : ''].filter((w) => w !== '').join(' AND ')
  return `SELECT seq, priority, fair_pos, scope FROM (
            SELECT q.*, ROW_NUMBER() OVER (PARTITION BY q.scope ORDER BY ${order('q.')}) AS rank FROM (${window}) q)
          WHERE ${within}
          ORDER BY ${order('')} LIMIT ${take}`
}

/**
 * An arm's rows with the key the claim merges the arms by, within a
 * priority (`mkey`): its seq for a kind taken oldest first. A fair
 * kind's rows are in fair order, not seq order: each gets the seq of the
 * same rank among its rows by age, so the merge keeps the kind's own
 * order and still places the kind among the others by the age of what
 * it takes.
 */
function mergeable(arm: ClaimArm, i: number, merged: boolean, withScope: boolean): string {
  const rows = claimArm(arm, i, withScope)
  if (!arm.fair || !merged) return `SELECT seq, priority, seq AS mkey, scope FROM (${rows})`
  return `WITH a AS MATERIALIZED (${rows})
          SELECT f.seq, f.priority, s.seq AS mkey, f.scope
            FROM (SELECT seq, priority, scope, ROW_NUMBER() OVER (PARTITION BY priority ORDER BY fair_pos, seq) AS r FROM a) f
            JOIN (SELECT seq, priority, ROW_NUMBER() OVER (PARTITION BY priority ORDER BY seq) AS r FROM a) s
              ON s.priority = f.priority AND s.r = f.r`
}

/** How a claim marks its jobs running, and what it returns of each. */
const CLAIM_SET = `status = 'running', attempt = attempt + 1, runner_id = @runnerId,
         started_at = max(@now, coalesce(run_at, @now)), updated_at = @now`
const CLAIM_RETURNING = `seq, id, kind, payload, attempt, max_attempts AS maxAttempts, timeout_ms AS timeoutMs, scope, trace_context AS traceContext,
            max(created_at, coalesce(run_at, 0)) AS readyAt`

/**
 * One statement claims jobs for every idle worker, of the runner's kinds
 * only, one arm per kind (parameters @k0, @k1, ..., with @cap{i} and
 * @scap{i} for limited kinds; prepared once per runner). Each arm reads
 * the head of its own kind's queue in the index jobtable_jobs_queued
 * (kind, priority DESC, seq), or jobtable_jobs_fair for a fair kind, and
 * the heads are merged by priority, then seq (a fair kind's merge key,
 * see mergeable): a backlog of a kind the runner does not take, or may
 * not take more of (at its limit), is never read past. SQLite serializes writers, so no
 * other claim can come between the counts of running jobs and the update:
 * no job is claimed twice and no limit is exceeded. A paused kind
 * (jobtable_paused_kinds), or one cooling down (jobtable_cooldowns, the
 * kind's name: these arms are of kinds without a rate rule), gives none.
 * started_at is never before the job's due time: the claimer's clock
 * reading may trail the promotion another process made. readyAt is when
 * the job became claimable (its due time, or its enqueue), for the wait
 * the runner reports.
 */
export function claimJobs(given: readonly (ClaimArm | ClaimArm['cap'])[]): string {
  // A cap's name alone is that cap's arm, oldest first (the benchmarks' floor uses the library's statement so).
  const arms = given.map((arm): ClaimArm => (typeof arm === 'string' ? { cap: arm, fair: false } : arm))
  const candidates =
    arms.length === 1 && arms[0]!.cap === 'free' && !arms[0]!.fair
      ? `SELECT seq FROM jobtable_jobs WHERE status = 'queued' AND kind = @k0 AND ${notPaused('@k0')} AND ${notCooling('@k0')} ORDER BY priority DESC, seq LIMIT @limit`
      : `SELECT seq FROM (${arms.map((arm, i) => `SELECT * FROM (${mergeable(arm, i, arms.length > 1, false)})`).join('\n UNION ALL ')})
          ORDER BY priority DESC, mkey LIMIT @limit`
  return `
  UPDATE jobtable_jobs
     SET ${CLAIM_SET}
   WHERE seq IN (${candidates})
  RETURNING ${CLAIM_RETURNING}`
}

/**
 * A rated claim's candidates (see DriverHotPath.jobClaim and
 * src/rate-limit.ts): what claimJobs's arms would take, rated kinds'
 * arms included, with each job's kind and scope, best first (priority,
 * then the merge key of mergeable). The driver picks from them with
 * pickWithinRates and marks its picks with claimPicked, in the same
 * transaction.
 */
export function claimCandidates(arms: readonly ClaimArm[]): string {
  return `
  SELECT seq, kind, scope, priority FROM (${arms.map((arm, i) => `SELECT seq, priority, mkey, scope, @k${i} AS kind FROM (${mergeable(arm, i, arms.length > 1, true)})`).join('\n UNION ALL ')})
   ORDER BY priority DESC, mkey`
}

/** Marks the queued jobs @seqs (a JSON array, picked by a rated claim in this transaction) running, as claimJobs does. */
export const claimPicked = `
  UPDATE jobtable_jobs
     SET ${CLAIM_SET}
   WHERE seq IN (SELECT value FROM json_each(@seqs)) AND status = 'queued'
  RETURNING ${CLAIM_RETURNING}`

/** A named bucket's claims at or after @since (later ones included: another process's clock may run ahead), and the earliest. */
export const rateUse = `SELECT count(*) AS used, min(at) AS oldest FROM jobtable_rate_starts WHERE bucket = @bucket AND at >= @since`

/** As rateUse for each of a kind's per-scope buckets (`<kind>@<scope>`) with claims in the window. */
export const rateUseByScope = `
  SELECT bucket, count(*) AS used, min(at) AS oldest FROM jobtable_rate_starts
   WHERE ${scopeBuckets('bucket', '@kind')} AND at >= @since
   GROUP BY bucket`

/** One claim record per bucket of @buckets (a JSON array, a bucket once per job claimed), at @now. */
export const recordStarts = `INSERT INTO jobtable_rate_starts (bucket, at) SELECT value, @now FROM json_each(@buckets)`

/** Deletes a named bucket's claim records from before @before, long past its window (ledgerKeepMs). */
export const pruneStarts = `DELETE FROM jobtable_rate_starts WHERE bucket = @bucket AND at < @before`

/** As pruneStarts for every per-scope bucket of @kind. */
export const pruneStartsByScope = `DELETE FROM jobtable_rate_starts WHERE ${scopeBuckets('bucket', '@kind')} AND at < @before`

/** The cooldown of @key in force at @now, if any. */
export const cooldownOf = `SELECT until FROM jobtable_cooldowns WHERE key = @key AND until > @now`

/**
 * Records a cooldown of @key until @until, or extends the one recorded
 * (never shortens it: a cooldown ends at the later of the two).
 */
export const upsertCooldown = `
  INSERT INTO jobtable_cooldowns (key, until, set_at) VALUES (@key, @until, @now)
  ON CONFLICT (key) DO UPDATE SET until = max(until, excluded.until),
                                  set_at = CASE WHEN excluded.until > until THEN excluded.set_at ELSE set_at END`

/** The cooldowns in force at @now, by key. */
export const cooldownsInForce = `SELECT key, until FROM jobtable_cooldowns WHERE until > @now ORDER BY key`

export const clearCooldown = `DELETE FROM jobtable_cooldowns WHERE key = @key`

/**
 * Puts back the jobs running under @runnerId that it does not hold (@keep,
 * a JSON array of ids): what a claim whose answer was lost marked running.
 * Puts each back by the rule of DriverHotPath.jobRelease (src/driver.ts),
 * decided in this one statement as in releaseJob.
 */
export const requeueLost = `
  UPDATE jobtable_jobs
     SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END,
         finished_at = CASE WHEN cancel_requested = 1 THEN @now END,
         runner_id = NULL, started_at = NULL, attempt = attempt - 1, updated_at = @now
   WHERE status = 'running' AND runner_id = @runnerId
     AND id NOT IN (SELECT value FROM json_each(@keep))`

/** The runners registered on the file, with their kinds (a JSON array). */
export const runnersWithKinds = `SELECT id, kinds FROM jobtable_runners`

/**
 * The kinds of queued jobs outside @served (a JSON array). It jumps from
 * one kind to the next in the index jobtable_jobs_queued (kind first), so
 * it reads one entry per kind, not every queued row: 0.16 ms against 13 ms
 * for SELECT DISTINCT over 300,000 queued jobs of 5 kinds (measured here).
 * A paused kind is not unserved: its jobs wait for the resume, whoever
 * runs (no claim would take them even with a runner of the kind up).
 */
export const unservedKinds = `
  WITH RECURSIVE queued(kind) AS (
    SELECT min(kind) FROM jobtable_jobs WHERE status = 'queued'
    UNION ALL
    SELECT (SELECT min(kind) FROM jobtable_jobs WHERE status = 'queued' AND kind > queued.kind) FROM queued WHERE queued.kind IS NOT NULL
  )
  SELECT kind FROM queued WHERE kind IS NOT NULL AND kind NOT IN (SELECT value FROM json_each(@served))
     AND kind NOT IN (SELECT kind FROM jobtable_paused_kinds)`

/** Fails the queued jobs due (enqueued, or scheduled for) before @before whose kind is outside @served and not paused. */
export const failUnserved = `
  UPDATE jobtable_jobs SET status = 'failed', error = @error, finished_at = @now, updated_at = @now
   WHERE status = 'queued' AND max(created_at, coalesce(run_at, 0)) < @before
     AND kind NOT IN (SELECT value FROM json_each(@served))
     AND kind NOT IN (SELECT kind FROM jobtable_paused_kinds)`

/** Fenced: applies only while the job is running under the same claim. */
export const publishResult = `
  UPDATE jobtable_jobs SET result = @result, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/**
 * Fenced like publishResult: puts a claimed job no handler started back,
 * by the rule of DriverHotPath.jobRelease (src/driver.ts), decided in
 * this one statement.
 */
export const releaseJob = `
  UPDATE jobtable_jobs
     SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END,
         finished_at = CASE WHEN cancel_requested = 1 THEN @now END,
         runner_id = NULL, started_at = NULL, attempt = attempt - 1, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/**
 * Fenced like publishResult: sends a job back for another attempt, due at
 * @runAt (scheduled until then); a snooze (@grant 1) gives back the
 * attempt it used. The last partial result is kept.
 */
export const retryJob = `
  UPDATE jobtable_jobs
     SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' WHEN @runAt > @now THEN 'scheduled' ELSE 'queued' END,
         run_at = CASE WHEN cancel_requested = 1 THEN run_at ELSE @runAt END,
         finished_at = CASE WHEN cancel_requested = 1 THEN @now END,
         result = coalesce(@result, result), runner_id = NULL, started_at = NULL,
         max_attempts = max_attempts + CASE WHEN cancel_requested = 1 THEN 0 ELSE @grant END, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/**
 * Fenced like publishResult; a null result keeps the last partial one. A
 * job whose cancellation was requested ends 'cancelled', whatever its
 * handler did (a result it returned is kept).
 */
export const finishJob = `
  UPDATE jobtable_jobs
     SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE @status END,
         result = coalesce(@result, result), error = CASE WHEN cancel_requested = 1 THEN NULL ELSE @error END,
         finished_at = @now, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/**
 * Fails the running jobs of every runner that is not registered, other
 * than @runnerId. Run in one transaction after deleting the runners proven
 * gone, so it also takes the jobs of a runner that stopped leaving a job it
 * could not finish, and those of a jobtable older than the runners table.
 * NOT IN is safe: jobtable_runners.id is NOT NULL.
 */
/**
 * Before failInterrupted, in the same transaction: the jobs it would fail
 * that requeue after a crash (an idempotent kind) and have an attempt
 * left go back to the queue instead.
 */
export const requeueInterrupted = `
  UPDATE jobtable_jobs SET status = 'queued', runner_id = NULL, started_at = NULL, updated_at = @now
   WHERE status = 'running' AND requeue_interrupted = 1 AND attempt < max_attempts AND cancel_requested = 0
     AND runner_id IS NOT @runnerId
     AND (runner_id IS NULL OR runner_id NOT IN (SELECT id FROM jobtable_runners))`

export const failInterrupted = `
  UPDATE jobtable_jobs
     SET status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'failed' END,
         error = CASE WHEN cancel_requested = 1 THEN NULL ELSE @error END, finished_at = @now, updated_at = @now
   WHERE status = 'running'
     AND runner_id IS NOT @runnerId
     AND (runner_id IS NULL OR runner_id NOT IN (SELECT id FROM jobtable_runners))`

/** Records a runner as live with its kinds and jobtable's release; its lock file, not a lease, proves it so (expires_at NULL). */
export const registerRunner = `
  INSERT INTO jobtable_runners (id, started_at, heartbeat_at, expires_at, kinds, version) VALUES (@runnerId, @now, @now, NULL, @kinds, ${VERSION_SQL})
  ON CONFLICT (id) DO UPDATE SET heartbeat_at = @now, kinds = @kinds`

export const heartbeatRunner = `UPDATE jobtable_runners SET heartbeat_at = @now WHERE id = @runnerId`

export const deleteRunner = `DELETE FROM jobtable_runners WHERE id = @runnerId`

export const otherRunners = `SELECT id FROM jobtable_runners WHERE id <> @runnerId`

/** Makes up to @limit scheduled jobs due at @now queued, earliest due first. */
export const promoteDue = `
  UPDATE jobtable_jobs SET status = 'queued', updated_at = @now
   WHERE seq IN (SELECT seq FROM jobtable_jobs WHERE status = 'scheduled' AND run_at <= @now ORDER BY run_at LIMIT @limit)`

/** Cancels a job waiting to run (queued or scheduled), within @scope unless @anyScope = 1 (DriverAdmin.jobCancelWaiting). */
export const cancelWaiting = `
  UPDATE jobtable_jobs SET status = 'cancelled', finished_at = @now, updated_at = @now
   WHERE id = @id AND (@anyScope = 1 OR scope IS @scope) AND status IN ('queued', 'scheduled')`

/** Asks the runner of a running job to abort it, within @scope unless @anyScope = 1 (DriverAdmin.jobRequestCancel). */
export const requestCancel = `
  UPDATE jobtable_jobs SET cancel_requested = 1, updated_at = @now
   WHERE id = @id AND (@anyScope = 1 OR scope IS @scope) AND status = 'running'`

/**
 * Runs a scheduled, failed or cancelled job again now (DriverAdmin.jobQueueNow),
 * within @scope unless @anyScope = 1: queued, due at @now, with one more
 * attempt than it has had when it has no attempt left; its error,
 * cancellation request and claim cleared, its last result kept. A failed
 * or cancelled job with a unique key re-enters the unique index
 * jobtable_jobs_unique, which refuses the update (SQLITE_CONSTRAINT_UNIQUE)
 * while another live job holds the key.
 */
export const queueNow = `
  UPDATE jobtable_jobs
     SET status = 'queued', run_at = @now, max_attempts = max(max_attempts, attempt + 1),
         error = NULL, cancel_requested = 0, runner_id = NULL, started_at = NULL, finished_at = NULL, updated_at = @now
   WHERE id = @id AND (@anyScope = 1 OR scope IS @scope) AND status IN ('scheduled', 'failed', 'cancelled')`

/**
 * The jobs by kind and status, of every scope, each status read from its
 * own partial index: terminal ones from jobtable_jobs_terminal (kind,
 * status, finished_at) alone, queued ones from jobtable_jobs_queued
 * (kind first) alone, running and scheduled ones through theirs. Every
 * status is in exactly one arm (the table's CHECK names these six). On
 * 1,000,000 jobs (95% succeeded, 5 kinds) it took 190-200 ms against
 * 1.1-1.2 s for a GROUP BY over the table, which reads every row
 * (bench/counts.ts); still a read of every terminal entry, so the driver
 * runs it at once only for a table of at most COUNTS_EXACT_MAX jobs (see
 * src/counts-cache.ts).
 */
export const countJobs = `
  SELECT kind, status, count(*) AS count FROM jobtable_jobs WHERE ${TERMINAL} GROUP BY kind, status
  UNION ALL
  SELECT kind, 'queued', count(*) FROM jobtable_jobs WHERE status = 'queued' GROUP BY kind
  UNION ALL
  SELECT kind, 'running', count(*) FROM jobtable_jobs WHERE status = 'running' GROUP BY kind
  UNION ALL
  SELECT kind, 'scheduled', count(*) FROM jobtable_jobs WHERE status = 'scheduled' GROUP BY kind`

/**
 * countJobs within one scope (@scope, NULL for unscoped jobs), found
 * through the index jobtable_jobs_scope: a statement of its own, since
 * `@anyScope = 1 OR scope IS @scope` would keep SQLite from using the
 * index and read the whole table for every scope's count (a scope of
 * 10,000 jobs among 1,000,000: 9 ms, against 300 ms with the OR;
 * measured here). A count still reads every job of its scope, about
 * 1.3 µs each (a scope of 200,000: 260-310 ms): see countJobs for when
 * the driver runs it at once.
 */
export const countScopedJobs = `SELECT kind, status, count(*) AS count FROM jobtable_jobs WHERE scope IS @scope GROUP BY kind, status`

/**
 * How many jobs the table holds, counted up to @limit: a read of at most
 * @limit entries of the id index (0.4 ms for 10,001 of 1,000,000).
 */
export const countJobsUpTo = `SELECT count(*) AS n FROM (SELECT 1 FROM jobtable_jobs LIMIT @limit)`

/** As countJobsUpTo within one scope, from the index jobtable_jobs_scope alone (0.7 ms for 10,001). */
export const countScopedJobsUpTo = `SELECT count(*) AS n FROM (SELECT 1 FROM jobtable_jobs WHERE scope IS @scope LIMIT @limit)`

/** The running jobs of @runnerId whose cancellation was requested. */
export const cancelRequested = `
  SELECT id FROM jobtable_jobs WHERE status = 'running' AND runner_id = @runnerId AND cancel_requested = 1`

/** The earliest due time of a scheduled job (from the index jobtable_jobs_scheduled). */
export const nextDue = `SELECT min(run_at) AS due FROM jobtable_jobs WHERE status = 'scheduled'`

/**
 * The live jobs for metrics (see Driver.queueCounts), each count at most
 * @limit. Queued jobs per kind: the kinds by jumps through the index
 * jobtable_jobs_queued (kind first, as unservedKinds), then each kind's
 * count read from that index alone, stopping at @limit. Running ones per
 * kind: as many rows as there are workers. Scheduled ones across kinds,
 * from the index jobtable_jobs_scheduled alone: it holds no kind, and
 * their kinds would need a read of every scheduled row. Measured here on
 * 1,000,000 queued and 1,000,000 scheduled jobs of 5 kinds (and 1,000,000
 * finished ones): a GROUP BY kind took 155 ms for the queued ones and 800
 * ms for the scheduled ones, blocking the event loop (better-sqlite3 is
 * synchronous); this statement takes 6 ms with @limit 10,000 (each kind
 * at the limit), 0.75 ms with 1,000, and 200 ms with no effective limit.
 */
export const queueCounts = `
  WITH RECURSIVE queued(kind) AS (
    SELECT min(kind) FROM jobtable_jobs WHERE status = 'queued'
    UNION ALL
    SELECT (SELECT min(kind) FROM jobtable_jobs WHERE status = 'queued' AND kind > queued.kind) FROM queued WHERE queued.kind IS NOT NULL
  )
  SELECT kind, 'queued' AS status,
         (SELECT count(*) FROM (SELECT 1 FROM jobtable_jobs j WHERE j.status = 'queued' AND j.kind = queued.kind LIMIT @limit)) AS count
    FROM queued WHERE kind IS NOT NULL
  UNION ALL
  SELECT kind, 'running', min(count(*), @limit) FROM jobtable_jobs WHERE status = 'running' GROUP BY kind
  UNION ALL
  SELECT NULL, 'scheduled', count(*) FROM (SELECT 1 FROM jobtable_jobs WHERE status = 'scheduled' LIMIT @limit)`

/** The columns a job is read with. */
const JOB_COLUMNS = 'id, kind, status, result, error, attempt, max_attempts AS maxAttempts, priority, run_at AS runAt'

export const getJob = `SELECT ${JOB_COLUMNS} FROM jobtable_jobs WHERE id = @id`

/** As getJob, only within one owner scope: another scope's job reads as missing. */
export const getScopedJob = `SELECT ${JOB_COLUMNS} FROM jobtable_jobs WHERE id = @id AND scope IS @scope`

/**
 * A page of jobs, newest first, inserted before the job @beforeId. Each
 * filter applies only when its parameter is set (@anyScope = 1 lists every
 * scope).
 *
 * A @beforeId whose job is gone (deleted by retention, a prune, any
 * DELETE), or is not the caller's to see, is placed by its id instead: a
 * job id begins with its enqueue time to the millisecond (a version-7
 * UUID), and @after is the id prefix of the millisecond after it (NULL for
 * an id without a time). The page then holds the jobs inserted before the
 * first of the caller's own jobs whose id is at or past @after (a
 * version-7 id: a random version-4 id of an older jobtable says nothing of
 * its time), found through the id's unique index: every job enqueued
 * before the cursor's
 * millisecond, and those enqueued within it again (where the cursor stood
 * among them is gone with it), never a job skipped. A cursor moves only
 * within the caller's own jobs: a job of another scope is placed by its
 * id's time as a deleted one is, so the page depends on nothing but the
 * caller's own jobs and the id given. The two lookups are uncorrelated
 * subqueries, each run once, and coalesce runs the second only when the
 * first finds nothing. The bound is one expression, without an OR, so
 * the page is a range of the primary key read backwards from it: a page
 * 1,000 jobs deep in 20,000 took 0.23 ms, against 2 ms when
 * `@beforeId IS NULL OR seq < ...` had every newer row read (measured
 * here).
 */
export const listJobs = `
  SELECT ${JOB_COLUMNS} FROM jobtable_jobs
   WHERE seq < CASE WHEN @beforeId IS NULL THEN 9223372036854775807 ELSE coalesce(
                 (SELECT c.seq FROM jobtable_jobs c WHERE c.id = @beforeId AND (@anyScope = 1 OR c.scope IS @scope)),
                 (SELECT n.seq FROM jobtable_jobs n WHERE n.id >= @after AND substr(n.id, 15, 1) = '7' AND (@anyScope = 1 OR n.scope IS @scope)
                   ORDER BY n.id LIMIT 1),
                 9223372036854775807) END
     AND (@anyScope = 1 OR scope IS @scope)
     AND (@status IS NULL OR status = @status)
     AND (@kind IS NULL OR kind = @kind)
   ORDER BY seq DESC
   LIMIT @limit`

/**
 * The jobs (of @scope unless @anyScope = 1) that finished at or after
 * @since, by minute and status. It jumps from one kind to the next in
 * the index jobtable_jobs_terminal (kind, status, finished_at), as
 * finishedKinds does, and reads each kind's and status's range from
 * @since: the jobs of the last hour, not every finished one.
 */
export const jobActivity = `
  WITH RECURSIVE finished(kind) AS (
    SELECT min(kind) FROM jobtable_jobs WHERE ${TERMINAL}
    UNION ALL
    SELECT (SELECT min(kind) FROM jobtable_jobs WHERE ${TERMINAL} AND kind > finished.kind) FROM finished WHERE finished.kind IS NOT NULL
  )
  SELECT (j.finished_at / 60000) * 60000 AS minute, j.status AS status, count(*) AS count
    FROM finished f JOIN jobtable_jobs j ON j.kind = f.kind
   WHERE f.kind IS NOT NULL AND j.${TERMINAL} AND j.finished_at >= @since AND (@anyScope = 1 OR j.scope IS @scope)
   GROUP BY minute, j.status
   ORDER BY minute, j.status`

/** Pauses a kind for every process on the file; a kind already paused keeps its first time. */
export const pauseKind = `INSERT INTO jobtable_paused_kinds (kind, paused_at) VALUES (@kind, @now) ON CONFLICT (kind) DO NOTHING`

export const resumeKind = `DELETE FROM jobtable_paused_kinds WHERE kind = @kind`

export const pausedKinds = `SELECT kind, paused_at AS pausedAt FROM jobtable_paused_kinds ORDER BY kind`

/**
 * Moves a schedule's last tick forward to @tick, or records it for a
 * schedule seen for the first time; a row already at or past @tick is
 * left alone. Returns the row only when it moved: the caller then stores
 * the tick's job in the same transaction.
 */
export const advanceSchedule = `
  INSERT INTO jobtable_schedules (name, last_tick_at, updated_at) VALUES (@name, @tick, @now)
  ON CONFLICT (name) DO UPDATE SET last_tick_at = excluded.last_tick_at, updated_at = excluded.updated_at
   WHERE last_tick_at < excluded.last_tick_at
  RETURNING name`

export const readSchedules = `SELECT name, last_tick_at AS lastTickAt FROM jobtable_schedules WHERE name IN (SELECT value FROM json_each(@names))`

/**
 * The kinds of terminal jobs, each once. It jumps from one kind to the
 * next in the index jobtable_jobs_terminal (kind first), as unservedKinds
 * does in the queued index, reading one entry per kind.
 */
export const finishedKinds = `
  WITH RECURSIVE finished(kind) AS (
    SELECT min(kind) FROM jobtable_jobs WHERE ${TERMINAL}
    UNION ALL
    SELECT (SELECT min(kind) FROM jobtable_jobs WHERE ${TERMINAL} AND kind > finished.kind) FROM finished WHERE finished.kind IS NOT NULL
  )
  SELECT kind FROM finished WHERE kind IS NOT NULL`

/**
 * Deletes up to @limit terminal jobs of @kind in @statuses (a JSON array)
 * finished before @before: a range of the index jobtable_jobs_terminal
 * (kind, status, finished_at) per status, never a live row.
 */
export const pruneJobs = `
  DELETE FROM jobtable_jobs WHERE seq IN (
    SELECT seq FROM jobtable_jobs
     WHERE kind = @kind AND ${TERMINAL} AND status IN (SELECT value FROM json_each(@statuses)) AND finished_at < @before
     LIMIT @limit)`
