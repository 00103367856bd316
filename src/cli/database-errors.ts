import { statSync } from 'node:fs'
import { resolve } from 'node:path'

/**
 * What a database error code means, in words an operator can act on, for
 * the database the command was given: `database "nope" does not exist on
 * db.internal:5432`. The caller prints the code beside them.
 *
 * Only the code is looked at, never the error's message (which can quote
 * values written), and of the --database value only what
 * describeDatabase would log: a file path, or a URL's host, port and
 * database name; never its user, password or query.
 */
export function databaseErrorWords(code: string, database: string): string {
  return isPostgresDatabase(database) ? postgresWords(code, database) : sqliteWords(code, database)
}

function isPostgresDatabase(database: string): boolean {
  return /^postgres(ql)?:\/\//i.test(database)
}

/** A SQLite error code: SQLITE_BUSY, or an extended one such as SQLITE_BUSY_SNAPSHOT, by its primary part. */
function sqliteWords(code: string, path: string): string {
  const primary = /^SQLITE_[A-Z]+/.exec(code)?.[0]
  switch (primary) {
    case 'SQLITE_CANTOPEN':
      return isFolder(path)
        ? `cannot open ${path}: it is a folder; give --database the path of a SQLite file`
        : `cannot open the SQLite file ${path}: check that it and its folder can be read and written by this user`
    case 'SQLITE_NOTADB':
      return `${path} is not a SQLite database (a file of another kind, or an encrypted one); check the --database path`
    case 'SQLITE_READONLY':
      return `${path} is read-only for this process: jobtable writes to the file and to its folder (the -wal and -shm files beside it); check their permissions and the file system`
    case 'SQLITE_BUSY':
    case 'SQLITE_LOCKED':
      return `${path} is locked by another connection (a long transaction, or a tool holding the file open); try again once it is done`
    case 'SQLITE_PERM':
    case 'SQLITE_AUTH':
      return `access to ${path} was denied; check its permissions`
    case 'SQLITE_CORRUPT':
      return `${path} is damaged; restore it from a backup`
    case 'SQLITE_FULL':
      return `the disk holding ${path} is full`
    case 'SQLITE_IOERR':
      return `reading or writing ${path} failed on the disk`
    case 'SQLITE_ERROR':
      return `SQLite refused a statement on ${path}: its tables may have been changed by something other than jobtable`
    default:
      return `database error on ${path}`
  }
}

/** A PostgreSQL SQLSTATE, a socket error (ECONNREFUSED), or one of the driver's own codes (timeout, connection_lost). */
function postgresWords(code: string, database: string): string {
  const { at, name } = target(database)
  const db = name === undefined ? 'the database named by the URL' : `database ${JSON.stringify(name)}`
  switch (code) {
    case '3D000':
      return `${db} does not exist on ${at}; create it${name === undefined ? '' : ` (createdb ${shellWord(name)})`}, or fix its name in the URL`
    case '28P01':
      return `password authentication failed at ${at}; check the user and password in the URL (or PGPASSWORD)`
    case '28000':
      return `the server at ${at} refused the login: the user does not exist, or pg_hba.conf does not let it connect`
    case '42501':
      return `permission denied on ${db}: the user in the URL lacks a privilege jobtable needs (to create its schema and tables when migrating, or to read and write them)`
    case '57P03':
      return `the server at ${at} is not accepting connections yet (starting up, shutting down or in recovery); try again shortly`
    case '57P01':
    case '57P02':
      return `the server at ${at} is shutting down`
    case '53300':
      return `the server at ${at} has too many connections; try again, or raise its max_connections`
    case '25006':
      return `the server at ${at} is read-only (a standby?); point the URL at the primary`
    case '3F000':
      return `the schema named in the URL does not exist in ${db}`
    case '40001':
    case '40P01':
    case '55P03':
      return `the database was busy with another transaction; try again`
    case 'ECONNREFUSED':
      return `cannot reach PostgreSQL at ${at}: the connection was refused (is the server running, and listening on that host and port?)`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot reach PostgreSQL at ${at}: its host name was not found`
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'timeout':
      return `cannot reach PostgreSQL at ${at}: no answer in time`
    case 'ECONNRESET':
    case 'EPIPE':
    case 'connection_lost':
      return `the connection to PostgreSQL at ${at} was lost`
    default:
      // Class 08: connection exceptions.
      if (code.startsWith('08')) return `the connection to PostgreSQL at ${at} failed`
      return `database error on ${db} at ${at}`
  }
}

/** Where a postgres:// URL points: `host:port` and the database's name, never its credentials or query. */
function target(database: string): { at: string; name: string | undefined } {
  try {
    const url = new URL(database)
    // pg takes a missing host and port from PGHOST and PGPORT, else localhost:5432.
    const host = url.hostname === '' ? 'the host of PGHOST (default localhost)' : url.hostname
    const port = url.port === '' ? '5432' : url.port
    let name: string | undefined
    try {
      name = decodeURIComponent(url.pathname.replace(/^\//, '')) || undefined
    } catch {
      name = undefined
    }
    return { at: `${host}:${port}`, name }
  } catch {
    return { at: 'the PostgreSQL server', name: undefined }
  }
}

function isFolder(path: string): boolean {
  try {
    return statSync(resolve(path)).isDirectory()
  } catch {
    return false
  }
}

/** A word as a POSIX shell reads it back: as it is when plain, else in single quotes. */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`
}
