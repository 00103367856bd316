import { ConfigError, SchemaBehindError, SchemaVersionError } from './errors.js'

/**
 * Schema versions that old code can share: the rule both backends'
 * migrations follow, written once.
 *
 * Each migration says the oldest schema version whose code can still run
 * on the schema it leaves (`compatibleFrom`). A migration that only adds
 * (a nullable column, a table, an index) keeps the window of the one
 * before it; one that removes or changes what older code reads or writes
 * (the contract step of expand-then-contract, a release after the
 * expand) moves the window's start up. The database stores each applied
 * migration's `compatible_from`, so code knows the window of a schema
 * newer than itself without knowing its migrations.
 *
 * Code at schema version C runs on a database at version D when D is C,
 * when D is older (after migrating it, unless told not to), or when D is
 * newer and its window starts at or below C. Anything else is refused
 * before any statement of the job tables runs.
 *
 * jobtable releases built before the window (schema 12 and older) read
 * only the highest version in the migrations table and refuse anything
 * above their own. Versions from 13 on are therefore recorded in a table
 * of their own (`schema_versions`), and written to the old table too only
 * by a migration that moves the window past LEGACY_VERSION: those
 * releases keep running on every newer schema that is still compatible
 * with them, and refuse the first that is not, as they always did.
 */

/** The last version recorded only in the migrations table; code built before the window reads nothing else. */
export const LEGACY_VERSION = 12

/**
 * How a driver treats the schema at open: `auto` (the default) applies
 * missing migrations; `verify` applies none and refuses a schema that is
 * behind this code or outside its window (for teams whose own migration
 * tool applies `jobtable migrate --sql`); `off` reads nothing and trusts
 * the operator.
 */
export type MigrateMode = 'auto' | 'verify' | 'off'

export const MIGRATE_MODES: readonly MigrateMode[] = ['auto', 'verify', 'off']

/** A database's schema: its version and the oldest code version that may run on it. */
export interface SchemaState {
  readonly version: number
  readonly compatibleFrom: number
}

/** One migration's place in the window. */
export interface WindowedMigration {
  readonly version: number
  /** The oldest code version that runs on the schema this migration leaves; default: the window of the one before. */
  readonly compatibleFrom?: number
}

/** The window start each migration leaves, by version; migrations up to LEGACY_VERSION each start their own window. */
export function windowStarts(migrations: readonly WindowedMigration[]): Map<number, number> {
  const starts = new Map<number, number>()
  let start = 0
  for (const m of migrations) {
    start = m.version <= LEGACY_VERSION ? m.version : Math.max(start, m.compatibleFrom ?? start)
    if (start > m.version) throw new Error(`migration ${m.version}: compatibleFrom ${start} is after it`)
    starts.set(m.version, start)
  }
  return starts
}

/** Whether the migration `version` is recorded in the legacy table too: it is legacy itself, or it closes the window to legacy code. */
export function recordedInLegacy(version: number, compatibleFrom: number): boolean {
  return version <= LEGACY_VERSION || compatibleFrom > LEGACY_VERSION
}

/**
 * What code at schema version `code` does with a database in `state`
 * (undefined: no jobtable tables yet) under `mode`: `run` as it is,
 * `migrate` it first, or throws SchemaVersionError (outside the window)
 * or SchemaBehindError (behind, under `verify`).
 */
export function decide(state: SchemaState | undefined, code: number, mode: MigrateMode): 'run' | 'migrate' {
  if (mode === 'off') return 'run'
  const version = state?.version ?? 0
  if (version > code) {
    if (state!.compatibleFrom > code) throw new SchemaVersionError(version, code, state!.compatibleFrom)
    return 'run'
  }
  if (version === code) return 'run'
  if (mode === 'verify') throw new SchemaBehindError(version, code)
  return 'migrate'
}

/** Checks a driver's `migrate` option. */
export function migrateMode(driver: string, value: unknown): MigrateMode {
  if (value === undefined) return 'auto'
  if (!MIGRATE_MODES.includes(value as MigrateMode)) throw new ConfigError(`${driver}: migrate must be 'auto', 'verify' or 'off'`)
  return value as MigrateMode
}

/**
 * The differences between a schema's objects as its migrations make them
 * (`expected`, by name, with their definitions) and as found: one line
 * each, `missing`, `changed` or `unexpected`, sorted.
 */
export function compareCatalogs(expected: ReadonlyMap<string, string>, found: ReadonlyMap<string, string>): string[] {
  const out: string[] = []
  for (const [name, def] of expected) {
    if (!found.has(name)) out.push(`missing ${name}`)
    else if (found.get(name) !== def) out.push(`changed ${name}`)
  }
  for (const name of found.keys()) if (!expected.has(name)) out.push(`unexpected ${name}`)
  return out.sort()
}
