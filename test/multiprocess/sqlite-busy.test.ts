import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { readSqlite } from './processes.js'

const ENQUEUER = fileURLToPath(new URL('./busy-enqueuer.ts', import.meta.url))
const HOLDER = fileURLToPath(new URL('./lock-holder.ts', import.meta.url))
const PROCESSES = 4
/** Rounds per enqueuer: 1, 8 and 10 jobs in turn (see busy-enqueuer.ts), 19 jobs every 3 rounds. */
const ROUNDS = 60
const JOBS_PER_PROCESS = (ROUNDS / 3) * 19

interface Stored {
  id: string
  i: number
  calledAt: number
  doneAt: number
  ticksAt: number
  ticksDone: number
}

/** Runs `script` with `env` added; resolves to its exit code and output. */
function run(script: string, env: Record<string, string>): { child: ChildProcess; done: Promise<{ code: number | null; out: string; err: string }>; ready: Promise<void> } {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  let onReady = () => {}
  const ready = new Promise<void>((resolve) => (onReady = resolve))
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString()
    if (out.startsWith('ready\n')) onReady()
  })
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()))
  const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) => child.on('close', (code) => resolve({ code, out, err })))
  return { child, done, ready }
}

const lines = <T>(text: string): T[] =>
  text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as T)

describe('sqlite: enqueues on a file another process keeps locking', () => {
  it('4 processes enqueue while a fifth holds write transactions of 100-300 ms again and again: no SQLITE_BUSY reaches a caller, every job is stored once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-busy-'))
    const path = join(dir, 'jobs.db')
    let holder: ReturnType<typeof run> | undefined
    const enqueuers: ReturnType<typeof run>[] = []
    try {
      // Made and migrated before any process opens it.
      await new Runner({ driver: sqlite({ path }) }).close()
      holder = run(HOLDER, { JT_SQLITE_PATH: path })
      await Promise.race([holder.ready, holder.done.then((d) => Promise.reject(new Error(`lock holder exited ${d.code}: ${d.err}`)))])
      const startAt = String(Date.now() + 4_000)
      for (let p = 0; p < PROCESSES; p++) enqueuers.push(run(ENQUEUER, { JT_SQLITE_PATH: path, JT_START_AT: startAt, JT_ROUNDS: String(ROUNDS) }))
      const results = await Promise.all(enqueuers.map((e) => e.done))
      holder.child.kill('SIGTERM')
      const held = await holder.done
      expect(held.code, held.err).toBe(0)
      const holds = lines<{ from: number; to: number }>(held.out)

      for (const r of results) {
        // An error line names the code the caller got: none may reach it.
        expect(lines<{ error?: string }>(r.out).filter((l) => l.error !== undefined), r.err).toEqual([])
        expect(r.code, r.err).toBe(0)
      }
      const answers = results.map((r) => lines<Stored>(r.out))
      for (const a of answers) {
        expect(a).toHaveLength(JOBS_PER_PROCESS)
        expect(a.map((s) => s.i)).toEqual(Array.from({ length: JOBS_PER_PROCESS }, (_, k) => k))
      }
      const ids = answers.flat().map((s) => s.id)
      expect(new Set(ids).size).toBe(PROCESSES * JOBS_PER_PROCESS)

      // Every answered id is stored, once, with the payload it was answered for, and nothing else is.
      const rows = readSqlite<{ id: string; payload: string }>(path, 'SELECT id, payload FROM jobtable_jobs')
      expect(rows).toHaveLength(PROCESSES * JOBS_PER_PROCESS)
      const stored = new Map(rows.map((r) => [r.id, JSON.parse(r.payload) as { pid: number; i: number }]))
      const pids = new Set<number>()
      for (const [p, a] of answers.entries()) {
        const pid = stored.get(a[0]!.id)!.pid
        pids.add(pid)
        for (const s of a) expect(stored.get(s.id), `process ${p} job ${s.i}`).toEqual({ pid, i: s.i })
      }
      expect(pids.size).toBe(PROCESSES)

      // The contention was real: calls made while the holder held the lock were answered only after it let go
      // (nothing can be stored during a hold), and the enqueuer's event loop turned meanwhile.
      const waited = answers.flat().filter((s) => holds.some((h) => s.calledAt > h.from && s.calledAt < h.to && s.doneAt >= h.to))
      expect(holds.length).toBeGreaterThan(0)
      expect(waited.length).toBeGreaterThan(0)
      expect(waited.filter((s) => s.ticksDone > s.ticksAt).length).toBeGreaterThan(0)
      const waits = waited.map((s) => s.doneAt - s.calledAt).sort((a, b) => a - b)
      console.info(
        `busy file: ${holds.length} holds; ${ids.length} jobs from ${PROCESSES} processes; ${waited.length} called during a hold and answered after it ` +
          `(wait p50 ${waits[Math.floor(waits.length / 2)]} ms, max ${waits.at(-1)} ms)`,
      )
    } finally {
      holder?.child.kill('SIGKILL')
      for (const e of enqueuers) e.child.kill('SIGKILL')
      await Promise.all([holder?.done, ...enqueuers.map((e) => e.done)])
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
