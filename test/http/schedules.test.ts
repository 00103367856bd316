import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { bearerTokens } from 'jobtable/http'
import { sqlite } from 'jobtable/sqlite'
import { schedulesCommand } from '../../src/cli/schedules.js'
import { HELP } from '../../src/cli/usage.js'
import type { CliContext } from '../../src/cli/runtime.js'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { servers } from './client.js'
import { PAYLOAD_MARKER, registerKinds } from './fixtures/schedule-kinds.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'
const KINDS = 'test/http/fixtures/schedule-kinds.ts'

/**
 * Saturday 28 March 2026, noon UTC: Paris (CET, UTC+1) springs forward the
 * next night, 02:00 to 03:00 CEST, so its 02:30 does not exist on the 29th.
 */
const T0 = Date.UTC(2026, 2, 28, 12, 0)

/** The fixture's schedules as listed before any runner recorded a tick, at T0: each next tick worked out by hand. */
const DECLARED = [
  { name: 'nightly-digest', kind: 'send_digest', cron: '0 3 * * *', timezone: 'UTC', missed: 'last', lastTickAt: null, nextTickAt: Date.UTC(2026, 2, 29, 3, 0) },
  // 02:30 falls in the gap on the 29th: it runs at the gap's end, 03:00 CEST (01:00 UTC), as the ticks themselves do.
  { name: 'paris-plan', kind: 'plan_week', cron: '30 2 * * *', timezone: 'Europe/Paris', missed: 'skip', lastTickAt: null, nextTickAt: Date.UTC(2026, 2, 29, 1, 0) },
  { name: 'hourly-digest', kind: 'send_digest', cron: '@hourly', timezone: 'UTC', missed: 'last', lastTickAt: null, nextTickAt: Date.UTC(2026, 2, 28, 13, 0) },
]

describeEachBackend('schedules: runner.schedules() and GET /api/v1/schedules', (backend) => {
  const h = harness(backend)
  const s = servers()

  /** A runner on the test clock with the fixture's kinds and schedules, not started. */
  const setup = (clock: { now: number }) => {
    const runner = h.runner({ clock: () => clock.now })
    registerKinds(runner)
    return runner
  }

  it('lists what the runner declared, in order, with the last tick the database recorded and the next tick (across a daylight-saving gap as the ticks run), never a payload', async () => {
    const clock = { now: T0 }
    const runner = setup(clock)
    // Not started: nothing recorded yet, and the next ticks from the clock.
    expect(await runner.schedules()).toEqual(DECLARED)

    // Started: a schedule seen for the first time is recorded at its latest tick (without a job).
    await runner.start()
    await runner.wake()
    const started = await runner.schedules()
    expect(started.map((x) => [x.name, x.lastTickAt, x.nextTickAt])).toEqual([
      ['nightly-digest', Date.UTC(2026, 2, 28, 3, 0), Date.UTC(2026, 2, 29, 3, 0)],
      ['paris-plan', Date.UTC(2026, 2, 28, 1, 30), Date.UTC(2026, 2, 29, 1, 0)],
      ['hourly-digest', Date.UTC(2026, 2, 28, 12, 0), Date.UTC(2026, 2, 28, 13, 0)],
    ])

    // At the tick the gap moved: enqueued then, recorded, and the next one is 02:30 CEST on the 30th (00:30 UTC).
    clock.now = Date.UTC(2026, 2, 29, 1, 0)
    await runner.wake()
    const after = await runner.schedules()
    expect(after.map((x) => [x.name, x.lastTickAt, x.nextTickAt])).toEqual([
      ['nightly-digest', Date.UTC(2026, 2, 28, 3, 0), Date.UTC(2026, 2, 29, 3, 0)],
      ['paris-plan', Date.UTC(2026, 2, 29, 1, 0), Date.UTC(2026, 2, 30, 0, 30)],
      ['hourly-digest', Date.UTC(2026, 2, 29, 1, 0), Date.UTC(2026, 2, 29, 2, 0)],
    ])
    const plans = await runner.list({ kind: 'plan_week' })
    expect(plans.jobs.map((j) => j.runAt)).toEqual([Date.UTC(2026, 2, 29, 1, 0)])
    expect(JSON.stringify(after)).not.toContain(PAYLOAD_MARKER)

    // A runner that declares none lists none, whatever the database recorded for others.
    const bare = h.runner({ clock: () => clock.now })
    expect(await bare.schedules()).toEqual([])
  })

  it('GET /api/v1/schedules answers the same list, without payloads or enqueue options; refuses parameters and other methods', async () => {
    const clock = { now: T0 }
    const runner = setup(clock)
    const api = await s.serve(runner)
    const answer = await api.get('/api/v1/schedules')
    expect(answer.status).toBe(200)
    expect(answer.headers.get('cache-control')).toBe('no-store')
    expect(answer.json).toEqual({ schedules: DECLARED })
    expect(answer.text).not.toContain(PAYLOAD_MARKER)

    await runner.start()
    await runner.wake()
    const recorded = await api.get('/api/v1/schedules')
    expect(recorded.json).toEqual({ schedules: await runner.schedules() })
    expect(recorded.json.schedules.every((x: { lastTickAt: number | null }) => x.lastTickAt !== null)).toBe(true)
    expect(recorded.text).not.toContain(PAYLOAD_MARKER)

    const head = await api.call('HEAD', '/api/v1/schedules')
    expect([head.status, head.text]).toEqual([200, ''])
    const param = await api.get('/api/v1/schedules?kind=send_digest')
    expect([param.status, param.json.code]).toEqual([400, 'invalid_argument'])
    const post = await api.call('POST', '/api/v1/schedules')
    expect([post.status, post.json.code, post.headers.get('allow')]).toEqual([405, 'method_not_allowed', 'GET, HEAD'])

    const none = await s.serve(h.runner())
    expect((await none.get('/api/v1/schedules')).json).toEqual({ schedules: [] })
  })

  it('with authorization, only the operator scope may list schedules, as only it may pause: 401 without a token, 403 for a household', async () => {
    const runner = setup({ now: T0 })
    const api = await s.serve(runner, { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops' }), operatorScope: 'ops' })
    const bare = await api.get('/api/v1/schedules')
    expect([bare.status, bare.headers.get('www-authenticate')]).toEqual([401, 'Bearer'])
    const household = await api.get('/api/v1/schedules', TOKEN_A)
    expect([household.status, household.json.code]).toEqual([403, 'forbidden'])
    expect(household.text).not.toContain('nightly-digest')
    const ops = await api.get('/api/v1/schedules', TOKEN_OPS)
    expect([ops.status, ops.json]).toEqual([200, { schedules: DECLARED }])
    // With authorization and no operator scope, no caller may.
    const closed = await s.serve(runner, { authorize: bearerTokens({ [TOKEN_OPS]: 'ops' }) })
    expect((await closed.get('/api/v1/schedules', TOKEN_OPS)).status).toBe(403)
  })
})

describe('schedulesCommand (jobtable schedules)', () => {
  let dir: string | undefined
  afterEach(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
    dir = undefined
  })

  /** Runs the command with `args` and resolves to its exit code and what it wrote. */
  async function run(args: string[]): Promise<{ code: number; stdout: string }> {
    const out = new PassThrough()
    let stdout = ''
    out.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
    const ctx = { args, stdout: out, env: { JOBTABLE_DATABASE: undefined }, command: 'schedules' } as unknown as CliContext
    const code = await schedulesCommand(ctx)
    return { code, stdout }
  }

  it('prints the schedules the kinds module declares, with the ticks the database recorded, as JSON; --help prints its help; --kinds is required', async () => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-schedules-'))
    const path = join(dir, 'jobs.db')
    // A worker ran the schedules once: each is recorded at its latest tick.
    const worker = new Runner({ driver: sqlite({ path }), logger: captureLogs() })
    registerKinds(worker)
    await worker.start()
    await worker.wake()
    const recorded = await worker.schedules()
    await worker.close()

    const before = Date.now()
    const { code, stdout } = await run(['--kinds', KINDS, '-d', path])
    expect(code).toBe(0)
    const printed = JSON.parse(stdout) as { schedules: typeof recorded }
    expect(printed.schedules.map((x) => [x.name, x.kind, x.cron, x.timezone, x.missed, x.lastTickAt])).toEqual(recorded.map((x) => [x.name, x.kind, x.cron, x.timezone, x.missed, x.lastTickAt]))
    for (const x of printed.schedules) expect(x.nextTickAt).toBeGreaterThan(before)
    expect(stdout).not.toContain(PAYLOAD_MARKER)

    expect(await run(['--help'])).toEqual({ code: 0, stdout: HELP.schedules })
    await expect(run(['-d', path])).rejects.toThrow(/--kinds is required/)
    await expect(run(['--kinds', KINDS, '--bogus'])).rejects.toThrow(/bogus/)
  })
})
