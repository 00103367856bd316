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

/**
 * insertJobs (or insertUniqueJobs, with `unique`) for a batch with fair
 * jobs ($12, true for a job of a fair kind; its unique keys then $13),
 * run after lockFairLanes has locked their lanes in this transaction, so
 * its snapshot sees what the lane's last insert committed. Each fair job
 * takes the next position of its lane (kind, scope; '' for unscoped):
 * `vnow` is the position of the head of the kind's fair queue at the
 * job's priority (jobs_fair; 0 when none is queued: positions are only
 * compared within a priority, so a job of a higher one does not move a
 * newcomer behind its own scope's backlog); a lane whose last job is
 * still queued goes on from its next_pos, never behind vnow, and an idle
 * one starts at vnow. A later job of the lane in the batch takes the
 * position after the one before it, never behind its own vnow: position
 * k (from 1) is k + the running max of (start - rank). The lane row is
 * moved past the last. Under `unique`, a job whose key a committed live
 * job or an earlier job of the batch holds is left out before positions
 * are given, so it takes none (one refused by a transaction still in
 * flight leaves a gap of one).
 */
function fairInsert(s: string, unique: boolean): string {
  const kept = unique
    ? `, kept AS (
        SELECT t.* FROM t
         WHERE t.unique_key IS NULL
            OR (NOT EXISTS (SELECT 1 FROM ${s}.jobs j
                             WHERE j.kind = t.kind AND coalesce(j.scope, '') = t.lane AND j.unique_key = t.unique_key
                               AND j.status IN ('scheduled', 'queued', 'running'))
                AND NOT EXISTS (SELECT 1 FROM t e WHERE e.kind = t.kind AND e.lane = t.lane AND e.unique_key = t.unique_key AND e.ord < t.ord))`
    : `, kept AS (SELECT * FROM t`
  return `
      WITH t AS (
        SELECT t.*, coalesce(t.scope, '') AS lane
          FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::int[], $7::bigint[], $8::int[], $9::int[], $10::boolean[], $11::text[], $12::boolean[]${unique ? ', $13::text[]' : ''})
               WITH ORDINALITY AS t(id, kind, payload, scope, priority, run_at, max_attempts, timeout_ms, requeue, trace_context, fair${unique ? ', unique_key' : ''}, ord)
      )${kept}
      ), lanes AS (
        SELECT l.kind, l.scope, l.next_pos, EXISTS (SELECT 1 FROM ${s}.jobs j WHERE j.seq = l.last_seq AND j.status = 'queued') AS busy
          FROM ${s}.fair_lanes l
         WHERE (l.kind, l.scope) IN (SELECT kind, lane FROM kept WHERE fair)
      ), heads AS (
        SELECT h.kind, h.priority,
               coalesce((SELECT q.fair_pos FROM ${s}.jobs q
                          WHERE q.status = 'queued' AND q.kind = h.kind AND q.priority = h.priority AND q.fair_pos IS NOT NULL
                          ORDER BY q.fair_pos, q.seq LIMIT 1), 0) AS vnow
          FROM (SELECT DISTINCT kind, priority FROM kept WHERE fair) h
      ), ranked AS (
        SELECT k.ord, k.kind, k.lane, hd.vnow, ln.busy, ln.next_pos, row_number() OVER (PARTITION BY k.kind, k.lane ORDER BY k.ord) AS rank
          FROM kept k
          JOIN heads hd ON hd.kind = k.kind AND hd.priority = k.priority
          JOIN lanes ln ON ln.kind = k.kind AND ln.scope = k.lane
         WHERE k.fair
      ), placed AS (
        SELECT r.ord, r.rank + max(CASE WHEN r.rank = 1 AND r.busy THEN greatest(r.next_pos, r.vnow) ELSE r.vnow END - r.rank)
                                 OVER (PARTITION BY r.kind, r.lane ORDER BY r.ord ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS pos
          FROM ranked r
      ), stored AS (
        INSERT INTO ${s}.jobs (id, kind, payload, scope, created_at, updated_at, priority, run_at, status,
                               max_attempts, timeout_ms, requeue_interrupted, trace_context${unique ? ', unique_key' : ''}, fair_pos)
        SELECT t.id, t.kind, t.payload, t.scope, $5, $5, t.priority, t.run_at,
               CASE WHEN t.run_at > ${dueNow('$5')} THEN 'scheduled' ELSE 'queued' END,
               t.max_attempts, t.timeout_ms, t.requeue, t.trace_context${unique ? ', t.unique_key' : ''}, p.pos
          FROM kept t LEFT JOIN placed p ON p.ord = t.ord
         ORDER BY t.ord
        ${unique ? 'ON CONFLICT DO NOTHING' : ''}
        RETURNING id, seq, kind, coalesce(scope, '') AS lane, fair_pos
      ), moved AS (
        UPDATE ${s}.fair_lanes l SET next_pos = m.pos + 1, last_seq = m.seq
          FROM (SELECT DISTINCT ON (kind, lane) kind, lane, fair_pos AS pos, seq FROM stored WHERE fair_pos IS NOT NULL ORDER BY kind, lane, seq DESC) m
         WHERE l.kind = m.kind AND l.scope = m.lane
      )
      SELECT id FROM stored`
}

/**
 * A rated kind with a rule per scope (a per-scope rate, scopeConcurrency)
 * reads at most SCOPED_READ of its queued jobs in each order, and ranks
 * within their scopes the first of those whose scope has room: twenty per
 * job it may take, SCOPED_WINDOW at most. A backlog of scopes out of room
 * thus costs a claim a bounded read (about 25 ms for two reads of 5,000
 * here) rather than a read of the whole queue while their windows last;
 * scopes past it are reached once those are out of room (they are then
 * skipped) or have room again. A fair kind's order puts every scope's
 * next job near its head.
 */
const SCOPED_READ = 5_000
const SCOPED_WINDOW = 1_000

/** No bound: what a job's scope room is when no rule bounds it. */
const UNBOUNDED = '2147483647'

/**
 * How many more jobs of the rated kind `k` the scope of job `q` may start
 * in this claim (see ratedCandidates): its scopeConcurrency less its
 * running jobs, and for a per-scope rate its bucket's room (limit less its
 * claims in the window, none while it cools down). Looked up in arrays `k`
 * holds, by scope ('' for none: a scope is never ''), rather than in the
 * CTEs: a lookup per job of a window of a thousand, in C.
 */
function scopeRoom(): string {
  return `CASE WHEN k.scoped THEN least(
            coalesce(k.scope_cap - coalesce(k.busy[array_position(k.busy_scopes, coalesce(q.scope, ''))], 0), ${UNBOUNDED}),
            CASE WHEN k.per_scope THEN coalesce(k.rooms[array_position(k.room_scopes, coalesce(q.scope, ''))], k.rate) ELSE ${UNBOUNDED} END)
          ELSE ${UNBOUNDED} END`
}

/** A rated claim's write, the claimed rows' columns as claimJobs names them. */
const CLAIMED_COLUMNS = `c.seq, c.id, c.kind, c.payload, c.attempt, c.max_attempts AS "maxAttempts", c.timeout_ms AS "timeoutMs", c.trace_context AS "traceContext",
             c.ready_at::float8 AS "readyAt", c.scope`

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

    /**
     * Locks the fair lanes ($1 kinds, $2 scopes, '' for unscoped) an
     * insert of fair jobs writes, made when missing, in one order for
     * every process (two batches never wait for each other in a cycle):
     * held to the end of the transaction, so inserts into one lane are
     * serialized. The update never applies; ON CONFLICT DO UPDATE locks the
     * row all the same.
     */
    lockFairLanes: `
      INSERT INTO ${s}.fair_lanes AS l (kind, scope, next_pos, last_seq)
      SELECT t.kind, t.scope, 0, 0 FROM unnest($1::text[], $2::text[]) AS t(kind, scope) ORDER BY t.kind, t.scope
      ON CONFLICT (kind, scope) DO UPDATE SET next_pos = l.next_pos WHERE false`,

    /** insertJobs for a batch with fair jobs (see fairInsert). */
    insertFairJobs: fairInsert(s, false),

    /** insertUniqueJobs for a batch with fair jobs (see fairInsert); returns the ids stored. */
    insertFairUniqueJobs: fairInsert(s, true),

    /**
     * retryAndFinishJobs ($1-$11) for a batch with cooldowns ($12 the ids
     * of the jobs that carry one, $13 their keys, $14 their ends): each is
     * recorded when its job's write applied, whatever status that left it
     * in, extending a cooldown already recorded for the key, never
     * shortening it. A claim of the same transaction that must see them
     * runs as a statement after this one (a data-modifying CTE is not
     * visible to the rest of its own statement).
     */
    finishCooling: `
      WITH retried AS (${retriedPart(s, 7, '$6')}
      ), finished AS (${finishedPart(s)}
      ), applied AS (SELECT id FROM retried UNION ALL SELECT id FROM finished
      ), cooled AS (
        INSERT INTO ${s}.cooldowns AS c (key, until, set_at)
        SELECT o.key, max(o.until), $6 FROM unnest($12::text[], $13::text[], $14::bigint[]) AS o(id, key, until)
         WHERE o.id IN (SELECT id FROM applied) GROUP BY o.key
        ON CONFLICT (key) DO UPDATE SET until = greatest(c.until, excluded.until),
                                        set_at = CASE WHEN excluded.until > c.until THEN excluded.set_at ELSE c.set_at END
      )
      SELECT id FROM applied`,

    /**
     * The first statement of a rated claim's transaction: the advisory
     * locks of its rate buckets ($1, bucketLocks' names in their order, in
     * a namespace of their own), then those of its rated kinds with a
     * concurrency limit ($2) as claim_jobs takes them (its namespace, the
     * kinds sorted by the server). Two rated claims of a bucket are thus
     * serialized across every process, and the statements after these see
     * every claim committed before them.
     */
    lockRated: `
      SELECT pg_advisory_xact_lock(hashtext('jobtable:rate:${s}'), hashtext(n.name))::text FROM unnest($1::text[]) AS n(name)
      UNION ALL
      SELECT pg_advisory_xact_lock(hashtext('jobtable:limit:${s}'), hashtext(k.kind))::text
        FROM (SELECT DISTINCT u.kind FROM unnest($2::text[]) AS u(kind) ORDER BY u.kind) k`,

    /**
     * What a rated claim reads, after its locks, in one snapshot: its rated
     * kinds ($1) with their concurrency ($2), scopeConcurrency ($3), fair
     * flag ($4), bucket ($5, null for one per scope), rate limit ($6) and
     * period ($7), up to $8 jobs at $9. Rows tagged 'u': a bucket's claims
     * in its window (used) and the earliest (oldest), for each named bucket
     * with any and each per-scope bucket (<kind>@<scope>) with any; 'k': a
     * bucket cooling down; 'j': a candidate (seq, kind, scope, priority,
     * age), at most the kind's room of each kind in its own order (fair, or
     * by age): a paused kind, a kind whose bucket cools down or is spent,
     * and the scopes at their scopeConcurrency or out of room in their own
     * bucket give none. Age is the sort key across kinds (see claim_jobs'
     * fair heads): a job's seq, or for a fair kind the i-th oldest of the
     * jobs read for it. Nothing is locked: rated claims of a bucket are
     * serialized by its lock, and the write's guard (status = 'queued')
     * stops a job another claim took meanwhile.
     */
    ratedCandidates: `
      WITH u AS (
        SELECT u.kind, u.cap, u.scope_cap, coalesce(u.fair, false) AS fair, u.bucket, u.rate, u.period
          FROM unnest($1::text[], $2::integer[], $3::integer[], $4::boolean[], $5::text[], $6::integer[], $7::bigint[])
               AS u(kind, cap, scope_cap, fair, bucket, rate, period)
         WHERE NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = u.kind)
      ), named AS (
        SELECT b.bucket, b.rate, w.used, w.oldest, EXISTS (SELECT 1 FROM ${s}.cooldowns c WHERE c.key = b.bucket AND c.until > $9::bigint) AS cooling
          FROM (SELECT DISTINCT u.bucket, u.rate, u.period FROM u WHERE u.bucket IS NOT NULL) b
         CROSS JOIN LATERAL (
           SELECT count(*) AS used, min(r.at) AS oldest FROM ${s}.rate_starts r
            WHERE r.bucket = b.bucket COLLATE "C" AND r.at > $9::bigint - b.period) w
      ), scoped_use AS (
        SELECT u.kind, r.bucket, count(*) AS used, min(r.at) AS oldest FROM u
          JOIN ${s}.rate_starts r
            ON r.bucket >= (u.kind || '@') COLLATE "C" AND r.bucket < (u.kind || 'A') COLLATE "C" AND r.at > $9::bigint - u.period
         WHERE u.bucket IS NULL
         GROUP BY u.kind, r.bucket
      ), scoped_cooling AS (
        SELECT u.kind, c.key FROM u JOIN ${s}.cooldowns c ON starts_with(c.key, u.kind || '@') AND c.until > $9::bigint
         WHERE u.bucket IS NULL
      ), scope_room AS (
        SELECT x.kind, substr(x.bucket, length(x.kind) + 2) AS scope, min(x.room) AS room FROM (
          SELECT su.kind, su.bucket::text AS bucket, greatest(0, u.rate - su.used) AS room FROM scoped_use su JOIN u ON u.kind = su.kind
          UNION ALL
          SELECT sc.kind, sc.key, 0 FROM scoped_cooling sc) x
         GROUP BY x.kind, x.bucket
      ), busy AS (
        SELECT r.kind, r.scope, count(*) AS n FROM ${s}.jobs r
         WHERE r.status = 'running' AND r.kind IN (SELECT u.kind FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL)
         GROUP BY r.kind, r.scope
      ), k AS (
        SELECT u.kind, u.fair, u.scope_cap, u.rate, u.bucket IS NULL AS per_scope, (u.bucket IS NULL OR u.scope_cap IS NOT NULL) AS scoped,
               greatest(0, least($8::integer,
                                 coalesce(u.cap - (SELECT coalesce(sum(b.n), 0) FROM busy b WHERE b.kind = u.kind), $8::integer),
                                 coalesce(n.rate - n.used, $8::integer)))::bigint AS take,
               rs.scopes AS room_scopes, rs.rooms, bs.scopes AS busy_scopes, bs.busy
          FROM u LEFT JOIN named n ON n.bucket = u.bucket
         CROSS JOIN LATERAL (SELECT array_agg(sr.scope) AS scopes, array_agg(sr.room) AS rooms FROM scope_room sr WHERE sr.kind = u.kind) rs
         CROSS JOIN LATERAL (SELECT array_agg(coalesce(b.scope, '')) AS scopes, array_agg(b.n) AS busy FROM busy b WHERE b.kind = u.kind) bs
         WHERE NOT coalesce(n.cooling, false)
      ), cand AS (
        SELECT k.kind, t.seq, t.scope, t.priority, r.ages[t.i::int] AS age FROM k
         CROSS JOIN LATERAL (
           SELECT array_agg(w.seq ORDER BY w.priority DESC, w.seq) AS ages,
                  array_agg(w.seq ORDER BY w.priority DESC, w.fp NULLS FIRST, w.seq) FILTER (WHERE w.kept) AS seqs,
                  array_agg(w.scope ORDER BY w.priority DESC, w.fp NULLS FIRST, w.seq) FILTER (WHERE w.kept) AS scopes,
                  array_agg(w.priority ORDER BY w.priority DESC, w.fp NULLS FIRST, w.seq) FILTER (WHERE w.kept) AS priorities
             FROM (SELECT x.seq, x.priority, x.fp, x.scope,
                          x.takeable AND ROW_NUMBER() OVER (PARTITION BY x.scope, x.takeable ORDER BY x.priority DESC, x.fp NULLS FIRST, x.seq) <= x.room AS kept
                     FROM (SELECT DISTINCT ON (y.seq) y.seq, y.priority, y.fp, y.scope, y.room, y.head OR y.fp IS NULL AS takeable FROM (
                             (SELECT * FROM (
                                SELECT q.seq, q.priority, q.fair_pos AS fp, q.scope, true AS head, ${scopeRoom()} AS room FROM ${s}.jobs q
                                 WHERE k.fair AND q.status = 'queued' AND q.kind = k.kind AND q.fair_pos IS NOT NULL
                                 ORDER BY q.priority DESC, q.fair_pos, q.seq LIMIT CASE WHEN k.scoped THEN ${SCOPED_READ} ELSE k.take END) a
                               WHERE a.room > 0 LIMIT least(${SCOPED_WINDOW}, k.take * 20))
                             UNION ALL
                             (SELECT * FROM (
                                SELECT q.seq, q.priority, CASE WHEN k.fair THEN q.fair_pos END AS fp, q.scope, NOT k.fair AS head, ${scopeRoom()} AS room FROM ${s}.jobs q
                                 WHERE q.status = 'queued' AND q.kind = k.kind
                                 ORDER BY q.priority DESC, q.seq LIMIT CASE WHEN k.scoped THEN ${SCOPED_READ} ELSE k.take END) a
                               WHERE a.room > 0 LIMIT least(${SCOPED_WINDOW}, k.take * 20))) y
                           ORDER BY y.seq, y.head DESC) x) w) r
         CROSS JOIN LATERAL unnest(r.seqs, r.scopes, r.priorities) WITH ORDINALITY AS t(seq, scope, priority, i)
         WHERE t.i <= k.take
      ), other AS (
        -- The heads of the kinds without a rate rule ($10), read in this same snapshot: the picks are made
        -- across all the claim's kinds by priority, then age, and the write claims as many of these as were picked.
        SELECT o.kind, h.seq, h.scope, h.priority FROM unnest($10::text[]) AS o(kind)
         CROSS JOIN LATERAL (
           SELECT q.seq, q.scope, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = o.kind
            ORDER BY q.priority DESC, q.seq LIMIT $8::integer) h
         WHERE NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = o.kind)
           AND NOT EXISTS (SELECT 1 FROM ${s}.cooldowns c WHERE c.key = o.kind AND c.until > $9::bigint)
      )
      SELECT 'u' AS part, bucket::text AS bucket, used::float8 AS used, oldest::float8 AS oldest,
             NULL::text AS seq, NULL::text AS kind, NULL::text AS scope, NULL::integer AS priority, NULL::float8 AS age FROM named WHERE used > 0
      UNION ALL SELECT 'u', bucket::text, used::float8, oldest::float8, NULL, NULL, NULL, NULL, NULL FROM scoped_use
      UNION ALL SELECT 'k', bucket::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM named WHERE cooling
      UNION ALL SELECT 'k', key, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM scoped_cooling
      UNION ALL SELECT 'j', NULL, NULL, NULL, seq::text, kind, scope, priority, age::float8 FROM cand
      UNION ALL SELECT 'o', NULL, NULL, NULL, seq::text, kind, scope, priority, seq::float8 FROM other`,

    /**
     * A rated claim's write, its last statement: marks the picks ($1 seqs,
     * $2 their buckets) running for runner $3 at $4 as claim_jobs does
     * (each only while still queued), records one claim per job marked in
     * its bucket, forgets the claims older than the ledger keeps of the
     * named buckets ($5, before $6) and of the kinds' per-scope buckets
     * ($7, before $8), and claims for the kinds without a rate rule ($9
     * kinds, $10 and $11 their limits, $12 fair flags) up to $13 more
     * jobs, as claimJobs does.
     */
    claimRated: `
      WITH picked AS (
        SELECT p.seq, p.bucket FROM unnest($1::bigint[], $2::text[]) AS p(seq, bucket)
      ), claimed AS (
        UPDATE ${s}.jobs AS j
           SET status = 'running', attempt = j.attempt + 1, runner_id = $3::text, started_at = greatest($4::bigint, j.run_at), updated_at = $4::bigint
         WHERE j.seq IN (SELECT seq FROM picked) AND j.status = 'queued'
        RETURNING j.seq, j.id, j.kind, j.payload, j.attempt, j.max_attempts, j.timeout_ms, j.trace_context, greatest(j.created_at, j.run_at) AS ready_at, j.scope
      ), recorded AS (
        INSERT INTO ${s}.rate_starts (bucket, at) SELECT p.bucket, $4::bigint FROM picked p WHERE p.seq IN (SELECT seq FROM claimed)
      ), forgotten AS (
        DELETE FROM ${s}.rate_starts r USING unnest($5::text[], $6::bigint[]) AS o(bucket, before)
         WHERE r.bucket = o.bucket COLLATE "C" AND r.at < o.before
      ), forgotten_scoped AS (
        DELETE FROM ${s}.rate_starts r USING unnest($7::text[], $8::bigint[]) AS o(kind, before)
         WHERE r.bucket >= (o.kind || '@') COLLATE "C" AND r.bucket < (o.kind || 'A') COLLATE "C" AND r.at < o.before
      )
      SELECT ${CLAIMED_COLUMNS} FROM claimed c
      UNION ALL
      SELECT c_seq, c_id, c_kind, c_payload, c_attempt, c_max_attempts, c_timeout_ms, c_trace_context, c_ready_at::float8, c_scope
        FROM ${s}.claim_jobs($9::text[], $10::integer[], $11::integer[], $12::boolean[], $13::integer, $3::text, $4::bigint)`,

    /** The cooldowns in force at $1 (DriverAdmin.cooldownList). */
    cooldowns: `SELECT key, until::float8 AS until FROM ${s}.cooldowns WHERE until > $1::bigint`,

    /** Ends the cooldown of $1, and wakes idle runners of every process as a resume does ($2: the schema). */
    clearCooldown: `
      WITH cleared AS (DELETE FROM ${s}.cooldowns WHERE key = $1 RETURNING key)
      SELECT key, pg_notify('${NOTIFY_CHANNEL}', $2) FROM cleared`,

    /**
     * The claims in each window at $5 (DriverAdmin.rateUsage): of each
     * named bucket ($1, periods $2), and of each per-scope bucket of the
     * kinds $3 (periods $4), grouped by bucket; a bucket without any is
     * left out. Ranges of the index rate_starts_bucket.
     */
    rateUsage: `
      SELECT o.bucket, count(*)::integer AS used, min(r.at)::float8 AS oldest
        FROM unnest($1::text[], $2::bigint[]) AS o(bucket, period)
        JOIN ${s}.rate_starts r ON r.bucket = o.bucket COLLATE "C" AND r.at > $5::bigint - o.period
       GROUP BY o.bucket
      UNION ALL
      SELECT r.bucket::text, count(*)::integer, min(r.at)::float8
        FROM unnest($3::text[], $4::bigint[]) AS o(kind, period)
        JOIN ${s}.rate_starts r
          ON r.bucket >= (o.kind || '@') COLLATE "C" AND r.bucket < (o.kind || 'A') COLLATE "C" AND r.at > $5::bigint - o.period
       GROUP BY r.bucket`,

    /**
     * Jobs finished at or after $1 per minute and status, of scope $3
     * unless $2 (DriverAdmin.jobActivity): the kinds by jumps through the
     * index jobs_terminal (kind, status, finished_at), as finishedKinds,
     * then each kind's range of the last minutes in it, so only the jobs
     * finished in the window are read, however many the table holds.
     */
    jobActivity: `
      WITH RECURSIVE finished(kind) AS (
        (SELECT kind FROM ${s}.jobs WHERE ${TERMINAL} ORDER BY kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM ${s}.jobs j WHERE j.${TERMINAL} AND j.kind > f.kind ORDER BY j.kind LIMIT 1)
          FROM finished f WHERE f.kind IS NOT NULL
      )
      SELECT (j.finished_at / 60000 * 60000)::float8 AS minute, j.status, count(*)::integer AS count
        FROM finished f JOIN ${s}.jobs j ON j.kind = f.kind AND j.${TERMINAL} AND j.finished_at >= $1::bigint
       WHERE f.kind IS NOT NULL AND ($2::boolean OR j.scope IS NOT DISTINCT FROM $3::text)
       GROUP BY 1, 2`,

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
     * claim_jobs (migration 14's overload), given the runner's kinds ($1)
     * with each one's concurrency ($2) and scopeConcurrency ($3), null for
     * none, and whether it is fair ($4; see the migration for a fair kind's
     * order), the limit ($5), runner ($6) and clock ($7). It
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
             c_max_attempts AS "maxAttempts", c_timeout_ms AS "timeoutMs", c_trace_context AS "traceContext", c_ready_at::float8 AS "readyAt", c_scope AS scope
        FROM ${s}.claim_jobs($1::text[], $2::integer[], $3::integer[], $4::boolean[], $5::integer, $6::text, $7::bigint)`,

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
     * finishJobs, then the claim's limit ($7), runner ($8), kinds ($9),
     * their limits ($10, $11) and fair flags ($12). The claim takes only queued rows and the
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
             NULL::integer AS "maxAttempts", NULL::integer AS "timeoutMs", NULL::text AS "traceContext", NULL::float8 AS "readyAt", NULL::text AS scope FROM finished
      UNION ALL
      SELECT 'c', c_seq, c_id, c_kind, c_payload, c_attempt, c_max_attempts, c_timeout_ms, c_trace_context, c_ready_at::float8, c_scope
        FROM ${s}.claim_jobs($9::text[], $10::integer[], $11::integer[], $12::boolean[], $7::integer, $8::text, $6::bigint)`,

    /**
     * finishAndClaimJobs for a batch with send-backs: their arrays as
     * $13-$17 (see retriedPart), so the batch applies whole or not at all (see
     * retryAndFinishJobs). The send-backs are read first, then the final
     * writes, then the claim, which therefore sees both (a job sent back
     * due now may be claimed again at once, as a later claim would).
     */
    retryFinishAndClaimJobs: `
      WITH retried AS (${retriedPart(s, 13, '$6')}
      ), finished AS (${finishedPart(s)}
      )
      SELECT 'f' AS part, NULL::bigint AS seq, id, NULL AS kind, NULL AS payload, NULL::integer AS attempt,
             NULL::integer AS "maxAttempts", NULL::integer AS "timeoutMs", NULL::text AS "traceContext", NULL::float8 AS "readyAt", NULL::text AS scope FROM retried
      UNION ALL
      SELECT 'f', NULL, id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM finished
      UNION ALL
      SELECT 'c', c_seq, c_id, c_kind, c_payload, c_attempt, c_max_attempts, c_timeout_ms, c_trace_context, c_ready_at::float8, c_scope
        FROM ${s}.claim_jobs($9::text[], $10::integer[], $11::integer[], $12::boolean[], $7::integer, $8::text, $6::bigint)`,

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
