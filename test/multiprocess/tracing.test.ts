import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { context, SpanKind, trace } from '@opentelemetry/api'
import type { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import { defineKind, Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { installTracing, only } from '../support/tracing.js'
import { eventually, spawnWorker, type WorkerProcess } from './processes.js'

const TRACED_WORKER = fileURLToPath(new URL('./traced-worker.ts', import.meta.url))
const silent = { debug() {}, info() {}, warn() {}, error() {} }

/** A span as traced-worker.ts writes it. */
interface SpanLine {
  name: string
  traceId: string
  spanId: string
  parentSpanId?: string
  kind: number
  attributes: Record<string, unknown>
}

describe('tracing across processes', () => {
  let dir: string
  let child: WorkerProcess | undefined
  let tracing: ReturnType<typeof installTracing>
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-trace-'))
    tracing = installTracing()
  })
  afterEach(async () => {
    child?.child.kill('SIGKILL')
    await child?.exited
    child = undefined
    await tracing.uninstall()
    rmSync(dir, { recursive: true, force: true })
  })

  /** The spans the child process has written so far. */
  const childSpans = (file: string): SpanLine[] =>
    existsSync(file)
      ? readFileSync(file, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l) as SpanLine)
      : []

  /**
   * Enqueues a job of `traced` inside a span of this process, on `driver`;
   * the runner in the child process runs it. Its run span is in this
   * process's trace, a child of the enqueue span made here, and the
   * handler's span is the run span's child.
   */
  async function enqueueHereRunThere(driver: Driver, env: Record<string, string>): Promise<void> {
    const spans = join(dir, 'spans.jsonl')
    child = spawnWorker({ ...env, JT_SPANS: spans }, TRACED_WORKER)
    await child.ready
    const web = new Runner({ driver, logger: silent })
    try {
      const kind = web.register(defineKind('traced', { payload: z.strictObject({ n: z.number().int() }) }))
      const request = tracing.tracer.startSpan('http request')
      const id = await context.with(trace.setSpan(context.active(), request), () => kind.enqueue({ n: 1 }))
      request.end()
      await eventually(async () => childSpans(spans).some((s) => s.name === 'handler work') && childSpans(spans).some((s) => s.name === 'jobtable run traced'), 20)
      const enqueue = only((tracing.exporter as InMemorySpanExporter).getFinishedSpans(), 'jobtable enqueue traced')
      const there = childSpans(spans)
      const run = there.find((s) => s.name === 'jobtable run traced')!
      const work = there.find((s) => s.name === 'handler work')!
      expect(enqueue.parentSpanContext?.spanId).toBe(request.spanContext().spanId)
      expect(run.kind).toBe(SpanKind.CONSUMER)
      expect(run.attributes['messaging.message.id']).toBe(id)
      expect(run.traceId).toBe(request.spanContext().traceId)
      expect(run.parentSpanId).toBe(enqueue.spanContext().spanId)
      expect(work.traceId).toBe(run.traceId)
      expect(work.parentSpanId).toBe(run.spanId)
      expect((await web.get(id)).status).toBe('succeeded')
    } finally {
      await web.close()
    }
  }

  it('sqlite: a job enqueued inside a trace in this process runs in another process inside that trace', async () => {
    const path = join(dir, 'jobs.db')
    await enqueueHereRunThere(sqlite({ path }), { JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path })
  }, 60_000)

  it.skipIf(postgresBackend().skip !== undefined)('postgres: a job enqueued inside a trace in this process runs in another process inside that trace', async () => {
    const schema = testSchema()
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 })
    try {
      const driver = postgres({ connectionString: PG_URL, schema })
      // Migrated before the child opens the schema, so the two never race to migrate.
      await driver.migrate()
      await enqueueHereRunThere(driver, { JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema })
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    }
  }, 60_000)
})
