import { readFileSync } from 'node:fs'
import { afterEach, expect, it } from 'vitest'
import { z } from 'zod'
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Context, type TextMapPropagator } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import type { InMemorySpanExporter, ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { defineKind, type Driver, type NewJob } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { installTracing, isChildOf, only, spansWhen, spanText } from '../support/tracing.js'
import { track } from '../support/wait.js'

/** Markers that must never reach a span: a payload's, a scope's, a result's, and what a handler threw. */
const PAYLOAD_SECRET = 'payload-secret-5f1c9a'
const SCOPE_SECRET = 'scope-secret-77d2e0'
const RESULT_SECRET = 'result-secret-0b8e43'
const THROWN_SECRET = 'thrown-secret-c3a9f1'

const payload = z.strictObject({ n: z.number().int(), note: z.string().optional() })
const plan = defineKind('plan_week', { payload, failures: ['out_of_stock'], retry: { maxAttempts: 2, codes: ['out_of_stock'], backoff: { baseMs: 0, maxMs: 0 } } })

/** jobtable's version, which names its tracer beside `jobtable`. */
const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version

const ENQUEUE = 'jobtable enqueue plan_week'
const RUN = 'jobtable run plan_week'

describeEachBackend('tracing', (backend) => {
  const h = harness(backend)
  let uninstall: (() => Promise<void>) | undefined
  afterEach(async () => {
    await uninstall?.()
    uninstall = undefined
  })

  /** Installs an SDK for this test; unregistered after it. */
  function sdk() {
    const installed = installTracing()
    uninstall = installed.uninstall
    return { ...installed, exporter: installed.exporter as InMemorySpanExporter }
  }

  /** A context whose active span is a new span of the test's own (ended at once: only its context matters). */
  function inSpan(tracer: ReturnType<typeof sdk>['tracer'], name: string, base: Context = ROOT_CONTEXT) {
    const span = tracer.startSpan(name, {}, base)
    span.end()
    return { span: span.spanContext(), ctx: trace.setSpan(base, span) }
  }

  /** The run spans by job id. */
  function runsById(spans: readonly ReadableSpan[]): Map<string, ReadableSpan[]> {
    const runs = new Map<string, ReadableSpan[]>()
    for (const s of spans.filter((s) => s.name === RUN)) {
      const id = s.attributes['messaging.message.id'] as string
      runs.set(id, [...(runs.get(id) ?? []), s])
    }
    return runs
  }

  it('an enqueue inside a trace is a PRODUCER child of the active span; its run, by another runner on its own driver, is a CONSUMER child of the enqueue; the handler runs inside the run span', async () => {
    const { exporter, tracer } = sdk()
    const web = h.runner()
    const produce = web.register(plan)
    const worker = h.runner()
    worker.register(plan, async () => {
      await Promise.resolve()
      tracer.startSpan('handler work').end()
      return { note: RESULT_SECRET }
    })
    const parent = inSpan(tracer, 'http request')
    const id = await context.with(parent.ctx, () => produce.enqueue({ n: 1, note: PAYLOAD_SECRET }, { scope: SCOPE_SECRET }))
    const done = track(worker)
    await worker.start()
    await done.ends([id])
    const spans = await spansWhen(exporter, (s) => s.some((x) => x.name === RUN))

    const enqueue = only(spans, ENQUEUE)
    expect(enqueue.kind).toBe(SpanKind.PRODUCER)
    expect(isChildOf(enqueue, parent.span)).toBe(true)
    expect(enqueue.attributes).toEqual({
      'messaging.system': 'jobtable',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'enqueue',
      'messaging.destination.name': 'plan_week',
      'messaging.message.id': id,
    })
    expect(enqueue.status.code).toBe(SpanStatusCode.UNSET)
    expect(enqueue.instrumentationScope).toMatchObject({ name: 'jobtable', version: VERSION })

    const run = only(spans, RUN)
    expect(run.kind).toBe(SpanKind.CONSUMER)
    expect(isChildOf(run, enqueue.spanContext())).toBe(true)
    expect(run.attributes).toEqual({
      'messaging.system': 'jobtable',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'run',
      'messaging.destination.name': 'plan_week',
      'messaging.message.id': id,
      'jobtable.job.attempt': 1,
      'jobtable.job.outcome': 'succeeded',
    })
    expect(run.status.code).toBe(SpanStatusCode.UNSET)
    expect(isChildOf(only(spans, 'handler work'), run.spanContext())).toBe(true)
    for (const s of spans) for (const secret of [PAYLOAD_SECRET, SCOPE_SECRET, RESULT_SECRET]) expect(spanText(s)).not.toContain(secret)
  })

  it('enqueueMany is one span with its batch size, each of its jobs run as its child; enqueueTx is a span of its own', async () => {
    const { exporter, tracer } = sdk()
    const web = h.runner()
    const produce = web.register(plan)
    const worker = h.runner()
    worker.register(plan, () => undefined)
    const parent = inSpan(tracer, 'import')
    const many = await context.with(parent.ctx, () => produce.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }]))
    const inTx: unknown[] = []
    // Returned so that PostgreSQL's asynchronous enqueueTx is awaited before COMMIT; SQLite's has written by then.
    await context.with(parent.ctx, () => h.store.transaction((tx) => (inTx[0] = produce.enqueueTx(tx as never, { n: 4 })), 'commit'))
    const txId = (await inTx[0]) as string
    const done = track(worker)
    await worker.start()
    await done.ends([...many, txId])
    const spans = await spansWhen(exporter, (s) => s.filter((x) => x.name === RUN).length === 4)

    const enqueues = spans.filter((s) => s.name === ENQUEUE)
    expect(enqueues).toHaveLength(2)
    const [batch, single] = enqueues[0]!.attributes['messaging.batch.message_count'] === 3 ? enqueues : [enqueues[1]!, enqueues[0]!]
    expect(batch!.attributes['messaging.batch.message_count']).toBe(3)
    expect(batch!.attributes['messaging.message.id']).toBeUndefined()
    expect(single!.attributes['messaging.message.id']).toBe(txId)
    for (const e of enqueues) expect(isChildOf(e, parent.span)).toBe(true)
    const runs = runsById(spans)
    for (const id of many) expect(isChildOf(runs.get(id)![0]!, batch!.spanContext())).toBe(true)
    expect(isChildOf(runs.get(txId)![0]!, single!.spanContext())).toBe(true)
  })

  it('a failed run has the status ERROR with its code alone, each attempt a child of the one enqueue; what the handler threw is in no span', async () => {
    const { exporter, tracer } = sdk()
    const runner = h.runner({ workers: 1 })
    const attempts = new Map<number, number>()
    runner.register(plan, (p, job) => {
      attempts.set(p.n, (attempts.get(p.n) ?? 0) + 1)
      if (p.n === 1) throw new Error(`the pantry said ${THROWN_SECRET}`)
      // Fails its first attempt with a declared code, retried at once (backoff 0), then succeeds.
      if (job.attempt === 1) job.fail('out_of_stock')
    })
    const parent = inSpan(tracer, 'request')
    const [crashes, retries] = await context.with(parent.ctx, () => Promise.all([runner.enqueue('plan_week', { n: 1, note: PAYLOAD_SECRET }), runner.enqueue('plan_week', { n: 2 })]))
    const done = track(runner)
    await runner.start()
    await done.ends([crashes!])
    const spans = await spansWhen(exporter, (s) => {
      const runs = runsById(s)
      return runs.get(crashes!)?.length === 1 && runs.get(retries!)?.some((r) => r.attributes['jobtable.job.attempt'] === 2) === true
    })
    expect((await runner.get(retries!)).status).toBe('succeeded')

    const runs = runsById(spans)
    const crash = runs.get(crashes!)![0]!
    expect(crash.status).toEqual({ code: SpanStatusCode.ERROR, message: 'internal_error' })
    expect(crash.attributes['jobtable.job.outcome']).toBe('failed')
    expect(crash.attributes['jobtable.job.error_code']).toBe('internal_error')
    expect(crash.attributes['error.type']).toBe('internal_error')
    expect(crash.events).toEqual([])

    const [first, second] = [...runs.get(retries!)!].sort((a, b) => (a.attributes['jobtable.job.attempt'] as number) - (b.attributes['jobtable.job.attempt'] as number))
    expect(first!.attributes['jobtable.job.attempt']).toBe(1)
    expect(first!.attributes['jobtable.job.outcome']).toBe('retry')
    expect(first!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'out_of_stock' })
    expect(first!.attributes['jobtable.job.error_code']).toBe('out_of_stock')
    expect(second!.attributes['jobtable.job.attempt']).toBe(2)
    expect(second!.attributes['jobtable.job.outcome']).toBe('succeeded')
    expect(second!.status.code).toBe(SpanStatusCode.UNSET)
    const enqueueOf = new Map(spans.filter((s) => s.name === ENQUEUE).map((s) => [s.attributes['messaging.message.id'], s.spanContext()]))
    for (const run of [crash, first!, second!]) expect(isChildOf(run, enqueueOf.get(run.attributes['messaging.message.id'])!)).toBe(true)
    for (const s of spans) for (const secret of [THROWN_SECRET, PAYLOAD_SECRET]) expect(spanText(s)).not.toContain(secret)
  })

  it('a job enqueued outside a trace stores no context and its run is a root span, though the runner started inside one', async () => {
    const { exporter, tracer } = sdk()
    const runner = h.runner()
    const seen: (string | undefined)[] = []
    runner.register(plan, () => {
      seen.push(trace.getActiveSpan()?.spanContext().spanId)
      tracer.startSpan('handler work').end()
    })
    const id = await runner.enqueue('plan_week', { n: 1 })
    expect(await h.store.dump()).not.toContain('traceparent')
    const done = track(runner)
    // The claim loop and its continuations inherit this context: the run span must not.
    await context.with(inSpan(tracer, 'boot').ctx, () => runner.start())
    await done.ends([id])
    const spans = await spansWhen(exporter, (s) => s.some((x) => x.name === RUN))
    expect(spans.filter((s) => s.name === ENQUEUE)).toEqual([])
    const run = only(spans, RUN)
    expect(run.parentSpanContext).toBeUndefined()
    expect(seen).toEqual([run.spanContext().spanId])
    expect(isChildOf(only(spans, 'handler work'), run.spanContext())).toBe(true)
  })

  it('without an SDK: no context is stored even inside an active remote context, no span is active in the handler, and jobs run', async () => {
    // A context manager and a propagator, as an application that propagates without tracing has; no tracer provider.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
    propagation.setGlobalPropagator(new W3CTraceContextPropagator())
    uninstall = async () => {
      context.disable()
      propagation.disable()
    }
    const runner = h.runner()
    const seen: unknown[] = []
    runner.register(plan, () => void seen.push(trace.getActiveSpan()))
    const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1, isRemote: true })
    const ids = await context.with(remote, () => Promise.all([runner.enqueue('plan_week', { n: 1 }), runner.register(defineKind('other', { payload })).enqueueMany([{ n: 2 }])]))
    expect(await h.store.dump()).not.toContain('0af7651916cd43dd8448eb211c80319c')
    const done = track(runner)
    await runner.start()
    await done.ends([ids[0]])
    expect(seen).toEqual([undefined])
    expect((await runner.get(ids[0])).status).toBe('succeeded')
  })

  it('baggage set where the job was enqueued reaches its handler, through the propagator the application installed', async () => {
    const { tracer } = sdk()
    const runner = h.runner()
    const seen: (string | undefined)[] = []
    runner.register(plan, () => void seen.push(propagation.getActiveBaggage()?.getEntry('tenant')?.value))
    const withBaggage = propagation.setBaggage(inSpan(tracer, 'request').ctx, propagation.createBaggage({ tenant: { value: 'household-12' } }))
    const id = await context.with(withBaggage, () => runner.enqueue('plan_week', { n: 1 }))
    const done = track(runner)
    await runner.start()
    await done.ends([id])
    expect(seen).toEqual(['household-12'])
  })

  it('a trace context the propagator makes too large is not stored: the job runs as a root span', async () => {
    const { exporter, tracer } = sdk()
    const w3c = new W3CTraceContextPropagator()
    const bloated: TextMapPropagator = {
      inject: (ctx, carrier, setter) => {
        w3c.inject(ctx, carrier, setter)
        setter.set(carrier, 'x-bloat', 'b'.repeat(9_000))
      },
      extract: (ctx, carrier, getter) => w3c.extract(ctx, carrier, getter),
      fields: () => [...w3c.fields(), 'x-bloat'],
    }
    propagation.disable()
    propagation.setGlobalPropagator(bloated)
    const runner = h.runner()
    runner.register(plan, () => undefined)
    const id = await context.with(inSpan(tracer, 'request').ctx, () => runner.enqueue('plan_week', { n: 1 }))
    expect(await h.store.dump()).not.toContain('bbbbbbbb')
    const done = track(runner)
    await runner.start()
    await done.ends([id])
    const spans = await spansWhen(exporter, (s) => s.some((x) => x.name === RUN))
    expect(only(spans, ENQUEUE).attributes['messaging.message.id']).toBe(id)
    expect(only(spans, RUN).parentSpanContext).toBeUndefined()
  })

  it('a stored trace context that is not one (damaged, or written by something else) runs its job as a root span', async () => {
    const { exporter } = sdk()
    const damaged = ['{', '[1]', '"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"', '{"traceparent":"not-a-traceparent"}', '{"traceparent":7}']
    const real = h.store.driver()
    // Stores each job with a damaged context in place of the none it was enqueued with.
    const driver = new Proxy(real, {
      get(target, prop, receiver) {
        if (prop === 'jobInsertMany') {
          return (params: { jobs: readonly NewJob[]; now: number }) =>
            target.jobInsertMany({ ...params, jobs: params.jobs.map((job, i) => ({ ...job, traceContext: damaged[i] ?? null })) })
        }
        const value = Reflect.get(target, prop, receiver) as unknown
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
      },
    }) as Driver
    const runner = h.runner({ driver })
    const kind = runner.register(plan, () => undefined)
    const ids = await kind.enqueueMany(damaged.map((_, n) => ({ n })))
    expect(await h.store.dump()).toContain('not-a-traceparent')
    const done = track(runner)
    await runner.start()
    await done.ends(ids)
    const spans = await spansWhen(exporter, (s) => s.filter((x) => x.name === RUN).length === damaged.length)
    for (const run of spans.filter((s) => s.name === RUN)) expect(run.parentSpanContext).toBeUndefined()
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
  })
})
