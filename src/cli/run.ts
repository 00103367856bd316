import { describeError } from '../error-name.js'
import { JobtableError } from '../index.js'
import { jobs, kinds, migrate } from './jobs.js'
import { pruneCommand } from './prune.js'
import type { CliContext } from './runtime.js'
import { serve } from './serve.js'
import { CliFailure, EXIT, HELP, UsageError } from './usage.js'

/**
 * Runs the `jobtable` command with `argv` (without node and the script)
 * and resolves to its exit code. Errors are printed to stderr as one line
 * naming what failed; a stack is never printed, since an error from a
 * database or a user's module can quote a secret.
 */
export async function run(argv: string[], io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream; env: NodeJS.ProcessEnv }): Promise<number> {
  const [command, ...args] = argv
  const ctx: CliContext = { args, stdout: io.stdout, env: io.env }
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
    if (err instanceof CliFailure) io.stderr.write(`jobtable: ${err.message}\n`)
    // jobtable's own messages never quote payloads, results or database values.
    else if (err instanceof JobtableError) io.stderr.write(`jobtable: ${err.message.replace(/^jobtable: /, '')}\n`)
    else io.stderr.write(`jobtable: failed (${describeError(err)})\n`)
    return EXIT.failure
  }
}
