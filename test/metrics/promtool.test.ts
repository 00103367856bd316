/**
 * /metrics as Prometheus's own linter reads it: a real runner on a real
 * SQLite file, its API on loopback, and the exposition piped to
 * `promtool check metrics` (test/metrics/promtool.ts), which must exit 0
 * and print nothing, not even a warning. Every jobtable metric family
 * has samples when it is checked (jobs succeeded, failed, retried, timed
 * out, a paused kind's job queued, one scheduled, a failed queue read, a
 * rate-limited kind with a cooldown in force),
 * so a name, type or help line that breaks a rule cannot hide behind an
 * empty family.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { JobFailure, Runner, TERMINAL_STATUSES } from 'jobtable'
import { createApi, listen, type Listening } from 'jobtable/http'
import { collectProcessMetrics, createMetrics, type Metrics } from 'jobtable/metrics'
import { collectDefaultMetrics, Registry } from 'prom-client'
import { sqliteBackend, type Store } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { captureLogs } from '../support/logs.js'
import { parseExposition, samplesOf } from '../support/prometheus.js'
import { aborted, until } from '../support/wait.js'
import { checkMetrics, promtoolSkipReason } from './promtool.js'

/** What a handler does at each attempt: return, fail with a declared code, throw, or wait for its signal (its deadline). */
const stepPayload = z.strictObject({ steps: z.array(z.enum(['ok', 'declared', 'throw', 'abort'])) })
type Payload = z.infer<typeof stepPayload>
const steps = (...s: Payload['steps']): Payload => ({ steps: s })

async function act({ steps: s }: Payload, job: { attempt: number; signal: AbortSignal }): Promise<{ ok: true }> {
  switch (s[job.attempt - 1] ?? 'ok') {
    case 'declared':
      throw new JobFailure<string>('provider_unavailable')
    case 'throw':
      throw new Error('provider said no')
    case 'abort':
      await aborted(job.signal)
      return { ok: true }
    default:
      return { ok: true }
  }
}

/** The family a sample belongs to: its name, less a histogram's or summary's suffix when that family is declared. */
function familyOf(sample: string, families: ReadonlySet<string>): string {
  for (const suffix of ['_bucket', '_sum', '_count']) if (sample.endsWith(suffix) && families.has(sample.slice(0, -suffix.length))) return sample.slice(0, -suffix.length)
  return sample
}

/** The families an exposition declares (`# TYPE` lines), with their types. */
function declaredFamilies(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]))
}

if (promtoolSkipReason !== undefined) {
  describe('/metrics under promtool check metrics', () => it.skip(`skipped: ${promtoolSkipReason}`, () => {}))
} else {
  describe('/metrics under promtool check metrics', () => {
    let cleanups: (() => unknown)[] = []
    afterEach(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup()
      cleanups = []
    })

    /** A runner on a fresh SQLite file (its driver wrapped to fail on demand), its metrics with the process's, and its API with /metrics on loopback. */
    async function serve() {
      const store: Store = await sqliteBackend.store()
      const faulty = new FaultyDriver(store.driver())
      const runner = new Runner({ driver: faulty.driver, workers: 2, logger: captureLogs() })
      const metrics: Metrics = createMetrics({ runner })
      collectProcessMetrics(metrics.registry)
      const listening: Listening = await listen(createApi({ runner, metrics: metrics.registry }), { port: 0 })
      cleanups.push(() => store.drop())
      cleanups.push(() => runner.close())
      cleanups.push(() => metrics.close())
      cleanups.push(() => listening.close())
      const scrape = async () => {
        const answer = await fetch(`${listening.url}/metrics`)
        expect(answer.status).toBe(200)
        return answer.text()
      }
      return { runner, faulty, scrape }
    }

    it('a runner that has done, failed, retried and timed out jobs, with a paused kind and a failed queue read: promtool exits 0 and says nothing', async () => {
      const { runner, faulty, scrape } = await serve()
      const plans = runner.register('plan_week', {
        payload: stepPayload,
        failures: ['provider_unavailable'],
        // Retried at once (no backoff), so no clock needs moving between attempts.
        retry: { maxAttempts: 2, codes: ['provider_unavailable', 'timeout'], backoff: { baseMs: 0, maxMs: 0 } },
        handler: act,
      })
      const mails = runner.register('send_mail', { payload: stepPayload, handler: act })
      // A rate-limited kind whose job ends with the provider's reset an hour ahead: a limit, its use and a cooldown to report.
      const calls = runner.register('call_model', { payload: stepPayload, rateLimit: { limit: 100, periodMs: 60_000 }, handler: (_p, job) => job.rateLimited(3_600_000) })
      await runner.pause('send_mail')
      await runner.start()
      const ids = await plans.enqueueMany([steps('ok'), steps('declared', 'declared'), steps('throw'), steps('declared', 'ok')])
      // Waits for its deadline's signal, then succeeds at its second attempt.
      ids.push(await plans.enqueue(steps('abort', 'ok'), { timeoutMs: 50 }))
      for (const id of ids) await until(runner, id, (job) => (TERMINAL_STATUSES as readonly string[]).includes(job.status))
      const cooled = await calls.enqueue(steps('ok'))
      await until(runner, cooled, (job) => job.status === 'scheduled')
      const paused = await mails.enqueue(steps('ok'))
      await plans.enqueue(steps('ok'), { delayMs: 3_600_000 })
      expect((await runner.get(paused)).status).toBe('queued')

      // One scrape whose queue read fails (counted in database_errors_total), then one that reads it.
      faulty.failNth('queueCounts', 1)
      const failedRead = await scrape()
      expect(samplesOf(failedRead).all('jobtable_database_errors_total', { operation: 'queue_depth' })).toHaveLength(1)
      const text = await scrape()

      const m = samplesOf(text)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'plan_week', status: 'succeeded' })).toBe(3)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'plan_week', status: 'failed', code: 'provider_unavailable' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'plan_week', status: 'failed', code: 'internal_error' })).toBe(1)
      expect(m.value('jobtable_retries_total', { kind: 'plan_week' })).toBe(3)
      expect(m.value('jobtable_timeouts_total', { kind: 'plan_week' })).toBe(1)
      expect(m.value('jobtable_queue_depth', { kind: 'send_mail', status: 'queued' })).toBe(1)
      expect(m.value('jobtable_queue_depth', { status: 'scheduled' })).toBe(2)
      expect(m.value('jobtable_rate_limit', { key: 'call_model' })).toBe(100)
      expect(m.value('jobtable_rate_limit_used', { key: 'call_model' })).toBe(1)
      expect(m.all('jobtable_cooldown_until_seconds', { key: 'call_model' })).toHaveLength(1)

      // Every jobtable family has samples, so each is checked with its samples.
      const families = declaredFamilies(text)
      const sampled = new Set(parseExposition(text).map((s) => familyOf(s.name, new Set(families.keys()))))
      const ours = [...families.keys()].filter((name) => name.startsWith('jobtable_'))
      expect(ours.sort()).toEqual(
        [
          'jobtable_database_errors_total',
          'jobtable_job_queue_wait_seconds',
          'jobtable_job_run_duration_seconds',
          'jobtable_jobs_enqueued_total',
          'jobtable_jobs_finished_total',
          'jobtable_jobs_started_total',
          'jobtable_queue_depth',
          'jobtable_retries_total',
          'jobtable_timeouts_total',
          'jobtable_workers',
          'jobtable_rate_limit',
          'jobtable_rate_limit_used',
          'jobtable_cooldown_until_seconds',
        ].sort(),
      )
      expect(ours.filter((name) => !sampled.has(name))).toEqual([])
      // The process's metrics are there, less the gauges whose names break the counter rule.
      for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes', 'nodejs_active_handles', 'nodejs_version_info']) {
        expect(families.has(name), name).toBe(true)
      }
      for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) expect(families.has(name), name).toBe(false)
      for (const [name, type] of families) if (name.endsWith('_total')) expect(type, name).toBe('counter')

      for (const exposition of [failedRead, text]) expect(await checkMetrics(exposition)).toEqual({ code: 0, output: '' })
    })

    it('the check has teeth: prom-client’s default metrics as they come fail it, naming the gauges that end in _total', async () => {
      const registry = new Registry()
      collectDefaultMetrics({ register: registry })
      const verdict = await checkMetrics(await registry.metrics())
      expect(verdict.code).not.toBe(0)
      expect(verdict.output).toMatch(/nodejs_active_handles_total non-counter metrics should not have "_total" suffix/)
    })

    it('a custom prefix and buckets pass as well, and collectProcessMetrics takes a prefix and refuses a bad one', async () => {
      const store = await sqliteBackend.store()
      cleanups.push(() => store.drop())
      const runner = new Runner({ driver: store.driver(), logger: captureLogs() })
      cleanups.push(() => runner.close())
      const metrics = createMetrics({ runner, prefix: 'app_jobs_', runDurationBuckets: [0.1, 1, 10], queueWaitBuckets: [1, 60] })
      cleanups.push(() => metrics.close())
      const names = collectProcessMetrics(metrics.registry, { prefix: 'app_' })
      expect(names).toContain('app_process_cpu_user_seconds_total')
      expect(names.filter((n) => !n.startsWith('app_'))).toEqual([])
      expect(() => collectProcessMetrics(new Registry(), { prefix: '9x' })).toThrow(/prefix/)
      expect(() => collectProcessMetrics({} as never)).toThrow(/Registry/)
      const text = await metrics.registry.metrics()
      expect(text).toContain('app_jobs_workers{state="idle"} 0')
      expect(await checkMetrics(text)).toEqual({ code: 0, output: '' })
    })

    it('jobtable serve --metrics: the command’s /metrics passes too', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'jobtable-promtool-'))
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
      const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'src/cli/main.ts', 'serve', '--kinds', 'test/cli/fixtures/kinds.ts', '--port', '0', '--metrics', '-d', join(dir, 'jobs.db')], {
        env: { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '', JOBTABLE_TOKENS: '' },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      const exited = new Promise<number | string | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)))
      cleanups.push(async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
        await exited
      })
      let stdout = ''
      let stderr = ''
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
      const at = await new Promise<string>((resolve, reject) => {
        child.stdout!.on('data', (chunk: Buffer) => {
          stdout += chunk.toString()
          const match = /metrics at (http:\/\/\S+)\n/.exec(stdout)
          if (match) resolve(match[1]!)
        })
        void exited.then((how) => reject(new Error(`jobtable serve exited (${how}) before serving metrics: ${stderr}`)))
      })
      const api = at.replace(/\/metrics$/, '')
      const created = await fetch(`${api}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'echo', payload: { text: 'hello' } }) })
      expect(created.status).toBe(201)
      const { id } = (await created.json()) as { id: string }
      // Until the job has ended: its run's histograms then have samples too.
      let text = ''
      for (;;) {
        const job = (await (await fetch(`${api}/api/v1/jobs/${id}`)).json()) as { status: string }
        if (job.status === 'succeeded') break
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      text = await (await fetch(at)).text()
      expect(samplesOf(text).value('jobtable_jobs_finished_total', { kind: 'echo', status: 'succeeded' })).toBe(1)
      expect(await checkMetrics(text)).toEqual({ code: 0, output: '' })
      child.kill('SIGTERM')
      expect(await exited).toBe(0)
    })
  })
}
