import { checkSchema, printMigrationSql } from './schema.js'
import { JOB_STATUSES, JobNotFoundError, type JobStatus, type Runner } from '../index.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { nearest } from './suggest.js'
import { CliFailure, EXIT, HELP, intFlag, parse, UsageError } from './usage.js'

/** `jobtable jobs list|show <id>`: jobs as JSON on stdout, for operators. */
export async function jobs(ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(
    ctx.args,
    {
      ...COMMON_FLAGS,
      scope: { type: 'string' },
      status: { type: 'string' },
      kind: { type: 'string' },
      limit: { type: 'string' },
      cursor: { type: 'string' },
    },
    true,
  )
  if (values.help) {
    ctx.stdout.write(HELP.jobs)
    return EXIT.ok
  }
  const [action, id, ...extra] = positionals
  if (action !== 'list' && action !== 'show') throw new UsageError('expected jobs list or jobs show <id>')
  ctx.command = `jobs ${action}`
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)
  if (action === 'show' && id === undefined) throw new UsageError('jobs show needs a job id')
  if (action === 'list' && id !== undefined) throw new UsageError('jobs list takes no positional argument')
  if (values.status !== undefined && !(JOB_STATUSES as readonly string[]).includes(values.status)) {
    throw new UsageError('--status must be one of ' + JOB_STATUSES.join(', '))
  }
  const limit = intFlag('limit', values.limit, 50, 1, 1000)
  const logger = loggerFor(values['log-level'] ?? 'warn')
  // Reads only: a database that is not there is a mistaken path, never made.
  const runner = await openRunner(databaseOf(values.database, ctx.env), 'existing', 1, logger)
  const pretty = (value: unknown) => JSON.stringify(value, null, (ctx.stdout as NodeJS.WriteStream).isTTY ? 2 : undefined) + '\n'
  try {
    if (action === 'show') {
      try {
        ctx.stdout.write(pretty(await runner.get(id!, values.scope === undefined ? {} : { scope: values.scope })))
      } catch (err) {
        if (err instanceof JobNotFoundError) throw new CliFailure(`job not found`)
        throw err
      }
    } else {
      const page = await runner.list({
        ...(values.scope === undefined ? {} : { scope: values.scope }),
        ...(values.status === undefined ? {} : { status: values.status as JobStatus }),
        ...(values.kind === undefined ? {} : { kind: values.kind }),
        ...(values.cursor === undefined ? {} : { cursor: values.cursor }),
        limit,
      })
      ctx.stdout.write(pretty(page))
    }
    return EXIT.ok
  } finally {
    await runner.close()
  }
}

/** `jobtable migrate`: opens the database, which applies every pending migration, and closes it; it may create the database: that is what it is for. */
export async function migrate(ctx: CliContext): Promise<number> {
  const { values } = parse(ctx.args, { ...COMMON_FLAGS, sql: { type: 'boolean' }, check: { type: 'boolean' }, from: { type: 'string' }, to: { type: 'string' }, out: { type: 'string' } })
  if (values.help) {
    ctx.stdout.write(HELP.migrate)
    return EXIT.ok
  }
  if (values.sql && values.check) throw new UsageError('give --sql or --check, not both')
  if (!values.sql && (values.from ?? values.to ?? values.out) !== undefined) throw new UsageError('--from, --to and --out go with --sql')
  const database = databaseOf(values.database, ctx.env)
  if (values.sql) {
    await printMigrationSql(database, { from: values.from, to: values.to, out: values.out }, ctx.stdout)
    return EXIT.ok
  }
  if (values.check) {
    ctx.command = 'migrate --check'
    const check = await checkSchema(database)
    ctx.stdout.write(`${JSON.stringify(check)}\n`)
    return check.state === 'current' && check.drift.length === 0 ? EXIT.ok : EXIT.failure
  }
  const logger = loggerFor(values['log-level'])
  const runner = await openRunner(database, 'create', 1, logger)
  try {
    // SQLite migrated when it opened; PostgreSQL migrates on first use, so ask it now.
    await runner.driver.migrate?.()
  } finally {
    await runner.close()
  }
  logger.info('the database schema is up to date')
  return EXIT.ok
}

/**
 * `jobtable kinds pause <kind>`, `kinds resume <kind>` and `kinds paused`:
 * pauses and resumes a kind for every process on the database (see
 * Runner.pause), and lists the paused kinds, as JSON on stdout. A kind
 * the database has never seen is refused unless --force: a pause that
 * succeeds on a typo leaves the real kind running.
 */
export async function kinds(ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(ctx.args, { ...COMMON_FLAGS, force: { type: 'boolean' } }, true)
  if (values.help) {
    ctx.stdout.write(HELP.kinds)
    return EXIT.ok
  }
  const [action, kind, ...extra] = positionals
  if (action !== 'pause' && action !== 'resume' && action !== 'paused') throw new UsageError('expected kinds pause <kind>, kinds resume <kind> or kinds paused')
  ctx.command = `kinds ${action}`
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)
  if (action === 'paused' && kind !== undefined) throw new UsageError('kinds paused takes no positional argument')
  if (action === 'paused' && values.force) throw new UsageError('--force is for kinds pause and kinds resume')
  if (action !== 'paused' && (kind === undefined || kind.length === 0 || kind.length > 256)) throw new UsageError(`kinds ${action} needs a kind name of 1 to 256 characters`)
  // A pause is kept in the database's tables: a database that is not there yet has no workers to pause.
  const runner = await openRunner(databaseOf(values.database, ctx.env), 'existing', 1, loggerFor(values['log-level'] ?? 'warn'))
  try {
    if (action === 'paused') ctx.stdout.write(JSON.stringify({ paused: await runner.paused() }) + '\n')
    else {
      if (!values.force) await refuseUnknownKind(runner, action, kind!)
      const changed = action === 'pause' ? await runner.pause(kind!) : await runner.resume(kind!)
      ctx.stdout.write(JSON.stringify({ kind, paused: action === 'pause', changed }) + '\n')
    }
    return EXIT.ok
  } finally {
    await runner.close()
  }
}

/** How many known kinds a refusal lists. */
const KINDS_LISTED = 20

/**
 * Refuses a kind the database has never seen: no job of it (in any
 * status, pruned ones aside), no pause, and no live runner that handles
 * it. counts() may read every job: a cost paid only here, by an
 * operator's command, and only when the kind is neither paused nor
 * registered.
 */
async function refuseUnknownKind(runner: Runner, action: 'pause' | 'resume', kind: string): Promise<void> {
  const paused = (await runner.paused()).map((p) => p.kind)
  const registered = await runner.driver.runnerKinds()
  if (paused.includes(kind) || registered.includes(kind)) return
  const known = [...new Set([...(await runner.counts()).map((c) => c.kind), ...paused, ...registered])].sort()
  if (known.includes(kind)) return
  const guess = nearest(kind, known)
  const listed = known.length === 0 ? 'no kind has had a job here yet' : `known kinds: ${known.slice(0, KINDS_LISTED).join(', ')}${known.length > KINDS_LISTED ? `, and ${known.length - KINDS_LISTED} more` : ''}`
  throw new CliFailure(
    `kinds ${action}: the database has never seen the kind ${JSON.stringify(kind)} (no job of it, it is not paused, and no live runner handles it)` +
      (guess === undefined ? '' : `; did you mean ${JSON.stringify(guess)}?`) +
      ` (${listed})\nTo ${action} it anyway, such as a kind whose first job is still to come, add --force.`,
  )
}
