import { describe, expect, it } from 'vitest'
import { defineKind, type Driver, type DriverBase, type DriverWakeups, type WakeReason } from 'jobtable'
import { WakePoll } from '../../src/runner/maintenance/wake-poll.js'
import { postgresBackend, sqliteBackend, type Backend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'

/** A poll short enough that it finds within a test what no notification told of; no assertion reads a clock. */
const QUICK_POLL_MS = 10

/**
 * The fallback poll is the runner's (WakePoll), the same for every
 * driver; a driver offers only its change token, if it has one, and its
 * pushed notifications (onWake), which these backends turn off: PostgreSQL
 * does not listen here, so a runner learns of another process's writes by
 * the poll alone.
 */
const polling: Backend[] = [sqliteBackend, postgresBackend({ listen: false })]

const echo = defineKind('echo', { payload: echoPayload })

/** A driver of nothing but a change token: each read takes the next of `tokens` (an Error is thrown). */
function tokenDriver(tokens: (string | Error)[] | undefined): DriverBase & DriverWakeups {
  const base: DriverBase = { name: 'fake', capabilities: { txSync: false, liveness: { heartbeatMs: null, sweepMs: 3_600_000 }, pollMs: 3_600_000 }, close: async () => undefined }
  if (tokens === undefined) return base
  return {
    ...base,
    changeToken: async () => {
      const token = tokens.shift()
      if (token === undefined) throw new Error('the test read more tokens than it gave')
      if (token instanceof Error) throw token
      return token
    },
  }
}

describe('WakePoll (the runner\'s fallback poll)', () => {
  /** The wakes of each pass, one pass per tick(). */
  async function passes(driver: DriverBase & DriverWakeups, count: number): Promise<WakeReason[][]> {
    let wakes: WakeReason[] = []
    const poll = new WakePoll(driver, captureLogs(), (what) => wakes.push(what))
    const each: WakeReason[][] = []
    for (let i = 0; i < count; i++) {
      wakes = []
      await poll.tick()
      each.push(wakes)
    }
    return each
  }

  it('with a change token: wakes at the first pass, then only when the token moved; a token it cannot read wakes too, and the next read is compared with nothing', async () => {
    const both: WakeReason[] = ['jobs', 'cancel']
    expect(await passes(tokenDriver(['a', 'a', 'a', 'b', 'b', new Error('busy'), 'b', 'b']), 8)).toEqual([both, [], [], both, [], both, both, []])
  })

  it('without a change token: every pass wakes', async () => {
    const both: WakeReason[] = ['jobs', 'cancel']
    expect(await passes(tokenDriver(undefined), 3)).toEqual([both, both, both])
  })
})

describe.each(polling)('$name: the fallback poll', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  const h = harness(backend)

  it('an idle runner finds a job another process enqueued, with no wake but its poll', async () => {
    const worker = h.runner({ driver: h.store.driver({ pollIntervalMs: QUICK_POLL_MS }) })
    worker.register(echo, () => null)
    const done = track(worker)
    await worker.start()
    // Another process: its enqueue wakes only its own runner, which is not started.
    const producer = h.runner()
    const id = await producer.register(echo).enqueue({ n: 1 })
    await done.ends([id])
    done.stop()
    expect((await worker.get(id)).status).toBe('succeeded')
  })

  it('with a change token, an idle runner polls by reading the token alone: no claim while nothing is written, one once another process writes', async ({ skip }) => {
    const real = h.store.driver({ pollIntervalMs: QUICK_POLL_MS })
    if (real.changeToken === undefined) skip('this driver has no change token: its poll wakes the runner every time')
    // Each driver call, by name, in the order made.
    const calls: string[] = []
    const driver = new Proxy(real, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target) as unknown
        if (typeof value !== 'function') return value
        return (...args: unknown[]) => {
          calls.push(String(prop))
          return (value as (...a: unknown[]) => unknown).apply(target, args)
        }
      },
    }) as Driver
    const tokenReads = () => calls.filter((c) => c === 'changeToken').length
    const waitForTokenReads = async (n: number) => {
      while (tokenReads() < n) await new Promise((resolve) => setTimeout(resolve, QUICK_POLL_MS))
    }
    const worker = h.runner({ driver })
    worker.register(echo, () => null)
    const done = track(worker)
    await worker.start()
    // The first pass wakes (it has no token to compare with); from the third on, nothing was written.
    await waitForTokenReads(3)
    const quietFrom = calls.length
    await waitForTokenReads(23)
    const quiet = calls.slice(quietFrom)
    expect(quiet.filter((c) => c === 'jobClaim' || c === 'jobFinishManyAndClaim')).toEqual([])
    // Another process writes: the token moves, and the next pass wakes the runner, which claims.
    const producer = h.runner()
    const id = await producer.register(echo).enqueue({ n: 1 })
    await done.ends([id])
    done.stop()
  })
})
