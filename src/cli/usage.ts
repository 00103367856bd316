import { parseArgs, type ParseArgsConfig } from 'node:util'

/** Exit codes of the `jobtable` command. */
export const EXIT = {
  /** Done, or stopped gracefully by a signal. */
  ok: 0,
  /** A runtime failure: the database, the kinds module, a job not found. */
  failure: 1,
  /** The command line itself is wrong: an unknown flag, a bad value, a public address without tokens. */
  usage: 2,
} as const

/** A mistake in the command line; the process exits with EXIT.usage after printing it and a pointer to --help. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

/** A runtime failure whose message is safe to print as it is. */
export class CliFailure extends Error {
  override readonly name = 'CliFailure'
}

/** The flags and positionals parse() found; every command also has --help. */
export interface Parsed<O> {
  readonly values: { readonly [K in keyof O]?: O[K] extends { type: 'boolean' } ? boolean : O[K] extends { multiple: true } ? string[] : string } & { readonly help?: boolean }
  readonly positionals: string[]
}

/** Parses a command's flags with node:util parseArgs, turning its errors into UsageError. */
export function parse<O extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: O, allowPositionals = false): Parsed<O> {
  try {
    return parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals, strict: true }) as Parsed<O>
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message.split('\n')[0]! : 'invalid arguments')
  }
}

/** An integer flag within [min, max], or the default when absent. */
export function intFlag(name: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback
  const n = /^\d+$/.test(value) ? Number(value) : NaN
  if (!(n >= min && n <= max)) throw new UsageError(`--${name} must be an integer from ${min} to ${max}`)
  return n
}

/** Milliseconds per unit of a duration flag. */
const UNITS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const

/**
 * A duration flag such as `7d`, `36h`, `90m`, `30s` or `500ms`: a whole
 * number and one unit (ms, s, m, h, d, w), in milliseconds. Anything else,
 * or a duration too long to count in milliseconds exactly, is a usage error.
 */
export function durationFlag(name: string, value: string): number {
  const m = /^(\d+)(ms|s|m|h|d|w)$/.exec(value)
  const ms = m ? Number(m[1]) * UNITS[m[2] as keyof typeof UNITS] : NaN
  if (!Number.isSafeInteger(ms)) throw new UsageError(`--${name} must be a whole number and a unit, such as 7d, 36h, 90m, 30s or 500ms`)
  return ms
}

const DATABASE = `  -d, --database <path|url>  SQLite file or postgres:// URL (env JOBTABLE_DATABASE; default ./jobtable.db)`
const STOP = `      --stop-timeout <ms>    how long a stop waits for running jobs (default 20000); jobs
                             still running then stay running for the next start to fail as
                             interrupted, and the process still exits 0`
const RETENTION = `      --retention <d|off>    how long finished jobs are kept before this process deletes them,
                             such as 30d (default 7d); off: this process never deletes any
                             (every process on the database prunes by its own setting)
`
const METRICS_LISTENER = `      --metrics-port <port>  serve Prometheus metrics at /metrics on a listener of their own
                             (0 picks a free port); needs prom-client (npm install prom-client@15)
      --metrics-host <addr>  its address (default 127.0.0.1); any non-loopback address needs
                             bearer tokens
      --metrics-scope <s>    the scope of the tokens that may read the metrics (and nothing
                             an operator may do); without tokens every caller may`
const LOG = `      --log-level <level>    debug, info, warn or error (default info); logs go to stderr,
                             readable in a terminal, JSON lines otherwise`

/** The help text of each command. */
export const HELP = {
  main: `Usage: jobtable <command> [options]

Durable background jobs in which a database table is the queue.

Commands:
  serve       the HTTP API and workers together
  worker      workers only
  migrate     create or upgrade the job tables, then exit
  jobs        list or show jobs (jobs list, jobs show <id>)
  kinds       pause or resume a kind everywhere (kinds pause <kind>, kinds resume <kind>, kinds paused)
  prune       delete finished jobs older than a duration (prune --older-than 7d)
  schedules   list the recurring schedules a kinds module declares, with their next ticks
  rate-limits list the rate limits a kinds module declares, with their use now
  cooldowns   list the cooldowns in force, or end one (cooldowns clear <key>)
  doctor      check a deployment: schema, live runners and their releases, kinds no
              runner handles, paused kinds, the longest wait; exit 1 when a person is needed

Run jobtable <command> --help for a command's options. jobtable -v (--version)
prints the version.

Only migrate, serve and worker create a database that is not there yet; the
other commands fail on a missing SQLite file or PostgreSQL schema, creating
nothing. A --kinds module in TypeScript is loaded through tsx when the project
(or jobtable) has it.

Exit codes: 0 ok, 1 runtime failure, 2 usage error.
`,
  serve: `Usage: jobtable serve [options]

Serves the HTTP API (/api/v1/jobs) and its dashboard (/), and runs workers
in one process. The dashboard reads through the API, with the same tokens.
SIGTERM or SIGINT stops gracefully, waiting up to --stop-timeout for running
jobs; a second signal exits at once (signals within 1 s of the first count as
one).

Options:
${DATABASE}
  -k, --kinds <module>       module exporting registerKinds(runner); required unless --workers 0;
                             a .ts module loads through tsx (npm i -D tsx)
      --host <address>       address to bind (default 127.0.0.1); any non-loopback address
                             needs bearer tokens
  -p, --port <port>          port (default 8080; 0 picks a free one)
  -w, --workers <n>          concurrent jobs (default 4; 0 serves the API without workers)
      --tokens-file <path>   JSON file {"<token>": "<scope>", ...}: each bearer token and the
                             scope its holder owns (env JOBTABLE_TOKENS holds the same JSON)
      --operator-scope <s>   the scope of the tokens that may pause and resume kinds, and read
                             and clear rate limits and cooldowns, over HTTP (without tokens
                             every caller may; with tokens and no operator scope, none may)
      --max-connections <n>  connections held at once (default 1024)
      --metrics              serve Prometheus metrics at GET /metrics on the API's listener, for
                             the operator scope and --metrics-scope; needs prom-client
${METRICS_LISTENER}
      --demo                 also run the kinds module's demo(runner, { url, signal }) export
${STOP}
${RETENTION}${LOG}
  -h, --help                 this help
`,
  worker: `Usage: jobtable worker --kinds <module> [options]

Runs workers only: claims queued jobs from the database and runs them.
SIGTERM or SIGINT stops gracefully, waiting up to --stop-timeout for running
jobs; a second signal exits at once (signals within 1 s of the first count as
one). Exits 1 when the workers stop on a database error that can never
succeed.

Options:
${DATABASE}
  -k, --kinds <module>       module exporting registerKinds(runner) (required); a .ts module
                             loads through tsx (npm i -D tsx)
  -w, --workers <n>          concurrent jobs (default 4)
${METRICS_LISTENER}
      --tokens-file <path>   bearer tokens guarding the metrics listener, as for serve
                             (env JOBTABLE_TOKENS)
${STOP}
${RETENTION}${LOG}
  -h, --help                 this help
`,
  migrate: `Usage: jobtable migrate [options]
       jobtable migrate --sql [--from <n>] [--to <n>] [--out <dir>] [-d <db>]
       jobtable migrate --check [-d <db>]

Creates the job tables, or upgrades them to this version's schema, then exits.
A database a newer jobtable migrated is left as it is when this version still
runs on it (its version window), and refused otherwise, untouched.

--sql prints the SQL of each migration, for your own migration tool: SQLite's,
or PostgreSQL's for the schema of a postgres:// --database (nothing connects).
Each script records itself, so a database it made is one this version runs on
with the driver option migrate: 'verify'.

--check reads the schema without changing it and prints what it found as JSON
({version, expected, compatibleFrom, state, runs, drift, advice}); it exits 1
when the schema is behind, ahead or drifted (a missing index, a changed
function), 0 when it is exactly this version's.

Options:
${DATABASE}
      --sql                  print the migrations' SQL instead of applying them
      --from <n>             with --sql: the version the database is at (default 0)
      --to <n>               with --sql: the last version to print (default this version's)
      --out <dir>            with --sql: one file per version in <dir>, instead of stdout
      --check                check the schema; exit 1 when it is not this version's
${LOG}
  -h, --help                 this help
`,
  jobs: `Usage: jobtable jobs list [options]
       jobtable jobs show <id> [options]

Shows jobs as JSON on stdout, across every scope unless --scope is given.

Options:
${DATABASE}
      --scope <scope>        only jobs of this owner scope
      --status <status>      list: scheduled, queued, running, succeeded, failed or cancelled
      --kind <kind>          list: only this kind
      --limit <n>            list: page size, 1 to 1000 (default 50)
      --cursor <cursor>      list: the nextCursor of the previous page
${LOG}
  -h, --help                 this help
`,
  kinds: `Usage: jobtable kinds pause <kind> [options]
       jobtable kinds resume <kind> [options]
       jobtable kinds paused [options]

Pauses a kind for every process on the database, and across restarts: its
queued jobs stay queued and running ones finish; resume lets them run again.
Prints {kind, paused, changed} (changed: false when it was already so), or
the paused kinds, as JSON on stdout. A kind the database has never seen (no
job of it, not paused, and no live runner handles it) is refused, naming the
nearest known kind, unless --force is given.

Options:
${DATABASE}
      --force                pause or resume the kind even though the database has never
                             seen it, such as a kind whose first job is still to come
${LOG}
  -h, --help                 this help
`,
  prune: `Usage: jobtable prune --older-than <duration> [options]

Deletes the jobs that finished (succeeded, failed or cancelled) longer ago
than the duration, in batches of 1,000 that never hold up the workers
running beside it; prints {"deleted": n} as JSON on stdout. A scheduled,
queued or running job is never deleted. Started runners do the same every
minute by their own retention (7 days unless configured).

Options:
${DATABASE}
      --older-than <d>       required: a whole number and a unit (ms, s, m, h, d, w),
                             such as 7d, 36h or 90m; 0s deletes every finished job
      --status <status>      only jobs in this status: succeeded, failed or cancelled
                             (repeat for several; default all three)
      --kind <kind>          only jobs of this kind (repeat for several; default every kind)
${LOG}
  -h, --help                 this help
`,
  schedules: `Usage: jobtable schedules --kinds <module> [options]

Lists the recurring schedules the kinds module declares (runner.schedule in
its registerKinds), as JSON on stdout: {"schedules": [{name, kind, cron,
timezone, missed, lastTickAt, nextTickAt}, ...]}, in declaration order.
lastTickAt is the last tick the database recorded (null until a started
runner records one), nextTickAt the next tick after now; both in epoch
milliseconds. The database stores only each schedule's name and last tick,
so the module says which schedules there are. Never a schedule's payload.
Nothing is started and nothing is enqueued.

Options:
${DATABASE}
  -k, --kinds <module>       module exporting registerKinds(runner) (required)
      --log-level <level>    debug, info, warn or error (default warn); logs go to stderr,
                             readable in a terminal, JSON lines otherwise
  -h, --help                 this help
`,
  'rate-limits': `Usage: jobtable rate-limits --kinds <module> [options]

Lists the rate limits the kinds module declares (rateLimit in its
registerKinds), each with its use now, as JSON on stdout:
{"rateLimits": [{key, kinds, limit, periodMs, perScope, used, resetAt,
cooldownUntil}, ...]}. key is the bucket: a kind's name, a name several
kinds share, or <kind>@* for a per-scope limit, whose "used" is its busiest
scope's and whose "scopes" lists each scope with claims in the window.
used counts the claims (starts) in the sliding window of periodMs now;
resetAt is when the oldest of them leaves it; cooldownUntil the end of a
cooldown in force on the key. Times are ISO dates (UTC), or null. The
database keeps only the claims, so the module says which limits there are.
Nothing is started and nothing is claimed.

Options:
${DATABASE}
  -k, --kinds <module>       module exporting registerKinds(runner) (required)
      --log-level <level>    debug, info, warn or error (default warn); logs go to stderr,
                             readable in a terminal, JSON lines otherwise
  -h, --help                 this help

Examples:
  jobtable rate-limits --kinds ./jobs.js
  jobtable rate-limits --kinds ./jobs.js -d postgres://db.internal/app
`,
  cooldowns: `Usage: jobtable cooldowns [list] [options]
       jobtable cooldowns clear <key> [options]

A cooldown pauses one rate-limit key for every process on the database
until a time: a handler sets it with job.rateLimited(until), such as a
model provider's reset after a 429. No job whose key it is starts before
its end. list (the default) prints the cooldowns in force as JSON on
stdout: {"cooldowns": [{key, until}, ...]}, until an ISO date (UTC).
clear ends the key's cooldown now and prints {"key", "cleared": true}; its
jobs may then be claimed again (a job the handler sent back stays due at
its own time: jobtable jobs list --status scheduled). A key with no
cooldown recorded exits 1, naming the keys in force, and changes nothing.

Options:
${DATABASE}
${LOG}
  -h, --help                 this help

Examples:
  jobtable cooldowns
  jobtable cooldowns clear provider:models
  jobtable cooldowns clear 'import_recipe@household-1'
`,
  doctor: `Usage: jobtable doctor [options]

Reads the database, changing nothing, and prints one JSON report: the schema
(as migrate --check), the live runners with their jobtable releases and kinds,
the kinds with queued jobs that no live runner handles, the paused kinds, and
per kind how many jobs are queued and how long the oldest has waited. Exits 1
when something needs a person (each in "problems", in words): a schema this
release cannot run on, one behind or drifted, queued jobs of a kind no live
runner handles, or a queued job waiting longer than --max-wait. A newer schema
this release still runs on (a rolling deploy) is not a problem.

Options:
${DATABASE}
      --max-wait <d>         how long a queued job may wait before it is a problem
                             (default 5m; a whole number and a unit: 30s, 5m, 1h)
${LOG}
  -h, --help                 this help
`,
} as const
