import type pg from 'pg'
import { compareCatalogs, decide, LEGACY_VERSION, recordedInLegacy, windowStarts, type MigrateMode, type SchemaState } from '../schema-window.js'
import { NOTIFY_CHANNEL } from './queries.js'

/** A numbered migration: `sql(s)` gives its statements for the quoted schema `s`. */
interface Migration {
  readonly version: number
  readonly sql: (s: string) => string
  /** The oldest code version that runs on the schema it leaves (src/schema-window.ts); default: the window before it. */
  readonly compatibleFrom?: number
  /**
   * Indexes on the jobs table, which may hold millions of rows: built
   * after the migration's transaction commits, with CREATE INDEX
   * CONCURRENTLY, so claims and enqueues go on while they are built (a
   * plain CREATE INDEX would hold every write to the table until it is
   * done). The code of this version runs without them, only slower.
   */
  readonly concurrentIndexes?: (s: string) => readonly ConcurrentIndex[]
}

/** An index a migration builds concurrently: its name and what follows `CREATE INDEX name` (`ON table (...) WHERE ...`). */
export interface ConcurrentIndex {
  readonly name: string
  readonly definition: string
}

/**
 * The schema, as numbered migrations applied in order, versions aligned
 * with the SQLite backend: version N means the same columns everywhere
 * (PostgreSQL types where SQLite has its own). An applied migration is
 * never edited; later work adds one at the end.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    sql: (s) => `
      -- seq is the claim order: insertion order, never a clock reading.
      -- attempt counts claims; every write after a claim is fenced on it.
      -- payload is text: exactly the JSON that was validated (jsonb would
      -- refuse a NUL character the payload schema allowed, failing the
      -- whole batch of enqueues it travels in). result is jsonb, so a
      -- result PostgreSQL cannot store is refused at the final write,
      -- which fails that job with internal_error.
      CREATE TABLE ${s}.jobs (
        seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id          text    NOT NULL UNIQUE,
        kind        text    NOT NULL,
        status      text    NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
        payload     text    NOT NULL,
        result      jsonb,
        error       text,
        attempt     integer NOT NULL DEFAULT 0,
        runner_id   text,
        created_at  bigint  NOT NULL,
        updated_at  bigint  NOT NULL,
        started_at  bigint,
        finished_at bigint
      );
      -- Partial indexes keep a claim and the sweep fast however many
      -- finished rows the table holds.
      CREATE INDEX jobs_queued ON ${s}.jobs (seq) WHERE status = 'queued';
      CREATE INDEX jobs_running ON ${s}.jobs (runner_id) WHERE status = 'running';
      -- Wakes idle runners of every process on any insert, including one in
      -- a user's own transaction made by any client: the notification is
      -- sent when that transaction commits, and never when it rolls back.
      -- Once per statement, so a batch of a thousand jobs is one message.
      CREATE FUNCTION ${s}.notify_jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify('${NOTIFY_CHANNEL}', TG_TABLE_SCHEMA);
        RETURN NULL;
      END
      $$;
      CREATE TRIGGER jobs_inserted AFTER INSERT ON ${s}.jobs
        FOR EACH STATEMENT EXECUTE FUNCTION ${s}.notify_jobs_inserted();
    `,
  },
  {
    version: 2,
    sql: (s) => `
      -- The owner scope a job was enqueued under; NULL for none.
      ALTER TABLE ${s}.jobs ADD COLUMN scope text;
      CREATE INDEX jobs_scope ON ${s}.jobs (scope, seq);
    `,
  },
  {
    version: 3,
    sql: (s) => `
      -- The live runners, one row per runner boot, each with a lease on the
      -- database's clock (ms since the epoch) that it renews: a sweep fails
      -- the running jobs of a runner only once its lease has lapsed.
      CREATE TABLE ${s}.runners (
        id           text   NOT NULL PRIMARY KEY,
        started_at   bigint NOT NULL,
        heartbeat_at bigint NOT NULL,
        expires_at   bigint
      );
    `,
  },
  {
    version: 4,
    sql: (s) => `
      -- The kinds each live runner has handlers for: a runner claims only
      -- its own kinds, and a queued job whose kind no live runner has waits
      -- instead of failing (unknown_kind only after a grace).
      ALTER TABLE ${s}.runners ADD COLUMN kinds text[] NOT NULL DEFAULT '{}';
    `,
  },
  {
    version: 5,
    sql: (s) => `
      -- Scheduled jobs and priorities (see the SQLite migration of the same
      -- number): 'scheduled' until due, so the claim's index holds only due
      -- jobs; 'cancelled' reserved for cancellation.
      ALTER TABLE ${s}.jobs DROP CONSTRAINT jobs_status_check;
      ALTER TABLE ${s}.jobs ADD CONSTRAINT jobs_status_check
        CHECK (status IN ('scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled'));
      ALTER TABLE ${s}.jobs ADD COLUMN priority integer NOT NULL DEFAULT 0;
      ALTER TABLE ${s}.jobs ADD COLUMN run_at bigint;
      DROP INDEX ${s}.jobs_queued;
      CREATE INDEX jobs_queued ON ${s}.jobs (priority DESC, seq) WHERE status = 'queued';
      CREATE INDEX jobs_scheduled ON ${s}.jobs (run_at) WHERE status = 'scheduled';
    `,
  },
  {
    version: 6,
    sql: (s) => `
      -- Retries, snoozes, timeouts and requeue after a crash, per job (see
      -- the SQLite migration of the same number).
      ALTER TABLE ${s}.jobs ADD COLUMN max_attempts integer NOT NULL DEFAULT 1;
      ALTER TABLE ${s}.jobs ADD COLUMN timeout_ms integer;
      ALTER TABLE ${s}.jobs ADD COLUMN requeue_interrupted boolean NOT NULL DEFAULT false;
    `,
  },
  {
    version: 7,
    sql: (s) => `
      -- Cancellation of a running job (see the SQLite migration of the same number).
      ALTER TABLE ${s}.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
    `,
  },
  {
    version: 8,
    sql: (s) => `
      -- The claim reads the head of each of its kinds' queues (see the
      -- SQLite migration of the same number).
      DROP INDEX ${s}.jobs_queued;
      CREATE INDEX jobs_queued ON ${s}.jobs (kind, priority DESC, seq) WHERE status = 'queued';
    `,
  },
  {
    version: 9,
    sql: (s) => `
      -- Unique jobs (see the SQLite migration of the same number).
      ALTER TABLE ${s}.jobs ADD COLUMN unique_key text;
      CREATE UNIQUE INDEX jobs_unique ON ${s}.jobs (kind, coalesce(scope, ''), unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('scheduled', 'queued', 'running');
    `,
  },
  {
    version: 10,
    sql: (s) => `
      -- Kinds paused by an operator (see the SQLite migration of the same
      -- number), and the claim, which skips them.
      CREATE TABLE ${s}.paused_kinds (kind text PRIMARY KEY, paused_at bigint NOT NULL);
      -- The claim: $1 the runner's kinds, with each
      -- one's concurrency ($2) and scopeConcurrency ($3), NULL for none.
      -- SKIP LOCKED alone cannot keep a count: two claimers would each see
      -- one job running of a limit of two, and take one each. So the
      -- limited kinds' claims are serialized across every process by an
      -- advisory lock per schema and kind, held to the end of the claim's
      -- transaction and taken in the kinds' order (two runners never wait
      -- for each other's second lock); and the claim runs as a statement of
      -- its own after the locks, with a snapshot that sees every claim
      -- committed before them (a function's statements take their own
      -- snapshot under READ COMMITTED; one statement alone would count with
      -- a snapshot from before its lock; under REPEATABLE READ or
      -- SERIALIZABLE the snapshot is the transaction's, so such a claim is
      -- refused). Each kind gives the head of its
      -- queue: a free kind up to $4 rows locked SKIP LOCKED, as claimJobs;
      -- a limited one no more than its cap less its running jobs, and with
      -- a scope cap, skipping the scopes at their cap, ranking the rest
      -- within each scope and taking a job only while its rank plus its
      -- scope's running count stays within the cap (the first 1,000 jobs of
      -- scopes with room: the scopes past them are reached by the next
      -- claims). The heads are merged by priority, then seq. A paused kind
      -- gives none.
      CREATE FUNCTION ${s}.claim_jobs(p_kinds text[], p_caps integer[], p_scope_caps integer[], p_limit integer, p_runner text, p_now bigint)
        RETURNS TABLE (c_seq bigint, c_id text, c_kind text, c_payload text, c_attempt integer, c_max_attempts integer, c_timeout_ms integer)
        LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
      DECLARE
        k text;
      BEGIN
        FOR k IN SELECT DISTINCT u.kind FROM unnest(p_kinds, p_caps, p_scope_caps) AS u(kind, cap, scope_cap)
                  WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL ORDER BY u.kind LOOP
          IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'jobtable: a claim with concurrency limits needs READ COMMITTED, not %', current_setting('transaction_isolation')
              USING ERRCODE = '55000';
          END IF;
          PERFORM pg_advisory_xact_lock(hashtext('jobtable:limit:${s}'), hashtext(k));
        END LOOP;
        RETURN QUERY
        WITH u AS (
          SELECT * FROM unnest(p_kinds, p_caps, p_scope_caps) AS u(kind, cap, scope_cap)
           WHERE NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = u.kind)
        ), busy AS (
          SELECT r.kind, r.scope, count(*) AS n FROM ${s}.jobs r
           WHERE r.status = 'running' AND r.kind IN (SELECT u.kind FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL)
           GROUP BY r.kind, r.scope
        ), room AS (
          SELECT u.kind, u.scope_cap,
                 greatest(0, least(p_limit, coalesce(u.cap - (SELECT coalesce(sum(b.n), 0) FROM busy b WHERE b.kind = u.kind), p_limit)))::bigint AS take
            FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL
        ), free_heads AS (
          SELECT h.seq, h.priority FROM u
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = u.kind
              ORDER BY q.priority DESC, q.seq LIMIT p_limit FOR UPDATE SKIP LOCKED) h
           WHERE u.cap IS NULL AND u.scope_cap IS NULL
        ), capped_heads AS (
          SELECT h.seq, h.priority FROM room
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = room.kind
              ORDER BY q.priority DESC, q.seq LIMIT room.take FOR UPDATE SKIP LOCKED) h
           WHERE room.scope_cap IS NULL
        ), scoped_heads AS (
          SELECT h.seq, h.priority FROM room
           CROSS JOIN LATERAL (
             SELECT ranked.seq, ranked.priority FROM (
               SELECT w.seq, w.priority, w.busy,
                      ROW_NUMBER() OVER (PARTITION BY w.scope ORDER BY w.priority DESC, w.seq) AS rank
                 FROM (SELECT q.seq, q.priority, q.scope,
                              coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) AS busy
                         FROM ${s}.jobs q
                        WHERE q.status = 'queued' AND q.kind = room.kind
                          AND coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) < room.scope_cap
                        ORDER BY q.priority DESC, q.seq LIMIT 1000) w) ranked
              WHERE ranked.rank + ranked.busy <= room.scope_cap
              ORDER BY ranked.priority DESC, ranked.seq LIMIT room.take) h
           WHERE room.scope_cap IS NOT NULL
        ), scoped_locked AS (
          SELECT l.seq, l.priority FROM unnest(ARRAY(SELECT seq FROM scoped_heads)) AS c(seq)
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.seq = c.seq AND q.status = 'queued' FOR UPDATE SKIP LOCKED) l
        ), next AS (
          SELECT seq FROM (SELECT * FROM free_heads UNION ALL SELECT * FROM capped_heads UNION ALL SELECT * FROM scoped_locked) heads
           ORDER BY priority DESC, seq LIMIT p_limit
        ), claimed AS (
          UPDATE ${s}.jobs AS j
             SET status = 'running', attempt = j.attempt + 1, runner_id = p_runner, started_at = greatest(p_now, j.run_at), updated_at = p_now
           WHERE j.seq = ANY (ARRAY(SELECT seq FROM next))
          RETURNING j.seq, j.id, j.kind, j.payload, j.attempt, j.max_attempts, j.timeout_ms
        )
        SELECT * FROM claimed;
      END
      $fn$;
    `,
  },
  {
    version: 11,
    sql: (s) => `
      -- Recurring jobs: the latest tick of each schedule enqueued (see the
      -- SQLite migration of the same number). The forward-only upsert on
      -- the primary key serializes concurrent processes on the row.
      CREATE TABLE ${s}.schedules (name text PRIMARY KEY, last_tick_at bigint NOT NULL, updated_at bigint NOT NULL);
      -- Retention: terminal jobs by kind, status and finish time, for the
      -- pruner (see the SQLite migration of the same number). Building it
      -- holds writes to the table until it is done; IF NOT EXISTS lets an
      -- operator build it first with CREATE INDEX CONCURRENTLY, under the
      -- same name and definition (docs/postgres.md).
      CREATE INDEX IF NOT EXISTS jobs_terminal ON ${s}.jobs (kind, status, finished_at)
        WHERE status IN ('succeeded', 'failed', 'cancelled');
    `,
  },
  {
    version: 12,
    sql: (s) => `
      -- Tracing: the trace context of the enqueue that made a job (see the
      -- SQLite migration of the same number).
      ALTER TABLE ${s}.jobs ADD COLUMN trace_context text;
      -- The claim returns it too, and when each job became claimable
      -- (c_ready_at: its due time, or its enqueue when it had none or was
      -- due before it), for the queue wait the runner reports. A function's
      -- result columns cannot be changed in place (CREATE OR REPLACE
      -- refuses a new row type), so it is dropped and made again in this
      -- transaction; apart from c_trace_context and c_ready_at it is
      -- migration 10's claim_jobs, word for word. A runner of an earlier
      -- version still running during a rolling deploy names its columns
      -- and ignores the new ones.
      DROP FUNCTION ${s}.claim_jobs(text[], integer[], integer[], integer, text, bigint);
      CREATE FUNCTION ${s}.claim_jobs(p_kinds text[], p_caps integer[], p_scope_caps integer[], p_limit integer, p_runner text, p_now bigint)
        RETURNS TABLE (c_seq bigint, c_id text, c_kind text, c_payload text, c_attempt integer, c_max_attempts integer, c_timeout_ms integer, c_trace_context text,
                       c_ready_at bigint)
        LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
      DECLARE
        k text;
      BEGIN
        FOR k IN SELECT DISTINCT u.kind FROM unnest(p_kinds, p_caps, p_scope_caps) AS u(kind, cap, scope_cap)
                  WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL ORDER BY u.kind LOOP
          IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'jobtable: a claim with concurrency limits needs READ COMMITTED, not %', current_setting('transaction_isolation')
              USING ERRCODE = '55000';
          END IF;
          PERFORM pg_advisory_xact_lock(hashtext('jobtable:limit:${s}'), hashtext(k));
        END LOOP;
        RETURN QUERY
        WITH u AS (
          SELECT * FROM unnest(p_kinds, p_caps, p_scope_caps) AS u(kind, cap, scope_cap)
           WHERE NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = u.kind)
        ), busy AS (
          SELECT r.kind, r.scope, count(*) AS n FROM ${s}.jobs r
           WHERE r.status = 'running' AND r.kind IN (SELECT u.kind FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL)
           GROUP BY r.kind, r.scope
        ), room AS (
          SELECT u.kind, u.scope_cap,
                 greatest(0, least(p_limit, coalesce(u.cap - (SELECT coalesce(sum(b.n), 0) FROM busy b WHERE b.kind = u.kind), p_limit)))::bigint AS take
            FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL
        ), free_heads AS (
          SELECT h.seq, h.priority FROM u
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = u.kind
              ORDER BY q.priority DESC, q.seq LIMIT p_limit FOR UPDATE SKIP LOCKED) h
           WHERE u.cap IS NULL AND u.scope_cap IS NULL
        ), capped_heads AS (
          SELECT h.seq, h.priority FROM room
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = room.kind
              ORDER BY q.priority DESC, q.seq LIMIT room.take FOR UPDATE SKIP LOCKED) h
           WHERE room.scope_cap IS NULL
        ), scoped_heads AS (
          SELECT h.seq, h.priority FROM room
           CROSS JOIN LATERAL (
             SELECT ranked.seq, ranked.priority FROM (
               SELECT w.seq, w.priority, w.busy,
                      ROW_NUMBER() OVER (PARTITION BY w.scope ORDER BY w.priority DESC, w.seq) AS rank
                 FROM (SELECT q.seq, q.priority, q.scope,
                              coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) AS busy
                         FROM ${s}.jobs q
                        WHERE q.status = 'queued' AND q.kind = room.kind
                          AND coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) < room.scope_cap
                        ORDER BY q.priority DESC, q.seq LIMIT 1000) w) ranked
              WHERE ranked.rank + ranked.busy <= room.scope_cap
              ORDER BY ranked.priority DESC, ranked.seq LIMIT room.take) h
           WHERE room.scope_cap IS NOT NULL
        ), scoped_locked AS (
          SELECT l.seq, l.priority FROM unnest(ARRAY(SELECT seq FROM scoped_heads)) AS c(seq)
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.seq = c.seq AND q.status = 'queued' FOR UPDATE SKIP LOCKED) l
        ), next AS (
          SELECT seq FROM (SELECT * FROM free_heads UNION ALL SELECT * FROM capped_heads UNION ALL SELECT * FROM scoped_locked) heads
           ORDER BY priority DESC, seq LIMIT p_limit
        ), claimed AS (
          UPDATE ${s}.jobs AS j
             SET status = 'running', attempt = j.attempt + 1, runner_id = p_runner, started_at = greatest(p_now, j.run_at), updated_at = p_now
           WHERE j.seq = ANY (ARRAY(SELECT seq FROM next))
          RETURNING j.seq, j.id, j.kind, j.payload, j.attempt, j.max_attempts, j.timeout_ms, j.trace_context, greatest(j.created_at, j.run_at)
        )
        SELECT * FROM claimed;
      END
      $fn$;
    `,
  },
  {
    version: 13,
    // Adds a nullable column: code of schema 12 runs on it (and writes NULL there).
    compatibleFrom: 12,
    sql: (s) => `
      -- The jobtable release each runner runs, for operators reading a
      -- rolling deploy (jobtable doctor); NULL for releases before it.
      ALTER TABLE ${s}.runners ADD COLUMN version text;
    `,
  },
  {
    version: 14,
    // Adds tables, a nullable column, an index and a function overload, and keeps claim_jobs' 6-argument result: code of schema 12 runs on it.
    compatibleFrom: 12,
    sql: (s) => `
      -- Rate limits, cooldowns and fair claims (see the SQLite migration of
      -- the same number). The claims each rate bucket recorded, a sliding
      -- window: a rated claim counts the rows after now - periodMs.
      -- bucket in the "C" collation, so a kind's per-scope buckets
      -- (<kind>@<scope>) are one range of the index.
      CREATE TABLE ${s}.rate_starts (bucket text COLLATE "C" NOT NULL, at bigint NOT NULL);
      CREATE INDEX rate_starts_bucket ON ${s}.rate_starts (bucket, at);
      -- No claim takes a job of a bucket before its cooldown's until.
      CREATE TABLE ${s}.cooldowns (key text PRIMARY KEY, until bigint NOT NULL, set_at bigint NOT NULL);
      -- Each fair kind's lane per scope ('' for unscoped jobs): the position
      -- its next job takes, and its last job (the lane is idle once that job
      -- is no longer queued). An insert locks its lanes' rows, so inserts
      -- into one lane are serialized.
      CREATE TABLE ${s}.fair_lanes (kind text NOT NULL, scope text NOT NULL, next_pos bigint NOT NULL, last_seq bigint NOT NULL, PRIMARY KEY (kind, scope));
      -- A nullable column without a default: a change of the catalog only,
      -- whatever the table holds. Its index, jobs_fair, is built after this
      -- transaction, concurrently (concurrentIndexes below).
      ALTER TABLE ${s}.jobs ADD COLUMN fair_pos bigint;
      -- The claim with fair kinds (p_fair, true for a fair kind; NULL for
      -- none), also returning each job's scope. Migration 12's claim_jobs,
      -- and besides: a kind with a cooldown in force on its name gives no
      -- job; a fair kind's head is taken in the order priority DESC,
      -- fair_pos NULLS FIRST, seq. A fair kind reads its positioned jobs
      -- from jobs_fair (locked SKIP LOCKED, as a free kind's head) and its
      -- jobs without a position among the first of its queue by age (those
      -- enqueued before it was fair, which are older than its positioned
      -- ones); a scope-capped fair kind ranks the same two reads within each
      -- scope, twenty jobs read per job it may take (a thousand at most: its
      -- order cycles through the scopes, where age order needs the thousand
      -- the scoped claim of migration 10 reads). Across kinds the heads merge by priority, then age: the i-th
      -- head of a fair kind in its order sorts as the i-th oldest of the
      -- jobs read for it, so a fair kind competes with others by the age of
      -- its queue while choosing among its scopes in turn.
      CREATE FUNCTION ${s}.claim_jobs(p_kinds text[], p_caps integer[], p_scope_caps integer[], p_fair boolean[], p_limit integer, p_runner text, p_now bigint)
        RETURNS TABLE (c_seq bigint, c_id text, c_kind text, c_payload text, c_attempt integer, c_max_attempts integer, c_timeout_ms integer, c_trace_context text,
                       c_ready_at bigint, c_scope text)
        LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
      DECLARE
        k text;
      BEGIN
        FOR k IN SELECT DISTINCT u.kind FROM unnest(p_kinds, p_caps, p_scope_caps) AS u(kind, cap, scope_cap)
                  WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL ORDER BY u.kind LOOP
          IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'jobtable: a claim with concurrency limits needs READ COMMITTED, not %', current_setting('transaction_isolation')
              USING ERRCODE = '55000';
          END IF;
          PERFORM pg_advisory_xact_lock(hashtext('jobtable:limit:${s}'), hashtext(k));
        END LOOP;
        RETURN QUERY
        WITH u AS (
          SELECT u.kind, u.cap, u.scope_cap, coalesce(u.fair, false) AS fair
            FROM unnest(p_kinds, p_caps, p_scope_caps, p_fair) AS u(kind, cap, scope_cap, fair)
           WHERE u.kind IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM ${s}.paused_kinds p WHERE p.kind = u.kind)
             AND NOT EXISTS (SELECT 1 FROM ${s}.cooldowns c WHERE c.key = u.kind AND c.until > p_now)
        ), busy AS (
          SELECT r.kind, r.scope, count(*) AS n FROM ${s}.jobs r
           WHERE r.status = 'running' AND r.kind IN (SELECT u.kind FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL)
           GROUP BY r.kind, r.scope
        ), room AS (
          SELECT u.kind, u.scope_cap, u.fair,
                 greatest(0, least(p_limit, coalesce(u.cap - (SELECT coalesce(sum(b.n), 0) FROM busy b WHERE b.kind = u.kind), p_limit)))::bigint AS take
            FROM u WHERE u.cap IS NOT NULL OR u.scope_cap IS NOT NULL
        ), free_heads AS (
          SELECT h.seq, h.priority, h.seq AS age FROM u
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = u.kind
              ORDER BY q.priority DESC, q.seq LIMIT p_limit FOR UPDATE SKIP LOCKED) h
           WHERE u.cap IS NULL AND u.scope_cap IS NULL AND NOT u.fair
        ), capped_heads AS (
          SELECT h.seq, h.priority, h.seq AS age FROM room
           CROSS JOIN LATERAL (
             SELECT q.seq, q.priority FROM ${s}.jobs q WHERE q.status = 'queued' AND q.kind = room.kind
              ORDER BY q.priority DESC, q.seq LIMIT room.take FOR UPDATE SKIP LOCKED) h
           WHERE room.scope_cap IS NULL AND NOT room.fair
        ), scoped_heads AS (
          SELECT h.seq, h.priority, h.seq AS age FROM room
           CROSS JOIN LATERAL (
             SELECT ranked.seq, ranked.priority FROM (
               SELECT w.seq, w.priority, w.busy,
                      ROW_NUMBER() OVER (PARTITION BY w.scope ORDER BY w.priority DESC, w.seq) AS rank
                 FROM (SELECT q.seq, q.priority, q.scope,
                              coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) AS busy
                         FROM ${s}.jobs q
                        WHERE q.status = 'queued' AND q.kind = room.kind
                          AND coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) < room.scope_cap
                        ORDER BY q.priority DESC, q.seq LIMIT 1000) w) ranked
              WHERE ranked.rank + ranked.busy <= room.scope_cap
              ORDER BY ranked.priority DESC, ranked.seq LIMIT room.take) h
           WHERE room.scope_cap IS NOT NULL AND NOT room.fair
        ), fair_heads AS (
          SELECT t.seq, t.priority, r.ages[t.i::int] AS age, t.locked FROM (
            SELECT u.kind, coalesce((SELECT room.take FROM room WHERE room.kind = u.kind), p_limit) AS take FROM u
             WHERE u.fair AND u.scope_cap IS NULL) f
           CROSS JOIN LATERAL (
             SELECT array_agg(x.seq ORDER BY x.priority DESC, x.seq) AS ages,
                    array_agg(x.seq ORDER BY x.priority DESC, x.fair_pos NULLS FIRST, x.seq) FILTER (WHERE x.locked OR x.fair_pos IS NULL) AS seqs,
                    array_agg(x.priority ORDER BY x.priority DESC, x.fair_pos NULLS FIRST, x.seq) FILTER (WHERE x.locked OR x.fair_pos IS NULL) AS priorities,
                    array_agg(x.locked ORDER BY x.priority DESC, x.fair_pos NULLS FIRST, x.seq) FILTER (WHERE x.locked OR x.fair_pos IS NULL) AS locks
               FROM (SELECT DISTINCT ON (y.seq) y.seq, y.priority, y.fair_pos, y.locked FROM (
                       SELECT * FROM (
                         SELECT q.seq, q.priority, q.fair_pos, true AS locked FROM ${s}.jobs q
                          WHERE q.status = 'queued' AND q.kind = f.kind AND q.fair_pos IS NOT NULL
                          ORDER BY q.priority DESC, q.fair_pos, q.seq LIMIT f.take FOR UPDATE SKIP LOCKED) positioned
                       UNION ALL
                       (SELECT q.seq, q.priority, q.fair_pos, false FROM ${s}.jobs q
                         WHERE q.status = 'queued' AND q.kind = f.kind
                         ORDER BY q.priority DESC, q.seq LIMIT f.take)) y
                     ORDER BY y.seq, y.locked DESC) x) r
           CROSS JOIN LATERAL unnest(r.seqs, r.priorities, r.locks) WITH ORDINALITY AS t(seq, priority, locked, i)
           WHERE t.i <= f.take
        ), scoped_fair_heads AS (
          SELECT t.seq, t.priority, r.ages[t.i::int] AS age FROM room
           CROSS JOIN LATERAL (
             SELECT array_agg(w.seq ORDER BY w.priority DESC, w.seq) AS ages,
                    array_agg(w.seq ORDER BY w.priority DESC, w.fair_pos NULLS FIRST, w.seq) FILTER (WHERE w.kept) AS seqs,
                    array_agg(w.priority ORDER BY w.priority DESC, w.fair_pos NULLS FIRST, w.seq) FILTER (WHERE w.kept) AS priorities
               FROM (SELECT x.seq, x.priority, x.fair_pos,
                            x.takeable AND ROW_NUMBER() OVER (PARTITION BY x.scope, x.takeable ORDER BY x.priority DESC, x.fair_pos NULLS FIRST, x.seq) + x.busy <= room.scope_cap AS kept
                       FROM (SELECT DISTINCT ON (y.seq) y.seq, y.priority, y.fair_pos, y.scope, y.busy, y.head OR y.fair_pos IS NULL AS takeable FROM (
                               (SELECT q.seq, q.priority, q.fair_pos, q.scope, true AS head,
                                       coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) AS busy
                                  FROM ${s}.jobs q
                                 WHERE q.status = 'queued' AND q.kind = room.kind AND q.fair_pos IS NOT NULL
                                   AND coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) < room.scope_cap
                                 ORDER BY q.priority DESC, q.fair_pos, q.seq LIMIT least(1000, room.take * 20))
                               UNION ALL
                               (SELECT q.seq, q.priority, q.fair_pos, q.scope, false,
                                       coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0)
                                  FROM ${s}.jobs q
                                 WHERE q.status = 'queued' AND q.kind = room.kind
                                   AND coalesce((SELECT b.n FROM busy b WHERE b.kind = room.kind AND b.scope IS NOT DISTINCT FROM q.scope), 0) < room.scope_cap
                                 ORDER BY q.priority DESC, q.seq LIMIT least(1000, room.take * 20))) y
                             ORDER BY y.seq, y.head DESC) x) w) r
           CROSS JOIN LATERAL unnest(r.seqs, r.priorities) WITH ORDINALITY AS t(seq, priority, i)
           WHERE room.scope_cap IS NOT NULL AND room.fair AND t.i <= room.take
        ), unlocked AS (
          SELECT seq, priority, age FROM scoped_heads
          UNION ALL SELECT seq, priority, age FROM scoped_fair_heads
          UNION ALL SELECT seq, priority, age FROM fair_heads WHERE NOT locked
        ), late_locked AS (
          SELECT c.seq, c.priority, c.age FROM unlocked c
           CROSS JOIN LATERAL (
             SELECT q.seq FROM ${s}.jobs q WHERE q.seq = c.seq AND q.status = 'queued' FOR UPDATE SKIP LOCKED) l
        ), next AS (
          SELECT seq FROM (
            SELECT seq, priority, age FROM free_heads
            UNION ALL SELECT seq, priority, age FROM capped_heads
            UNION ALL SELECT seq, priority, age FROM fair_heads WHERE locked
            UNION ALL SELECT seq, priority, age FROM late_locked) heads
           ORDER BY priority DESC, age, seq LIMIT p_limit
        ), claimed AS (
          UPDATE ${s}.jobs AS j
             SET status = 'running', attempt = j.attempt + 1, runner_id = p_runner, started_at = greatest(p_now, j.run_at), updated_at = p_now
           WHERE j.seq = ANY (ARRAY(SELECT seq FROM next))
          RETURNING j.seq, j.id, j.kind, j.payload, j.attempt, j.max_attempts, j.timeout_ms, j.trace_context, greatest(j.created_at, j.run_at), j.scope
        )
        SELECT * FROM claimed;
      END
      $fn$;
      -- Migration 12's claim, same arguments and result (a runner of an
      -- earlier version still calls it, on a statement it prepared): now the
      -- claim above without fair kinds, so it honours cooldowns too.
      CREATE OR REPLACE FUNCTION ${s}.claim_jobs(p_kinds text[], p_caps integer[], p_scope_caps integer[], p_limit integer, p_runner text, p_now bigint)
        RETURNS TABLE (c_seq bigint, c_id text, c_kind text, c_payload text, c_attempt integer, c_max_attempts integer, c_timeout_ms integer, c_trace_context text,
                       c_ready_at bigint)
        LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
      BEGIN
        RETURN QUERY
        SELECT c.c_seq, c.c_id, c.c_kind, c.c_payload, c.c_attempt, c.c_max_attempts, c.c_timeout_ms, c.c_trace_context, c.c_ready_at
          FROM ${s}.claim_jobs(p_kinds, p_caps, p_scope_caps, NULL::boolean[], p_limit, p_runner, p_now) AS c;
      END
      $fn$;
    `,
    // Only queued fair jobs: empty when the migration runs, but a plain build would still read the whole table.
    concurrentIndexes: (s) => [
      { name: 'jobs_fair', definition: `ON ${s}.jobs (kind, priority DESC, fair_pos, seq) WHERE status = 'queued' AND fair_pos IS NOT NULL` },
    ],
  },
]

/** The schema version this jobtable writes. */
export const SCHEMA_VERSION = MIGRATIONS.length

const STARTS = windowStarts(MIGRATIONS)

/** A migration's statements with its concurrent indexes built inside the same transaction: for a scratch or an empty schema, where a build reads no rows. */
function inlineSql(m: Migration, schema: string): string {
  const indexes = (m.concurrentIndexes?.(schema) ?? []).map((i) => `CREATE INDEX IF NOT EXISTS ${i.name} ${i.definition};`)
  return [m.sql(schema), ...indexes].join('\n')
}

/** The bookkeeping tables, made before the first migration (IF NOT EXISTS: every script and every migrator may run it). */
function bookkeeping(schema: string): string {
  return `
CREATE SCHEMA IF NOT EXISTS ${schema};
CREATE TABLE IF NOT EXISTS ${schema}.migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
-- Versions after ${LEGACY_VERSION}, with the oldest code version that runs on each (see jobtable's src/schema-window.ts).
CREATE TABLE IF NOT EXISTS ${schema}.schema_versions (version integer PRIMARY KEY, compatible_from integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
`
}

/** The statements that record migration `version` as applied in `schema`. */
function recordSql(schema: string, version: number): string {
  const from = STARTS.get(version)!
  const legacy = recordedInLegacy(version, from) ? `INSERT INTO ${schema}.migrations (version) VALUES (${version});\n` : ''
  const windowed = version > LEGACY_VERSION ? `INSERT INTO ${schema}.schema_versions (version, compatible_from) VALUES (${version}, ${from});\n` : ''
  return legacy + windowed
}

/**
 * Brings the schema to this jobtable's version as `mode` says (see
 * MigrateMode): `auto` applies the migrations it lacks in one transaction
 * under a transaction-scoped advisory lock keyed by the schema, so ten
 * processes starting at once migrate exactly once (the others wait for
 * the lock, then find nothing to do); `verify` only reads; `off` does
 * nothing. A newer schema inside this jobtable's window is left as it is;
 * one outside it is refused with SchemaVersionError and left untouched.
 * `schema` must be quoted.
 */
export async function migrateSchema(client: pg.ClientBase, schema: string, target = SCHEMA_VERSION, mode: MigrateMode = 'auto'): Promise<void> {
  if (mode === 'off') return
  // Fast path without the lock, which needs no CREATE privilege once migrated.
  const current = await readSchema(client, schema)
  if (decide(current, SCHEMA_VERSION, mode) === 'run' || (current?.version ?? 0) >= target) {
    if (mode === 'auto' && current !== undefined) await buildIndexes(client, schema, Math.min(current.version, target))
    return
  }
  for (let attempt = 1; ; attempt++) {
    try {
      await migrateLocked(client, schema, target)
      break
    } catch (err) {
      // The jobs table was held past LOCK_TIMEOUT (a long transaction of the application's): step out of the
      // way of the claims queued behind this migration's request, and ask again.
      if ((err as { code?: unknown } | null)?.code !== '55P03' || attempt >= LOCK_ATTEMPTS) throw err
      await new Promise((resolve) => setTimeout(resolve, 250 * attempt))
    }
  }
  await buildIndexes(client, schema, target)
}

/**
 * How long a migration waits for a lock on a table (ALTER TABLE on jobs
 * needs the strongest lock): while it waits, every claim queued behind it
 * waits too, so it gives up soon and tries again, LOCK_ATTEMPTS times.
 */
const LOCK_TIMEOUT = '1s'
const LOCK_ATTEMPTS = 30

/** migrateSchema's transaction: the migrations the schema lacks, under the migration lock. */
async function migrateLocked(client: pg.ClientBase, schema: string, target: number): Promise<void> {
  await client.query('BEGIN')
  try {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext('jobtable'), hashtext($1))`, [schema])
    // Taking a relation's lock makes this connection read the catalog changes other sessions committed while it waited
    // (an advisory lock does not): behind a transaction pooler the check above may have run on another server connection.
    await client.query('SELECT FROM pg_catalog.pg_namespace LIMIT 0')
    await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`)
    await client.query(bookkeeping(schema))
    const locked = await readSchema(client, schema)
    if (decide(locked, SCHEMA_VERSION, 'auto') === 'migrate') {
      const small = await fewJobs(client, schema, locked?.version ?? 0)
      for (const m of MIGRATIONS) {
        if (m.version <= (locked?.version ?? 0) || m.version > target) continue
        // On a table of few jobs (a new schema, a small deployment) a build takes a moment: its indexes are built in place.
        await client.query(small ? inlineSql(m, schema) : m.sql(schema))
        await client.query(recordSql(schema, m.version))
      }
    }
    await client.query('COMMIT')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined)
    throw err
  }
}

/** Below this many jobs, a migration builds its indexes inside its transaction: reading the table takes a moment. */
const INLINE_BUILD_ROWS = 10_000

/** Whether the jobs table (absent before version 1) holds fewer than INLINE_BUILD_ROWS rows: read before any lock on it is taken. */
async function fewJobs(client: pg.ClientBase, schema: string, version: number): Promise<boolean> {
  if (version === 0) return true
  const { rows } = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM (SELECT 1 FROM ${schema}.jobs LIMIT ${INLINE_BUILD_ROWS}) few`)
  return (rows[0]?.n ?? 0) < INLINE_BUILD_ROWS
}

/**
 * Builds the concurrent indexes of migrations up to `version` that the
 * schema lacks, or holds invalid (a build that was interrupted), outside
 * any transaction. Migrators take turns: a build takes a lock on its table
 * that another build's waits for, and an index another process is
 * building now is waited for, never dropped. Reads the catalog once when
 * every index is there.
 */
async function buildIndexes(client: pg.ClientBase, schema: string, version: number): Promise<void> {
  const wanted = MIGRATIONS.filter((m) => m.version <= version).flatMap((m) => m.concurrentIndexes?.(schema) ?? [])
  if (wanted.length === 0) return
  const namespace = unquote(schema)
  let builds = 0
  for (;;) {
    const { rows } = await client.query<{ name: string; valid: boolean; building: boolean }>(
      `SELECT c.relname AS name, x.indisvalid AS valid,
              EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = c.oid) AS building
         FROM pg_class c JOIN pg_index x ON x.indexrelid = c.oid
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND c.relname = ANY ($2::text[])`,
      [namespace, wanted.map((i) => i.name)],
    )
    const found = new Map(rows.map((r) => [r.name, r]))
    const todo = wanted.filter((i) => found.get(i.name)?.valid !== true)
    if (todo.length === 0) return
    const waiting = todo.filter((i) => found.get(i.name)?.building === true)
    for (const index of todo) {
      const state = found.get(index.name)
      if (state?.building === true) continue
      if (++builds > BUILD_ATTEMPTS) throw new Error(`jobtable: index ${index.name} is still not valid after ${BUILD_ATTEMPTS} builds`)
      // Invalid and nobody building it: what an interrupted build leaves. It is dropped and built again.
      if (state !== undefined) await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${schema}.${index.name}`)
      try {
        await client.query(`CREATE INDEX CONCURRENTLY IF NOT EXISTS ${index.name} ${index.definition}`)
      } catch (err) {
        // Another migrator made it between the read and this build, or two builds on one table waited for each
        // other (each build waits for the transactions older than it, the other build's included): look again.
        if (!BUILD_RACES.has((err as { code?: string } | null)?.code ?? '')) throw err
      }
    }
    if (waiting.length > 0) await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

/** What a build racing another migrator's may fail with: a duplicate name, or a deadlock PostgreSQL broke. */
const BUILD_RACES = new Set(['23505', '42P07', '40P01'])

/** How many builds buildIndexes starts at most before it gives up: a build that fails each time is an error, not a loop. */
const BUILD_ATTEMPTS = 5

/** A schema name as the catalog holds it, from the quoted form migrations take. */
function unquote(schema: string): string {
  return schema.startsWith('"') && schema.endsWith('"') ? schema.slice(1, -1).replaceAll('""', '"') : schema
}

/** The schema's version and window, or undefined when it has no migrations table yet. Reads only. */
export async function readSchema(client: pg.ClientBase, schema: string): Promise<SchemaState | undefined> {
  const tables = await client.query<{ legacy: boolean; windowed: boolean }>(
    `SELECT to_regclass($1) IS NOT NULL AS legacy, to_regclass($2) IS NOT NULL AS windowed`,
    [`${schema}.migrations`, `${schema}.schema_versions`],
  )
  if (!tables.rows[0]?.legacy) return undefined
  const legacy = (await client.query<{ v: number | null }>(`SELECT max(version) AS v FROM ${schema}.migrations`)).rows[0]?.v ?? 0
  const windowed = tables.rows[0].windowed
    ? (await client.query<{ v: number | null; f: number | null }>(`SELECT max(version) AS v, max(compatible_from) AS f FROM ${schema}.schema_versions`)).rows[0]!
    : { v: null, f: null }
  const version = Math.max(legacy, windowed.v ?? 0)
  // A legacy version above every windowed one was recorded without a window: only its own code runs on it.
  return { version, compatibleFrom: legacy > (windowed.v ?? 0) ? legacy : (windowed.f ?? version) }
}

/**
 * The SQL of migrations `from + 1` to `to` for `schema` (quoted), one
 * script per version, each in its own transaction and recording itself:
 * what `jobtable migrate --sql` prints for a team's own migration tool.
 * Applied in order by psql, they give the schema migrateSchema gives.
 */
export function migrationScripts(schema: string, from = 0, to = SCHEMA_VERSION): { version: number; sql: string }[] {
  return MIGRATIONS.filter((m) => m.version > from && m.version <= to).map((m) => ({
    version: m.version,
    sql:
      `-- jobtable PostgreSQL schema version ${m.version}\nBEGIN;\nSELECT pg_advisory_xact_lock(hashtext('jobtable'), hashtext('${schema.replace(/'/g, "''")}'));\n${bookkeeping(schema).trim()}\n${m.sql(schema)}\n${recordSql(schema, m.version)}COMMIT;\n` +
      (m.concurrentIndexes?.(schema) ?? [])
        .map((i) => `-- Built outside the transaction, so writes to the table go on meanwhile (not inside psql --single-transaction).\nCREATE INDEX CONCURRENTLY IF NOT EXISTS ${i.name} ${i.definition};\n`)
        .join(''),
  }))
}

/**
 * How the schema differs from what its version should be: each table
 * column, index, function or trigger of jobtable's that is missing, extra
 * or not as its migrations made it. Compared with a scratch schema
 * migrated to the same version inside a transaction that is rolled back,
 * so nothing is left behind (it needs the CREATE privilege on the
 * database). Empty when it matches; a schema newer than this jobtable is
 * not compared.
 */
export async function schemaDrift(client: pg.ClientBase, schema: string, unquoted: string): Promise<string[]> {
  const state = await readSchema(client, schema)
  if (state === undefined || state.version > SCHEMA_VERSION) return []
  const scratch = `jobtable_drift_${process.pid}_${Date.now()}`
  await client.query('BEGIN')
  try {
    await client.query(`CREATE SCHEMA "${scratch}"`)
    for (const m of MIGRATIONS) if (m.version <= state.version) await client.query(inlineSql(m, `"${scratch}"`))
    return compareCatalogs(await catalogOf(client, scratch), await catalogOf(client, unquoted))
  } finally {
    await client.query('ROLLBACK').catch(() => undefined)
  }
}

/** A schema's columns, indexes, functions and triggers, by name, with their definitions, the schema's own name taken out. */
async function catalogOf(client: pg.ClientBase, schema: string): Promise<Map<string, string>> {
  const rows = await client.query<{ name: string; def: string }>(
    `SELECT 'column ' || table_name || '.' || column_name AS name,
            concat_ws(' ', data_type, is_nullable, column_default) AS def
       FROM information_schema.columns WHERE table_schema = $1 AND table_name NOT IN ('migrations', 'schema_versions')
     UNION ALL
     SELECT 'index ' || i.indexname, i.indexdef || CASE WHEN x.indisvalid THEN '' ELSE ' (invalid: an interrupted build)' END
       FROM pg_indexes i JOIN pg_namespace n ON n.nspname = i.schemaname
       JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = i.indexname JOIN pg_index x ON x.indexrelid = c.oid
      WHERE i.schemaname = $1 AND i.tablename NOT IN ('migrations', 'schema_versions')
     UNION ALL
     SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', p.prosrc || coalesce(array_to_string(p.proconfig, ','), '')
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
     UNION ALL
     SELECT 'trigger ' || t.tgname, pg_get_triggerdef(t.oid)
       FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal`,
    [schema],
  )
  // Migrations write the schema quoted (in names and in string literals); the catalog renders a name unquoted when it can.
  const quoted = new RegExp(`"${schema}"`, 'g')
  const bare = new RegExp(`\\b${schema}\\.`, 'g')
  return new Map(rows.rows.map((r) => [r.name, r.def.replace(quoted, 'S').replace(bare, 'S.')]))
}
