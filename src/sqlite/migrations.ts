import type Database from 'better-sqlite3'
import type { SqliteDatabase } from './database.js'
import { compareCatalogs, decide, LEGACY_VERSION, recordedInLegacy, windowStarts, type MigrateMode, type SchemaState } from '../schema-window.js'

/**
 * The schema, as numbered migrations applied in order on open. A database
 * made by an older jobtable is migrated forward, never recreated; one made
 * by a newer jobtable is refused. Versions are aligned with the other
 * backends: version N means the same columns everywhere.
 *
 * Later work (scheduled jobs, priorities, retries, cancellation, an owner
 * scope per job) adds columns by a new migration at the end of this list;
 * an applied migration is never edited.
 */
export const MIGRATIONS: readonly { version: number; sql: string; compatibleFrom?: number }[] = [
  {
    version: 1,
    sql: `
      -- seq is the claim order: insertion order, never a clock reading.
      -- attempt counts claims; every write after a claim is fenced on it.
      CREATE TABLE jobtable_jobs (
        seq         INTEGER PRIMARY KEY,
        id          TEXT    NOT NULL UNIQUE,
        kind        TEXT    NOT NULL,
        status      TEXT    NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
        payload     TEXT    NOT NULL,
        result      TEXT,
        error       TEXT,
        attempt     INTEGER NOT NULL DEFAULT 0,
        runner_id   TEXT,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        started_at  INTEGER,
        finished_at INTEGER
      ) STRICT;
      -- Partial indexes keep a claim and the restart sweep fast however many
      -- finished rows the table holds.
      CREATE INDEX jobtable_jobs_queued ON jobtable_jobs (seq) WHERE status = 'queued';
      CREATE INDEX jobtable_jobs_running ON jobtable_jobs (runner_id) WHERE status = 'running';
    `,
  },
  {
    version: 2,
    sql: `
      -- The owner scope a job was enqueued under (a household, a tenant):
      -- callers of the HTTP API read, list and stream only their own.
      -- NULL is the scope of jobs enqueued without one.
      ALTER TABLE jobtable_jobs ADD COLUMN scope TEXT;
      -- Listing newest first within a scope walks this index backwards.
      CREATE INDEX jobtable_jobs_scope ON jobtable_jobs (scope, seq);
    `,
  },
  {
    version: 3,
    sql: `
      -- The live runners, one row per runner process boot, so that several
      -- processes can share one file: a starting runner fails only the
      -- running jobs of runners proven gone. On SQLite a runner is proven
      -- gone by its lock file (see SqliteDriver), so expires_at stays NULL;
      -- PostgreSQL keeps a lease there.
      CREATE TABLE jobtable_runners (
        id           TEXT    NOT NULL PRIMARY KEY,
        started_at   INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL,
        expires_at   INTEGER
      ) STRICT;
    `,
  },
  {
    version: 4,
    sql: `
      -- The kinds each live runner has handlers for, as a JSON array of
      -- names: a runner claims only its own kinds, and a queued job whose
      -- kind no live runner has waits instead of failing (unknown_kind only
      -- after a grace). A runner of an older jobtable has none recorded.
      ALTER TABLE jobtable_runners ADD COLUMN kinds TEXT NOT NULL DEFAULT '[]';
    `,
  },
  {
    version: 5,
    sql: `
      -- Scheduled jobs and priorities. A job enqueued with a due time still
      -- to come is 'scheduled' until the runner's scheduler makes it
      -- 'queued' at that time, so the claim's index never holds jobs that
      -- are not due: a million jobs scheduled for next week cost the claim
      -- nothing. 'cancelled' is reserved for cancellation. SQLite cannot
      -- change a CHECK constraint in place: the table is rebuilt, keeping
      -- every row, its seq (the claim order) included.
      CREATE TABLE jobtable_jobs_v5 (
        seq         INTEGER PRIMARY KEY,
        id          TEXT    NOT NULL UNIQUE,
        kind        TEXT    NOT NULL,
        status      TEXT    NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled')),
        payload     TEXT    NOT NULL,
        result      TEXT,
        error       TEXT,
        attempt     INTEGER NOT NULL DEFAULT 0,
        runner_id   TEXT,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        started_at  INTEGER,
        finished_at INTEGER,
        scope       TEXT,
        -- Higher is claimed first; insertion order (seq) within a priority.
        priority    INTEGER NOT NULL DEFAULT 0,
        -- When the job is due (ms since the epoch); NULL: at once.
        run_at      INTEGER
      ) STRICT;
      INSERT INTO jobtable_jobs_v5 (seq, id, kind, status, payload, result, error, attempt, runner_id,
                                    created_at, updated_at, started_at, finished_at, scope)
        SELECT seq, id, kind, status, payload, result, error, attempt, runner_id,
               created_at, updated_at, started_at, finished_at, scope FROM jobtable_jobs;
      DROP TABLE jobtable_jobs;
      ALTER TABLE jobtable_jobs_v5 RENAME TO jobtable_jobs;
      -- The claim walks this in order: highest priority, then oldest.
      CREATE INDEX jobtable_jobs_queued ON jobtable_jobs (priority DESC, seq) WHERE status = 'queued';
      CREATE INDEX jobtable_jobs_running ON jobtable_jobs (runner_id) WHERE status = 'running';
      CREATE INDEX jobtable_jobs_scope ON jobtable_jobs (scope, seq);
      -- The scheduler finds the due jobs, and the next due time, here.
      CREATE INDEX jobtable_jobs_scheduled ON jobtable_jobs (run_at) WHERE status = 'scheduled';
    `,
  },
  {
    version: 6,
    sql: `
      -- Retries, snoozes, timeouts and requeue after a crash, decided per
      -- job at its enqueue from its kind (and its own options), so every
      -- process, whatever kinds it knows, treats the job alike:
      -- max_attempts: how many claims it may have (1: the single attempt of
      -- the reference design; a snooze gives one back); timeout_ms: its
      -- deadline from each start, NULL for none; requeue_interrupted: 1 for
      -- a kind declared idempotent, whose job a crash queues again.
      ALTER TABLE jobtable_jobs ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 1;
      ALTER TABLE jobtable_jobs ADD COLUMN timeout_ms INTEGER;
      ALTER TABLE jobtable_jobs ADD COLUMN requeue_interrupted INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 7,
    sql: `
      -- Cancellation of a running job: set by cancel(), read by the runner
      -- running it (which aborts its signal), and turned into the status
      -- 'cancelled' by whichever final write comes next.
      ALTER TABLE jobtable_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 8,
    sql: `
      -- The claim reads the head of each of its kinds' queues, merged by
      -- priority then seq: with the kind first, a backlog of a kind the
      -- claimer does not take (another version's, or one at its
      -- concurrency limit) is never stepped over.
      DROP INDEX jobtable_jobs_queued;
      CREATE INDEX jobtable_jobs_queued ON jobtable_jobs (kind, priority DESC, seq) WHERE status = 'queued';
    `,
  },
  {
    version: 9,
    sql: `
      -- Unique jobs: while a job of a kind, scope and unique_key is
      -- scheduled, queued or running, no other job with all three can be
      -- stored; once it is terminal the key is free again. The database
      -- enforces it (an enqueue that loses the race finds the row, never
      -- a second one). A scope is never '' (enqueue refuses it), so
      -- coalesce(scope, '') tells no scope apart from every scope.
      ALTER TABLE jobtable_jobs ADD COLUMN unique_key TEXT;
      CREATE UNIQUE INDEX jobtable_jobs_unique ON jobtable_jobs (kind, coalesce(scope, ''), unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('scheduled', 'queued', 'running');
    `,
  },
  {
    version: 10,
    sql: `
      -- Kinds an operator paused (runner.pause), for every process on the
      -- file and across restarts: their queued jobs stay queued until
      -- resume; the claim skips them.
      CREATE TABLE jobtable_paused_kinds (kind TEXT PRIMARY KEY, paused_at INTEGER NOT NULL) STRICT;
    `,
  },
  {
    version: 11,
    sql: `
      -- Recurring jobs: the latest tick of each schedule that was enqueued
      -- (or passed over), by the schedule's name. A tick is enqueued by the
      -- write that moves last_tick_at forward to it, in the same
      -- transaction as its job, and the row only ever moves forward: each
      -- tick is enqueued once however many processes declare the schedule.
      CREATE TABLE jobtable_schedules (
        name         TEXT    NOT NULL PRIMARY KEY,
        last_tick_at INTEGER NOT NULL,
        updated_at   INTEGER NOT NULL
      ) STRICT;
      -- Retention: the pruner deletes terminal jobs finished before a
      -- cutoff, one kind and its statuses at a time (each kind and status
      -- may keep its jobs for its own age). Terminal rows only, so a prune
      -- never reads a live job; the kind first, so a kind kept for 90 days
      -- is never stepped over by the prune of one kept for a day. The
      -- pruner lists the kinds by jumping from one to the next here.
      -- IF NOT EXISTS: an operator may have built it ahead of the upgrade.
      CREATE INDEX IF NOT EXISTS jobtable_jobs_terminal ON jobtable_jobs (kind, status, finished_at)
        WHERE status IN ('succeeded', 'failed', 'cancelled');
    `,
  },
  {
    version: 12,
    sql: `
      -- Tracing: the OpenTelemetry trace context of the enqueue that made
      -- a job (the propagator's fields as JSON text), so each of its runs,
      -- in whichever process, joins that trace. NULL when the enqueue was
      -- made outside a trace, as always without an SDK.
      ALTER TABLE jobtable_jobs ADD COLUMN trace_context TEXT;
    `,
  },
  {
    version: 13,
    // Adds a nullable column: code of schema 12 runs on it (and writes NULL there).
    compatibleFrom: 12,
    sql: `
      -- The jobtable release each runner runs, for operators reading a
      -- rolling deploy (jobtable doctor); NULL for releases before it.
      ALTER TABLE jobtable_runners ADD COLUMN version TEXT;
    `,
  },
  {
    version: 14,
    // Adds tables, a nullable column and an index: code of schema 12 runs on it and ignores them.
    compatibleFrom: 12,
    sql: `
      -- Rate limits: one row per claim of a rate-limited kind, in its
      -- bucket, at the claim's time. A claim counts the rows of the
      -- bucket's window (a sliding window) in its own transaction and
      -- deletes the rows long past it.
      CREATE TABLE jobtable_rate_starts (bucket TEXT NOT NULL, at INTEGER NOT NULL) STRICT;
      CREATE INDEX jobtable_rate_starts_bucket ON jobtable_rate_starts (bucket, at);
      -- Cooldowns: no claim takes a job of the bucket (or kind) named
      -- key before until, whichever process claims.
      CREATE TABLE jobtable_cooldowns (key TEXT NOT NULL PRIMARY KEY, until INTEGER NOT NULL, set_at INTEGER NOT NULL) STRICT, WITHOUT ROWID;
      -- Fair claims: each lane (a fair kind's scope, '' for unscoped
      -- jobs) gives its jobs positions from next_pos on; last_seq is
      -- the lane's latest job, whose leaving the queue makes it idle.
      CREATE TABLE jobtable_fair_lanes (
        kind     TEXT    NOT NULL,
        scope    TEXT    NOT NULL,
        next_pos INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (kind, scope)
      ) STRICT, WITHOUT ROWID;
      -- A fair job's position in its kind's turn order; NULL for others.
      ALTER TABLE jobtable_jobs ADD COLUMN fair_pos INTEGER;
      -- A fair kind's claim walks this: by priority, then position. It
      -- holds only positioned queued jobs, so other kinds pay nothing.
      CREATE INDEX jobtable_jobs_fair ON jobtable_jobs (kind, priority DESC, fair_pos, seq)
        WHERE status = 'queued' AND fair_pos IS NOT NULL;
    `,
  },
]

/** The schema version this jobtable writes. */
export const SCHEMA_VERSION = MIGRATIONS.length

const STARTS = windowStarts(MIGRATIONS)

/** The bookkeeping tables, made before the first migration (IF NOT EXISTS: every script and every open may run it). */
const BOOKKEEPING = `
  CREATE TABLE IF NOT EXISTS jobtable_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT;
  -- Versions after ${LEGACY_VERSION}, with the oldest code version that runs on each (see src/schema-window.ts).
  CREATE TABLE IF NOT EXISTS jobtable_schema_versions (
    version         INTEGER PRIMARY KEY,
    compatible_from INTEGER NOT NULL,
    applied_at      INTEGER NOT NULL
  ) STRICT;
`

/** The statements that record migration `version` as applied, at `appliedAt` (SQL text: a number, or an expression for a script). */
function recordSql(version: number, appliedAt: string): string {
  const from = STARTS.get(version)!
  const legacy = recordedInLegacy(version, from) ? `INSERT INTO jobtable_migrations (version, applied_at) VALUES (${version}, ${appliedAt});\n` : ''
  const windowed = version > LEGACY_VERSION ? `INSERT INTO jobtable_schema_versions (version, compatible_from, applied_at) VALUES (${version}, ${from}, ${appliedAt});\n` : ''
  return legacy + windowed
}

/**
 * The database's schema version and window, or undefined when it has no
 * jobtable tables. Reads only.
 */
export function readSchema(database: SqliteDatabase): SchemaState | undefined {
  const db = database as Database.Database
  const has = (table: string) => db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(table) !== undefined
  if (!has('jobtable_migrations')) return undefined
  const legacy = (db.prepare('SELECT max(version) AS v FROM jobtable_migrations').get() as { v: number | null }).v ?? 0
  const windowed = has('jobtable_schema_versions')
    ? (db.prepare('SELECT max(version) AS v, max(compatible_from) AS f FROM jobtable_schema_versions').get() as { v: number | null; f: number | null })
    : { v: null, f: null }
  const version = Math.max(legacy, windowed.v ?? 0)
  // A legacy version above every windowed one was recorded without a window: only its own code runs on it.
  return { version, compatibleFrom: legacy > (windowed.v ?? 0) ? legacy : (windowed.f ?? version) }
}

/**
 * Applies the migrations `db` lacks, up to `target`, in one immediate
 * transaction, so two processes opening one file at once migrate it
 * exactly once: the second waits for the first's lock, then finds nothing
 * to do. A newer schema inside this jobtable's window is left as it is;
 * one outside it is refused with SchemaVersionError.
 */
export function migrate(database: SqliteDatabase, target = SCHEMA_VERSION): void {
  // Typed by shape in the public signature; it is a better-sqlite3 Database (see SqliteDatabase).
  const db = database as Database.Database
  db.transaction(() => {
    db.exec(BOOKKEEPING)
    if (decide(readSchema(db), SCHEMA_VERSION, 'auto') === 'run') return
    const current = readSchema(db)?.version ?? 0
    for (const m of MIGRATIONS) {
      if (m.version <= current || m.version > target) continue
      db.exec(m.sql)
      db.exec(recordSql(m.version, String(Date.now())))
    }
  }).immediate()
}

/**
 * Opens the schema as the driver's `migrate` option says (see
 * MigrateMode): migrates it, checks it without writing, or trusts it.
 */
export function openSchema(database: SqliteDatabase, mode: MigrateMode): void {
  if (mode === 'auto') migrate(database)
  else decide(readSchema(database), SCHEMA_VERSION, mode)
}

/**
 * The SQL of migrations `from + 1` to `to`, one script per version, each
 * recording itself as applied: what `jobtable migrate --sql` prints for a
 * team's own migration tool. Applied in order by the sqlite3 shell, they
 * give the schema `migrate()` gives.
 */
export function migrationScripts(from = 0, to = SCHEMA_VERSION): { version: number; sql: string }[] {
  const appliedAt = "CAST(strftime('%s', 'now') AS INTEGER) * 1000"
  return MIGRATIONS.filter((m) => m.version > from && m.version <= to).map((m) => ({
    version: m.version,
    sql: `-- jobtable SQLite schema version ${m.version}\nBEGIN IMMEDIATE;\n${dedent(BOOKKEEPING)}\n${dedent(m.sql)}\n${recordSql(m.version, appliedAt)}COMMIT;\n`,
  }))
}

/**
 * How the database's schema differs from what its version should be: each
 * table, index or trigger of jobtable's that is missing, extra or not as
 * its migrations made it (an index an operator dropped, a column added by
 * hand). Compared with a scratch in-memory database migrated to the same
 * version. Empty when it matches; a schema newer than this jobtable is not
 * compared (its migrations are unknown here).
 */
export function schemaDrift(database: SqliteDatabase): string[] {
  const db = database as Database.Database
  const state = readSchema(db)
  if (state === undefined || state.version > SCHEMA_VERSION) return []
  const scratch = new (db.constructor as typeof Database)(':memory:')
  try {
    migrate(scratch, state.version)
    return compareCatalogs(objectsOf(scratch), objectsOf(db))
  } finally {
    scratch.close()
  }
}

/** jobtable's tables, indexes and triggers, by name, with their SQL with whitespace normalized. */
function objectsOf(db: Database.Database): Map<string, string> {
  const rows = db.prepare(`SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'jobtable%' AND sql IS NOT NULL`).all() as { type: string; name: string; sql: string }[]
  return new Map(rows.map((r) => [`${r.type} ${r.name}`, r.sql.replace(/--[^\n]*/g, '').replace(/\s+/g, ' ').replace(/\( /g, '(').replace(/ \)/g, ')').trim()]))
}

function dedent(sql: string): string {
  return sql.replace(/^\n+|\s+$/g, '').replace(/^ {4,6}/gm, '')
}
