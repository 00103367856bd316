import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { decide, type SchemaState } from '../schema-window.js'
import { SchemaBehindError, SchemaVersionError } from '../errors.js'
import { checkSqlitePath, isPostgresUrl, pgClientFor, pgFailure } from './database.js'
import { CliFailure, UsageError } from './usage.js'

/** The schema's name a postgres:// URL names (`?schema=`, default jobtable), checked as the driver checks it. */
export function schemaOf(database: string): string {
  let schema = 'jobtable'
  try {
    schema = new URL(database).searchParams.get('schema') ?? 'jobtable'
  } catch {
    // A URL pg reads but WHATWG does not: the default schema.
  }
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema)) throw new UsageError('?schema= must be an identifier of letters, digits and underscores, at most 63 long')
  return schema
}

/** A migration number flag: an integer from 0 to the newest version. */
function versionFlag(name: string, value: string | undefined, fallback: number, newest: number): number {
  if (value === undefined) return fallback
  const n = /^\d+$/.test(value) ? Number(value) : NaN
  if (!(n >= 0 && n <= newest)) throw new UsageError(`--${name} must be a schema version from 0 to ${newest}`)
  return n
}

/**
 * `jobtable migrate --sql`: the SQL of migrations `--from` + 1 to `--to`
 * for the backend `database` names (a postgres:// URL: PostgreSQL, for
 * its schema; anything else: SQLite), printed in order, or written one
 * file per version into `--out`. Nothing connects to a database.
 */
export async function printMigrationSql(
  database: string,
  flags: { from?: string | undefined; to?: string | undefined; out?: string | undefined },
  stdout: NodeJS.WritableStream,
): Promise<void> {
  const postgres = isPostgresUrl(database)
  // The migrations modules hold SQL text only; they load neither database client.
  const { SCHEMA_VERSION, scripts } = postgres
    ? await import('../postgres/migrations.js').then((m) => ({ SCHEMA_VERSION: m.SCHEMA_VERSION, scripts: (from: number, to: number) => m.migrationScripts(`"${schemaOf(database)}"`, from, to) }))
    : await import('../sqlite/migrations.js').then((m) => ({ SCHEMA_VERSION: m.SCHEMA_VERSION, scripts: m.migrationScripts }))
  const from = versionFlag('from', flags.from, 0, SCHEMA_VERSION)
  const to = versionFlag('to', flags.to, SCHEMA_VERSION, SCHEMA_VERSION)
  if (from > to) throw new UsageError('--from must not be after --to')
  const list = scripts(from, to)
  if (flags.out === undefined) {
    for (const s of list) stdout.write(`${s.sql}\n`)
    return
  }
  mkdirSync(flags.out, { recursive: true })
  for (const s of list) {
    const file = join(flags.out, `${String(s.version).padStart(4, '0')}_jobtable_${postgres ? 'postgres' : 'sqlite'}.sql`)
    writeFileSync(file, s.sql)
    stdout.write(`${file}\n`)
  }
}

/** What `jobtable migrate --check` finds. */
export interface SchemaCheck {
  /** The database's schema version (0: no jobtable tables). */
  readonly version: number
  /** This jobtable's schema version. */
  readonly expected: number
  /** The oldest jobtable schema version that runs on the database's schema. */
  readonly compatibleFrom: number
  /** `current`, `behind` (migrations to apply), `ahead` (a newer release migrated it; `runs` says whether this one still can). */
  readonly state: 'current' | 'behind' | 'ahead'
  /** Whether this jobtable runs on the schema as it is. */
  readonly runs: boolean
  /** Tables, columns, indexes, functions or triggers not as the migrations made them. */
  readonly drift: string[]
  /** What to do, in words; empty when nothing. */
  readonly advice: string
}

/**
 * Reads the database's schema without changing it (a missing database is
 * refused, as for every read-only command): its version against this
 * jobtable's, and its drift.
 */
export async function checkSchema(database: string): Promise<SchemaCheck> {
  let state: SchemaState | undefined
  let drift: string[]
  let expected: number
  if (isPostgresUrl(database)) {
    const schema = schemaOf(database)
    const m = await import('../postgres/migrations.js')
    expected = m.SCHEMA_VERSION
    const client = await pgClientFor(database, 'check')
    try {
      state = await m.readSchema(client, `"${schema}"`)
      drift = await m.schemaDrift(client, `"${schema}"`, schema)
    } catch (err) {
      throw pgFailure('check', err)
    } finally {
      await client.end().catch(() => undefined)
    }
  } else {
    const { default: Database } = await import('better-sqlite3')
    const m = await import('../sqlite/migrations.js')
    expected = m.SCHEMA_VERSION
    // Read only, and refused when missing (never created), as for every read-only command.
    const db = new Database(checkSqlitePath(database, 'existing'), { readonly: true, fileMustExist: true })
    try {
      state = m.readSchema(db)
      drift = m.schemaDrift(db)
    } finally {
      db.close()
    }
  }
  const version = state?.version ?? 0
  const compatibleFrom = state?.compatibleFrom ?? 0
  let runs = true
  let advice = ''
  try {
    decide(state, expected, 'verify')
  } catch (err) {
    runs = false
    if (err instanceof SchemaBehindError) advice = `apply migrations ${version + 1} to ${expected} (jobtable migrate, or jobtable migrate --sql --from ${version})`
    else if (err instanceof SchemaVersionError) advice = `a newer jobtable migrated this database past what this one runs on: deploy a release of schema version ${compatibleFrom} or newer`
    else throw err
  }
  if (runs && version > expected) advice = `a newer jobtable (schema ${version}) migrated this database; this one still runs on it (its window starts at ${compatibleFrom})`
  if (drift.length > 0) advice = [advice, `the schema differs from what migration ${version} leaves: ${drift.join(', ')}`].filter((a) => a !== '').join('; ')
  if (state === undefined) throw new CliFailure('no jobtable tables in this database (create them with jobtable migrate)')
  return { version, expected, compatibleFrom, state: version === expected ? 'current' : version < expected ? 'behind' : 'ahead', runs, drift, advice }
}
