/**
 * jobtable's PostgreSQL backend, over node-postgres (`pg`, a peer
 * dependency): many runner processes on many machines share one database.
 */
export { postgres, PostgresDriver, type PostgresOptions, type PgQueryable } from './driver.js'
export { SCHEMA_VERSION } from './migrations.js'
