/**
 * jobtable/testing's reads and assertions: what matches a partial
 * payload, what a failed assertion says, and that each options object
 * refuses keys it does not know.
 */
import { AssertionError } from 'node:assert'
import { existsSync } from 'node:fs'
import { dirname } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, defineKind, InvalidArgumentError, JobFailure, JobNotFoundError } from 'jobtable'
import { createTestClock, createTestKit, TestClock, type TestKit } from 'jobtable/testing'

const open: TestKit<unknown>[] = []
afterEach(async () => {
  for (const kit of open.splice(0)) await kit.close()
})

const order = z.strictObject({
  customer: z.strictObject({ id: z.string(), tier: z.string() }),
  lines: z.array(z.strictObject({ sku: z.string(), qty: z.number().int() })),
  at: z.string().optional(),
})
const ping = defineKind('ping', { payload: z.strictObject({ n: z.number().int() }) })

async function shopKit() {
  const kit = await createTestKit({
    register: (runner) => ({
      order: runner.register('order', {
        payload: order,
        result: (r: { total: number }) => r,
        failures: ['out_of_stock'],
        handler: ({ lines }) => {
          if (lines.some((l) => l.qty > 5)) throw new JobFailure<'out_of_stock'>('out_of_stock')
          return { total: lines.reduce((a, l) => a + l.qty, 0) }
        },
      }),
      ping: runner.register(ping, () => undefined),
    }),
  })
  open.push(kit as TestKit<unknown>)
  return kit
}

const big = { customer: { id: 'c1', tier: 'gold' }, lines: [{ sku: 'tea', qty: 2 }, { sku: 'cup', qty: 1 }] }

/** The AssertionError fn throws (failing the test when it throws none or another). */
function assertionOf(fn: () => unknown): AssertionError {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(AssertionError)
    return err as AssertionError
  }
  throw new Error('expected an AssertionError, and nothing was thrown')
}

describe('testing: enqueued and its assertions', () => {
  it('a partial payload matches by the fields given at every depth; arrays match element by element with the same length', async () => {
    const kit = await shopKit()
    const id = await kit.kinds.order.enqueue(big)
    const found = (partial: unknown) => kit.enqueued('order', partial).map((j) => j.id)
    expect(found(undefined)).toEqual([id])
    expect(found({})).toEqual([id])
    expect(found({ customer: { tier: 'gold' } })).toEqual([id])
    expect(found({ lines: [{ sku: 'tea' }, { qty: 1 }] })).toEqual([id])
    expect(found({ customer: { tier: 'silver' } })).toEqual([])
    // An array given is the whole array: a prefix, or the elements in another order, is not.
    expect(found({ lines: [{ sku: 'tea' }] })).toEqual([])
    expect(found({ lines: [{ sku: 'cup' }, { sku: 'tea' }] })).toEqual([])
    // A field the payload lacks, or a value of another type, does not match.
    expect(found({ at: '2030-01-01T00:00:00.000Z' })).toEqual([])
    expect(found({ customer: 'c1' })).toEqual([])
    expect(found({ customer: { id: 'c1', tier: 'gold', extra: null } })).toEqual([])
  })

  it('the partial is compared as JSON, as the payload is stored: a Date matches its ISO string', async () => {
    const kit = await shopKit()
    const at = new Date(Date.UTC(2030, 0, 1))
    await kit.kinds.order.enqueue({ ...big, at: at.toISOString() })
    expect(kit.enqueued(kit.kinds.order, { at })).toHaveLength(1)
    expect(kit.enqueued(kit.kinds.order, { at: new Date(at.getTime() + 1) })).toHaveLength(0)
    expect(() => kit.enqueued('order', { n: 1n })).toThrow(InvalidArgumentError)
  })

  it('a job enqueued and run since was still enqueued; options narrow by status, scope, priority and due time', async () => {
    const kit = await shopKit()
    const clock = kit.clock.now()
    const done = await kit.kinds.ping.enqueue({ n: 1 })
    await kit.drain()
    const later = await kit.kinds.ping.enqueue({ n: 2 }, { scope: 'h1', priority: 3, delayMs: 1_000 })
    const ids = (options: Parameters<typeof kit.enqueued>[2]) => kit.enqueued(ping, undefined, options).map((j) => j.id)
    expect(ids({})).toEqual([done, later])
    expect(ids({ status: 'succeeded' })).toEqual([done])
    expect(ids({ status: ['scheduled', 'queued'] })).toEqual([later])
    expect(ids({ scope: 'h1' })).toEqual([later])
    expect(ids({ scope: null })).toEqual([done])
    expect(ids({ priority: 3 })).toEqual([later])
    expect(ids({ runAt: clock + 1_000 })).toEqual([later])
    expect(ids({ runAt: new Date(clock + 1_000) })).toEqual([later])
    expect(ids({ runAt: null })).toEqual([done])
  })

  it('assertEnqueued returns the first match, and with count asserts exactly that many', async () => {
    const kit = await shopKit()
    const first = await kit.kinds.ping.enqueue({ n: 1 })
    await kit.kinds.ping.enqueue({ n: 1 })
    expect(kit.assertEnqueued(ping, { n: 1 }).id).toBe(first)
    expect(kit.assertEnqueued(ping, { n: 1 }, { count: 2 }).id).toBe(first)
    const error = assertionOf(() => kit.assertEnqueued(ping, { n: 1 }, { count: 1 }))
    expect(error.message).toMatch(/^expected exactly 1 job of kind "ping" with a payload matching \{"n":1\} to have been enqueued, but 2 match:\n {2}- queued /)
  })

  it('when no job of the kind was enqueued, the message names the kinds that were', async () => {
    const kit = await shopKit()
    expect(assertionOf(() => kit.assertEnqueued('order')).message).toBe(
      'expected a job of kind "order" to have been enqueued, but no job of kind "order" was; no job was enqueued at all',
    )
    await kit.kinds.ping.enqueue({ n: 1 })
    await kit.kinds.ping.enqueue({ n: 2 })
    expect(assertionOf(() => kit.assertEnqueued(kit.kinds.order, { customer: { id: 'c1' } })).message).toBe(
      'expected a job of kind "order" with a payload matching {"customer":{"id":"c1"}} to have been enqueued, but no job of kind "order" was; jobs enqueued: "ping" ×2',
    )
  })

  it('when jobs of the kind were enqueued and none matches, the message lists each with its status and payload', async () => {
    const kit = await shopKit()
    const a = await kit.kinds.order.enqueue(big, { scope: 'h1' })
    const b = await kit.kinds.order.enqueue({ customer: { id: 'c2', tier: 'basic' }, lines: [{ sku: 'pot', qty: 9 }] })
    await kit.drain()
    const message = assertionOf(() => kit.assertEnqueued('order', { customer: { id: 'c3' } }, { status: 'failed' })).message
    expect(message).toBe(
      'expected a job of kind "order" with a payload matching {"customer":{"id":"c3"}} (status failed) to have been enqueued, but none of the 2 jobs of that kind matches:\n' +
        `  - succeeded ${a} scope "h1": ${JSON.stringify(big)}\n` +
        `  - failed ${b}: {"customer":{"id":"c2","tier":"basic"},"lines":[{"sku":"pot","qty":9}]}`,
    )
  })

  it('a long list is cut at 20 jobs, saying how many more', async () => {
    const kit = await shopKit()
    await kit.kinds.ping.enqueueMany(Array.from({ length: 25 }, (_, n) => ({ n })))
    const message = assertionOf(() => kit.assertEnqueued(ping, { n: 99 })).message
    expect(message.split('\n')).toHaveLength(1 + 20 + 1)
    expect(message).toMatch(/\n {2}\(and 5 more\)$/)
  })

  it('assertNotEnqueued passes when nothing matches, and otherwise lists the matches', async () => {
    const kit = await shopKit()
    kit.assertNotEnqueued('ping')
    const id = await kit.kinds.ping.enqueue({ n: 4 }, { priority: 2 })
    kit.assertNotEnqueued(ping, { n: 5 })
    kit.assertNotEnqueued(ping, { n: 4 }, { status: 'succeeded' })
    expect(assertionOf(() => kit.assertNotEnqueued(ping, { n: 4 })).message).toBe(
      `expected no job of kind "ping" with a payload matching {"n":4} to have been enqueued, but 1 job match:\n  - queued ${id} priority 2: {"n":4}`,
    )
  })
})

describe('testing: reading jobs', () => {
  it('kit.job() is what runner.get() returns, with the payload as stored and the scope', async () => {
    const kit = await shopKit()
    const ok = await kit.kinds.order.enqueue(big, { scope: 'h1' })
    const out = await kit.kinds.order.enqueue({ ...big, lines: [{ sku: 'pot', qty: 6 }] })
    const waiting = await kit.kinds.ping.enqueue({ n: 1 }, { delayMs: 5_000, priority: -1 })
    await kit.drain()
    for (const [id, payload, scope] of [
      [ok, big, 'h1'],
      [out, { ...big, lines: [{ sku: 'pot', qty: 6 }] }, null],
      [waiting, { n: 1 }, null],
    ] as const) {
      expect(kit.job(id)).toEqual({ ...(await kit.runner.get(id)), payload, scope })
    }
    expect(kit.job(ok)).toMatchObject({ status: 'succeeded', result: { total: 3 } })
    expect(kit.job(out)).toMatchObject({ status: 'failed', error: 'out_of_stock' })
    expect(() => kit.job('01a00000-0000-7000-8000-000000000000')).toThrow(JobNotFoundError)
  })

  it('kit.thrown() keeps what a handler threw behind its internal_error (neither a JobFailure nor a snooze), and the job fails as it would', async () => {
    const bug = new TypeError("Cannot read properties of undefined (reading 'qty')")
    const kit = await createTestKit({
      clock: 0,
      register: (runner) => ({
        // The one-step form, retrying internal_error: a snooze (which gives its attempt back), a declared failure, then the bug on each of the three attempts left.
        flaky: runner.register('flaky', {
          payload: z.strictObject({}),
          failures: ['busy'],
          retry: { maxAttempts: 4, codes: ['busy', 'internal_error'], backoff: { baseMs: 0 } },
          handler: async (_p, job) => {
            if (job.attempt === 1) return job.snooze(0)
            if (job.attempt === 2) return job.fail('busy')
            throw bug
          },
        }),
        // A definition with a synchronous handler.
        sync: runner.register(ping, () => {
          throw bug
        }),
      }),
    })
    open.push(kit as TestKit<unknown>)
    const flaky = await kit.kinds.flaky.enqueue({})
    const sync = await kit.kinds.sync.enqueue({ n: 1 })
    await kit.drain({ advance: true })
    expect(kit.job(flaky)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 5 })
    expect(kit.thrown(flaky)).toEqual([bug, bug, bug])
    expect(kit.job(sync)).toMatchObject({ status: 'failed', error: 'internal_error' })
    expect(kit.thrown(sync)).toEqual([bug])
    expect(kit.thrown('01a00000-0000-7000-8000-000000000000')).toEqual([])
  })

  it('kit.jobs() lists in insertion order, filtered by kind, status and scope', async () => {
    const kit = await shopKit()
    const a = await kit.kinds.ping.enqueue({ n: 1 })
    const b = await kit.kinds.order.enqueue(big, { scope: 's' })
    const c = await kit.kinds.ping.enqueue({ n: 2 }, { scope: 's' })
    const ids = (filter?: Parameters<typeof kit.jobs>[0]) => kit.jobs(filter).map((j) => j.id)
    expect(ids()).toEqual([a, b, c])
    expect(ids({ kind: ping })).toEqual([a, c])
    expect(ids({ kind: 'order' })).toEqual([b])
    expect(ids({ scope: 's' })).toEqual([b, c])
    expect(ids({ kind: 'ping', scope: null })).toEqual([a])
    expect(ids({ status: 'running' })).toEqual([])
  })
})

describe('testing: options', () => {
  it('createTestKit refuses a key it does not know, naming it, and the runner options the kit owns', async () => {
    await expect(createTestKit({ workers: 2 } as never)).rejects.toThrow(new ConfigError('createTestKit: unknown option "workers" (known: register, clock, storage, runner, drain)'))
    await expect(createTestKit({ runner: { worker: 2 } } as never)).rejects.toThrow(/createTestKit runner options: unknown option "worker"/)
    await expect(createTestKit({ runner: { clock: () => 0 } } as never)).rejects.toThrow(/unknown option "clock" \(the kit's clock is the clock option\)/)
    await expect(createTestKit({ runner: { driver: {} } } as never)).rejects.toThrow(/unknown option "driver"/)
    await expect(createTestKit({ drain: { maxjobs: 1 } } as never)).rejects.toThrow(/createTestKit drain options: unknown option "maxjobs"/)
    await expect(createTestKit({ storage: 'disk' } as never)).rejects.toBeInstanceOf(ConfigError)
    await expect(createTestKit({ drain: { maxJobs: 0 } })).rejects.toBeInstanceOf(ConfigError)
    // The runner's own checks still apply.
    await expect(createTestKit({ runner: { workers: 0 } })).rejects.toThrow(/workers must be an integer >= 1/)
  })

  it('each call refuses a key it does not know, naming it', async () => {
    const kit = await shopKit()
    await expect(kit.drain({ maxjobs: 1 } as never)).rejects.toThrow(new InvalidArgumentError('drain: unknown option "maxjobs" (known: maxJobs, timeoutMs, advance)'))
    await expect(kit.drain({ timeoutMs: 0 })).rejects.toBeInstanceOf(InvalidArgumentError)
    expect(() => kit.jobs({ kinds: 'ping' } as never)).toThrow(/jobs: unknown option "kinds"/)
    expect(() => kit.enqueued('ping', {}, { statuses: 'queued' } as never)).toThrow(/enqueued: unknown option "statuses"/)
    expect(() => kit.assertEnqueued('ping', {}, { counts: 1 } as never)).toThrow(/assertEnqueued: unknown option "counts"/)
    expect(() => kit.assertNotEnqueued('ping', {}, { count: 1 } as never)).toThrow(/assertNotEnqueued: unknown option "count"/)
    expect(() => kit.enqueued('ping', {}, { status: 'done' as never })).toThrow(/status must be one of/)
    expect(() => kit.assertEnqueued('ping', {}, { count: 0 })).toThrow(/count must be an integer >= 1/)
  })

  it('a register callback that throws: its error comes through, and the temporary folder is removed', async () => {
    const boom = new Error('bad kinds')
    let path = ''
    await expect(
      createTestKit({
        storage: 'file',
        register: (runner) => {
          path = runner.driver.database.name
          expect(existsSync(path)).toBe(true)
          throw boom
        },
      }),
    ).rejects.toBe(boom)
    expect(existsSync(dirname(path))).toBe(false)
  })
})

describe('testing: TestClock', () => {
  it('stays where it is put, moves by advance and set, and tells its listeners', () => {
    const clock = createTestClock(new Date(Date.UTC(2030, 0, 1)))
    expect(clock).toBeInstanceOf(TestClock)
    const seen: number[] = []
    const stop = clock.onChange((now) => seen.push(now))
    const t0 = Date.UTC(2030, 0, 1)
    expect(clock.now()).toBe(t0)
    expect(clock.advance(1_500)).toBe(t0 + 1_500)
    expect(clock.set(t0 - 10)).toBe(t0 - 10)
    stop()
    clock.advance(1)
    expect(seen).toEqual([t0 + 1_500, t0 - 10])
    expect(clock.now()).toBe(t0 - 9)
  })

  it('refuses a negative or fractional advance and a time that is not one', () => {
    const clock = createTestClock(0)
    expect(() => clock.advance(-1)).toThrow(InvalidArgumentError)
    expect(() => clock.advance(1.5)).toThrow(InvalidArgumentError)
    expect(() => clock.set(new Date('not a date'))).toThrow(InvalidArgumentError)
    expect(() => clock.set('2030-01-01' as never)).toThrow(InvalidArgumentError)
    expect(() => clock.set(9e15)).toThrow(InvalidArgumentError)
    expect(() => createTestClock(Number.NaN)).toThrow(InvalidArgumentError)
    expect(clock.now()).toBe(0)
  })

  it("the kit's runner reads it: delayMs counts from it, and runAt is stored as given", async () => {
    const t0 = Date.UTC(2030, 5, 1)
    const kit = await createTestKit({ clock: new Date(t0), register: (runner) => runner.register(ping, () => undefined) })
    open.push(kit as TestKit<unknown>)
    const id = await kit.kinds.enqueue({ n: 1 }, { delayMs: 60_000 })
    expect(kit.job(id)).toMatchObject({ status: 'scheduled', runAt: t0 + 60_000 })
  })
})
