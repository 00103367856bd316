import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createApi, listen, UnsafeBindError } from 'jobtable/http'
import { defineKind, Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import pg from 'pg'
import { describeDatabase } from '../../src/cli/database.js'
import { REPEAT_WINDOW_MS } from '../../src/cli/signals.js'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'
import { samplesOf } from '../support/prometheus.js'
import { registerKinds } from './fixtures/kinds.js'

const KINDS = 'test/cli/fixtures/kinds.ts'
const TOKEN = 'cli-test-token-0123456789'
const MARKER = 'SECRET-MARKER-cli-51'

interface Cli {
  readonly proc: ChildProcess
  stdout: string
  stderr: string
  /** Resolves with the exit code (or 128 + signal number). */
  readonly exit: Promise<number>
  /** Resolves with the first match of re in stdout, waiting for it. */
  waitFor(re: RegExp): Promise<RegExpMatchArray>
}

let dir: string
let children: ChildProcess[] = []
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'jobtable-cli-'))
})
afterEach(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  children = []
  rmSync(dir, { recursive: true, force: true })
})

function cli(args: string[], env: Record<string, string> = {}): Cli {
  const proc = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'src/cli/main.ts', ...args], {
    env: { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '', JOBTABLE_TOKENS: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(proc)
  let waiters: (() => void)[] = []
  const state: Cli = {
    proc,
    stdout: '',
    stderr: '',
    exit: new Promise((resolve) => proc.once('exit', (code, signal) => resolve(code ?? 128 + (signal === 'SIGKILL' ? 9 : 15)))),
    async waitFor(re) {
      for (;;) {
        const m = state.stdout.match(re)
        if (m) return m
        if (proc.exitCode !== null) throw new Error(`exited ${proc.exitCode} before ${re}: ${state.stderr}`)
        await new Promise<void>((r) => waiters.push(r))
      }
    },
  }
  const notify = () => {
    const w = waiters
    waiters = []
    for (const f of w) f()
  }
  proc.stdout!.on('data', (d) => {
    state.stdout += d
    notify()
  })
  proc.stderr!.on('data', (d) => {
    state.stderr += d
  })
  proc.once('exit', notify)
  return state
}

async function serveCli(extra: string[] = [], env: Record<string, string> = {}) {
  const c = cli(['serve', '--kinds', KINDS, '--port', '0', '-d', join(dir, 'jobs.db'), ...extra], env)
  const [, url] = await c.waitFor(/API at (http:\/\/[^/\s]+)\/api\/v1\/jobs/)
  return { c, url: url! }
}

async function poll<T>(read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  for (;;) {
    const v = await read()
    if (ok(v)) return v
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** poll(), failing at once if the command exits before ok holds. */
async function pollWhileUp<T>(c: Cli, read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  return poll(
    async () => {
      if (c.proc.exitCode !== null || c.proc.signalCode !== null) throw new Error(`exited ${c.proc.exitCode ?? c.proc.signalCode}: ${c.stderr}`)
      return read()
    },
    ok,
  )
}

/** The command's JSON log lines. */
function logLines(c: Cli): Record<string, unknown>[] {
  return c.stderr.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)
}

const QUIET = { debug() {}, info() {}, warn() {}, error() {} }

/** A runner in this process on the command's SQLite file, with the fixture kinds: to enqueue and read, not started unless a test says so. */
function sideRunner(db: string): Runner {
  const runner = new Runner({ driver: sqlite({ path: db }), logger: QUIET })
  registerKinds(runner)
  return runner
}

/**
 * Waits until the worker runs jobs: an echo job enqueued from this
 * process has succeeded (the worker's own startup line is the runner's).
 */
async function workerRunsJobs(worker: Cli, db: string): Promise<void> {
  const side = sideRunner(db)
  try {
    const id = await side.enqueue('echo', { text: 'first' })
    await pollWhileUp(worker, () => side.get(id), (j) => j.status === 'succeeded')
  } finally {
    await side.close()
  }
}

describe('jobtable command', () => {
  it('prints help for every command with exit 0, and refuses bad command lines with exit 2', async () => {
    for (const command of [[], ['serve'], ['worker'], ['migrate'], ['jobs'], ['kinds']]) {
      const c = cli([...command, '--help'])
      expect(await c.exit, command.join(' ')).toBe(0)
      expect(c.stdout).toContain(`Usage: jobtable ${command[0] ?? '<command>'}`)
    }
    for (const args of [[], ['frobnicate'], ['serve', '--bogus'], ['serve', '--kinds', KINDS, '--workers', 'many'], ['serve', '--port', '70000', '--kinds', KINDS], ['worker'], ['jobs'], ['jobs', 'show'], ['jobs', 'list', '--status', 'done'], ['migrate', '--log-level', 'loud'], ['worker', '--kinds', KINDS, '--stop-timeout', 'soon'], ['serve', '--kinds', KINDS, '--stop-timeout', '-1'], ['kinds'], ['kinds', 'pause'], ['kinds', 'stop', 'echo'], ['kinds', 'paused', 'echo']]) {
      const c = cli(args)
      expect(await c.exit, args.join(' ')).toBe(2)
      expect(c.stderr, args.join(' ')).toMatch(/^jobtable: |Usage: jobtable/)
    }
    // 22 command processes in turn: a bound for a loaded machine, not a measure.
  }, 120_000)

  it('--version and -v print the version in package.json, run from the source', async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }
    for (const flag of ['--version', '-v']) {
      const c = cli([flag])
      expect(await c.exit).toBe(0)
      expect(c.stdout).toBe(`${version}\n`)
    }
    const help = cli(['--help'])
    expect(await help.exit).toBe(0)
    expect(help.stdout).toContain('-v (--version)')
    const kindsHelp = cli(['kinds', '--help'])
    expect(await kindsHelp.exit).toBe(0)
    expect(kindsHelp.stdout).toContain('--force')
  })

  it('refuses to listen on a non-loopback address without tokens (exit 2), and the library refuses too', async () => {
    for (const host of ['0.0.0.0', '::', '192.0.2.10']) {
      const c = cli(['serve', '--kinds', KINDS, '--host', host, '-d', join(dir, 'x.db')])
      expect(await c.exit, host).toBe(2)
      expect(c.stderr).toContain(`refusing to listen on ${host} without authentication`)
    }
    const runner = new Runner({ driver: sqlite({ path: join(dir, 'lib.db') }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
    try {
      await expect(listen(createApi({ runner }), { host: '0.0.0.0', port: 0 })).rejects.toBeInstanceOf(UnsafeBindError)
    } finally {
      await runner.close()
    }
  })

  it('serves with bearer tokens on a public address, logs JSON lines without secrets, and stops on SIGTERM with exit 0', async () => {
    const tokens = join(dir, 'tokens.json')
    writeFileSync(tokens, JSON.stringify({ [TOKEN]: 'household-1' }), { mode: 0o600 })
    const { c, url } = await serveCli(['--host', '0.0.0.0', '--tokens-file', tokens])
    const base = url.replace('0.0.0.0', '127.0.0.1')
    expect((await fetch(`${base}/api/v1/jobs`)).status).toBe(401)
    const created = await fetch(`${base}/api/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'echo', payload: { text: MARKER } }),
    })
    expect(created.status).toBe(201)
    const { id } = (await created.json()) as { id: string }
    const job = await poll(
      async () => (await (await fetch(`${base}/api/v1/jobs/${id}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { status: string; result: unknown },
      (j) => j.status === 'succeeded',
    )
    expect(job.result).toEqual({ length: MARKER.length })
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)
    const lines = c.stderr.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(lines.some((l) => l.msg === 'request' && l.status === 201 && l.path === '/api/v1/jobs')).toBe(true)
    expect(lines.at(-1)!.msg).toBe('stopped')
    expect(c.stderr).not.toContain(TOKEN)
    expect(c.stderr).not.toContain(MARKER)
  })

  it('on SIGTERM during work stops gracefully, leaving the job for the next start to fail as interrupted', async () => {
    const { c, url } = await serveCli()
    const created = await fetch(`${url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"kind":"block","payload":{}}' })
    const { id } = (await created.json()) as { id: string }
    await poll(async () => (await (await fetch(`${url}/api/v1/jobs/${id}`)).json()) as { result: unknown }, (j) => j.result !== null)
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)
    const show = cli(['jobs', 'show', id, '-d', join(dir, 'jobs.db')])
    expect(await show.exit).toBe(0)
    expect(JSON.parse(show.stdout)).toMatchObject({ id, status: 'running' })
    // A worker started on the same file fails it as interrupted, then stops on SIGINT.
    const worker = cli(['worker', '--kinds', KINDS, '-d', join(dir, 'jobs.db')])
    await poll(
      async () => {
        const s = cli(['jobs', 'show', id, '-d', join(dir, 'jobs.db')])
        await s.exit
        return JSON.parse(s.stdout) as { status: string; error: string | null }
      },
      (j) => j.status === 'failed',
    ).then((j) => expect(j.error).toBe('interrupted by restart'))
    worker.proc.kill('SIGINT')
    expect(await worker.exit).toBe(0)
  })

  it("npm start's command: prints the dashboard's URL and serves it there, the demo keeps enqueueing example jobs, and SIGTERM stops it (exit 0)", async () => {
    const c = cli(['serve', '--kinds', 'examples/meal-plan.ts', '--demo', '--port', '0', '-d', join(dir, 'demo.db')])
    const [, url] = await c.waitFor(/dashboard at (http:\/\/[^/\s]+)\/\n/)
    const page = await fetch(`${url}/`)
    expect([page.status, page.headers.get('content-type')]).toEqual([200, 'text/html; charset=utf-8'])
    expect(await page.text()).toContain('<script type="module" src="/dashboard/app.js">')
    // The first two jobs, then one more every few seconds: the jobs keep moving for the dashboard.
    const total = async () => ((await (await fetch(`${url}/api/v1/stats`)).json()) as { counts: { count: number }[] }).counts.reduce((n, r) => n + r.count, 0)
    await pollWhileUp(c, total, (n) => n >= 4)
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)
    expect(c.stderr).not.toContain('demo failed')
  })

  it('exits at once on a second signal when a job will not stop', async () => {
    const { c, url } = await serveCli()
    const created = await fetch(`${url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"kind":"stubborn","payload":{}}' })
    const { id } = (await created.json()) as { id: string }
    await poll(async () => (await (await fetch(`${url}/api/v1/jobs/${id}`)).json()) as { result: unknown }, (j) => j.result !== null)
    c.proc.kill('SIGTERM')
    // Wait for the first signal to be taken, and past the window in which a repeat counts as the same signal, before sending the second.
    await poll(async () => c.stderr, (text) => text.includes('stopping'))
    await new Promise((r) => setTimeout(r, REPEAT_WINDOW_MS + 100))
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(143)
    expect(c.stderr).toContain('second signal')
  })

  it('an idle worker stays up on its own, and runs a job another process enqueues later', async () => {
    const db = join(dir, 'idle.db')
    const worker = cli(['worker', '--kinds', KINDS, '-d', db])
    await workerRunsJobs(worker, db)
    const side = sideRunner(db)
    try {
      const id = await side.enqueue('echo', { text: 'later' })
      // Noticed by the worker's poll of the file, since this process's wake cannot reach it.
      const job = await pollWhileUp(worker, () => side.get(id), (j) => j.status === 'succeeded')
      expect(job.result).toEqual({ length: 5 })
    } finally {
      await side.close()
    }
    worker.proc.kill('SIGTERM')
    expect(await worker.exit).toBe(0)
    const lines = logLines(worker)
    // At the default level the runner's own info line says it started, with its kinds; the command adds none of its own.
    expect(lines.filter((l) => l.level === 30 && Array.isArray(l.kinds))).toHaveLength(1)
    expect(lines.some((l) => l.msg === 'jobtable worker running')).toBe(false)
    expect(lines.at(-1)!.msg).toBe('stopped')
  })

  it('serve --workers 0 stays up on its HTTP server alone, answering, until SIGTERM (exit 0)', async () => {
    const c = cli(['serve', '--workers', '0', '--port', '0', '-d', join(dir, 'api-only.db')])
    const [, url] = await c.waitFor(/API at (http:\/\/[^/\s]+)\/api\/v1\/jobs/)
    const page = await fetch(`${url}/api/v1/jobs`)
    expect(page.status).toBe(200)
    expect(await page.json()).toMatchObject({ jobs: [] })
    expect(c.proc.exitCode).toBe(null)
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)
    expect(logLines(c).at(-1)!.msg).toBe('stopped')
  })

  it('serve --metrics answers GET /metrics on the API listener with the runner’s and the process’s metrics; --metrics-port moves them to a listener of their own', async () => {
    const { c, url } = await serveCli(['--metrics'])
    const [, at] = await c.waitFor(/metrics at (http:\/\/\S+)\n/)
    expect(at).toBe(`${url}/metrics`)
    const created = await fetch(`${url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'echo', payload: { text: MARKER } }) })
    const { id } = (await created.json()) as { id: string }
    const m = await pollWhileUp(
      c,
      async () => samplesOf(await (await fetch(at!)).text()),
      (m) => m.value('jobtable_jobs_finished_total', { kind: 'echo', status: 'succeeded' }) === 1,
    )
    expect(m.value('jobtable_jobs_enqueued_total', { kind: 'echo' })).toBe(1)
    expect(m.all('process_cpu_user_seconds_total')).toHaveLength(1)
    expect(JSON.stringify(m.samples)).not.toContain(MARKER)
    expect(JSON.stringify(m.samples)).not.toContain(id)
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)

    const own = cli(['serve', '--kinds', KINDS, '--port', '0', '--metrics-port', '0', '-d', join(dir, 'own.db')])
    const [, ownAt] = await own.waitFor(/metrics at (http:\/\/\S+)\n/)
    const [, apiUrl] = await own.waitFor(/API at (http:\/\/[^/\s]+)\/api\/v1\/jobs/)
    expect(ownAt).not.toBe(`${apiUrl}/metrics`)
    expect((await fetch(ownAt!)).status).toBe(200)
    expect((await fetch(`${apiUrl}/metrics`)).status).toBe(404)
    expect((await fetch(ownAt!.replace(/\/metrics$/, '/api/v1/jobs'))).status).toBe(404)
    own.proc.kill('SIGTERM')
    expect(await own.exit).toBe(0)
  })

  it('worker --metrics-port serves metrics behind the tokens of --tokens-file for --metrics-scope; metrics flags that cannot hold are usage errors (exit 2)', async () => {
    const tokens = join(dir, 'tokens.json')
    writeFileSync(tokens, JSON.stringify({ [TOKEN]: 'household-1', 'monitoring-token-0123456789': 'monitoring' }), { mode: 0o600 })
    const db = join(dir, 'worker-metrics.db')
    const w = cli(['worker', '--kinds', KINDS, '-d', db, '--metrics-port', '0', '--metrics-host', '0.0.0.0', '--tokens-file', tokens, '--metrics-scope', 'monitoring'])
    const [, at] = await w.waitFor(/metrics at (http:\/\/\S+)\n/)
    const local = at!.replace('0.0.0.0', '127.0.0.1')
    expect((await fetch(local)).status).toBe(401)
    expect((await fetch(local, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(403)
    const ok = await fetch(local, { headers: { authorization: 'Bearer monitoring-token-0123456789' } })
    expect(ok.status).toBe(200)
    expect(samplesOf(await ok.text()).value('jobtable_workers', { state: 'idle' })).toBe(4)
    w.proc.kill('SIGTERM')
    expect(await w.exit).toBe(0)

    for (const args of [
      ['serve', '--kinds', KINDS, '--metrics-port', '0', '--metrics-host', '0.0.0.0'],
      ['serve', '--kinds', KINDS, '--metrics-host', '127.0.0.1'],
      ['serve', '--kinds', KINDS, '--metrics', '--tokens-file', tokens],
      ['serve', '--kinds', KINDS, '--metrics-scope', 'monitoring'],
      ['serve', '--kinds', KINDS, '--metrics-port', '70000'],
      ['worker', '--kinds', KINDS, '--tokens-file', tokens],
      ['worker', '--kinds', KINDS, '--metrics'],
    ]) {
      const c = cli([...args, '-d', join(dir, 'bad.db')])
      expect(await c.exit, args.join(' ')).toBe(2)
      expect(c.stderr, args.join(' ')).toMatch(/^jobtable: /)
    }
  })

  it('worker: --stop-timeout ends the stop of a handler that ignores its signal, exit 0, its job left running for the next start to fail as interrupted', async () => {
    const db = join(dir, 'stubborn.db')
    const worker = cli(['worker', '--kinds', KINDS, '--stop-timeout', '500', '-d', db])
    await workerRunsJobs(worker, db)
    const side = sideRunner(db)
    try {
      const id = await side.enqueue('stubborn', {})
      // Its handler has published: it is running, and will never return.
      await pollWhileUp(worker, () => side.get(id), (j) => j.status === 'running' && j.result !== null)
      worker.proc.kill('SIGTERM')
      expect(await worker.exit).toBe(0)
      const lines = logLines(worker)
      expect(lines.some((l) => l.level === 30 && l.stop_timeout_ms === 500 && String(l.msg).startsWith('stopping'))).toBe(true)
      // The runner's count of handlers it left, under the timeout the flag gave.
      expect(lines.some((l) => l.level === 40 && l.running === 1 && l.timeout_ms === 500)).toBe(true)
      expect(lines.at(-1)!.msg).toBe('stopped')
      expect(lines.some((l) => String(l.msg).startsWith('second signal'))).toBe(false)
      expect(await side.get(id)).toMatchObject({ id, status: 'running' })
      // The next start on the file fails it as interrupted.
      await side.start()
      expect(await side.get(id)).toMatchObject({ id, status: 'failed', error: 'interrupted by restart' })
    } finally {
      await side.close()
    }
  })

  it('worker: a claim the database refuses for good (its table renamed away) stops the workers with an error line and exit 1', async () => {
    const db = join(dir, 'broken.db')
    const worker = cli(['worker', '--kinds', KINDS, '-d', db])
    await workerRunsJobs(worker, db)
    const raw = new Database(db)
    try {
      raw.pragma('busy_timeout = 5000')
      // The change to the file makes the idle worker claim, and its claim finds no table: SQLITE_ERROR, never transient.
      raw.exec('ALTER TABLE jobtable_jobs RENAME TO jobtable_jobs_gone')
    } finally {
      raw.close()
    }
    expect(await worker.exit).toBe(1)
    const lines = logLines(worker)
    const fatal = lines.find((l) => l.msg === 'workers stopped on a database error')
    expect(fatal).toMatchObject({ level: 50, error: 'DatabaseError (database_error)', db_code: 'SQLITE_ERROR' })
    expect(fatal!.reason).toMatch(/^SQLite refused a statement on /)
    expect(lines.at(-1)!.msg).toBe('stopped')
  })

  it('migrates, lists and shows jobs as JSON, and answers an unknown id with exit 1', async () => {
    const db = join(dir, 'ops.db')
    expect(await cli(['migrate', '-d', db]).exit).toBe(0)
    const runner = new Runner({ driver: sqlite({ path: db }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
    runner.register('echo', { payload: (await import('zod')).z.strictObject({ n: (await import('zod')).z.number() }), handler: () => null })
    const ids = [await runner.enqueue('echo', { n: 1 }, { scope: 's1' }), await runner.enqueue('echo', { n: 2 })]
    await runner.close()
    const list = cli(['jobs', 'list', '-d', db])
    expect(await list.exit).toBe(0)
    const page = JSON.parse(list.stdout) as { jobs: { id: string }[]; nextCursor: string | null }
    expect(page.jobs.map((j) => j.id)).toEqual([...ids].reverse())
    const scoped = cli(['jobs', 'list', '--scope', 's1', '--limit', '1', '-d', db])
    expect(await scoped.exit).toBe(0)
    expect(JSON.parse(scoped.stdout).jobs.map((j: { id: string }) => j.id)).toEqual([ids[0]])
    const show = cli(['jobs', 'show', ids[1]!, '-d', db])
    expect(await show.exit).toBe(0)
    expect(JSON.parse(show.stdout)).toEqual({ id: ids[1], kind: 'echo', status: 'queued', result: null, error: null, attempt: 0, priority: 0, runAt: null, maxAttempts: 1 })
    const missing = cli(['jobs', 'show', '00000000-0000-4000-8000-000000000000', '-d', db])
    expect(await missing.exit).toBe(1)
    expect(missing.stderr).toBe('jobtable: job not found\n')
  })

  it('kinds pause, paused and resume act on the database for every process, as JSON on stdout', async () => {
    const db = join(dir, 'pause.db')
    expect(await cli(['migrate', '-d', db]).exit).toBe(0)
    const side = sideRunner(db)
    await side.enqueue('echo', { text: 'seen' })
    await side.close()
    const pause = cli(['kinds', 'pause', 'echo', '-d', db])
    expect(await pause.exit).toBe(0)
    expect(JSON.parse(pause.stdout)).toEqual({ kind: 'echo', paused: true, changed: true })
    const again = cli(['kinds', 'pause', 'echo', '-d', db])
    expect(await again.exit).toBe(0)
    expect(JSON.parse(again.stdout).changed).toBe(false)
    // A runner of another process reads the pause from the database.
    const runner = new Runner({ driver: sqlite({ path: db }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
    expect((await runner.paused()).map((p) => p.kind)).toEqual(['echo'])
    await runner.close()
    const listed = cli(['kinds', 'paused', '-d', db])
    expect(await listed.exit).toBe(0)
    expect(JSON.parse(listed.stdout).paused.map((p: { kind: string }) => p.kind)).toEqual(['echo'])
    const resume = cli(['kinds', 'resume', 'echo', '-d', db])
    expect(await resume.exit).toBe(0)
    expect(JSON.parse(resume.stdout)).toEqual({ kind: 'echo', paused: false, changed: true })
    const none = cli(['kinds', 'paused', '-d', db])
    expect(await none.exit).toBe(0)
    expect(JSON.parse(none.stdout)).toEqual({ paused: [] })
  })

  it('prune --help; prune and --retention refuse a bad duration or a status that is not terminal with exit 2, deleting nothing', async () => {
    const help = cli(['prune', '--help'])
    expect(await help.exit).toBe(0)
    expect(help.stdout).toContain('Usage: jobtable prune --older-than <duration>')
    const db = join(dir, 'refused.db')
    const bad = [
      ['prune'],
      ['prune', '--older-than', '7'],
      ['prune', '--older-than', '7 days'],
      ['prune', '--older-than', '-1d'],
      ['prune', '--older-than', '1y'],
      ['prune', '--older-than', '99999999999999d'],
      ['prune', '--older-than', '7d', '--status', 'queued'],
      ['prune', '--older-than', '7d', 'now'],
      ['worker', '--kinds', KINDS, '--retention', '7 days'],
      ['serve', '--kinds', KINDS, '--retention', '-1d'],
    ]
    await Promise.all(
      bad.map(async (args) => {
        const c = cli([...args, '-d', db])
        expect(await c.exit, args.join(' ')).toBe(2)
        expect(c.stderr, args.join(' ')).toMatch(/^jobtable: .*\nRun jobtable (prune|worker|serve) --help for usage\.\n$/)
      }),
    )
    // Refused before the database was opened.
    expect(existsSync(db)).toBe(false)
  })

  it('prune deletes the finished jobs older than --older-than, by status and kind if asked, prints the count, and never a queued job', async () => {
    const db = join(dir, 'prune.db')
    const DAY = 86_400_000
    // Jobs that ended ten days ago, by a runner whose clock says so; then one that ends now.
    const past = new Runner({ driver: sqlite({ path: db }), logger: QUIET, clock: () => Date.now() - 10 * DAY, retention: false })
    const z = (await import('zod')).z
    const payload = z.strictObject({ n: z.number() })
    for (const kind of ['echo', 'mail']) past.register(kind, { payload, failures: ['declined'], handler: ({ n }, job) => (n === 1 ? job.fail('declined') : null) })
    const queued = new Runner({ driver: sqlite({ path: db }), logger: QUIET, clock: () => Date.now() - 10 * DAY })
    const parked = queued.register(defineKind('parked', { payload }))
    const waiting = await parked.enqueue({ n: 0 })
    await past.start()
    const old = { echoOk: await past.enqueue('echo', { n: 0 }), echoFailed: await past.enqueue('echo', { n: 1 }), mailOk: await past.enqueue('mail', { n: 0 }) }
    const ended = async (r: Runner, id: string) => {
      while (!['succeeded', 'failed'].includes((await r.get(id)).status)) await new Promise((resolve) => setTimeout(resolve, 10))
    }
    for (const id of Object.values(old)) await ended(past, id)
    await past.close()
    await queued.close()
    const present = new Runner({ driver: sqlite({ path: db }), logger: QUIET, retention: false })
    present.register('echo', { payload, handler: () => null })
    await present.start()
    const young = await present.enqueue('echo', { n: 0 })
    await ended(present, young)
    await present.close()

    const prune = async (...args: string[]) => {
      const c = cli(['prune', '-d', db, ...args])
      expect(await c.exit, c.stderr).toBe(0)
      return JSON.parse(c.stdout) as { deleted: number }
    }
    expect(await prune('--older-than', '11d')).toEqual({ deleted: 0 })
    expect(await prune('--older-than', '7d', '--status', 'failed')).toEqual({ deleted: 1 })
    expect(await prune('--older-than', '7d', '--kind', 'mail', '--kind', 'other')).toEqual({ deleted: 1 })
    expect(await prune('--older-than', '168h', '--status', 'succeeded', '--status', 'cancelled')).toEqual({ deleted: 1 })
    const reader = new Runner({ driver: sqlite({ path: db }), logger: QUIET })
    try {
      expect((await reader.list()).jobs.map((j) => [j.id, j.status]).sort()).toEqual([[waiting, 'queued'], [young, 'succeeded']].sort())
      expect(await prune('--older-than', '0s')).toEqual({ deleted: 1 })
      expect((await reader.list()).jobs.map((j) => j.id)).toEqual([waiting])
    } finally {
      await reader.close()
    }
  })

  it('worker --retention: the started workers delete the finished jobs older than it, at their start, and log how many', async () => {
    const db = join(dir, 'retention.db')
    const DAY = 86_400_000
    const finishedAgo = async (days: number) => {
      const r = new Runner({ driver: sqlite({ path: db }), logger: QUIET, clock: () => Date.now() - days * DAY, retention: false })
      registerKinds(r)
      await r.start()
      const id = await r.enqueue('echo', { text: 'x' })
      await poll(() => r.get(id), (j) => j.status === 'succeeded')
      await r.close()
      return id
    }
    const old = await finishedAgo(10)
    const young = await finishedAgo(1)
    // No --log-level: the runner's info lines are written at the default level.
    const c = cli(['worker', '--kinds', KINDS, '-d', db, '--retention', '5d'])
    const reader = sideRunner(db)
    try {
      await pollWhileUp(c, () => reader.list(), (page) => !page.jobs.some((j) => j.id === old))
      expect((await reader.list()).jobs.map((j) => j.id)).toEqual([young])
    } finally {
      await reader.close()
    }
    c.proc.kill('SIGTERM')
    expect(await c.exit).toBe(0)
    expect(logLines(c).filter((l) => l.msg === 'deleted terminal jobs past their retention').map((l) => l.count)).toEqual([1])
  })

  it('fails with exit 1 and one line, without a stack, when the kinds module cannot load', async () => {
    const bad = join(dir, 'bad-kinds.mjs')
    writeFileSync(bad, `throw new Error(${JSON.stringify(MARKER)})`)
    const c = cli(['serve', '--kinds', bad, '-d', join(dir, 'k.db'), '--port', '0'])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toMatch(/could not load the kinds module/)
    expect(c.stderr).not.toContain(MARKER)
    expect(c.stderr).not.toMatch(/\n\s+at /)
    const none = join(dir, 'no-register.mjs')
    writeFileSync(none, 'export const x = 1')
    const d = cli(['worker', '--kinds', none, '-d', join(dir, 'k.db')])
    expect(await d.exit).toBe(1)
    expect(d.stderr).toContain('does not export a registerKinds(runner) function')
  })

  it('serves on PostgreSQL from a postgres:// URL, in the schema the URL names', async () => {
    if (postgresSkipReason !== undefined) {
      console.warn(`jobtable tests: CLI on PostgreSQL SKIPPED: ${postgresSkipReason}`)
      return
    }
    const schema = testSchema()
    const client = new pg.Client({ connectionString: PG_URL })
    await client.connect()
    try {
      const c = cli(['serve', '--kinds', KINDS, '--port', '0', '-d', `${PG_URL}?schema=${schema}`])
      const [, url] = await c.waitFor(/API at (http:\/\/[^/\s]+)\/api\/v1\/jobs/)
      const created = await fetch(`${url}/api/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'echo', payload: { text: 'hello' } }),
      })
      expect(created.status).toBe(201)
      const { id } = (await created.json()) as { id: string }
      const job = await poll(
        async () => (await (await fetch(`${url}/api/v1/jobs/${id}`)).json()) as { status: string; result: unknown },
        (j) => j.status === 'succeeded',
      )
      expect(job.result).toEqual({ length: 5 })
      c.proc.kill('SIGTERM')
      expect(await c.exit).toBe(0)
      const rows = await client.query(`SELECT status FROM "${schema}".jobs WHERE id = $1`, [id])
      expect(rows.rows).toEqual([{ status: 'succeeded' }])
    } finally {
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await client.end()
    }
  })

  it('migrate on PostgreSQL really migrates: a database that does not exist fails with exit 1', async () => {
    if (postgresSkipReason !== undefined) return
    const c = cli(['migrate', '-d', PG_URL.replace(/\/[^/]*$/, '/jobtable_no_such_database')])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toMatch(/^jobtable: migrate: database "jobtable_no_such_database" does not exist on .*\(3D000\)\n$/)
  })

  it('logs a PostgreSQL URL without credentials, in its user part or its query', () => {
    const shown = describeDatabase(`postgres://app:${MARKER}@db.internal:5432/prod?password=${MARKER}&sslpassword=${MARKER}&schema=jobs`)
    expect(shown).toBe('postgres://db.internal:5432/prod?schema=jobs')
  })

  it('opens a postgres:// URL through the PostgreSQL driver only, failing with exit 1 without printing the password', async () => {
    // Port 1 has no server: whether the driver is missing or cannot connect, the command fails cleanly.
    const c = cli(['jobs', 'list', '-d', `postgres://user:${MARKER}@127.0.0.1:1/none`])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toBe('jobtable: jobs list: cannot reach PostgreSQL at 127.0.0.1:1: the connection was refused (is the server running, and listening on that host and port?) (ECONNREFUSED)\n')
    const nowhere = cli(['jobs', 'show', '00000000-0000-4000-8000-000000000000', '-d', `postgres://user:${MARKER}@jobtable-no-such-host.invalid:5432/none`])
    expect(await nowhere.exit).toBe(1)
    // EAI_AGAIN where no name server answers at all.
    expect(nowhere.stderr).toMatch(/^jobtable: jobs show: cannot reach PostgreSQL at jobtable-no-such-host\.invalid:5432: its host name was not found \((ENOTFOUND|EAI_AGAIN)\)\n$/)
    expect(nowhere.stderr).not.toContain(MARKER)
    expect(c.stderr).not.toContain(MARKER)
    expect(c.stderr).not.toMatch(/\n\s+at /)
  })
  it('a kinds module that exports the wrong thing: the error shows the shape to export and what it exports instead', async () => {
    const wrong = join(dir, 'wrong-kinds.mjs')
    writeFileSync(wrong, 'export default function (runner) {}\nexport const foo = 1\n')
    const c = cli(['worker', '--kinds', wrong, '-d', join(dir, 'w.db')])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toContain(`${wrong} does not export a registerKinds(runner) function; it exports: default, foo.`)
    expect(c.stderr).toContain('Its default export is a function: export it by the name registerKinds instead.')
    expect(c.stderr).toContain('  export function registerKinds(runner) {\n    runner.register(kind, handler)')
    const empty = join(dir, 'empty-kinds.mjs')
    writeFileSync(empty, 'const registerKinds = () => {}\n')
    const e = cli(['worker', '--kinds', empty, '-d', join(dir, 'w.db')])
    expect(await e.exit).toBe(1)
    expect(e.stderr).toContain('it exports nothing.')
    const notFunction = join(dir, 'object-kinds.mjs')
    writeFileSync(notFunction, 'export const registerKinds = { echo: true }\n')
    const o = cli(['worker', '--kinds', notFunction, '-d', join(dir, 'w.db')])
    expect(await o.exit).toBe(1)
    expect(o.stderr).toContain('its registerKinds is a object, not a function.')
    // Refused before the database was opened.
    expect(existsSync(join(dir, 'w.db'))).toBe(false)
    const refused = join(dir, 'refused-kinds.mjs')
    writeFileSync(refused, `export function registerKinds(runner) { runner.register('echo', { handler: () => null }) }\n`)
    const r = cli(['worker', '--kinds', refused, '-d', join(dir, 'w.db')])
    expect(await r.exit).toBe(1)
    expect(r.stderr).toMatch(new RegExp(`^jobtable: registerKinds\\(runner\\) of ${refused.replaceAll('.', '\\.')} failed: register "echo": .+\n$`))
    const missing = cli(['worker', '--kinds', join(dir, 'no-such-kinds.ts'), '-d', join(dir, 'w.db')])
    expect(await missing.exit).toBe(1)
    expect(missing.stderr).toBe(`jobtable: no kinds module at ${join(dir, 'no-such-kinds.ts')} (--kinds takes the path of a module, relative to the working directory)\n`)
  })

  it('migrate into a folder that does not exist says so (no TypeError), and creates nothing', async () => {
    const db = join(dir, 'nodir', 'x.db')
    const c = cli(['migrate', '-d', db])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toBe(`jobtable: cannot open the database ${db}: the folder ${join(dir, 'nodir')} does not exist (create it with mkdir -p ${join(dir, 'nodir')}, or give --database a path in an existing folder)\n`)
    expect(existsSync(join(dir, 'nodir'))).toBe(false)
    // The same for a worker, which may create the file but not its folder.
    const w = cli(['worker', '--kinds', KINDS, '-d', db])
    expect(await w.exit).toBe(1)
    expect(w.stderr).toContain('the folder')
    expect(w.stderr).not.toContain('TypeError')
  })

  it('no command but migrate, serve and worker creates a SQLite database: the others fail on a missing file, saying how to create it, and create nothing', async () => {
    const db = join(dir, 'typo.db')
    const readers = [
      ['jobs', 'list'],
      ['jobs', 'show', '00000000-0000-4000-8000-000000000000'],
      ['kinds', 'paused'],
      ['kinds', 'pause', 'echo'],
      ['kinds', 'pause', 'echo', '--force'],
      ['kinds', 'resume', 'echo', '--force'],
      ['prune', '--older-than', '7d'],
    ]
    await Promise.all(
      readers.map(async (args) => {
        const c = cli([...args, '-d', db])
        expect(await c.exit, args.join(' ')).toBe(1)
        expect(c.stderr, args.join(' ')).toBe(`jobtable: no database at ${db} (create it with jobtable migrate -d ${db})\n`)
      }),
    )
    // Not even the -wal and -shm files.
    expect(readdirSync(dir)).toEqual([])
    // The default database too, in the working directory.
    const cwd = join(dir, 'project')
    mkdirSync(cwd)
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href
    const byDefault = spawn(process.execPath, ['--import', tsx, '--conditions=source', join(process.cwd(), 'src/cli/main.ts'), 'jobs', 'list'], {
      cwd,
      env: { ...process.env, JOBTABLE_DATABASE: undefined },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let stderr = ''
    byDefault.stderr!.on('data', (d) => (stderr += d))
    expect(await new Promise((r) => byDefault.once('close', r))).toBe(1)
    expect(stderr).toBe('jobtable: no database at ./jobtable.db (create it with jobtable migrate -d ./jobtable.db)\n')
    expect(readdirSync(cwd)).toEqual([])
    // migrate creates it; then they read it.
    expect(await cli(['migrate', '-d', db]).exit).toBe(0)
    const list = cli(['jobs', 'list', '-d', db])
    expect(await list.exit).toBe(0)
    expect(JSON.parse(list.stdout)).toEqual({ jobs: [], nextCursor: null })
  }, 120_000)

  it('kinds pause and resume refuse a kind the database has never seen unless --force, suggesting the nearest known one', async () => {
    const db = join(dir, 'typo-kinds.db')
    expect(await cli(['migrate', '-d', db]).exit).toBe(0)
    const unseen = cli(['kinds', 'pause', 'meal_plan', '-d', db])
    expect(await unseen.exit).toBe(1)
    expect(unseen.stderr).toContain('kinds pause: the database has never seen the kind "meal_plan" (no job of it, it is not paused, and no live runner handles it) (no kind has had a job here yet)')
    // A producer's jobs: no process has run either kind.
    const side = new Runner({ driver: sqlite({ path: db }), logger: QUIET })
    const payload = (await import('zod')).z.strictObject({})
    for (const kind of ['meal_plan', 'send_email']) await side.register(defineKind(kind, { payload })).enqueue({})
    await side.close()

    const typo = cli(['kinds', 'pause', 'meal_pln', '-d', db])
    expect(await typo.exit).toBe(1)
    expect(typo.stderr).toBe(
      'jobtable: kinds pause: the database has never seen the kind "meal_pln" (no job of it, it is not paused, and no live runner handles it); did you mean "meal_plan"? (known kinds: meal_plan, send_email)\n' +
        'To pause it anyway, such as a kind whose first job is still to come, add --force.\n',
    )
    const paused = cli(['kinds', 'paused', '-d', db])
    expect(await paused.exit).toBe(0)
    expect(JSON.parse(paused.stdout)).toEqual({ paused: [] })
    // Swapped letters are one edit too.
    const swapped = cli(['kinds', 'resume', 'mael_plan', '-d', db])
    expect(await swapped.exit).toBe(1)
    expect(swapped.stderr).toContain('did you mean "meal_plan"?')
    const far = cli(['kinds', 'pause', 'reports', '-d', db])
    expect(await far.exit).toBe(1)
    expect(far.stderr).not.toContain('did you mean')

    const known = cli(['kinds', 'pause', 'meal_plan', '-d', db])
    expect(await known.exit).toBe(0)
    expect(JSON.parse(known.stdout)).toEqual({ kind: 'meal_plan', paused: true, changed: true })
    const forced = cli(['kinds', 'pause', 'reports', '--force', '-d', db])
    expect(await forced.exit).toBe(0)
    expect(JSON.parse(forced.stdout)).toEqual({ kind: 'reports', paused: true, changed: true })
    // A kind a live runner handles is known before its first job; once that runner is gone it is not.
    const worker = new Runner({ driver: sqlite({ path: db }), logger: QUIET })
    worker.register('digest', { payload, handler: () => undefined })
    await worker.start()
    const handled = cli(['kinds', 'pause', 'digest', '-d', db])
    expect(await handled.exit).toBe(0)
    expect(JSON.parse(handled.stdout)).toEqual({ kind: 'digest', paused: true, changed: true })
    expect(await cli(['kinds', 'resume', 'digest', '-d', db]).exit).toBe(0)
    await worker.close()
    expect(await cli(['kinds', 'pause', 'digest', '-d', db]).exit).toBe(1)
    // A paused kind is known: resume it without --force.
    const resumed = cli(['kinds', 'resume', 'reports', '-d', db])
    expect(await resumed.exit).toBe(0)
    expect(JSON.parse(resumed.stdout)).toEqual({ kind: 'reports', paused: false, changed: true })
    const listed = cli(['kinds', 'paused', '-d', db])
    expect(await listed.exit).toBe(0)
    expect(JSON.parse(listed.stdout).paused.map((p: { kind: string }) => p.kind)).toEqual(['meal_plan'])
    const misplaced = cli(['kinds', 'paused', '--force', '-d', db])
    expect(await misplaced.exit).toBe(2)
    // 14 command processes in turn: a bound for a loaded machine, not a measure.
  }, 120_000)

  it('SQLite errors are named in words with their code, for the command that ran: not a database, a folder, a lock held', async () => {
    const text = join(dir, 'notes.db')
    writeFileSync(text, 'shopping list: '.repeat(100))
    const notDb = cli(['jobs', 'list', '-d', text])
    expect(await notDb.exit).toBe(1)
    expect(notDb.stderr).toBe(`jobtable: jobs list: ${text} is not a SQLite database (a file of another kind, or an encrypted one); check the --database path (SQLITE_NOTADB)\n`)
    const folder = join(dir, 'a-folder')
    mkdirSync(folder)
    const cantOpen = cli(['kinds', 'paused', '-d', folder])
    expect(await cantOpen.exit).toBe(1)
    expect(cantOpen.stderr).toBe(`jobtable: kinds paused: cannot open ${folder}: it is a folder; give --database the path of a SQLite file (SQLITE_CANTOPEN)\n`)

    // A file another connection holds an exclusive lock on (a rollback journal: readers wait too), past the open's wait.
    const locked = join(dir, 'locked.db')
    const holder = new Database(locked)
    try {
      holder.exec('CREATE TABLE t (x)')
      holder.exec('BEGIN EXCLUSIVE')
      holder.exec('INSERT INTO t VALUES (1)')
      const busy = cli(['migrate', '-d', locked])
      expect(await busy.exit).toBe(1)
      expect(busy.stderr).toBe(`jobtable: migrate: ${locked} is locked by another connection (a long transaction, or a tool holding the file open); try again once it is done (SQLITE_BUSY)\n`)
    } finally {
      holder.exec('ROLLBACK')
      holder.close()
    }
  })

  it('PostgreSQL errors are named in words with their code, for the command that ran, never with the password', async () => {
    if (postgresSkipReason !== undefined) {
      console.warn(`jobtable tests: CLI database errors on PostgreSQL SKIPPED: ${postgresSkipReason}`)
      return
    }
    const url = new URL(PG_URL)
    const at = `${url.hostname}:${url.port || '5432'}`
    const withPassword = (user: string, database: string) => `postgres://${user}:${MARKER}@${at}/${database}`
    const run = async (args: string[]) => {
      const c = cli(args)
      expect(await c.exit, args.join(' ')).toBe(1)
      expect(c.stderr, args.join(' ')).not.toContain(MARKER)
      expect(c.stderr, args.join(' ')).not.toMatch(/\n\s+at /)
      return c.stderr
    }
    expect(await run(['jobs', 'list', '-d', withPassword(url.username || 'postgres', 'jobtable_no_such_database')])).toBe(
      `jobtable: jobs list: database "jobtable_no_such_database" does not exist on ${at}; create it (createdb jobtable_no_such_database), or fix its name in the URL (3D000)\n`,
    )
    // 28000 under trust authentication, as here; 28P01 where the server asks for a password.
    const login = await run(['migrate', '-d', withPassword('jobtable_no_such_role', url.pathname.slice(1))])
    expect([
      `jobtable: migrate: the server at ${at} refused the login: the user does not exist, or pg_hba.conf does not let it connect (28000)\n`,
      `jobtable: migrate: password authentication failed at ${at}; check the user and password in the URL (or PGPASSWORD) (28P01)\n`,
    ]).toContain(login)
    // A role that may log in, but not create jobtable's schema.
    const role = `jt_cli_${testSchema().slice(-12)}`
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN`)
      const denied = await run(['migrate', '-d', `${withPassword(role, url.pathname.slice(1))}?schema=${testSchema()}`])
      expect(denied).toBe(
        `jobtable: migrate: permission denied on database "${url.pathname.slice(1)}": the user in the URL lacks a privilege jobtable needs (to create its schema and tables when migrating, or to read and write them) (42501)\n`,
      )
    } finally {
      await admin.query(`DROP ROLE IF EXISTS ${role}`)
      await admin.end()
    }
  })

  it('a read-only command on a PostgreSQL schema without jobtable tables fails, creating nothing', async () => {
    if (postgresSkipReason !== undefined) {
      console.warn(`jobtable tests: CLI missing schema on PostgreSQL SKIPPED: ${postgresSkipReason}`)
      return
    }
    const schema = testSchema()
    const client = new pg.Client({ connectionString: PG_URL })
    await client.connect()
    try {
      for (const args of [['jobs', 'list'], ['kinds', 'paused'], ['prune', '--older-than', '1d']]) {
        const c = cli([...args, '-d', `${PG_URL}?schema=${schema}`])
        expect(await c.exit, args.join(' ')).toBe(1)
        expect(c.stderr).toBe(`jobtable: no jobtable tables in the schema "${schema}" of this database (create them with jobtable migrate -d <the same URL>, or fix ?schema= in the URL)\n`)
      }
      expect((await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount).toBe(0)
      expect(await cli(['migrate', '-d', `${PG_URL}?schema=${schema}`]).exit).toBe(0)
      const list = cli(['jobs', 'list', '-d', `${PG_URL}?schema=${schema}`])
      expect(await list.exit).toBe(0)
      expect(JSON.parse(list.stdout)).toEqual({ jobs: [], nextCursor: null })
    } finally {
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await client.end()
    }
  })

  it('a --database URL of another scheme is a usage error that prints only its scheme', async () => {
    const c = cli(['jobs', 'list', '-d', `mysql://app:${MARKER}@db.internal/prod`])
    expect(await c.exit).toBe(2)
    expect(c.stderr).toBe('jobtable: --database mysql://… is not a database jobtable knows: give a SQLite file path or a postgres:// URL\nRun jobtable jobs --help for usage.\n')
  })
})
