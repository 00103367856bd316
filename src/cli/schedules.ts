import { loadKinds } from './kinds.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { EXIT, HELP, parse, UsageError } from './usage.js'

/**
 * `jobtable schedules --kinds <module>`: the schedules the kinds module
 * declares, with their last recorded and next ticks (see
 * Runner.schedules), as JSON on stdout. The runner is never started.
 */
export async function schedulesCommand(ctx: CliContext): Promise<number> {
  const { values } = parse(ctx.args, { ...COMMON_FLAGS, kinds: { type: 'string', short: 'k' } })
  if (values.help) {
    ctx.stdout.write(HELP.schedules)
    return EXIT.ok
  }
  if (values.kinds === undefined) throw new UsageError('--kinds is required: the schedules are declared in the kinds module (the database stores only their names and last ticks)')
  const database = databaseOf(values.database, ctx.env)
  const logger = loggerFor(values['log-level'] ?? 'warn')
  const kinds = await loadKinds(values.kinds)
  // Reads only: a database that is not there is a mistaken path, never made.
  const runner = await openRunner(database, 'existing', 1, logger)
  try {
    kinds.registerKinds(runner)
    const schedules = await runner.schedules()
    ctx.stdout.write(JSON.stringify({ schedules }, null, (ctx.stdout as NodeJS.WriteStream).isTTY ? 2 : undefined) + '\n')
    return EXIT.ok
  } finally {
    await runner.close()
  }
}
