import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'

/**
 * The worker's code, plain JavaScript evaluated as a script (so it needs no
 * file of its own beside the compiled one, nor TypeScript when jobtable
 * runs from its sources): one read-only connection to the file, each
 * request's statement prepared once and run, its rows or its error's code
 * sent back. better-sqlite3 is loaded from the path the main thread
 * resolved, so the worker finds the application's copy whatever its
 * working directory.
 */
const SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const Database = require(workerData.module)
let db
const statements = new Map()
parentPort.on('message', ({ id, sql, params }) => {
  try {
    if (db === undefined) {
      db = new Database(workerData.path, { readonly: true, fileMustExist: true })
      db.pragma('busy_timeout = ' + workerData.busyTimeoutMs)
    }
    let statement = statements.get(sql)
    if (statement === undefined) statements.set(sql, (statement = db.prepare(sql)))
    parentPort.postMessage({ id, rows: statement.all(params) })
  } catch (err) {
    parentPort.postMessage({ id, error: { code: err && typeof err.code === 'string' ? err.code : undefined, message: String(err && err.message) } })
  }
})
`

/** A statement the worker could not run: the SQLite error code when it had one. */
export class CountWorkerError extends Error {
  readonly code: string | undefined
  constructor(code: string | undefined, message: string) {
    super(message)
    this.code = code
  }
}

/**
 * Reads on a worker thread with a read-only connection of its own to a
 * SQLite file (in WAL mode, it never waits for a writer nor holds one up),
 * so a read of a million rows never blocks the event loop that runs the
 * application's handlers, claims and final writes. Started at the first
 * read; it keeps the process alive only while a read is under way. When
 * it cannot be started (better-sqlite3 not resolvable from here, as in
 * some bundles, or it died before its first answer), `all` rejects with
 * CountWorkerError code undefined, and every later call does too.
 */
export class CountWorker {
  readonly #path: string
  readonly #busyTimeoutMs: number
  #worker: Worker | undefined
  #unavailable: Error | undefined
  #next = 0
  readonly #waiting = new Map<number, { resolve: (rows: unknown[]) => void; reject: (err: unknown) => void }>()

  constructor(path: string, busyTimeoutMs: number) {
    this.#path = path
    this.#busyTimeoutMs = busyTimeoutMs
  }

  /** Runs the read-only statement `sql` with `params` on the worker; resolves to its rows. */
  all(sql: string, params: Record<string, unknown>): Promise<unknown[]> {
    if (this.#unavailable !== undefined) return Promise.reject(this.#unavailable)
    let worker: Worker
    try {
      worker = this.#worker ??= this.#start()
    } catch (err) {
      this.#unavailable = new CountWorkerError(undefined, `count worker unavailable: ${String((err as Error)?.message ?? err)}`)
      return Promise.reject(this.#unavailable)
    }
    const id = this.#next++
    if (this.#waiting.size === 0) worker.ref()
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject })
      worker.postMessage({ id, sql, params })
    })
  }

  #start(): Worker {
    const module = createRequire(import.meta.url).resolve('better-sqlite3')
    const worker = new Worker(SOURCE, { eval: true, workerData: { module, path: this.#path, busyTimeoutMs: this.#busyTimeoutMs } })
    worker.unref()
    let answered = false
    worker.on('message', (m: { id: number; rows?: unknown[]; error?: { code: string | undefined; message: string } }) => {
      answered = true
      const waiter = this.#waiting.get(m.id)
      if (waiter === undefined) return
      this.#waiting.delete(m.id)
      if (this.#waiting.size === 0) worker.unref()
      if (m.error !== undefined) waiter.reject(new CountWorkerError(m.error.code, m.error.message))
      else waiter.resolve(m.rows!)
    })
    // A worker that dies fails what it was asked; the next read starts another, unless this one never answered (it cannot load here).
    const gone = (err: unknown) => {
      if (this.#worker === worker) this.#worker = undefined
      const failed = new CountWorkerError(undefined, `count worker stopped: ${String((err as Error)?.message ?? err)}`)
      if (!answered) this.#unavailable ??= failed
      for (const waiter of this.#waiting.values()) waiter.reject(failed)
      this.#waiting.clear()
    }
    worker.on('error', gone)
    worker.on('exit', (code) => gone(`exit ${code}`))
    return worker
  }

  /** Stops the worker (and its connection); reads under way reject. */
  async close(): Promise<void> {
    const worker = this.#worker
    this.#worker = undefined
    this.#unavailable = new CountWorkerError(undefined, 'count worker closed')
    if (worker !== undefined) await worker.terminate()
  }
}
