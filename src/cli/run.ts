import { parseArgs } from 'node:util'
import { describeError } from '../error-name.js'
import { DatabaseError, JobtableError } from '../index.js'
import { databaseErrorWords } from './database-errors.js'
import { DEFAULT_DATABASE } from './database.js'
import { jobs, kinds, migrate } from './jobs.js'
import { pruneCommand } from './prune.js'
import type { CliContext } from './runtime.js'
import { cooldownsCommand, rateLimitsCommand } from './cooldowns.js'
import { doctorCommand } from './doctor.js'
import { schedulesCommand } from './schedules.js'
import { serve } from './serve.js'
import { CliFailure, EXIT, HELP, UsageError } from './usage.js'
import { packageVersion } from './version.js'

/**
 * Runs the `jobtable` command with `argv` (without node and the script)
 * and resolves to its exit code. Errors are printed to stderr as one line
 * naming what failed; a stack is never printed, since an error from a
 * database or a user's module can quote a secret.
 */
export async function run(argv: string[], io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream; env: NodeJS.ProcessEnv }): Promise<number> {
  const [command, ...args] = argv
  const ctx: CliContext = { args, stdout: io.stdout, env: io.env, command: command ?? '' }
  try {
    switch (command) {
      case 'serve':
        return await serve(ctx, 'serve')
      case 'worker':
        return await serve(ctx, 'worker')
      case 'migrate':
        return await migrate(ctx)
      case 'jobs':
        return await jobs(ctx)
      case 'kinds':
        return await kinds(ctx)
      case 'prune':
        return await pruneCommand(ctx)
      case 'schedules':
        return await schedulesCommand(ctx)
      case 'doctor':
        return await doctorCommand(ctx)
      case 'cooldowns':
        return await cooldownsCommand(ctx)
      case 'rate-limits':
        return await rateLimitsCommand(ctx)
      case '-v':
      case '--version':
        io.stdout.write(`${packageVersion()}\n`)
        return EXIT.ok
      case undefined:
      case '-h':
      case '--help':
      case 'help':
        // Without a command it is a usage error: the help goes to stderr.
        ;(command === undefined ? io.stderr : io.stdout).write(HELP.main)
        return command === undefined ? EXIT.usage : EXIT.ok
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}`)
    }
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`jobtable: ${err.message}\nRun jobtable ${command && command in HELP ? command + ' ' : ''}--help for usage.\n`)
      return EXIT.usage
    }
    io.stderr.write(`jobtable: ${failureLine(err, ctx)}\n`)
    return EXIT.failure
  }
}

/**
 * The line a runtime failure prints, after `jobtable: `. A database error
 * is said in words for the command that ran, its code beside them
 * (`jobs list: database "nope" does not exist on host:5432 (3D000)`),
 * whichever operation inside the command met it. The words name the
 * database only as the logs do, never its credentials.
 */
function failureLine(err: unknown, ctx: CliContext): string {
  if (err instanceof CliFailure) return err.message
  if (err instanceof DatabaseError) {
    const database = databaseFlag(ctx)
    return `${ctx.command}: ${databaseErrorWords(err.dbCode, database)} (${err.dbCode})`
  }
  // jobtable's own messages never quote payloads, results or database values.
  if (err instanceof JobtableError) return err.message.replace(/^jobtable: /, '')
  return `${ctx.command === '' ? '' : `${ctx.command}: `}failed (${describeError(err)})`
}

/**
 * The database the command was given, as databaseOf read it: its -d or
 * --database flag, else JOBTABLE_DATABASE, else the default. Read again
 * from the arguments, leniently, since the command's own parse is gone
 * with its frame; it reached the database, so its flags parsed.
 */
function databaseFlag(ctx: CliContext): string {
  let flag: string | undefined
  try {
    const { values } = parseArgs({ args: ctx.args, options: { database: { type: 'string', short: 'd' } }, strict: false, allowPositionals: true })
    flag = typeof values.database === 'string' ? values.database : undefined
  } catch {
    flag = undefined
  }
  return flag ?? (ctx.env.JOBTABLE_DATABASE || undefined) ?? DEFAULT_DATABASE
}
