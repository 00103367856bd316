import type { Logger as Pino } from 'pino'
import { Runner, type RunnerOptions } from '../index.js'
import { describeDatabase, DEFAULT_DATABASE, isPostgresUrl, openDriver, type DatabaseAccess } from './database.js'
import { cliLogger, isLogLevel } from './logger.js'
import { UsageError } from './usage.js'

/** What every command is given: its arguments, its output, and its environment. */
export interface CliContext {
  readonly args: string[]
  readonly stdout: NodeJS.WritableStream
  readonly env: NodeJS.ProcessEnv
  /**
   * What ran, as an error line names it (`jobs list`): the command, and
   * its action once the command has read it.
   */
  command: string
}

/** The flags every command that opens the database shares. */
export const COMMON_FLAGS = {
  database: { type: 'string', short: 'd' },
  'log-level': { type: 'string' },
} as const

/** The logger a --log-level value asks for; a bad level is a usage error. */
export function loggerFor(level: string | undefined): Pino {
  const chosen = level ?? 'info'
  if (!isLogLevel(chosen)) throw new UsageError('--log-level must be debug, info, warn or error')
  return cliLogger(chosen)
}

/** The --database value, falling back to JOBTABLE_DATABASE, then the default file. */
export function databaseOf(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const database = flag ?? env.JOBTABLE_DATABASE ?? DEFAULT_DATABASE
  if (database.trim() === '') throw new UsageError('--database must not be empty')
  // Another URL would be taken for a file path, and its text (a password in it too) printed as one: name only its scheme.
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(database)?.[1]
  if (scheme !== undefined && !isPostgresUrl(database)) throw new UsageError(`--database ${scheme}://… is not a database jobtable knows: give a SQLite file path or a postgres:// URL`)
  return database
}

/**
 * Opens a runner on the database (applying migrations), logging where,
 * never a password; `options` reach the Runner. `access` says whether
 * this command may create the database (see DatabaseAccess): every
 * command says so, and only those that set a database up or run workers
 * on it (migrate, serve, worker) say `create`.
 */
export async function openRunner(
  database: string,
  access: DatabaseAccess,
  workers: number,
  logger: Pino,
  options: Pick<RunnerOptions<never>, 'retention'> = {},
): Promise<Runner> {
  const driver = await openDriver(database, access)
  logger.debug({ database: describeDatabase(database), driver: driver.name }, 'database open')
  return new Runner({ driver, workers: Math.max(workers, 1), logger, ...options })
}
