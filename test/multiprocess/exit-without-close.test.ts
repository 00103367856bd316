/**
 * A process that makes a runner, enqueues one job and never starts or
 * closes the runner (enqueue-and-leave.ts) exits by itself, on SQLite and
 * on PostgreSQL: nothing the runner or the driver's own pool holds keeps
 * it alive.
 *
 * The oracle is not a measure of time. The child sets its pool's idle
 * timeout to an hour, so a pool that held the process would hold it for
 * an hour; then:
 * - the child reports, once its last await has settled, what keeps its
 *   event loop alive (process.getActiveResourcesInfo(), which leaves out
 *   unref'd handles and timers): it must be nothing, so a ref'd timer or
 *   socket of the runner or the pool fails the test however short it is;
 * - it must exit by itself with code 0 within EXIT_BOUND_MS, a bound
 *   generous for a loaded machine (the child exits about a second after it
 *   starts) and sixty times shorter than the held pool's hour: a failure is
 *   never a near miss either way;
 * - its job is in the database, read by the test on a connection of its own.
 * A control (PostgreSQL) turns allowExitOnIdle off in the child, as the
 * driver's pool was before, and sees the oracle report the idle
 * connection and its timer: the check can fail. That child is killed at
 * once, not waited for.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'
import { readSqlite } from './processes.js'

const CHILD = fileURLToPath(new URL('./enqueue-and-leave.ts', import.meta.url))
/** How long the test waits for the child to exit by itself: far above its real second, far below the held pool's hour. */
const EXIT_BOUND_MS = 60_000

interface Report {
  readonly id: string
  readonly idleTimeoutMs: number
  readonly alive: string[]
}

/** Spawns the child with `env` added; resolves its report (its one line of JSON) and, separately, how it exited. */
function leave(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', CHILD], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const exited = new Promise<number | string | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)))
  const report = new Promise<Report>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      const line = stdout.split('\n').find((l) => l.startsWith('{"id"'))
      if (line !== undefined) resolve(JSON.parse(line) as Report)
    })
    void exited.then((how) => reject(new Error(`the child exited (${how}) without its report: ${stderr}`)))
  })
  report.catch(() => undefined)
  /** Resolves with the exit code, or 'still running' once EXIT_BOUND_MS has passed (the child is then killed). */
  const exit = async (): Promise<number | string | null> => {
    let timer: NodeJS.Timeout | undefined
    const bound = new Promise<'still running'>((resolve) => (timer = setTimeout(() => resolve('still running'), EXIT_BOUND_MS)))
    const how = await Promise.race([exited, bound])
    clearTimeout(timer)
    if (how === 'still running') child.kill('SIGKILL')
    return how
  }
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  }
  return { report, exit, kill, stderr: () => stderr }
}

let cleanups: (() => Promise<unknown> | unknown)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup()
  cleanups = []
})

describe('a process that enqueues and never closes its runner exits by itself', () => {
  it('sqlite: nothing keeps it alive once the enqueue has settled, it exits 0, and its job is stored', { timeout: EXIT_BOUND_MS + 30_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-leave-'))
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'jobs.db')
    const child = leave({ JOBTABLE_TEST_BACKEND: 'sqlite', JOBTABLE_TEST_DB: path })
    cleanups.push(child.kill)
    const report = await child.report
    expect(report.alive).toEqual([])
    expect(await child.exit()).toBe(0)
    expect(readSqlite<{ status: string }>(path, 'SELECT status FROM jobtable_jobs WHERE id = ?', report.id)).toEqual([{ status: 'queued' }])
  })

  const pgIt = postgresSkipReason === undefined ? it : it.skip
  const pgTitle = (title: string) => (postgresSkipReason === undefined ? title : `${title} (skipped: ${postgresSkipReason})`)

  /** A fresh schema, dropped after the test, and a pool of the test's own to read it. */
  function pgStore() {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 })
    admin.on('error', () => undefined)
    cleanups.push(async () => {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined)
      await admin.end()
    })
    return { schema, admin }
  }

  pgIt(pgTitle('postgres: the driver’s own pool lets it go (allowExitOnIdle): nothing alive once the enqueue has settled, exit 0, job stored'), { timeout: EXIT_BOUND_MS + 30_000 }, async () => {
    const { schema, admin } = pgStore()
    const child = leave({ JOBTABLE_TEST_BACKEND: 'postgres', JOBTABLE_TEST_DB: PG_URL, JOBTABLE_TEST_SCHEMA: schema })
    cleanups.push(child.kill)
    const report = await child.report
    expect(report.idleTimeoutMs).toBe(3_600_000)
    expect(report.alive).toEqual([])
    expect(await child.exit()).toBe(0)
    expect((await admin.query(`SELECT status FROM "${schema}".jobs WHERE id = $1`, [report.id])).rows).toEqual([{ status: 'queued' }])
  })

  pgIt(pgTitle('postgres, the control: a pool without allowExitOnIdle is seen holding the process (its idle connection and timer)'), async () => {
    const { schema } = pgStore()
    const child = leave({ JOBTABLE_TEST_BACKEND: 'postgres', JOBTABLE_TEST_DB: PG_URL, JOBTABLE_TEST_SCHEMA: schema, JOBTABLE_TEST_HOLD_POOL: '1' })
    cleanups.push(child.kill)
    const report = await child.report
    expect(report.alive).toContain('TCPSocketWrap')
    expect(report.alive).toContain('Timeout')
    // Held for the pool's hour: killed now rather than waited for.
    await child.kill()
  })
})
