/**
 * The part of a better-sqlite3 `Database` that jobtable's public types
 * name, typed by shape: jobtable's declaration files never import
 * better-sqlite3's types, so a TypeScript user compiles them with or
 * without `@types/better-sqlite3` (and with `skipLibCheck: false`). A
 * better-sqlite3 Database is one as it is; jobtable checks at run time
 * that the value handed in really is one.
 */
export interface SqliteDatabase {
  /** The database file's path (`:memory:` for one in memory). */
  readonly name: string
  readonly memory: boolean
  readonly open: boolean
  /** Whether a transaction is open on this connection. */
  readonly inTransaction: boolean
  prepare(source: string): unknown
  exec(source: string): unknown
  pragma(source: string, options?: { simple?: boolean }): unknown
}
