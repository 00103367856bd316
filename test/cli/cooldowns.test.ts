/**
 * `jobtable cooldowns [list|clear <key>]` and `jobtable rate-limits
 * --kinds <module>` as an operator runs them: real command processes on a
 * SQLite file that a runner of this process filled (claims counted in the
 * rate limits' windows, cooldowns set by handlers through
 * job.rateLimited). Times print as ISO dates. No assertion reads a clock:
 * the cooldowns end at a fixed date far ahead, and the windows are a day
 * long.
 */
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { HELP } from '../../src/cli/usage.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'
import { COOLDOWN_END, registerKinds } from './fixtures/rate-limit-kinds.js'

const KINDS = 'test/cli/fixtures/rate-limit-kinds.ts'
const END = new Date(COOLDOWN_END).toISOString()
const DAY = 86_400_000

interface Exit {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs the command from the source, as the other CLI tests do, and resolves once it has exited. */
function cli(args: string[]): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'src/cli/main.ts', ...args], {
      env: { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '', JOBTABLE_TOKENS: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    proc.stdout.on('data', (d) => (stdout += d))
    proc.stderr.on('data', (d) => (stderr += d))
    proc.once('error', reject)
    proc.once('close', (code) => resolve({ code, stdout, stderr }))
  })
}

let dir: string
let db: string
/** The claims' times lie between these (read around the runner's work, for the resetAt range only). */
let before: number
let after: number

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'jobtable-cooldowns-'))
  db = join(dir, 'jobs.db')
  const runner = new Runner({ driver: sqlite({ path: db }), workers: 2, logger: captureLogs() })
  try {
    registerKinds(runner)
    const done = track(runner)
    before = Date.now()
    await runner.start()
    // Each limited job comes after the others of its key: claims take the oldest first, so the cooldown it sets holds back none of them.
    const ids = [
      await runner.enqueue('plan_week', { limited: false }),
      await runner.enqueue('shopping_list', { limited: false }),
      await runner.enqueue('plan_week', { limited: true }),
      await runner.enqueue('import_recipe', { limited: false }, { scope: 'h1' }),
      await runner.enqueue('import_recipe', { limited: false }, { scope: 'h2' }),
      await runner.enqueue('import_recipe', { limited: true }, { scope: 'h1' }),
      await runner.enqueue('send_mail', { limited: true }),
    ]
    await done.ends(ids)
    after = Date.now()
    done.stop()
  } finally {
    await runner.close()
  }
}, 60_000)

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

describe('jobtable cooldowns and rate-limits', () => {
  it('cooldowns lists those in force by key with ISO ends; clear ends one (exit 0), and a key with none recorded exits 1 naming those in force, changing nothing', async () => {
    const inForce = [
      { key: 'import_recipe@h1', until: END },
      { key: 'provider:models', until: END },
      { key: 'send_mail', until: END },
    ]
    const [listed, explicit] = await Promise.all([cli(['cooldowns', '-d', db]), cli(['cooldowns', 'list', '-d', db])])
    for (const run of [listed, explicit]) {
      expect(run, run.stderr).toMatchObject({ code: 0, stderr: '' })
      expect(JSON.parse(run.stdout)).toEqual({ cooldowns: inForce })
    }

    const typo = await cli(['cooldowns', 'clear', 'provider:modles', '-d', db])
    expect(typo).toEqual({
      code: 1,
      stdout: '',
      stderr: 'jobtable: cooldowns clear: no cooldown of the key "provider:modles" is recorded; nothing was changed (in force: "import_recipe@h1", "provider:models", "send_mail")\n',
    })

    const cleared = await cli(['cooldowns', 'clear', 'provider:models', '-d', db])
    expect(cleared, cleared.stderr).toEqual({ code: 0, stdout: '{"key":"provider:models","cleared":true}\n', stderr: '' })
    const left = await cli(['cooldowns', '-d', db])
    expect(JSON.parse(left.stdout)).toEqual({ cooldowns: inForce.filter((c) => c.key !== 'provider:models') })
  }, 60_000)

  it('rate-limits lists each limit the kinds module declares with its claims in the window, the per-scope one as <kind>@* with its scopes, times as ISO dates', async () => {
    const run = await cli(['rate-limits', '--kinds', KINDS, '-d', db])
    expect(run, run.stderr).toMatchObject({ code: 0, stderr: '' })
    const { rateLimits } = JSON.parse(run.stdout) as { rateLimits: Record<string, unknown>[] }
    const byKey = new Map(rateLimits.map((l) => [l.key as string, l]))
    // send_mail has no rate limit: its cooldown is not a limit's.
    expect([...byKey.keys()].sort()).toEqual(['import_recipe@*', 'provider:models'])
    const isoWithin = (value: unknown) => {
      expect(value).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      const ms = Date.parse(value as string)
      expect(ms).toBeGreaterThanOrEqual(before + DAY)
      expect(ms).toBeLessThanOrEqual(after + DAY)
    }
    const shared = byKey.get('provider:models')!
    expect(shared).toMatchObject({ kinds: ['plan_week', 'shopping_list'], limit: 10, periodMs: DAY, perScope: false, used: 3 })
    isoWithin(shared.resetAt)
    // Cleared by the other test, or still in force (an ISO date): never epoch milliseconds.
    expect(shared.cooldownUntil === null || shared.cooldownUntil === END).toBe(true)
    const perScope = byKey.get('import_recipe@*')!
    expect(perScope).toMatchObject({ kinds: ['import_recipe'], limit: 5, periodMs: DAY, perScope: true, used: 2 })
    isoWithin(perScope.resetAt)
    const scopes = [...(perScope.scopes as { scope: string; used: number; resetAt: string }[])].sort((a, b) => a.scope.localeCompare(b.scope))
    expect(scopes.map((s) => [s.scope, s.used])).toEqual([
      ['h1', 2],
      ['h2', 1],
    ])
    for (const s of scopes) isoWithin(s.resetAt)
  }, 60_000)

  it('help with examples for both; a wrong command line exits 2 naming the mistake; a missing database exits 1 and is not created', async () => {
    const helps = await Promise.all([cli(['cooldowns', '--help']), cli(['rate-limits', '--help'])])
    for (const [i, help] of helps.entries()) {
      expect(help.code).toBe(0)
      expect(help.stdout).toContain(`Usage: jobtable ${['cooldowns', 'rate-limits'][i]}`)
      expect(help.stdout).toContain('Examples:')
    }
    expect(HELP.main).toMatch(/\n {2}rate-limits +\S/)
    expect(HELP.main).toMatch(/\n {2}cooldowns +\S/)

    const usage = await Promise.all(
      [
        [['cooldowns', 'clear'], /cooldowns clear needs a key of 1 to 1024 characters/],
        [['cooldowns', 'stop'], /expected cooldowns, cooldowns list or cooldowns clear <key>/],
        [['cooldowns', 'list', 'x'], /cooldowns list takes no positional argument/],
        [['cooldowns', 'clear', 'a', 'b'], /unexpected argument "b"/],
        [['rate-limits'], /--kinds is required/],
      ].map(async ([args, said]) => ({ args: args as string[], said: said as RegExp, run: await cli([...(args as string[]), '-d', db]) })),
    )
    for (const { args, said, run } of usage) {
      expect(run.code, args.join(' ')).toBe(2)
      expect(run.stderr, args.join(' ')).toMatch(said)
      expect(run.stderr, args.join(' ')).toMatch(/\nRun jobtable (cooldowns|rate-limits) --help for usage\.\n$/)
    }

    const nowhere = join(dir, 'typo.db')
    const missing = await cli(['cooldowns', '-d', nowhere])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toMatch(/^jobtable: no database at /)
    expect(existsSync(nowhere)).toBe(false)
  }, 60_000)
})
