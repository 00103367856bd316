import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
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
    await pollWhileUp(worker, async () => worker.stderr, (text) => text.includes('jobtable worker running'))
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
    expect(logLines(worker).at(-1)!.msg).toBe('stopped')
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
    await pollWhileUp(worker, async () => worker.stderr, (text) => text.includes('jobtable worker running'))
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
    await pollWhileUp(worker, async () => worker.stderr, (text) => text.includes('jobtable worker running'))
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
    const c = cli(['worker', '--kinds', KINDS, '-d', db, '--retention', '5d', '--log-level', 'info'])
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
  })

  it('logs a PostgreSQL URL without credentials, in its user part or its query', () => {
    const shown = describeDatabase(`postgres://app:${MARKER}@db.internal:5432/prod?password=${MARKER}&sslpassword=${MARKER}&schema=jobs`)
    expect(shown).toBe('postgres://db.internal:5432/prod?schema=jobs')
  })

  it('opens a postgres:// URL through the PostgreSQL driver only, failing with exit 1 without printing the password', async () => {
    // Port 1 has no server: whether the driver is missing or cannot connect, the command fails cleanly.
    const c = cli(['jobs', 'list', '-d', `postgres://user:${MARKER}@127.0.0.1:1/none`])
    expect(await c.exit).toBe(1)
    expect(c.stderr).toMatch(/^jobtable: /)
    expect(c.stderr).not.toContain(MARKER)
    expect(c.stderr).not.toMatch(/\n\s+at /)
  })
})
