import type pg from 'pg'
import { SchemaVersionError } from '../errors.js'
import { NOTIFY_CHANNEL } from './queries.js'

/** A numbered migration: `sql(s)` gives its statements for the quoted schema `s`. */
interface Migration {
  readonly version: number
  readonly sql: (s: string) => string
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

]

/** The schema version this jobtable writes. */
export const SCHEMA_VERSION = MIGRATIONS.length

/**
 * Applies the migrations the schema lacks in one transaction under a
 * transaction-scoped advisory lock keyed by the schema, so ten processes
 * starting at once migrate exactly once: the others wait for the lock,
 * then find nothing to do. A schema made by a newer jobtable is refused
 * with SchemaVersionError and left untouched. `schema` must be quoted.
 */
export async function migrateSchema(client: pg.ClientBase, schema: string, target = SCHEMA_VERSION): Promise<void> {
  // Fast path without the lock, which needs no CREATE privilege once migrated.
  const current = await readVersion(client, schema)
  if (current !== undefined && current > SCHEMA_VERSION) throw new SchemaVersionError(current, SCHEMA_VERSION)
  if (current !== undefined && current >= target) return
  await client.query('BEGIN')
  try {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext('jobtable'), hashtext($1))`, [schema])
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`)
    await client.query(`CREATE TABLE IF NOT EXISTS ${schema}.migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
    const locked = (await readVersion(client, schema)) ?? 0
    if (locked > SCHEMA_VERSION) throw new SchemaVersionError(locked, SCHEMA_VERSION)
    for (const m of MIGRATIONS) {
      if (m.version <= locked || m.version > target) continue
      await client.query(m.sql(schema))
      await client.query(`INSERT INTO ${schema}.migrations (version) VALUES ($1)`, [m.version])
    }
    await client.query('COMMIT')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined)
    throw err
  }
}

/** The schema's version, or undefined when it has no migrations table yet. */
async function readVersion(client: pg.ClientBase, schema: string): Promise<number | undefined> {
  const exists = await client.query<{ found: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS found`, [`${schema}.migrations`])
  if (!exists.rows[0]?.found) return undefined
  const row = await client.query<{ version: number | null }>(`SELECT max(version) AS version FROM ${schema}.migrations`)
  return row.rows[0]?.version ?? 0
}
