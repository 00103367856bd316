import { TERMINAL_STATUSES, type TerminalStatus } from '../index.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { EXIT, HELP, parse, UsageError } from './usage.js'

/** Milliseconds per unit of a --older-than duration. */
const UNITS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const

/**
 * A duration such as `7d`, `36h`, `90m`, `30s` or `500ms`: a whole number
 * and one unit (ms, s, m, h, d, w), in milliseconds. Anything else, or a
 * duration too long to count in milliseconds exactly, is a usage error.
 */
export function parseDuration(flag: string, value: string): number {
  const m = /^(\d+)(ms|s|m|h|d|w)$/.exec(value)
  const ms = m ? Number(m[1]) * UNITS[m[2] as keyof typeof UNITS] : NaN
  if (!Number.isSafeInteger(ms)) throw new UsageError(`--${flag} must be a whole number and a unit, such as 7d, 36h, 90m, 30s or 500ms`)
  return ms
}

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
  const olderThanMs = parseDuration('older-than', olderThan)
  const statuses = values.status
  for (const s of statuses ?? []) {
    if (!(TERMINAL_STATUSES as readonly string[]).includes(s)) throw new UsageError(`--status must be ${TERMINAL_STATUSES.join(', ')} (a job in any other status is never pruned)`)
  }
  const kinds = values.kind
  for (const k of kinds ?? []) if (k.length === 0 || k.length > 256) throw new UsageError('--kind must be a kind name of 1 to 256 characters')
  const runner = await openRunner(databaseOf(values.database, ctx.env), 1, loggerFor(values['log-level'] ?? 'warn'))
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
