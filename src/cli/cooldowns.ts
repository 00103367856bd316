import type { Cooldown, RateLimitState } from '../index.js'
import { isCooldownKey, MAX_COOLDOWN_KEY } from '../kind.js'
import { loadKinds, registerFailure } from './kinds.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { CliFailure, EXIT, HELP, parse, UsageError } from './usage.js'

/** How many keys in force a refused clear lists. */
const KEYS_LISTED = 20

/**
 * `jobtable cooldowns [list]` and `jobtable cooldowns clear <key>`: the
 * cooldowns in force for every process on the database (see
 * Runner.cooldowns), and an operator's end to one (Runner.clearCooldown),
 * as JSON on stdout with times as ISO dates. A key with no cooldown
 * recorded exits 1, listing the keys in force: a clear that succeeds on a
 * typo would leave the real key paused.
 */
export async function cooldownsCommand(ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(ctx.args, COMMON_FLAGS, true)
  if (values.help) {
    ctx.stdout.write(HELP.cooldowns)
    return EXIT.ok
  }
  const [action = 'list', key, ...extra] = positionals
  if (action !== 'list' && action !== 'clear') throw new UsageError('expected cooldowns, cooldowns list or cooldowns clear <key>')
  ctx.command = `cooldowns ${action}`
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)
  if (action === 'list' && key !== undefined) throw new UsageError('cooldowns list takes no positional argument')
  if (action === 'clear' && (key === undefined || !isCooldownKey(key))) {
    throw new UsageError(`cooldowns clear needs a key of 1 to ${MAX_COOLDOWN_KEY} characters (jobtable cooldowns lists them)`)
  }
  // A cooldown is a row in the database's tables: a database that is not there yet has none.
  const runner = await openRunner(databaseOf(values.database, ctx.env), 'existing', 1, loggerFor(values['log-level'] ?? 'warn'))
  try {
    if (action === 'list') {
      ctx.stdout.write(render(ctx, { cooldowns: (await runner.cooldowns()).map(cooldownOut) }))
      return EXIT.ok
    }
    if (!(await runner.clearCooldown(key!))) {
      const inForce = (await runner.cooldowns()).map((c) => c.key)
      const listed =
        inForce.length === 0
          ? 'no cooldown is in force'
          : `in force: ${inForce.slice(0, KEYS_LISTED).map((k) => JSON.stringify(k)).join(', ')}${inForce.length > KEYS_LISTED ? `, and ${inForce.length - KEYS_LISTED} more` : ''}`
      throw new CliFailure(`cooldowns clear: no cooldown of the key ${JSON.stringify(key)} is recorded; nothing was changed (${listed})`)
    }
    ctx.stdout.write(render(ctx, { key, cleared: true }))
    return EXIT.ok
  } finally {
    await runner.close()
  }
}

/**
 * `jobtable rate-limits --kinds <module>`: each rate limit the kinds
 * module declares, with the claims in its window now and any cooldown in
 * force on it (see Runner.rateLimits), as JSON on stdout with times as
 * ISO dates. The rules live in the code, the claims they count in the
 * database: the module says which limits there are. Nothing is started.
 */
export async function rateLimitsCommand(ctx: CliContext): Promise<number> {
  const { values } = parse(ctx.args, { ...COMMON_FLAGS, kinds: { type: 'string', short: 'k' } })
  if (values.help) {
    ctx.stdout.write(HELP['rate-limits'])
    return EXIT.ok
  }
  if (values.kinds === undefined) throw new UsageError('--kinds is required: rate limits are declared in the kinds module (the database keeps only the claims they count)')
  const database = databaseOf(values.database, ctx.env)
  const logger = loggerFor(values['log-level'] ?? 'warn')
  const kinds = await loadKinds(values.kinds)
  // Reads only: a database that is not there is a mistaken path, never made.
  const runner = await openRunner(database, 'existing', 1, logger)
  try {
    try {
      await kinds.registerKinds(runner)
    } catch (err) {
      throw registerFailure(values.kinds, err)
    }
    ctx.stdout.write(render(ctx, { rateLimits: (await runner.rateLimits()).map(rateLimitOut) }))
    return EXIT.ok
  } finally {
    await runner.close()
  }
}

/** JSON on stdout: indented on a terminal, one line otherwise. */
function render(ctx: CliContext, value: unknown): string {
  return JSON.stringify(value, null, (ctx.stdout as NodeJS.WriteStream).isTTY ? 2 : undefined) + '\n'
}

/** Epoch milliseconds as an ISO date, for people reading a terminal. */
function iso(ms: number): string {
  return new Date(ms).toISOString()
}

function cooldownOut(cooldown: Cooldown): { key: string; until: string } {
  return { key: cooldown.key, until: iso(cooldown.until) }
}

function rateLimitOut(state: RateLimitState) {
  return {
    key: state.key,
    kinds: state.kinds,
    limit: state.limit,
    periodMs: state.periodMs,
    perScope: state.perScope,
    used: state.used,
    resetAt: state.resetAt === null ? null : iso(state.resetAt),
    ...(state.scopes === undefined ? {} : { scopes: state.scopes.map((s) => ({ scope: s.scope, used: s.used, resetAt: s.resetAt === null ? null : iso(s.resetAt) })) }),
    cooldownUntil: state.cooldownUntil === null ? null : iso(state.cooldownUntil),
  }
}
