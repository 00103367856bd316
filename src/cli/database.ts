import { existsSync, statSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { DatabaseError, type Driver } from '../index.js'
import { shellWord } from './database-errors.js'
import { CliFailure, UsageError } from './usage.js'

/** The default database: a SQLite file in the working directory. */
export const DEFAULT_DATABASE = './jobtable.db'

/** Whether a --database value names PostgreSQL rather than a SQLite file. */
export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//i.test(database)
}

/**
 * How a command uses the database: `create` may make it (a SQLite file,
 * a PostgreSQL schema) and its tables; `existing` needs it made already,
 * and fails saying how to make it rather than leave an empty database
 * behind a typo.
 */
export type DatabaseAccess = 'create' | 'existing'

/**
 * Opens the driver a --database value names: a postgres:// URL through
 * `jobtable/postgres`, anything else as a SQLite file path through
 * `jobtable/sqlite`. Each is imported only when named, so a PostgreSQL
 * user never loads better-sqlite3 and a SQLite user never loads `pg`:
 * both are optional peer dependencies. Opening applies migrations (on
 * PostgreSQL at the first statement). With `existing`, a SQLite file or a
 * PostgreSQL schema that is not there is refused before anything is made.
 */
export async function openDriver(database: string, access: DatabaseAccess): Promise<Driver> {
  if (!isPostgresUrl(database)) return openSqlite(database, access)
  const mod = await importDriver(() => import('../postgres/index.js'), 'pg', 'PostgreSQL')
  // `?schema=name` picks the PostgreSQL schema (default jobtable); pg itself never sees it.
  // `?pooler=transaction` says a transaction-mode pooler (PgBouncer) is in between (the driver's `pooler` option).
  let connectionString = database
  let schema: string | undefined
  let pooler: string | undefined
  try {
    const url = new URL(database)
    schema = url.searchParams.get('schema') ?? undefined
    pooler = url.searchParams.get('pooler') ?? undefined
    url.searchParams.delete('schema')
    url.searchParams.delete('pooler')
    connectionString = url.toString()
  } catch {
    // Not a WHATWG URL (a socket path, say): hand it to pg as it is.
  }
  if (pooler !== undefined && pooler !== 'transaction' && pooler !== 'none') throw new UsageError('?pooler= must be transaction or none')
  // Made first: it checks the schema's name before anything connects.
  const driver = mod.postgres({ connectionString, ...(schema === undefined ? {} : { schema }), ...(pooler === undefined ? {} : { pooler: pooler as 'transaction' | 'none' }) })
  if (access === 'existing') {
    try {
      if (!(await postgresTablesExist(connectionString, schema ?? 'jobtable'))) {
        throw new CliFailure(`no jobtable tables in the schema ${JSON.stringify(schema ?? 'jobtable')} of this database (create them with jobtable migrate -d <the same URL>, or fix ?schema= in the URL)`)
      }
    } catch (err) {
      await driver.close().catch(() => undefined)
      throw err
    }
  }
  return driver
}

/**
 * The SQLite file: its folder must exist (better-sqlite3 would throw a
 * bare TypeError), and for `existing` the file too (SQLite would create
 * an empty one). An error SQLite raises while opening and migrating is
 * turned into a DatabaseError naming its code, as the driver does for
 * its statements.
 */
async function openSqlite(database: string, access: DatabaseAccess): Promise<Driver> {
  const path = checkSqlitePath(database, access)
  const { sqlite } = await importDriver(() => import('../sqlite/index.js'), 'better-sqlite3', 'SQLite')
  try {
    return sqlite({ path })
  } catch (err) {
    // better-sqlite3 loads its native addon at the first open.
    if (err instanceof Error && /Could not locate the bindings file|better_sqlite3\.node/.test(err.message)) {
      throw new CliFailure(`SQLite support could not be loaded: the native addon of better-sqlite3 is missing or was built for another Node.js; reinstall it (${INSTALL['better-sqlite3']})`)
    }
    // Only jobtable's and better-sqlite3's code ran here: a SQLITE_ code is SQLite's own.
    const code = (err as { code?: unknown } | null)?.code
    if (typeof code === 'string' && /^SQLITE_[A-Z_]{1,60}$/.test(code)) throw new DatabaseError('open', code, /^SQLITE_(BUSY|LOCKED)/.test(code))
    throw err
  }
}

/** The SQLite file's absolute path, once its folder (and for `existing`, the file) is there; refused in words otherwise. */
export function checkSqlitePath(database: string, access: DatabaseAccess): string {
  const path = resolve(database)
  const folder = dirname(path)
  if (!isDirectory(folder)) {
    const given = dirname(database)
    throw new CliFailure(
      existsSync(folder)
        ? `cannot make the database ${database}: ${given} is not a folder`
        : `cannot open the database ${database}: the folder ${given} does not exist (create it with mkdir -p ${shellWord(given)}, or give --database a path in an existing folder)`,
    )
  }
  if (access === 'existing' && !existsSync(path)) {
    throw new CliFailure(`no database at ${database} (create it with jobtable migrate -d ${shellWord(database)})`)
  }
  return path
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory()
  } catch {
    return false
  }
}

/**
 * Whether jobtable's tables are in `schema`, read on a connection of its
 * own, which creates nothing (the driver migrates at its first
 * statement). A failure to connect is a DatabaseError naming its
 * SQLSTATE or socket code, never pg's message.
 */
async function postgresTablesExist(connectionString: string, schema: string): Promise<boolean> {
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 5_000 })
  client.on('error', () => undefined)
  try {
    await client.connect()
    const { rows } = await client.query<{ present: boolean }>(`SELECT to_regclass(format('%I.jobs', $1::text)) IS NOT NULL AS present`, [schema])
    return rows[0]?.present === true
  } catch (err) {
    throw pgFailure('open', err)
  } finally {
    await client.end().catch(() => undefined)
  }
}

/**
 * A pg client on the database a postgres:// URL names (its `?schema=`
 * taken out: pg does not know it), connected, for the commands that read
 * the tables directly. A failure to connect is a DatabaseError naming its
 * code (see pgFailure).
 */
export async function pgClientFor(database: string, operation: string): Promise<import('pg').Client> {
  const { default: pg } = await import('pg')
  const url = new URL(database)
  url.searchParams.delete('schema')
  url.searchParams.delete('pooler')
  const client = new pg.Client({ connectionString: url.toString(), connectionTimeoutMillis: 5_000 })
  client.on('error', () => undefined)
  try {
    await client.connect()
  } catch (err) {
    await client.end().catch(() => undefined)
    throw pgFailure(operation, err)
  }
  return client
}

/** A pg error as a DatabaseError naming its SQLSTATE or socket code, never pg's message (it can quote values). */
export function pgFailure(operation: string, err: unknown): DatabaseError {
  if (err instanceof DatabaseError) return err
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code === 'string' && (/^[0-9A-Z]{5}$/.test(code) || /^E[A-Z0-9_]{2,20}$/.test(code))) return new DatabaseError(operation, code, false)
  if (err instanceof Error && /timeout/i.test(err.message)) return new DatabaseError(operation, 'timeout', true)
  return new DatabaseError(operation, 'unexpected', false)
}

/** How to install each optional peer dependency the drivers load. */
const INSTALL = { 'better-sqlite3': 'npm install better-sqlite3@12', pg: 'npm install pg@8' } as const

/**
 * Imports a driver's entry point, turning a missing peer dependency into a
 * CliFailure that names the package to install. Any other failure to load
 * is rethrown as it is.
 */
async function importDriver<T>(load: () => Promise<T>, pkg: keyof typeof INSTALL, what: string): Promise<T> {
  try {
    return await load()
  } catch (err) {
    if (isMissingPackage(err, pkg)) throw new CliFailure(`${what} support needs the ${pkg} package, which is not installed: ${INSTALL[pkg]}`)
    throw err
  }
}

/** Whether err is Node's failure to find the package `pkg` itself (not a module inside it, nor another package). */
export function isMissingPackage(err: unknown, pkg: string): boolean {
  if (!(err instanceof Error)) return false
  const code = (err as { code?: unknown }).code
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false
  return err.message.includes(`'${pkg}'`)
}

/**
 * A database value safe to log: for a URL only its host, port, database
 * and schema. Credentials can sit in the user part and in query
 * parameters (password, sslpassword, sslkey), so neither is kept.
 */
export function describeDatabase(database: string): string {
  if (!isPostgresUrl(database)) return resolve(database)
  try {
    const url = new URL(database)
    const schema = url.searchParams.get('schema')
    return `${url.protocol}//${url.host}${url.pathname}${schema === null ? '' : `?schema=${encodeURIComponent(schema)}`}`
  } catch {
    return 'postgres://(unparsable URL)'
  }
}
