import { resolve } from 'node:path'
import type { Driver } from '../index.js'
import { CliFailure } from './usage.js'

/** The default database: a SQLite file in the working directory. */
export const DEFAULT_DATABASE = './jobtable.db'

/** Whether a --database value names PostgreSQL rather than a SQLite file. */
export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//i.test(database)
}

/**
 * Opens the driver a --database value names: a postgres:// URL through
 * `jobtable/postgres`, anything else as a SQLite file path through
 * `jobtable/sqlite`. Each is imported only when named, so a PostgreSQL
 * user never loads better-sqlite3 and a SQLite user never loads `pg`:
 * both are optional peer dependencies. Opening applies migrations.
 */
export async function openDriver(database: string): Promise<Driver> {
  if (!isPostgresUrl(database)) {
    const { sqlite } = await importDriver(() => import('../sqlite/index.js'), 'better-sqlite3', 'SQLite')
    try {
      return sqlite({ path: resolve(database) })
    } catch (err) {
      // better-sqlite3 loads its native addon at the first open.
      if (err instanceof Error && /Could not locate the bindings file|better_sqlite3\.node/.test(err.message)) {
        throw new CliFailure(`SQLite support could not be loaded: the native addon of better-sqlite3 is missing or was built for another Node.js; reinstall it (${INSTALL['better-sqlite3']})`)
      }
      throw err
    }
  }
  const mod = await importDriver(() => import('../postgres/index.js'), 'pg', 'PostgreSQL')
  // `?schema=name` picks the PostgreSQL schema (default jobtable); pg itself never sees it.
  let connectionString = database
  let schema: string | undefined
  try {
    const url = new URL(database)
    schema = url.searchParams.get('schema') ?? undefined
    url.searchParams.delete('schema')
    connectionString = url.toString()
  } catch {
    // Not a WHATWG URL (a socket path, say): hand it to pg as it is.
  }
  return await mod.postgres(schema === undefined ? { connectionString } : { connectionString, schema })
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
