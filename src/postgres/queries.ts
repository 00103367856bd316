import { VERSION_SQL } from '../version.js'

/**
 * Every SQL statement the PostgreSQL driver runs, in one place, for the
 * tables of one schema. `s` is the schema name, already validated and
 * quoted. Job times are milliseconds since the epoch from the runner's
 * clock; runner leases use the database's clock (see `dbNowMs`), so
 * runners on machines whose clocks disagree still agree on who is late.
 * Whether a job is due is read on the earlier of the two (`dueNow`): a
 * runner whose clock runs ahead never makes a job due before its time.
 */

/** The database's clock in milliseconds since the epoch; clock_timestamp() moves within a transaction. */
const dbNowMs = `(extract(epoch from clock_timestamp()) * 1000)::bigint`

/**
 * The time a due time is compared with: the runner's clock reading
 * `param`, or the database's clock when that is earlier. A runner ahead
 * of the database waits for the database's time; a runner's own clock
 * held in the past (a test's) is followed as it is. statement_timestamp()
 * is stable within the statement, so `run_at <= dueNow` still reads the
 * index jobs_scheduled (clock_timestamp(), volatile, would not).
 */
const dueNow = (param: string) => `LEAST(${param}::bigint, (extract(epoch from statement_timestamp()) * 1000)::bigint)`

/** The channel every jobtable schema notifies on; the payload names the schema. */
export const NOTIFY_CHANNEL = 'jobtable_jobs'

/** The columns a job is read with (run_at as a number: bigint would come back as a string). */
const JOB_COLUMNS = `id, kind, status, result::text AS result, error, attempt, max_attempts AS "maxAttempts", priority, run_at::float8 AS "runAt"`

/** The statuses a job ends in, as the partial index jobs_terminal names them: a query repeats them word for word to use it. */
const TERMINAL = `status IN ('succeeded', 'failed', 'cancelled')`

/** The statements of one schema. */
export type Queries = ReturnType<typeof queries>

/** The batch of final writes of finishAndClaimJobs, $1-$6 as in finishJobs. */
function finishedPart(s: string): string {
  return `
        UPDATE ${s}.jobs AS j
           SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE f.status END,
               result = coalesce(f.result::jsonb, j.result), error = CASE WHEN j.cancel_requested THEN NULL ELSE f.error END,
               finished_at = $6, updated_at = $6
          FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) AS f(id, attempt, status, result, error)
         WHERE j.id = f.id AND j.status = 'running' AND j.attempt = f.attempt
        RETURNING j.id`
}

/**
 * The send-backs (retries and snoozes) of a batch, part of the statements
 * that make them with the batch's final writes: arrays $first to
 * $first+4 (ids, attempts, due times, results, granted) and `now`, the
 * clock reading. Fenced like finishJobs: sends jobs back for another
 * attempt, each due at its run_at (scheduled until then); a snooze
 * (granted 1) gives back the attempt it used. A retry's due time is its
 * runner's clock plus a delay: from a runner whose clock is ahead of the
 * database's it is stored that lead earlier, so the delay is waited on the
 * database's time (see dueNow), not the lead besides. Returns the ids it
 * changed. The alias is `granted`, not `grant`: GRANT is a reserved word,
 * a syntax error (42601) as a column alias, which left every retry and
 * snooze running.
 */
function retriedPart(s: string, first: number, now: string): string {
  const [ids, attempts, runAts, results, granted] = [0, 1, 2, 3, 4].map((i) => `$${first + i}`)
  return `
        UPDATE ${s}.jobs AS j
           SET status = CASE WHEN j.cancel_requested THEN 'cancelled' WHEN f.run_at > ${now} THEN 'scheduled' ELSE 'queued' END,
               run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE f.run_at - (${now}::bigint - ${dueNow(now)}) END,
               finished_at = CASE WHEN j.cancel_requested THEN ${now}::bigint END,
               result = coalesce(f.result::jsonb, j.result), runner_id = NULL, started_at = NULL,
               max_attempts = j.max_attempts + CASE WHEN j.cancel_requested THEN 0 ELSE f.granted END, updated_at = ${now}
          FROM unnest(${ids}::text[], ${attempts}::int[], ${runAts}::bigint[], ${results}::text[], ${granted}::int[]) AS f(id, attempt, run_at, result, granted)
         WHERE j.id = f.id AND j.status = 'running' AND j.attempt = f.attempt
        RETURNING j.id`
}

/** Builds the statements for the quoted schema `s`. */
export function queries(s: string) {
  return {
    /**
     * Many jobs in one statement: arrays, unnested in order, so a batch of
     * a thousand is one round trip. WITH ORDINALITY and ORDER BY keep seq
     * in the order of the batch.
     */
    insertJobs: `
      INSERT INTO ${s}.jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, trace_context)
      SELECT t.id, t.kind, t.payload, t.scope, $5, $5, t.priority, t.run_at,
             CASE WHEN t.run_at > ${dueNow('$5')} THEN 'scheduled' ELSE 'queued' END,
             t.max_attempts, t.timeout_ms, t.requeue, t.trace_context
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::int[], $7::bigint[], $8::int[], $9::int[], $10::boolean[], $11::text[])
             WITH ORDINALITY AS t(id, kind, payload, scope, priority, run_at, max_attempts, timeout_ms, requeue, trace_context, ord)
       ORDER BY t.ord`,

    /**
     * insertJobs for a batch with unique keys ($12, null for a job without
     * one): a job whose kind, scope and key a live job holds (the unique
     * index jobs_unique) is not stored. Returns the ids stored. A conflict
     * with a transaction still in flight waits for it to end.
     */
    insertUniqueJobs: `
      INSERT INTO ${s}.jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                             max_attempts, timeout_ms, requeue_interrupted, trace_context, unique_key)
      SELECT t.id, t.kind, t.payload, t.scope, $5, $5, t.priority, t.run_at,
             CASE WHEN t.run_at > ${dueNow('$5')} THEN 'scheduled' ELSE 'queued' END,
             t.max_attempts, t.timeout_ms, t.requeue, t.trace_context, t.unique_key
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::int[], $7::bigint[], $8::int[], $9::int[], $10::boolean[], $11::text[], $12::text[])
             WITH ORDINALITY AS t(id, kind, payload, scope, priority, run_at, max_attempts, timeout_ms, requeue, trace_context, unique_key, ord)
       ORDER BY t.ord
      ON CONFLICT DO NOTHING
      RETURNING id`,

    /** Pauses a kind (see the SQLite pauseKind). */
    pauseKind: `INSERT INTO ${s}.paused_kinds (kind, paused_at) VALUES ($1, $2) ON CONFLICT (kind) DO NOTHING`,

    /** Resumes a kind, and wakes the idle runners of every process as an insert does (the channel's payload names the schema). */
    resumeKind: `
      WITH resumed AS (DELETE FROM ${s}.paused_kinds WHERE kind = $1 RETURNING kind)
      SELECT kind, pg_notify('${NOTIFY_CHANNEL}', $2) FROM resumed`,

    pausedKinds: `SELECT kind, paused_at::float8 AS "pausedAt" FROM ${s}.paused_kinds ORDER BY kind`,

    /** Moves a schedule's last tick forward (see the SQLite advanceSchedule); a row only when it moved. Concurrent calls wait on the row's lock and see the winner's tick. */
    advanceSchedule: `
      INSERT INTO ${s}.schedules AS c (name, last_tick_at, updated_at) VALUES ($1, $2, $3)
      ON CONFLICT (name) DO UPDATE SET last_tick_at = excluded.last_tick_at, updated_at = excluded.updated_at
       WHERE c.last_tick_at < excluded.last_tick_at
      RETURNING name`,

    readSchedules: `SELECT name, last_tick_at::float8 AS "lastTickAt" FROM ${s}.schedules WHERE name = ANY ($1::text[])`,

    /** The live jobs holding the unique keys ($1 kinds, $2 scopes, $3 keys), with the 1-based index of the key each holds. */
    uniqueHolders: `
      SELECT j.id, t.ord::int AS ord
        FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS t(kind, scope, unique_key, ord)
        JOIN ${s}.jobs j
          ON j.kind = t.kind AND coalesce(j.scope, '') = coalesce(t.scope, '') AND j.unique_key = t.unique_key
         AND j.unique_key IS NOT NULL AND j.status IN ('scheduled', 'queued', 'running')`,

    /**
     * One statement claims jobs for every idle worker: the function
     * claim_jobs (migration 12), given the runner's kinds ($1) with each
     * one's concurrency ($2) and scopeConcurrency ($3), null for none. It
     * reads the head of each kind's queue in the partial index jobs_queued
     * (kind, priority DESC, seq; queued rows only, so millions of finished
     * rows cost nothing, and a backlog of a kind the claimer does not take
     * is never read past), merges the heads by priority then seq, and takes
     * them FOR UPDATE SKIP LOCKED: concurrent claimers take disjoint rows
     * without waiting for each other, and a row another claimer has just
     * updated is skipped, so no job is claimed twice. Limited kinds claim
     * under their advisory locks (see the migration). A function, not a
     * plain statement, also for a runner without limits: its statement
     * runs on a generic plan (plan_cache_mode), where a prepared statement
     * was planned again at every claim. The shaped drain of 20,000 jobs in
     * claims of 10, one round trip each with the final writes of the
     * claim before: 10.8k jobs/s as a plain statement, 12.6k through the
     * function (PostgreSQL 15 here). started_at is never before the job's
     * due time: the clock reading sent may trail the promotion another
     * process made. readyAt is when the job became claimable (its due
     * time, or its enqueue), for the wait the runner reports.
     *
     * One known departure from the claim order, under concurrency only: a
     * claim of several kinds locks the head of each kind's queue (up to
     * its limit per kind, since the merge may take them all from one) and
     * takes its limit of them in all, so the heads it does not take stay
     * locked until its statement commits. A claim running beside it skips
     * those and may take a lower-priority or later job of the same kind;
     * the skipped ones stay queued for the next claim. A claim of one kind
     * takes every row it locks, and a limited kind's claims are serialized
     * by its advisory lock, so neither shows it. Locking only the rows the
     * merge keeps would need a second read of them, and a concurrent
     * claimer reading the same candidates would then find them locked and
     * take fewer jobs, rather than the rows past them: a slower claim on
     * both counts, so it is not done.
     */
    claimJobs: `
      SELECT c_seq AS seq, c_id AS id, c_kind AS kind, c_payload AS payload, c_attempt AS attempt,
             c_max_attempts AS "maxAttempts", c_timeout_ms AS "timeoutMs", c_trace_context AS "traceContext", c_ready_at::float8 AS "readyAt"
        FROM ${s}.claim_jobs($1::text[], $2::integer[], $3::integer[], $4::integer, $5::text, $6::bigint)`,

    /**
     * Puts back the jobs a claim marked running for a runner whose claim
     * answer was lost with its connection (the statement may have
     * committed). `$2` lists every job the runner holds: any other job
     * running under its id never reached a handler, so putting it back
     * starts no handler twice. Each is put back by the rule of
     * DriverHotPath.jobRelease (src/driver.ts), decided in this one
     * statement as in releaseJobs.
     */
    requeueLostClaims: `
      UPDATE ${s}.jobs
         SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
             finished_at = CASE WHEN cancel_requested THEN $3::bigint END,
             runner_id = NULL, started_at = NULL, attempt = attempt - 1, updated_at = $3
       WHERE runner_id = $1 AND status = 'running' AND NOT (id = ANY($2::text[]))`,

    /**
     * Fenced: applies only while the job is running under the same claim.
     * A published result notifies the channel (payload `<schema>:change`),
     * so event streams of every process read it at once.
     */
    publishResult: `
      WITH published AS (
        UPDATE ${s}.jobs SET result = $3::jsonb, updated_at = $4
         WHERE id = $1 AND status = 'running' AND attempt = $2
        RETURNING id)
      SELECT id, pg_notify('${NOTIFY_CHANNEL}', $5) FROM published`,

    /**
     * A batch of final writes with send-backs, in one statement so that it
     * applies whole or not at all: finishJobs' $1-$6, then the send-backs'
     * arrays as $7-$11 (see retriedPart; their clock reading is $6). Made as two statements, a
     * transient failure of the second after the first committed had the
     * runner's retry of the batch find the send-backs applied already, and
     * answer them as not running under their claim. The two updates touch
     * different rows (a batch holds one write per job). Returns the ids it
     * changed.
     */
    retryAndFinishJobs: `
      WITH retried AS (${retriedPart(s, 7, '$6')}
      ), finished AS (${finishedPart(s)}
      )
      SELECT id FROM retried UNION ALL SELECT id FROM finished`,

    /**
     * Fenced like finishJobs: puts claimed jobs no handler started back,
     * by the rule of DriverHotPath.jobRelease (src/driver.ts), decided in
     * this one statement.
     */
    releaseJobs: `
      UPDATE ${s}.jobs AS j
         SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
             finished_at = CASE WHEN j.cancel_requested THEN $3::bigint END,
             runner_id = NULL, started_at = NULL, attempt = j.attempt - 1, updated_at = $3
        FROM unnest($1::text[], $2::int[]) AS r(id, attempt)
       WHERE j.id = r.id AND j.status = 'running' AND j.attempt = r.attempt`,

    /**
     * Every final write of a batch in one statement, fenced like
     * publishResult; a null result keeps the last partial one. Returns the
     * ids it changed: a finish whose id is missing was not running under
     * its claim.
     */
    finishJobs: `
      UPDATE ${s}.jobs AS j
         SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE f.status END,
             result = coalesce(f.result::jsonb, j.result), error = CASE WHEN j.cancel_requested THEN NULL ELSE f.error END,
             finished_at = $6, updated_at = $6
        FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) AS f(id, attempt, status, result, error)
       WHERE j.id = f.id AND j.status = 'running' AND j.attempt = f.attempt
      RETURNING j.id`,

    /**
     * finishJobs and claimJobs in one statement, so a busy runner makes one
     * round trip per batch of final writes instead of two: $1-$6 as in
     * finishJobs, then the claim's limit ($7), runner ($8), kinds ($9) and
     * their limits ($10, $11). The claim takes only queued rows and the
     * finish only running ones, so the two parts never touch one row. The
     * function's statements take their own snapshot, after its locks; it
     * runs after the final writes (the UNION's first branch is read
     * first), so it counts the jobs they ended as ended. Were the order to
     * change, it would count them as still running and claim fewer: a
     * limit can be undercounted for one claim, never exceeded. Rows come
     * back tagged: 'f' for a finish that applied (its id), 'c' for a
     * claimed job.
     */
    finishAndClaimJobs: `
      WITH finished AS (${finishedPart(s)}
      )
      SELECT 'f' AS part, NULL::bigint AS seq, id, NULL AS kind, NULL AS payload, NULL::integer AS attempt,
             NULL::integer AS "maxAttempts", NULL::integer AS "timeoutMs", NULL::text AS "traceContext", NULL::float8 AS "readyAt" FROM finished
      UNION ALL
      SELECT 'c', c_seq, c_id, c_kind, c_payload, c_attempt, c_max_attempts, c_timeout_ms, c_trace_context, c_ready_at::float8
        FROM ${s}.claim_jobs($9::text[], $10::integer[], $11::integer[], $7::integer, $8::text, $6::bigint)`,

    /**
     * finishAndClaimJobs for a batch with send-backs: their arrays as
     * $12-$16 (see retriedPart), so the batch applies whole or not at all (see
     * retryAndFinishJobs). The send-backs are read first, then the final
     * writes, then the claim, which therefore sees both (a job sent back
     * due now may be claimed again at once, as a later claim would).
     */
    retryFinishAndClaimJobs: `
      WITH retried AS (${retriedPart(s, 12, '$6')}
      ), finished AS (${finishedPart(s)}
      )
      SELECT 'f' AS part, NULL::bigint AS seq, id, NULL AS kind, NULL AS payload, NULL::integer AS attempt,
             NULL::integer AS "maxAttempts", NULL::integer AS "timeoutMs", NULL::text AS "traceContext", NULL::float8 AS "readyAt" FROM retried
      UNION ALL
      SELECT 'f', NULL, id, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM finished
      UNION ALL
      SELECT 'c', c_seq, c_id, c_kind, c_payload, c_attempt, c_max_attempts, c_timeout_ms, c_trace_context, c_ready_at::float8
        FROM ${s}.claim_jobs($9::text[], $10::integer[], $11::integer[], $7::integer, $8::text, $6::bigint)`,

    /**
     * The sweep, in one statement: forgets the runners whose lease has
     * lapsed and fails the running jobs of runners that are not registered
     * or were just forgotten, never those of $1 (the sweeping runner).
     * Both parts see the table as it was when the statement began, so the
     * forgotten runners are named through the CTE.
     */
    failInterrupted: `
      WITH gone AS (
        DELETE FROM ${s}.runners WHERE id <> $1 AND expires_at < ${dbNowMs} RETURNING id
      ), orphans AS (
        SELECT j.seq, (j.requeue_interrupted AND j.attempt < j.max_attempts AND NOT j.cancel_requested) AS requeue,
               j.cancel_requested AS cancelled FROM ${s}.jobs j
         WHERE j.status = 'running' AND j.runner_id IS DISTINCT FROM $1
           AND (j.runner_id IS NULL
                OR j.runner_id IN (SELECT id FROM gone)
                OR NOT EXISTS (SELECT 1 FROM ${s}.runners r WHERE r.id = j.runner_id))
      )
      UPDATE ${s}.jobs AS j
         SET status = CASE WHEN o.requeue THEN 'queued' WHEN o.cancelled THEN 'cancelled' ELSE 'failed' END,
             error = CASE WHEN o.requeue OR o.cancelled THEN NULL ELSE $2::text END,
             finished_at = CASE WHEN o.requeue THEN NULL ELSE $3::bigint END,
             runner_id = CASE WHEN o.requeue THEN NULL ELSE j.runner_id END,
             started_at = CASE WHEN o.requeue THEN NULL ELSE j.started_at END,
             updated_at = $3::bigint
        FROM orphans o WHERE j.seq = o.seq
      RETURNING o.requeue`,

    /** The kinds of the runners whose lease is live on the database's clock, each once. */
    runnerKinds: `SELECT DISTINCT unnest(kinds) AS kind FROM ${s}.runners WHERE expires_at >= ${dbNowMs}`,

    /** Records a live runner of the kinds $4, with jobtable's release, and a lease of $3 ms on the database's clock. */
    registerRunner: `
      INSERT INTO ${s}.runners (id, started_at, heartbeat_at, expires_at, kinds, version) VALUES ($1, $2, $2, ${dbNowMs} + $3, $4::text[], ${VERSION_SQL})
      ON CONFLICT (id) DO UPDATE SET heartbeat_at = $2, expires_at = ${dbNowMs} + $3, kinds = $4::text[]`,

    /**
     * The kinds of queued jobs that no runner with a live lease has. It
     * jumps from one kind to the next in the index jobs_queued (kind
     * first), reading one entry per kind rather than every queued row. A
     * paused kind is not unserved: its jobs wait for the resume.
     */
    unservedKinds: `
      WITH RECURSIVE queued(kind) AS (
        (SELECT kind FROM ${s}.jobs WHERE status = 'queued' ORDER BY kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM ${s}.jobs j WHERE j.status = 'queued' AND j.kind > q.kind ORDER BY j.kind LIMIT 1)
          FROM queued q WHERE q.kind IS NOT NULL
      )
      SELECT q.kind FROM queued q
       WHERE q.kind IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM ${s}.runners r WHERE r.expires_at >= ${dbNowMs} AND q.kind = ANY(r.kinds))
         AND NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = q.kind)`,

    /** Fails the queued jobs enqueued before $1 whose kind no runner with a live lease has, and is not paused. */
    failUnserved: `
      UPDATE ${s}.jobs j SET status = 'failed', error = $2, finished_at = $3, updated_at = $3
       WHERE j.status = 'queued' AND greatest(j.created_at, coalesce(j.run_at, 0)) < $1
         AND NOT EXISTS (SELECT 1 FROM ${s}.runners r WHERE r.expires_at >= ${dbNowMs} AND j.kind = ANY(r.kinds))
         AND NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = j.kind)`,

    /** Renews a lease; no row means the lease lapsed and the runner was forgotten. */
    heartbeatRunner: `UPDATE ${s}.runners SET heartbeat_at = $2, expires_at = ${dbNowMs} + $3 WHERE id = $1`,

    deleteRunner: `DELETE FROM ${s}.runners WHERE id = $1`,

    /**
     * Makes up to $2 scheduled jobs due at $1 (or at the database's time,
     * when earlier: see dueNow) queued, earliest due first. SKIP LOCKED: two schedulers promoting at once take disjoint rows.
     */
    promoteDue: `
      WITH due AS (
        SELECT seq FROM ${s}.jobs WHERE status = 'scheduled' AND run_at <= ${dueNow('$1')} ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.jobs AS j SET status = 'queued', updated_at = $1 FROM due WHERE j.seq = due.seq`,

    /** Cancels a job waiting to run (queued or scheduled), within scope $4 unless $3 (DriverAdmin.jobCancelWaiting). */
    cancelWaiting: `
      UPDATE ${s}.jobs SET status = 'cancelled', finished_at = $2, updated_at = $2
       WHERE id = $1 AND ($3::boolean OR scope IS NOT DISTINCT FROM $4::text) AND status IN ('queued', 'scheduled')`,

    /** Asks the runner of a running job to abort it, and tells listening runners at once (DriverAdmin.jobRequestCancel). */
    requestCancel: `
      WITH r AS (
        UPDATE ${s}.jobs SET cancel_requested = true, updated_at = $2
         WHERE id = $1 AND ($3::boolean OR scope IS NOT DISTINCT FROM $4::text) AND status = 'running'
        RETURNING id
      )
      SELECT id, pg_notify('${NOTIFY_CHANNEL}', $5::text) FROM r`,

    /**
     * Runs a scheduled, failed or cancelled job again now (as the SQLite
     * queueNow), within scope $4 unless $3, and tells listening runners
     * at once ($5: the schema, as an insert's trigger does). The unique
     * index jobs_unique refuses the update (23505) while another live
     * job holds a failed or cancelled job's key.
     */
    queueNow: `
      WITH r AS (
        UPDATE ${s}.jobs
           SET status = 'queued', run_at = $2, max_attempts = GREATEST(max_attempts, attempt + 1),
               error = NULL, cancel_requested = false, runner_id = NULL, started_at = NULL, finished_at = NULL, updated_at = $2
         WHERE id = $1 AND ($3::boolean OR scope IS NOT DISTINCT FROM $4::text) AND status IN ('scheduled', 'failed', 'cancelled')
        RETURNING id
      )
      SELECT id, pg_notify('${NOTIFY_CHANNEL}', $5::text) FROM r`,

    /**
     * The jobs by kind and status, of every scope (float8: a bigint would
     * come back as a string), each status from its own partial index:
     * terminal ones by an index-only scan of jobs_terminal (kind, status,
     * finished_at), queued ones of jobs_queued (kind first), running and
     * scheduled ones through theirs; every status is in exactly one arm.
     * On 1,000,000 jobs (95% succeeded, 5 kinds, vacuumed) 180-200 ms
     * against 340-390 ms for a GROUP BY over the table (bench/counts.ts).
     * Still a read of every terminal entry: see src/counts-cache.ts.
     */
    countJobs: `
      SELECT kind, status, count(*)::float8 AS count FROM ${s}.jobs WHERE ${TERMINAL} GROUP BY kind, status
      UNION ALL
      SELECT kind, 'queued', count(*)::float8 FROM ${s}.jobs WHERE status = 'queued' GROUP BY kind
      UNION ALL
      SELECT kind, 'running', count(*)::float8 FROM ${s}.jobs WHERE status = 'running' GROUP BY kind
      UNION ALL
      SELECT kind, 'scheduled', count(*)::float8 FROM ${s}.jobs WHERE status = 'scheduled' GROUP BY kind`,

    /**
     * countJobs within scope $1, through the index jobs_scope: `scope =`
     * and `scope IS NULL` can use it, where `IS NOT DISTINCT FROM` (or an
     * OR with a flag for every scope) reads the whole table: 148 ms for a
     * scope of 10,000 jobs among 300,000, against 17 ms through the index
     * (measured here).
     */
    countScopedJobs: `SELECT kind, status, count(*)::float8 AS count FROM ${s}.jobs WHERE scope = $1 GROUP BY kind, status`,
    countUnscopedJobs: `SELECT kind, status, count(*)::float8 AS count FROM ${s}.jobs WHERE scope IS NULL GROUP BY kind, status`,

    /**
     * How many jobs the table ($1 the limit), scope $1 ($2 the limit) or
     * the unscoped jobs ($1 the limit) hold, counted up to the limit: an
     * index-only scan of at most that many entries of the primary key or
     * jobs_scope (1-1.3 ms for 10,001 of 1,000,000), to tell a count that
     * is cheap to make exactly from one that is not (src/counts-cache.ts).
     */
    countJobsUpTo: `SELECT count(*)::float8 AS n FROM (SELECT 1 FROM ${s}.jobs LIMIT $1) t`,
    countScopedJobsUpTo: `SELECT count(*)::float8 AS n FROM (SELECT 1 FROM ${s}.jobs WHERE scope = $1 LIMIT $2) t`,
    countUnscopedJobsUpTo: `SELECT count(*)::float8 AS n FROM (SELECT 1 FROM ${s}.jobs WHERE scope IS NULL LIMIT $1) t`,

    /** The running jobs of $1 whose cancellation was requested. */
    cancelRequested: `SELECT id FROM ${s}.jobs WHERE status = 'running' AND runner_id = $1 AND cancel_requested`,

    /** The earliest due time of a scheduled job (from the index jobs_scheduled). */
    nextDue: `SELECT min(run_at) AS due FROM ${s}.jobs WHERE status = 'scheduled'`,

    /**
     * The kinds of terminal jobs, each once, jumping from one kind to the
     * next in the index jobs_terminal (kind first), as unservedKinds does.
     */
    finishedKinds: `
      WITH RECURSIVE finished(kind) AS (
        (SELECT kind FROM ${s}.jobs WHERE ${TERMINAL} ORDER BY kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM ${s}.jobs j WHERE j.${TERMINAL} AND j.kind > f.kind ORDER BY j.kind LIMIT 1)
          FROM finished f WHERE f.kind IS NOT NULL
      )
      SELECT kind FROM finished WHERE kind IS NOT NULL`,

    /**
     * Deletes up to $4 terminal jobs of kind $1 in statuses $2 finished
     * before $3: a range of the index jobs_terminal (kind, status,
     * finished_at) per status, never a live row. SKIP LOCKED: pruners in
     * several processes delete disjoint rows, without waiting for each
     * other.
     */
    pruneJobs: `
      WITH doomed AS (
        SELECT seq FROM ${s}.jobs
         WHERE kind = $1 AND ${TERMINAL} AND status = ANY($2::text[]) AND finished_at < $3
         LIMIT $4 FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${s}.jobs AS j USING doomed WHERE j.seq = doomed.seq`,

    /**
     * The live jobs for metrics, each count at most $1 (see the SQLite
     * queueCounts): queued ones per kind, the kinds by jumps through the
     * index jobs_queued and each kind's count from it, stopping at $1;
     * running ones per kind (as many as there are workers); scheduled ones
     * across kinds, from the index jobs_scheduled. On 1,000,000 queued and
     * 1,000,000 scheduled jobs of 5 kinds (PostgreSQL 15 here, vacuumed, so
     * index-only scans): 16 ms with $1 10,000 and 2.5 ms with 1,000,
     * against 230 ms (queued) and 330 ms (scheduled) for a GROUP BY kind.
     */
    queueCounts: `
      WITH RECURSIVE queued(kind) AS (
        (SELECT kind FROM ${s}.jobs WHERE status = 'queued' ORDER BY kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM ${s}.jobs j WHERE j.status = 'queued' AND j.kind > q.kind ORDER BY j.kind LIMIT 1)
          FROM queued q WHERE q.kind IS NOT NULL
      )
      SELECT q.kind, 'queued' AS status,
             (SELECT count(*) FROM (SELECT 1 FROM ${s}.jobs j WHERE j.status = 'queued' AND j.kind = q.kind LIMIT $1) c)::integer AS count
        FROM queued q WHERE q.kind IS NOT NULL
      UNION ALL
      SELECT kind, 'running', least(count(*), $1)::integer FROM ${s}.jobs WHERE status = 'running' GROUP BY kind
      UNION ALL
      SELECT NULL, 'scheduled', count(*)::integer FROM (SELECT 1 FROM ${s}.jobs WHERE status = 'scheduled' LIMIT $1) c`,

    getJob: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs WHERE id = $1`,

    /** As getJob, only within one owner scope: another scope's job reads as missing. */
    getScopedJob: `
      SELECT ${JOB_COLUMNS} FROM ${s}.jobs
       WHERE id = $1 AND scope IS NOT DISTINCT FROM $2`,

    /**
     * A page of jobs, newest first, inserted before the job $1. Each filter
     * applies only when its parameter is set ($2 true lists every scope).
     * A $1 whose job is gone, or is not the caller's to see, is placed by
     * its id's time, $7 being the id prefix of the millisecond after it
     * (see the SQLite listJobs): every job enqueued before that
     * millisecond, and those within it again, never one skipped; a cursor
     * moves only within the caller's own jobs. Both lookups are InitPlans,
     * and COALESCE runs the second only when the first finds nothing. The
     * bound is one expression, without an OR, so even a generic plan reads
     * the page as a range of the primary key.
     */
    listJobs: `
      SELECT ${JOB_COLUMNS} FROM ${s}.jobs
       WHERE seq < CASE WHEN $1::text IS NULL THEN 9223372036854775807 ELSE COALESCE(
                     (SELECT c.seq FROM ${s}.jobs c WHERE c.id = $1::text AND ($2::boolean OR c.scope IS NOT DISTINCT FROM $3::text)),
                     (SELECT n.seq FROM ${s}.jobs n WHERE n.id >= $7::text AND substr(n.id, 15, 1) = '7' AND ($2::boolean OR n.scope IS NOT DISTINCT FROM $3::text)
                       ORDER BY n.id LIMIT 1),
                     9223372036854775807) END
         AND ($2::boolean OR scope IS NOT DISTINCT FROM $3::text)
         AND ($4::text IS NULL OR status = $4::text)
         AND ($5::text IS NULL OR kind = $5::text)
       ORDER BY seq DESC
       LIMIT $6`,
  }
}
