import { mkdtempSync, rmSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defineKind, Runner, type Driver, type Job } from 'jobtable'
import Database from 'better-sqlite3'
import { jobtableCommand } from './secrets-cli.js'
import { SLEEPY, sleepyPayload, type LedgerRow } from './secrets-shutdown-kinds.js'

const KINDS = 'test/reliability/support/secrets-shutdown-kinds.ts'
const sleepy = defineKind(SLEEPY, { payload: sleepyPayload })
const quiet = { debug() {}, info() {}, warn() {}, error() {} }

/** One run: a `jobtable worker` (or `serve`) under load, signalled at a random moment. */
export interface RunPlan {
  /**
   * `serve` runs the API too, with a request still arriving when the
   * signal comes (a slow upload), so closing the API takes a while.
   */
  readonly mode: 'worker' | 'serve'
  /** The --database value, and a driver on the same store for the test's own reads. */
  readonly database: string
  readonly driver: () => Driver
  readonly jobs: number
  readonly workers: number
  /** Handlers sleep from 10 ms to this, log-uniformly. */
  readonly maxHandlerMs: number
  readonly stopTimeoutMs: number
  /** How long after the worker is up the first SIGTERM goes. */
  readonly signalAfterMs: number
  /** SIGTERMs sent, 10 ms apart. */
  readonly signals: number
}

/** What one run showed. */
export interface RunOutcome {
  readonly exit: number | string
  readonly stderr: string
  /** From the first SIGTERM sent to the process's exit, by the test's clock. */
  readonly exitMs: number
  /** SIGTERMs the process saw. */
  readonly signalsSeen: number
  readonly ledger: LedgerRow[]
  /** Every job after the exit, and after a new runner's start on the store. */
  readonly after: Map<string, Job>
  readonly afterRestart: Map<string, Job>
}

/** Enqueues the jobs, runs the worker, signals it, waits for its exit, and reads the ledger and the store. */
export async function shutdownRun(plan: RunPlan): Promise<RunOutcome> {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-shutdown-'))
  try {
    const producer = new Runner({ driver: plan.driver(), logger: quiet })
    const kind = producer.register(sleepy)
    const span = Math.log(plan.maxHandlerMs / 10)
    await kind.enqueueMany(Array.from({ length: plan.jobs }, () => ({ ms: Math.round(10 * Math.exp(Math.random() * span)) })))
    await producer.close()

    const ledgerPath = join(dir, 'ledger.db')
    const worker = jobtableCommand(
      [plan.mode, '--kinds', KINDS, '--workers', String(plan.workers), '--stop-timeout', String(plan.stopTimeoutMs), '-d', plan.database, ...(plan.mode === 'serve' ? ['--port', '0'] : [])],
      { JT_SHUTDOWN_LEDGER: ledgerPath },
    )
    let upload: Socket | undefined
    if (plan.mode === 'serve') {
      const [, port] = await worker.waitFor(/API at http:\/\/127\.0\.0\.1:(\d+)\//)
      upload = await slowUpload(Number(port))
    } else await worker.waitFor(/runner started/, 'stderr')
    await new Promise((r) => setTimeout(r, plan.signalAfterMs))
    const signalled = performance.now()
    for (let i = 0; i < plan.signals; i++) {
      if (i > 0) await new Promise((r) => setTimeout(r, 10))
      worker.proc.kill('SIGTERM')
    }
    const exit = await worker.exit
    const exitMs = performance.now() - signalled
    upload?.destroy()

    const ledger = readLedger(ledgerPath)
    const reader = new Runner({ driver: plan.driver(), logger: quiet })
    reader.register(sleepy)
    const after = await everyJob(reader)
    // A new start on the store: it fails what the worker left running as interrupted.
    await reader.start()
    const afterRestart = await everyJob(reader)
    await reader.close()
    return { exit, stderr: worker.stderr, exitMs, signalsSeen: ledger.filter((r) => r.what === 'signal').length, ledger, after, afterRestart }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

async function everyJob(runner: Runner): Promise<Map<string, Job>> {
  const jobs = new Map<string, Job>()
  let cursor: string | undefined
  do {
    const page = await runner.list({ limit: 1000, ...(cursor === undefined ? {} : { cursor }) })
    for (const job of page.jobs) jobs.set(job.id, job)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  return jobs
}

/** The ledger's rows in the order the worker wrote them (through a writable connection, which reads the worker's -wal left behind). */
function readLedger(path: string): LedgerRow[] {
  const db = new Database(path)
  try {
    return db.prepare('SELECT seq, what, job_id, at FROM ledger ORDER BY seq').all() as LedgerRow[]
  } finally {
    db.close()
  }
}

/** A request whose body is still on its way: its headers and the first bytes of a body that never ends. */
async function slowUpload(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => undefined)
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  socket.write('POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"kind":')
  return socket
}
