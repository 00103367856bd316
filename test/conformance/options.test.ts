import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, defineKind, JobtableError, Runner } from 'jobtable'
import { createApi, listen, type Api } from 'jobtable/http'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { captureLogs } from '../support/logs.js'

/** No server listens here: a refusal cannot have come from connecting, and constructing never connects. */
const NOWHERE = 'postgres://nobody@127.0.0.1:1/none'

/** The error fn throws (or the promise rejects with). */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  throw new Error('expected a throw')
}

/** Asserts err is jobtable's refusal of `key` with the given code, naming the key. */
function expectRefusal(err: unknown, key: string, code: 'invalid_config' | 'invalid_argument'): void {
  expect(err).toBeInstanceOf(JobtableError)
  expect((err as JobtableError).code).toBe(code)
  expect((err as Error).message).toContain(`unknown option ${JSON.stringify(key)}`)
}

describe('unknown options are refused, naming the key', () => {
  let dir: string | undefined
  const opened: { close(): unknown }[] = []
  afterEach(async () => {
    for (const o of opened.splice(0)) await o.close()
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
    dir = undefined
  })
  const dbPath = () => join((dir ??= mkdtempSync(join(tmpdir(), 'jobtable-options-'))), 'jobs.db')

  it('sqlite(): a misspelled key is a ConfigError, and the file is not created', async () => {
    const path = dbPath()
    const err = await thrown(() => sqlite({ path, pollIntervallMs: 5 } as never))
    expectRefusal(err, 'pollIntervallMs', 'invalid_config')
    expect(err).toBeInstanceOf(ConfigError)
    expect((err as Error).message).toBe(
      'jobtable: sqlite: unknown option "pollIntervallMs" (known: path, database, synchronous, busyTimeoutMs, busyRetryMs, sweepIntervalMs, pollIntervalMs, migrate)',
    )
    expectRefusal(await thrown(() => sqlite({ path, delayMs: 10 } as never)), 'delayMs', 'invalid_config')
    // Refused before anything is opened: no file was made.
    expect(existsSync(path)).toBe(false)
  })

  it('sqlite(): every known key is still accepted, on a real file', async () => {
    const driver = sqlite({ path: dbPath(), synchronous: 'full', busyTimeoutMs: 5, busyRetryMs: 0, sweepIntervalMs: 100, pollIntervalMs: 50, migrate: 'auto' })
    const runner = new Runner({ driver, logger: captureLogs() })
    opened.push(runner)
    const kind = runner.register('echo', { payload: { '~standard': { version: 1, vendor: 'test', validate: (value) => ({ value }) } }, handler: () => undefined })
    const id = await kind.enqueue({ n: 1 })
    expect((await runner.get(id)).status).toBe('queued')
  })

  it('postgres(): a misspelled key is a ConfigError (constructing connects to nothing)', async () => {
    const err = await thrown(() => postgres({ connectionString: NOWHERE, leasMs: 1000 } as never))
    expectRefusal(err, 'leasMs', 'invalid_config')
    expect(err).toBeInstanceOf(ConfigError)
    expect((err as Error).message).toMatch(/^jobtable: postgres: unknown option "leasMs" \(known: pool, connectionString, schema, listen, pollIntervalMs, leaseMs, sweepIntervalMs, preparedStatements, statementTimeoutMs, pooler, listenUrl, migrate\)$/)
    expectRefusal(await thrown(() => postgres({ connectionString: NOWHERE, pollIntervallMs: 5 } as never)), 'pollIntervallMs', 'invalid_config')
    // The known keys, statementTimeoutMs among them, construct a driver (closed without ever connecting).
    const driver = postgres({ connectionString: NOWHERE, schema: 's', listen: false, pollIntervalMs: 5, leaseMs: 1000, sweepIntervalMs: 10, preparedStatements: false })
    opened.push(driver)
    opened.push(postgres({ connectionString: NOWHERE, statementTimeoutMs: 1000 } as never))
  })

  it('createApi(): a misspelled key is a ConfigError; known keys still work', async () => {
    const driver = sqlite({ path: dbPath() })
    const runner = new Runner({ driver, logger: captureLogs() })
    opened.push(runner)
    const err = await thrown(() => createApi({ runner, bodyLimitByte: 10 } as never))
    expectRefusal(err, 'bodyLimitByte', 'invalid_config')
    expect((err as Error).message).toBe(
      'jobtable: createApi: unknown option "bodyLimitByte" (known: runner, authorize, bodyLimitBytes, eventsPollMs, eventsHeartbeatMs, logger, allowedHosts, operatorScope, basePath, metrics, metricsScope, dashboard)',
    )
    expectRefusal(await thrown(() => createApi({ runner, allowedHost: ['example.com'] } as never)), 'allowedHost', 'invalid_config')
    expect(await thrown(() => createApi(null as never))).toMatchObject({ code: 'invalid_config' })
    const api = createApi({ runner, bodyLimitBytes: 10, eventsPollMs: 5, eventsHeartbeatMs: 10, allowedHosts: 'any' })
    const response = await api.fetch(new Request('http://jobs.example/api/v1/jobs'))
    expect(response.status).toBe(200)
    api.close()
  })

  it('listen(): a misspelled key is a ConfigError and nothing listens; known keys still serve', async () => {
    const api: Api = { fetch: async () => new Response('ok'), close: () => undefined }
    const err = await thrown(() => listen(api, { port: 0, requestTimeout: 5 } as never))
    expectRefusal(err, 'requestTimeout', 'invalid_config')
    expect(err).toBeInstanceOf(ConfigError)
    expect(await thrown(() => listen(api, 'port' as never))).toMatchObject({ code: 'invalid_config' })
    const listening = await listen(api, { host: '127.0.0.1', port: 0, requestTimeoutMs: 5_000, headersTimeoutMs: 5_000, timeoutCheckMs: 1_000 })
    opened.push(listening)
    expect(await (await fetch(listening.url)).text()).toBe('ok')
  })
})

describe('the runner refuses unknown options, naming the key, and stores nothing', () => {
  let dir: string
  let runner: Runner
  afterEach(async () => {
    await runner?.close()
    rmSync(dir, { recursive: true, force: true })
  })
  function fresh(): Runner {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-options-'))
    runner = new Runner({ driver: sqlite({ path: join(dir, 'jobs.db') }), logger: captureLogs() })
    return runner
  }
  const payload = z.strictObject({ n: z.number() })

  it('Runner options', async () => {
    const r = fresh()
    const err = await thrown(() => new Runner({ driver: r.driver, wrokers: 2 } as never))
    expect(err).toBeInstanceOf(ConfigError)
    expectRefusal(err, 'wrokers', 'invalid_config')
  })

  it('enqueue options: a misspelled delay never runs a job at once', async () => {
    const r = fresh()
    const kind = r.register('echo', { payload, handler: () => undefined })
    expectRefusal(await thrown(() => kind.enqueue({ n: 1 }, { delay: 800 } as never)), 'delay', 'invalid_argument')
    expectRefusal(await thrown(() => kind.enqueueMany([{ n: 1 }], { priorty: 1 } as never)), 'priorty', 'invalid_argument')
    expectRefusal(await thrown(() => r.enqueue('echo', { n: 1 }, { run_at: 0 } as never)), 'run_at', 'invalid_argument')
    expect((await r.list()).jobs).toEqual([])
  })

  it('register and defineKind: a misspelled field (retries, maxConcurrency, failure) is refused', async () => {
    const r = fresh()
    for (const key of ['retries', 'maxConcurrency', 'failure']) {
      const err = await thrown(() => r.register('echo', { payload, handler: () => undefined, [key]: 1 } as never))
      expect((err as JobtableError).code).toBe('invalid_registration')
      expect((err as Error).message).toContain(`unknown option ${JSON.stringify(key)}`)
    }
    const err = await thrown(() => defineKind('echo', { payload, handler: () => undefined } as never))
    expect((err as Error).message).toContain('unknown option "handler"')
  })

  it('rateLimit options, and the options of rateLimits, activity and clearCooldown', async () => {
    const r = fresh()
    const err = await thrown(() => r.register('echo', { payload, handler: () => undefined, rateLimit: { limit: 1, periodMs: 1_000, per: 'scope' } } as never))
    expect((err as JobtableError).code).toBe('invalid_registration')
    expect((err as Error).message).toContain('unknown rateLimit option "per"')
    expect((await thrown(() => defineKind('echo', { payload, rateLimit: { limit: 1, period: 1_000 } } as never)) as Error).message).toContain('unknown rateLimit option "period"')
    expectRefusal(await thrown(() => r.activity({ minute: 5 } as never)), 'minute', 'invalid_argument')
    expect(((await thrown(() => r.clearCooldown('')))) as JobtableError).toMatchObject({ code: 'invalid_argument' })
  })

  it('list, get and stop options', async () => {
    const r = fresh()
    r.register('echo', { payload, handler: () => undefined })
    expectRefusal(await thrown(() => r.list({ limt: 5 } as never)), 'limt', 'invalid_argument')
    expectRefusal(await thrown(() => r.get('00000000-0000-7000-8000-000000000000', { scop: 'h' } as never)), 'scop', 'invalid_argument')
    await r.start()
    expectRefusal(await thrown(() => r.stop({ timeout: 5 } as never)), 'timeout', 'invalid_argument')
  })
})

describe('due times out of the range of a Date are refused before anything is stored', () => {
  it('runAt past the last Date, and a delayMs that would put it there', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-options-'))
    const runner = new Runner({ driver: sqlite({ path: join(dir, 'jobs.db') }), logger: captureLogs() })
    try {
      const kind = runner.register('echo', { payload: z.strictObject({ n: z.number() }), handler: () => undefined })
      for (const options of [{ runAt: 1e20 }, { runAt: Number.MAX_VALUE }, { runAt: 8.64e15 + 1 }, { runAt: -8.64e15 - 1 }, { delayMs: Number.MAX_SAFE_INTEGER }]) {
        const err = await thrown(() => kind.enqueue({ n: 1 }, options))
        expect((err as JobtableError).code).toBe('invalid_argument')
      }
      expect((await runner.list()).jobs).toEqual([])
      // The last date a Date holds is still a due time.
      await kind.enqueue({ n: 1 }, { runAt: 8.64e15 })
      expect((await runner.list()).jobs.map((j) => j.runAt)).toEqual([8.64e15])
    } finally {
      await runner.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
