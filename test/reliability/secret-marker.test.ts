import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { inspect } from 'node:util'
import { pino, stdSerializers } from 'pino'
import * as v from 'valibot'
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { z } from 'zod'
import { Runner, type Logger } from 'jobtable'
import { createMetrics } from 'jobtable/metrics'
import { describeEachBackend, postgresSkipReason, PG_URL } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { installTracing } from '../support/tracing.js'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import { servers } from '../http/client.js'
import { bound, size } from './sizes.js'
import { registerSecretKinds, REFUSED } from './support/secrets-kinds.js'
import { encodings, findMarker, newMarker, whereFound, type Marker } from './support/secrets-search.js'
import { exercise, recorder, until } from './support/secrets-scenario.js'
import { postgresSecretStore, sqliteSecretStore, type SecretStore } from './support/secrets-stores.js'
import { jobtableCommand, type Command } from './support/secrets-cli.js'

/** How many times the whole scenario runs against one runner (each way once per round). */
const ROUNDS = size('secret_marker_rounds', 1, 5)
const PG = postgresSkipReason === undefined ? PG_URL : undefined

/** Where each search looked, and what it found: a channel must show no form of the marker, and, where `control` says, the control. */
interface Channel {
  readonly name: string
  readonly text: string
  /** Whether the control text must show here: proof that this capture holds what it should. */
  readonly control: boolean
}

function expectNoLeak(channels: Channel[], marker: Marker, control: Marker): string {
  const leaks: Record<string, Record<string, number>> = {}
  for (const c of channels) {
    const found = findMarker(c.text, marker)
    if (Object.keys(found).length > 0) leaks[c.name] = found
  }
  const where = channels.map((c) => `${c.name}:\n${whereFound(c.text, marker).join('\n---\n')}`).filter((w) => w.includes('<'))
  expect(leaks, `occurrences of the marker, by channel and form, where:\n${where.join('\n\n')}`).toEqual({})
  for (const c of channels.filter((c) => c.control)) {
    expect(Object.keys(findMarker(c.text, control)).length, `the control text shows in ${c.name}`).toBeGreaterThan(0)
  }
  return channels.map((c) => `${c.name} ${c.text.length} characters`).join(', ')
}

/** A pino logger writing JSON lines to a file, errors under err, error and cause expanded as pino does, teed to a capture. */
function fileLogger(file: string): { logger: Logger; text(): string } {
  const serializers = { err: stdSerializers.err, error: stdSerializers.err, cause: stdSerializers.err }
  const real = pino({ level: 'debug', serializers }, pino.destination({ dest: file, sync: true }))
  const captured = captureLogs()
  const tee = (level: 'debug' | 'info' | 'warn' | 'error') => (fields: object, message: string) => {
    real[level](fields, message)
    captured[level](fields, message)
  }
  return {
    logger: { debug: tee('debug'), info: tee('info'), warn: tee('warn'), error: tee('error') },
    text: () => `${readFileSync(file, 'utf8')}\n${captured.text()}`,
  }
}

/** What a rejected call hands its caller, written out every way a caller might print it. */
async function thrownBy(what: string, call: Promise<unknown>): Promise<string> {
  try {
    await call
    return `${what}: resolved`
  } catch (err) {
    const e = err as { message?: unknown; issues?: unknown; code?: unknown }
    return [what, String(err), inspect(err, { depth: 20, showHidden: true }), JSON.stringify(err), JSON.stringify(e.issues), String(e.code), String(e.message)].join('\n')
  }
}

describe('the marker search', () => {
  /** The oracle can fail: each encoding of the marker, at each offset inside a longer encoded text, is found. */
  it('finds the marker raw, base64, base64url, hex and percent-encoded, at any alignment, and its core alone', () => {
    const marker = newMarker()
    expect(findMarker('nothing here', marker)).toEqual({})
    for (let pad = 0; pad < 4; pad++) {
      const framed = `${'p'.repeat(pad)}{"e":"${marker.text}"}tail`
      for (const text of encodings(framed)) expect(Object.keys(findMarker(`<${text}>`, marker)).length, `${pad} ${text}`).toBeGreaterThan(0)
    }
    expect(Object.keys(findMarker(`at handler (${marker.core.slice(0)}`, marker))).toContain('core:raw')
  })
})

describeEachBackend('secret marker', (backend) => {
  let store: SecretStore
  let dir: string
  let untrace: (() => Promise<void>) | undefined
  const s = servers()
  beforeEach(() => {
    store = backend.name === 'sqlite' ? sqliteSecretStore() : postgresSecretStore()
    dir = mkdtempSync(join(tmpdir(), 'jobtable-secrets-out-'))
  })
  afterEach(async () => {
    await untrace?.()
    untrace = undefined
    await store.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  /**
   * Proves, in the library: a marker a handler, projection, validator or
   * database error holds, let out in every way listed in
   * secrets-kinds.ts and secrets-scenario.ts, shows in no form in the
   * database files, the runner's and the API's pino log, the metrics,
   * any API answer or event stream, or any error a call rejects with;
   * while the control text, stored and shown by design, shows in each.
   */
  it('keeps the marker out of the store, the logs, the metrics, every answer and every error thrown to the caller', async () => {
    const marker = newMarker()
    const control = newMarker('CTRL')
    const side: string[] = []
    const setup = { marker: marker.text, control: control.text, side: (t: string) => void side.push(t), pgUrl: PG }
    const log = fileLogger(join(dir, 'runner.log'))
    // An OpenTelemetry SDK, as an application installs one: every run's span, and the enqueue spans made inside a request's.
    const exporter = new InMemorySpanExporter()
    const tracing = installTracing(exporter)
    untrace = () => tracing.uninstall()
    const open = async () => {
      const runner = new Runner({ driver: store.driver(), workers: 8, logger: log.logger })
      registerSecretKinds(runner, setup)
      const metrics = createMetrics({ runner })
      await runner.start()
      const api = recorder((await s.serve(runner, { logger: log.logger, metrics: metrics.registry, eventsPollMs: 20 })).base)
      return { runner, metrics, api }
    }
    const first = await open()
    const quoted = await store.refuseQuoting(marker.text)
    // The database's own message quotes the value it refuses.
    expect(quoted).toContain(marker.text)

    const thrown: string[] = []
    let ways = 0
    for (let round = 0; round < ROUNDS; round++) {
      const { jobs, refused } = await exercise(first.api, marker.text, control.text, { metrics: true })
      ways += jobs.size + refused
      thrown.push(await thrownBy('enqueue refused by zod', first.runner.enqueue('leaky_zod', { text: marker.text })))
      thrown.push(await thrownBy('enqueue refused by valibot', first.runner.enqueue('leaky_valibot', { n: marker.text })))
      thrown.push(await thrownBy('enqueue refused by the database', first.runner.enqueue('leaky_text', { text: `${REFUSED} ${marker.text}` })))
      thrown.push(await thrownBy('an unknown cursor', first.runner.list({ cursor: marker.text })))
      thrown.push(await thrownBy('get of an id that is the marker', first.runner.get(marker.text)))
      thrown.push(await thrownBy('cancel of an id that is the marker', first.runner.cancel(marker.text)))
      // Inside a request's span, so each enqueue has one of its own, failed by its code.
      await tracing.tracer.startActiveSpan('request', async (span) => {
        thrown.push(await thrownBy('enqueue in a span, refused by zod', first.runner.enqueue('leaky_zod', { text: marker.text })))
        thrown.push(await thrownBy('enqueue in a span, refused by the database', first.runner.enqueue('leaky_text', { text: `${REFUSED} ${marker.text}` })))
        // The application's own validator's error reaches the application as it is; only the span is searched.
        await first.runner.enqueue('leaky_throwing_validator', { text: marker.text }).catch(() => undefined)
        await first.runner.enqueue(`control ${control.text}`, { text: control.text, fail: false })
        span.end()
      })
    }
    // The validators do quote the value: jobtable drops what they say.
    const zodIssue = z.strictObject({ text: z.string().refine(() => false, { error: (i) => `refused ${String(i.input)}` }) }).safeParse({ text: marker.text })
    expect(JSON.stringify(zodIssue.error?.issues)).toContain(marker.text)
    expect(JSON.stringify(v.safeParse(v.strictObject({ n: v.number() }), { n: marker.text }).issues?.[0]?.message)).toContain(marker.text)

    // A throw after abort: the handler throws the marker once stop() aborts it; the next start fails the job as interrupted.
    const stopping = await first.api.post({ kind: 'leaky', payload: { way: 'a throw after abort (stop)' } })
    await until(first.api, stopping.json.id, (j) => j.status === 'running')
    await first.runner.stop()
    const beforeRestart = await store.dump()
    await first.runner.close()
    first.metrics.close()
    const second = await open()
    expect(await until(second.api, stopping.json.id, (j) => j.status === 'failed')).toMatchObject({ error: 'interrupted by restart' })
    await second.api.events(stopping.json.id)
    await second.api.get('/metrics')
    await second.runner.close()
    second.metrics.close()
    const afterClose = await store.dump()
    const spans = exporter.getFinishedSpans().map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events, links: s.links }))

    expect(Object.keys(findMarker(side.join('\n'), marker)).length, 'the handlers held the marker').toBeGreaterThan(0)
    const searched = expectNoLeak(
      [
        { name: `database before restart (${beforeRestart.how})`, text: beforeRestart.text, control: true },
        { name: `database after close (${afterClose.how})`, text: afterClose.text, control: true },
        { name: 'logs', text: log.text(), control: true },
        { name: 'API answers', text: [...first.api.heard, ...second.api.heard].join('\n'), control: true },
        { name: 'event streams', text: [...first.api.heard, ...second.api.heard].filter((h) => h.includes('/events ->')).join('\n'), control: true },
        { name: 'metrics', text: [...first.api.heard, ...second.api.heard].filter((h) => h.startsWith('GET /metrics')).join('\n'), control: true },
        { name: 'errors thrown to the caller', text: thrown.join('\n'), control: false },
        { name: 'trace spans', text: JSON.stringify(spans), control: true },
      ],
      marker,
      control,
    )
    console.info(`secret marker, library (${backend.name}): ${ROUNDS} round(s), ${ways} jobs and refused requests over HTTP, ${thrown.length} calls rejected in code, ${spans.length} spans; 0 occurrences in ${searched}`)
  }, bound(60_000, 300_000))

  /**
   * Proves, in the `jobtable` command: the same ways, through `jobtable
   * serve` with bearer tokens, metrics and debug logs, stopped by SIGTERM
   * with a handler that throws the marker once aborted, then started
   * again, and `jobtable jobs list` and `jobs show`: no form of the
   * marker in either process's stdout or stderr, in the answers, the
   * event streams, the metrics, or the database.
   */
  it('keeps the marker out of the output of jobtable serve, its answers, its metrics and its database, across a SIGTERM and a restart', async () => {
    const marker = newMarker()
    const control = newMarker('CTRL')
    const sideFile = join(dir, 'side.txt')
    const token = `token-${control.core}`
    const tokensFile = join(dir, 'tokens.json')
    writeFileSync(tokensFile, JSON.stringify({ [token]: 'household' }))
    const env = { JT_SECRET_MARKER: marker.text, JT_SECRET_CONTROL: control.text, JT_SECRET_SIDE: sideFile, ...(PG ? { JT_SECRET_PG_URL: PG } : {}) }
    const serveArgs = ['serve', '--kinds', 'test/reliability/support/secrets-kinds.ts', '--port', '0', '--workers', '8', '--log-level', 'debug']
    const flags = [...serveArgs, '--metrics', '--tokens-file', tokensFile, '--operator-scope', 'household', '-d', store.database]
    const processes: Command[] = []
    const serveOnce = async () => {
      const c = jobtableCommand(flags, env)
      processes.push(c)
      const [, url] = await c.waitFor(/API at (http:\/\/[^/\s]+)\/api\/v1\/jobs/)
      return { c, api: recorder(url!, token) }
    }

    const first = await serveOnce()
    expect(await store.refuseQuoting(marker.text)).toContain(marker.text)
    let ways = 0
    for (let round = 0; round < ROUNDS; round++) {
      const { jobs, refused } = await exercise(first.api, marker.text, control.text, { metrics: true })
      ways += jobs.size + refused + 1
      // A token that is the marker is refused without being written down.
      expect((await first.api.call('GET', '/api/v1/jobs', { headers: { authorization: `Bearer ${marker.text}` } })).status).toBe(401)
    }
    const stopping = await first.api.post({ kind: 'leaky', payload: { way: 'a throw after abort (stop)' } })
    await until(first.api, stopping.json.id, (j) => j.status === 'running')
    // While the process is up: on SQLite, the -wal and -shm it holds.
    const whileUp = await store.dump()
    first.c.proc.kill('SIGTERM')
    expect(await first.c.exit).toBe(0)

    const second = await serveOnce()
    expect(await until(second.api, stopping.json.id, (j) => j.status === 'failed')).toMatchObject({ error: 'interrupted by restart' })
    await second.api.get('/metrics')
    second.c.proc.kill('SIGTERM')
    expect(await second.c.exit).toBe(0)
    for (const args of [['jobs', 'list', '--scope', 'household', '--limit', '1000'], ['jobs', 'show', stopping.json.id, '--scope', 'household']]) {
      const c = jobtableCommand([...args, '-d', store.database], env)
      processes.push(c)
      expect(await c.exit, args.join(' ')).toBe(0)
    }
    const dumped = await store.dump()

    expect(existsSync(sideFile) && Object.keys(findMarker(readFileSync(sideFile, 'utf8'), marker)).length, 'the handlers held the marker').toBeGreaterThan(0)
    const heard = [...first.api.heard, ...second.api.heard]
    const searched = expectNoLeak(
      [
        { name: `database while serving (${whileUp.how})`, text: whileUp.text, control: true },
        { name: `database (${dumped.how})`, text: dumped.text, control: true },
        { name: 'stderr of jobtable serve (its pino log)', text: first.c.stderr + second.c.stderr, control: true },
        { name: 'stdout of jobtable serve', text: first.c.stdout + second.c.stdout, control: false },
        { name: 'stdout of jobtable jobs', text: processes.slice(2).map((p) => p.stdout).join('\n'), control: true },
        { name: 'stderr of jobtable jobs', text: processes.slice(2).map((p) => p.stderr).join('\n'), control: false },
        { name: 'API answers', text: heard.join('\n'), control: true },
        { name: 'event streams', text: heard.filter((h) => h.includes('/events ->')).join('\n'), control: true },
        { name: 'metrics', text: heard.filter((h) => h.startsWith('GET /metrics')).join('\n'), control: true },
      ],
      marker,
      control,
    )
    console.info(`secret marker, jobtable serve (${backend.name}): ${ROUNDS} round(s), ${ways} jobs and refused requests, ${processes.length} processes; 0 occurrences in ${searched}`)
  }, bound(90_000, 400_000))
})

describe('secret marker: a kinds module that fails', () => {
  /** Proves the command's own error line, when the kinds module fails with the marker as its message, name, code and cause, at import or at registration, holds no form of it. */
  it('keeps the marker out of the error line of jobtable serve and worker when the kinds module fails with it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-secrets-kinds-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const marker = newMarker()
    const lines: Channel[] = []
    for (const mode of ['serve', 'worker']) {
      for (const fail of ['import', 'register']) {
        const args = [mode, '--kinds', 'test/reliability/support/secrets-broken-kinds.ts', '-d', join(dir, 'jobs.db'), ...(mode === 'serve' ? ['--port', '0'] : [])]
        const c = jobtableCommand(args, { JT_SECRET_MARKER: marker.text, JT_SECRET_FAIL: fail })
        expect(await c.exit, `${mode} ${fail}`).toBe(1)
        expect(c.stderr, `${mode} ${fail}`).toMatch(/^jobtable: /)
        lines.push({ name: `${mode}, failing at ${fail}: stderr`, text: c.stderr, control: false }, { name: `${mode}, failing at ${fail}: stdout`, text: c.stdout, control: false })
      }
    }
    expectNoLeak(lines, marker, marker)
  }, bound(60_000, 120_000))
})
