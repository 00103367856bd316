import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, defineKind, Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { FaultyDriver } from '../support/faults.js'
import { captureLogs } from '../support/logs.js'
import { gate, retryTransient, track } from '../support/wait.js'
import { eventually, spawnWorker, type WorkerProcess, readSqlite, sqliteLedger } from './processes.js'

const silent = { debug() {}, info() {}, warn() {}, error() {} }
const payload = z.strictObject({ ms: z.number().int() })

describe('sqlite: several processes on one file', () => {
  let dir: string
  let path: string
  let children: WorkerProcess[] = []
  const opened: Runner[] = []

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-mp-'))
    path = join(dir, 'jobs.db')
  })
  afterEach(async () => {
    for (const c of children) c.child.kill('SIGKILL')
    await Promise.all(children.map((c) => c.exited))
    children = []
    for (const r of opened.splice(0)) await r.close().catch(() => undefined)
    rmSync(dir, { recursive: true, force: true })
  })

  const start = (n: number, env: Record<string, string> = {}) => {
    const started = Array.from({ length: n }, () =>
      spawnWorker({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path, JT_LEDGER: join(dir, 'ledger'), JT_WORKERS: '8', ...env }),
    )
    children.push(...started)
    return started
  }

  const runner = (options: { sweepIntervalMs?: number } = {}) => {
    const r = new Runner({ driver: sqlite({ path, ...options }), logger: silent })
    opened.push(r)
    return r
  }

  const read = <R>(text: string, ...values: unknown[]): R[] => readSqlite<R>(path, text, ...values)

  /** Job id → handler starts, from every process's own ledger file. */
  const ledger = () => sqliteLedger(dir)

  it('2 processes x 8 workers run 20,000 jobs: every handler starts exactly once and every job succeeds', async () => {
    // The file is created and migrated before the processes open it.
    const enqueuer = runner()
    const kind = enqueuer.register('ledgered', { payload, handler: () => undefined })
    const procs = start(2)
    await Promise.all(procs.map((p) => p.ready))
    const ids: string[] = []
    // As an application would: a batch refused as busy (two processes' workers writing the file) is tried again; it stored nothing.
    for (let i = 0; i < 20_000; i += 1000) ids.push(...(await retryTransient(() => kind.enqueueMany(Array.from({ length: 1000 }, () => ({ ms: 0 }))))))
    // The processes learn of these inserts from the file's change counter (pollIntervalMs).
    await eventually(async () => read<{ n: number }>(`SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('queued', 'running')`)[0]!.n === 0, 250)

    const starts = ledger()
    expect(starts.size).toBe(20_000)
    for (const id of ids) expect(starts.get(id)).toBe(1)
    expect(read(`SELECT status, count(*) AS n FROM jobtable_jobs GROUP BY status`)).toEqual([{ status: 'succeeded', n: 20_000 }])
  }, 180_000)

  it('a rolling deploy: a process of the old version (no new kind) beside one of the new; every job runs exactly once, on a process that has its kind, none fails', async () => {
    const enqueuer = runner()
    const kinds = { old: enqueuer.register(defineKind('ledgered', { payload })), added: enqueuer.register(defineKind('ledgered_v2', { payload })) }
    const [oldProc] = start(1, { JT_KINDS: 'ledgered' })
    const [newProc] = start(1, { JT_KINDS: 'ledgered,ledgered_v2' })
    const [oldId, newId] = await Promise.all([oldProc!.ready, newProc!.ready])
    const added = await kinds.added.enqueueMany(Array.from({ length: 500 }, () => ({ ms: 0 })))
    const old = await kinds.old.enqueueMany(Array.from({ length: 500 }, () => ({ ms: 0 })))
    await eventually(async () => read<{ n: number }>(`SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('queued', 'running')`)[0]!.n === 0, 100)
    expect(read(`SELECT status, error, count(*) AS n FROM jobtable_jobs GROUP BY status, error`)).toEqual([{ status: 'succeeded', error: null, n: 1000 }])
    const ranBy = new Map(read<{ id: string; runner_id: string }>(`SELECT id, runner_id FROM jobtable_jobs`).map((r) => [r.id, r.runner_id]))
    for (const id of added) expect(ranBy.get(id)).toBe(newId)
    for (const id of old) expect([oldId, newId]).toContain(ranBy.get(id))
    const starts = ledger()
    expect(starts.size).toBe(1000)
    for (const id of [...added, ...old]) expect(starts.get(id)).toBe(1)
  }, 60_000)

  it("a starting runner leaves a live process's running jobs alone; once that process is killed, a sweep fails them as interrupted", async () => {
    const enqueuer = runner()
    const kind = enqueuer.register('ledgered', { payload, handler: () => undefined })
    const [live] = start(1, { JT_WORKERS: '2' })
    const liveId = await live!.ready
    // Held for an hour: these stay running until their process dies.
    await kind.enqueueMany([{ ms: 3_600_000 }, { ms: 3_600_000 }])
    await eventually(async () => read(`SELECT id FROM jobtable_jobs WHERE status = 'running' AND runner_id = ?`, liveId).length === 2)

    const logs = captureLogs()
    const second = new Runner({ driver: sqlite({ path, sweepIntervalMs: 50 }), logger: logs })
    opened.push(second)
    second.register('ledgered', { payload, handler: () => undefined })
    await second.start()
    expect(read(`SELECT status FROM jobtable_jobs`)).toEqual([{ status: 'running' }, { status: 'running' }])

    live!.child.kill('SIGKILL')
    await live!.exited
    // Only the lock file can tell the sweep that process is gone.
    await eventually(async () => read(`SELECT id FROM jobtable_jobs WHERE status = 'running'`).length === 0)
    expect(read(`SELECT status, error, runner_id FROM jobtable_jobs`)).toEqual([
      { status: 'failed', error: CODE_INTERRUPTED, runner_id: liveId },
      { status: 'failed', error: CODE_INTERRUPTED, runner_id: liveId },
    ])
    expect(logs.lines).toContainEqual({ level: 'warn', fields: { count: 2 }, message: 'failed jobs interrupted by restart' })
    expect(ledger().size).toBe(2)
  }, 60_000)

  it('two runners of one process on one file: the second start does not fail the first one’s running job', async () => {
    const first = runner()
    const release = gate()
    const kind = first.register('ledgered', { payload, handler: () => release.promise })
    const done = track(first)
    await first.start()
    const id = await kind.enqueue({ ms: 0 })
    await done.starts(1)

    const faulty = new FaultyDriver(sqlite({ path, sweepIntervalMs: 1 }))
    const second = new Runner({ driver: faulty.driver, logger: silent })
    opened.push(second)
    second.register('ledgered', { payload, handler: () => undefined })
    await second.start()
    // The start's sweep and twenty periodic ones.
    await eventually(async () => (faulty.calls['jobFailInterrupted'] ?? 0) > 20, 5)
    expect((await second.get(id)).status).toBe('running')
    release.open()
    await done.ends([id])
    expect((await second.get(id)).status).toBe('succeeded')
  })
})
