/**
 * A process that makes a runner, enqueues one job and leaves: it never
 * starts the runner and never calls close(), as a script or a web
 * process at its end does. It must exit by itself (see
 * exit-without-close.test.ts).
 *
 * Environment: JOBTABLE_TEST_BACKEND (sqlite or postgres), JOBTABLE_TEST_DB
 * (a SQLite path, or a PostgreSQL URL) and JOBTABLE_TEST_SCHEMA
 * (PostgreSQL). The pool's idle timeout is set to an hour here, so a pool
 * that held the process would hold it for an hour, far past any bound the
 * test waits; JOBTABLE_TEST_HOLD_POOL=1 also turns allowExitOnIdle off,
 * as the driver's pool was before it set it, for the test's control.
 *
 * It prints one line of JSON once its last await has settled: the job's
 * id, the pool's idle timeout, and what keeps its event loop alive then
 * (process.getActiveResourcesInfo(), which leaves out unref'd handles and
 * timers) that did not before jobtable was loaded.
 */
import pg from 'pg'
import { z } from 'zod'

// What keeps the loop alive before jobtable is loaded: the standard streams (a pipe each, which never hold a process
// at its end). The report leaves these out, so it names only what the runner and its driver left behind.
void process.stdout
void process.stderr
const before = process.getActiveResourcesInfo()

const IDLE_TIMEOUT_MS = 3_600_000
const hold = process.env['JOBTABLE_TEST_HOLD_POOL'] === '1'

// Before the driver makes its pool: every pool of this process gets the known idle timeout.
const Pool = pg.Pool
;(pg as { Pool: unknown }).Pool = class extends Pool {
  constructor(options?: pg.PoolConfig) {
    super({ ...options, idleTimeoutMillis: IDLE_TIMEOUT_MS, ...(hold ? { allowExitOnIdle: false } : {}) })
  }
}

const { defineKind, Runner } = await import('jobtable')
const backend = process.env['JOBTABLE_TEST_BACKEND']
const database = process.env['JOBTABLE_TEST_DB']!
const driver =
  backend === 'postgres'
    ? (await import('jobtable/postgres')).postgres({ connectionString: database, schema: process.env['JOBTABLE_TEST_SCHEMA']! })
    : (await import('jobtable/sqlite')).sqlite({ path: database })
// The default logger, as an application has: pino on standard output.
const runner = new Runner({ driver })
const note = runner.register(defineKind('note', { payload: z.strictObject({ text: z.string() }) }))
const id = await note.enqueue({ text: 'left behind' })
// One turn of the event loop, so what the enqueue left behind has settled.
await new Promise((resolve) => setImmediate(resolve))
const alive = process.getActiveResourcesInfo()
for (const resource of before) alive.splice(alive.indexOf(resource), alive.includes(resource) ? 1 : 0)
process.stdout.write(JSON.stringify({ id, idleTimeoutMs: IDLE_TIMEOUT_MS, alive }) + '\n')
