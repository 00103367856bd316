import { TERMINAL_STATUSES, type TerminalStatus } from '../index.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { durationFlag, EXIT, HELP, parse, UsageError } from './usage.js'

/**
 * `jobtable prune --older-than <duration> [--status S]... [--kind K]...`:
 * deletes the terminal jobs that finished longer ago than the duration,
 * in the batches a runner's retention uses, and prints `{"deleted": n}`.
 * A job that is not terminal is never deleted.
 */
export async function pruneCommand(ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(
    ctx.args,
    {
      ...COMMON_FLAGS,
      'older-than': { type: 'string' },
      status: { type: 'string', multiple: true },
      kind: { type: 'string', multiple: true },
    },
    true,
  )
  if (values.help) {
    ctx.stdout.write(HELP.prune)
    return EXIT.ok
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`)
  const olderThan = values['older-than']
  if (olderThan === undefined) throw new UsageError('prune needs --older-than, such as --older-than 7d')
  const olderThanMs = durationFlag('older-than', olderThan)
  const statuses = values.status
  for (const s of statuses ?? []) {
    if (!(TERMINAL_STATUSES as readonly string[]).includes(s)) throw new UsageError(`--status must be ${TERMINAL_STATUSES.join(', ')} (a job in any other status is never pruned)`)
  }
  const kinds = values.kind
  for (const k of kinds ?? []) if (k.length === 0 || k.length > 256) throw new UsageError('--kind must be a kind name of 1 to 256 characters')
  // Deletes only: a database that is not there has nothing to prune, and is a mistaken path.
  const runner = await openRunner(databaseOf(values.database, ctx.env), 'existing', 1, loggerFor(values['log-level'] ?? 'warn'))
  try {
    const deleted = await runner.prune({
      olderThanMs,
      ...(statuses === undefined ? {} : { statuses: statuses as TerminalStatus[] }),
      ...(kinds === undefined ? {} : { kinds }),
    })
    ctx.stdout.write(JSON.stringify({ deleted }) + '\n')
    return EXIT.ok
  } finally {
    await runner.close()
  }
}
