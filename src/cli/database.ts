import { resolve } from 'node:path'
import type { Driver } from '../index.js'
import { sqlite } from '../sqlite/index.js'
import { CliFailure } from './usage.js'

/** The default database: a SQLite file in the working directory. */
export const DEFAULT_DATABASE = './jobtable.db'

/** Whether a --database value names PostgreSQL rather than a SQLite file. */
export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//i.test(database)
}

/**
 * Opens the driver a --database value names: a postgres:// URL through
 * `jobtable/postgres`, imported only then so a SQLite user never loads
 * `pg`; anything else as a SQLite file path. Opening applies migrations.
 */
export async function openDriver(database: string): Promise<Driver> {
  if (!isPostgresUrl(database)) return sqlite({ path: resolve(database) })
  // A variable specifier: the PostgreSQL entry point is optional at build time.
  const specifier = '../postgres/index.js'
  let mod: { postgres?: (options: { connectionString: string; schema?: string }) => Driver | Promise<Driver> }
  try {
    mod = (await import(specifier)) as typeof mod
  } catch {
    throw new CliFailure('PostgreSQL support could not be loaded: install the pg package (npm install pg)')
  }
  if (typeof mod.postgres !== 'function') throw new CliFailure('this jobtable has no PostgreSQL driver')
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
