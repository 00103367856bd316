import { AsyncLocalStorage } from 'node:async_hooks'
import Database from 'better-sqlite3'
import pg from 'pg'

/**
 * Faults raised beneath a driver's own error mapping: a better-sqlite3
 * statement that throws a SqliteError, a pg query that rejects with a
 * pg DatabaseError or a socket error, exactly where the real library
 * raises them. The driver then maps them as it maps a real one
 * (src/sqlite/driver.ts `run`, src/postgres/driver.ts `toDatabaseError`),
 * rolls back, and releases or destroys its connection.
 *
 * Which statements fail is decided per driver call: the caller runs a
 * driver method inside `withFault(fault, fn)`, and only the statements
 * that method sends see the fault (AsyncLocalStorage follows the call
 * through its awaits, and through nothing else running meanwhile).
 */
export interface NativeFault {
  /** `fail`: the first statement after any BEGIN fails before it runs. `lost`: the statement that commits (a COMMIT, or a lone statement) runs, then its answer is lost. */
  readonly mode: 'fail' | 'lost'
  /** The error the library would raise. */
  readonly error: () => Error
  /** With `fail`: which statement of the call fails, counting neither BEGIN, COMMIT nor ROLLBACK. Default 1. */
  readonly nth?: number
}

interface CallState {
  readonly fault: NativeFault
  inTransaction: boolean
  /** Set once the fault has been raised: one per call. */
  raised: boolean
  /** How many statements of the call (BEGIN, COMMIT and ROLLBACK aside) have been sent, for `nth`. */
  sent: number
  onRaise: () => void
}

const current = new AsyncLocalStorage<CallState>()

/** Runs fn (one driver call) with `fault` armed for the statements it sends; onRaise is told when the fault is raised. */
export function withFault<T>(fault: NativeFault, onRaise: () => void, fn: () => T): T {
  return current.run({ fault, inTransaction: false, raised: false, sent: 0, onRaise }, fn)
}

/** Runs fn (one driver call) with no fault armed, even when called from within a faulted call's context. */
export function withoutFault<T>(fn: () => T): T {
  return current.exit(fn)
}

/** What to do with one statement of the current call: let it run, fail it before it runs, or lose its answer after. */
function decide(text: string): 'pass' | 'fail' | 'lost' {
  const call = current.getStore()
  if (call === undefined || call.raised) return 'pass'
  const head = text.trimStart().slice(0, 8).toUpperCase()
  if (head.startsWith('BEGIN')) {
    call.inTransaction = true
    return 'pass'
  }
  if (head.startsWith('ROLLBACK')) {
    call.inTransaction = false
    return 'pass'
  }
  let verdict: 'pass' | 'fail' | 'lost' = 'pass'
  if (call.fault.mode === 'fail') {
    // Without nth, whatever statement comes first fails (a COMMIT too); with it, a call that sends fewer statements runs untouched.
    const failing = head.startsWith('COMMIT') ? call.fault.nth === undefined : ++call.sent === (call.fault.nth ?? 1)
    verdict = failing ? 'fail' : 'pass'
  }
  else if (head.startsWith('COMMIT') || !call.inTransaction) verdict = 'lost'
  if (head.startsWith('COMMIT')) call.inTransaction = false
  if (verdict !== 'pass') {
    call.raised = true
    call.onRaise()
  }
  return verdict
}

function faultError(): Error {
  return current.getStore()!.fault.error()
}

let sqliteHooked = false

/**
 * Wraps better-sqlite3's Statement methods (run, get, all, iterate) once
 * per process so a statement of a faulted call throws. The transactions
 * of `db.transaction()` run their BEGIN, COMMIT and ROLLBACK through the
 * same methods. Statements outside a faulted call are untouched.
 */
export function hookSqlite(): void {
  if (sqliteHooked) return
  sqliteHooked = true
  const probe = new Database(':memory:')
  const proto = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Record<string, (...args: unknown[]) => unknown>
  probe.close()
  for (const method of ['run', 'get', 'all', 'iterate']) {
    const real = proto[method]!
    proto[method] = function (this: { source: string }, ...args: unknown[]) {
      const verdict = decide(this.source)
      if (verdict === 'fail') throw faultError()
      const result = real.apply(this, args)
      if (verdict === 'lost') throw faultError()
      return result
    }
  }
}

/** A SQLite error as better-sqlite3 raises it. */
export function sqliteError(code: string): () => Error {
  return () => new Database.SqliteError(`injected ${code}`, code)
}

/** A server error as pg raises it: a DatabaseError with its SQLSTATE. */
export function pgError(code: string): () => Error {
  return () => {
    const err = new pg.DatabaseError(`injected ${code}`, 0, 'error')
    err.code = code
    err.severity = 'FATAL'
    return err
  }
}

/** A connection reset as Node's socket raises it under pg. */
export function connectionReset(): Error {
  return Object.assign(new Error('read ECONNRESET'), { errno: -104, code: 'ECONNRESET', syscall: 'read' })
}

/**
 * A real pg Pool whose clients' queries fail (or lose their answer)
 * within a faulted call; handed to the driver as its `pool`.
 */
export function faultyPool(connectionString: string): pg.Pool {
  const pool = new pg.Pool({ connectionString, max: 4 })
  pool.on('error', () => undefined)
  const hooked = new WeakSet<pg.PoolClient>()
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>
  pool.connect = (async () => {
    const client = await connect()
    if (!hooked.has(client)) {
      hooked.add(client)
      const query = client.query.bind(client) as (config: string | { text: string }, values?: unknown[]) => Promise<unknown>
      client.query = (async (config: string | { text: string }, values?: unknown[]) => {
        const verdict = decide(typeof config === 'string' ? config : config.text)
        const error = verdict === 'pass' ? undefined : faultError()
        // As a server answers: after a turn of the event loop.
        if (verdict === 'fail') return new Promise((_, reject) => setImmediate(() => reject(error)))
        const result = await query(config, values)
        if (error !== undefined) throw error
        return result
      }) as never
    }
    return client
  }) as never
  return pool
}
