/** jobtable's embedded default backend: SQLite through better-sqlite3. */
export { sqlite, SqliteDriver, type SqliteOptions } from './driver.js'
export { SCHEMA_VERSION, migrate } from './migrations.js'
export type { SqliteDatabase } from './database.js'
