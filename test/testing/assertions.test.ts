/**
 * jobtable/testing's reads and assertions: what matches a partial
 * payload, what a failed assertion says, what a handler threw, and that
 * each options object refuses keys it does not know. The reads and
 * assertions run on the kit's own SQLite database and on PostgreSQL (a
 * driver handed in).
 */
import { AssertionError } from 'node:assert'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, defineKind, InvalidArgumentError, JobFailure, JobNotFoundError, type Driver, type Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { createTestClock, createTestKit, TestClock, type TestKit } from 'jobtable/testing'
import { describeKits, type KitMaker } from './kits.js'

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

function shopKinds(runner: Runner<Driver>) {
  return {
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
  }
}

const big = { customer: { id: 'c1', tier: 'gold' }, lines: [{ sku: 'tea', qty: 2 }, { sku: 'cup', qty: 1 }] }

/** The AssertionError the promise rejects with (failing the test when it resolves, or rejects with another). */
async function assertionOf(promise: Promise<unknown>): Promise<AssertionError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  if (err === undefined) throw new Error('expected an AssertionError, and the assertion passed')
  expect(err).toBeInstanceOf(AssertionError)
  return err as AssertionError
}

describeKits('testing: enqueued and its assertions', (kits: KitMaker) => {
  const shopKit = () => kits.kit({ register: shopKinds })

  it('a partial payload matches by the fields given at every depth; arrays match element by element with the same length', async () => {
    const kit = await shopKit()
    const id = await kit.kinds.order.enqueue(big)
    const found = async (partial: unknown) => (await kit.enqueued('order', partial)).map((j) => j.id)
    expect(await found(undefined)).toEqual([id])
    expect(await found({})).toEqual([id])
    expect(await found({ customer: { tier: 'gold' } })).toEqual([id])
    expect(await found({ lines: [{ sku: 'tea' }, { qty: 1 }] })).toEqual([id])
    expect(await found({ customer: { tier: 'silver' } })).toEqual([])
    // An array given is the whole array: a prefix, or the elements in another order, is not.
    expect(await found({ lines: [{ sku: 'tea' }] })).toEqual([])
    expect(await found({ lines: [{ sku: 'cup' }, { sku: 'tea' }] })).toEqual([])
    // A field the payload lacks, or a value of another type, does not match.
    expect(await found({ at: '2030-01-01T00:00:00.000Z' })).toEqual([])
    expect(await found({ customer: 'c1' })).toEqual([])
    expect(await found({ customer: { id: 'c1', tier: 'gold', extra: null } })).toEqual([])
  })

  it('the partial is compared as JSON, as the payload is stored: a Date matches its ISO string', async () => {
    const kit = await shopKit()
    const at = new Date(Date.UTC(2030, 0, 1))
    await kit.kinds.order.enqueue({ ...big, at: at.toISOString() })
    expect(await kit.enqueued(kit.kinds.order, { at })).toHaveLength(1)
    expect(await kit.enqueued(kit.kinds.order, { at: new Date(at.getTime() + 1) })).toHaveLength(0)
    await expect(kit.enqueued('order', { n: 1n })).rejects.toThrow(InvalidArgumentError)
  })

  it('a job enqueued and run since was still enqueued; options narrow by status, scope, priority and due time', async () => {
    const kit = await shopKit()
    const clock = kit.clock.now()
    const done = await kit.kinds.ping.enqueue({ n: 1 })
    await kit.drain()
    const later = await kit.kinds.ping.enqueue({ n: 2 }, { scope: 'h1', priority: 3, delayMs: 1_000 })
    const ids = async (options: Parameters<typeof kit.enqueued>[2]) => (await kit.enqueued(ping, undefined, options)).map((j) => j.id)
    expect(await ids({})).toEqual([done, later])
    expect(await ids({ status: 'succeeded' })).toEqual([done])
    expect(await ids({ status: ['scheduled', 'queued'] })).toEqual([later])
    expect(await ids({ scope: 'h1' })).toEqual([later])
    expect(await ids({ scope: null })).toEqual([done])
    expect(await ids({ priority: 3 })).toEqual([later])
    expect(await ids({ runAt: clock + 1_000 })).toEqual([later])
    expect(await ids({ runAt: new Date(clock + 1_000) })).toEqual([later])
    expect(await ids({ runAt: null })).toEqual([done])
  })

  it('assertEnqueued resolves to the first match, and with count asserts exactly that many', async () => {
    const kit = await shopKit()
    const first = await kit.kinds.ping.enqueue({ n: 1 })
    await kit.kinds.ping.enqueue({ n: 1 })
    expect((await kit.assertEnqueued(ping, { n: 1 })).id).toBe(first)
    expect((await kit.assertEnqueued(ping, { n: 1 }, { count: 2 })).id).toBe(first)
    const error = await assertionOf(kit.assertEnqueued(ping, { n: 1 }, { count: 1 }))
    expect(error.message).toMatch(/^expected exactly 1 job of kind "ping" with a payload matching \{"n":1\} to have been enqueued, but 2 match:\n {2}- queued /)
  })

  it('when no job of the kind was enqueued, the message names the kinds that were', async () => {
    const kit = await shopKit()
    expect((await assertionOf(kit.assertEnqueued('order'))).message).toBe(
      'expected a job of kind "order" to have been enqueued, but no job of kind "order" was; no job was enqueued at all',
    )
    await kit.kinds.ping.enqueue({ n: 1 })
    await kit.kinds.ping.enqueue({ n: 2 })
    expect((await assertionOf(kit.assertEnqueued(kit.kinds.order, { customer: { id: 'c1' } }))).message).toBe(
      'expected a job of kind "order" with a payload matching {"customer":{"id":"c1"}} to have been enqueued, but no job of kind "order" was; jobs enqueued: "ping" ×2',
    )
  })

  it('when jobs of the kind were enqueued and none matches, the message lists each with its status and payload', async () => {
    const kit = await shopKit()
    const a = await kit.kinds.order.enqueue(big, { scope: 'h1' })
    const b = await kit.kinds.order.enqueue({ customer: { id: 'c2', tier: 'basic' }, lines: [{ sku: 'pot', qty: 9 }] })
    await kit.drain()
    const message = (await assertionOf(kit.assertEnqueued('order', { customer: { id: 'c3' } }, { status: 'failed' }))).message
    expect(message).toBe(
      'expected a job of kind "order" with a payload matching {"customer":{"id":"c3"}} (status failed) to have been enqueued, but none of the 2 jobs of that kind matches:\n' +
        `  - succeeded ${a} scope "h1": ${JSON.stringify(big)}\n` +
        `  - failed ${b}: {"customer":{"id":"c2","tier":"basic"},"lines":[{"sku":"pot","qty":9}]}`,
    )
  })

  it('a long list is cut at 20 jobs, saying how many more', async () => {
    const kit = await shopKit()
    await kit.kinds.ping.enqueueMany(Array.from({ length: 25 }, (_, n) => ({ n })))
    const message = (await assertionOf(kit.assertEnqueued(ping, { n: 99 }))).message
    expect(message.split('\n')).toHaveLength(1 + 20 + 1)
    expect(message).toMatch(/\n {2}\(and 5 more\)$/)
  })

  it('assertNotEnqueued passes when nothing matches, and otherwise lists the matches', async () => {
    const kit = await shopKit()
    await kit.assertNotEnqueued('ping')
    const id = await kit.kinds.ping.enqueue({ n: 4 }, { priority: 2 })
    await kit.assertNotEnqueued(ping, { n: 5 })
    await kit.assertNotEnqueued(ping, { n: 4 }, { status: 'succeeded' })
    expect((await assertionOf(kit.assertNotEnqueued(ping, { n: 4 }))).message).toBe(
      `expected no job of kind "ping" with a payload matching {"n":4} to have been enqueued, but 1 job match:\n  - queued ${id} priority 2: {"n":4}`,
    )
  })
})

describeKits('testing: reading jobs', (kits: KitMaker) => {
  const shopKit = () => kits.kit({ register: shopKinds })

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
      expect(await kit.job(id)).toEqual({ ...(await kit.runner.get(id)), payload, scope })
    }
    expect(await kit.job(ok)).toMatchObject({ status: 'succeeded', result: { total: 3 } })
    expect(await kit.job(out)).toMatchObject({ status: 'failed', error: 'out_of_stock' })
    await expect(kit.job('01a00000-0000-7000-8000-000000000000')).rejects.toThrow(JobNotFoundError)
  })

  it('kit.thrown() keeps what each failed attempt threw (a declared failure, the error behind an internal_error; never a snooze), and the job fails as it would', async () => {
    const bug = new TypeError("Cannot read properties of undefined (reading 'qty')")
    const kit = await kits.kit({
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
    const flaky = await kit.kinds.flaky.enqueue({})
    const sync = await kit.kinds.sync.enqueue({ n: 1 })
    await kit.drain({ advance: true })
    expect(await kit.job(flaky)).toMatchObject({ status: 'failed', error: 'internal_error', attempt: 5 })
    const [declared, ...bugs] = kit.thrown(flaky)
    expect(declared).toBeInstanceOf(JobFailure)
    expect((declared as JobFailure).code).toBe('busy')
    expect(bugs).toEqual([bug, bug, bug])
    expect(await kit.job(sync)).toMatchObject({ status: 'failed', error: 'internal_error' })
    expect(kit.thrown(sync)).toEqual([bug])
    expect(kit.thrown('01a00000-0000-7000-8000-000000000000')).toEqual([])
  })

  it("an onHandlerError of the test's own is called too, with the job, and thrown() still keeps the error", async () => {
    const bug = new RangeError('off by one')
    const seen: [unknown, { id: string; kind: string; attempt: number; code: string }][] = []
    const kit = await kits.kit({
      runner: { onHandlerError: (error, job) => seen.push([error, { ...job }]) },
      register: (runner) =>
        runner.register(ping, () => {
          throw bug
        }),
    })
    const id = await kit.kinds.enqueue({ n: 1 })
    await kit.drain()
    expect(seen).toEqual([[bug, { id, kind: 'ping', attempt: 1, code: 'internal_error' }]])
    expect(kit.thrown(id)).toEqual([bug])
  })

  it("a job enqueued in a transaction of the test's own is read once committed, with its payload and scope; one rolled back never is", async () => {
    const kit = await kits.kit({ register: (runner) => runner.register(ping, () => undefined) })
    // enqueueTx is synchronous on SQLite and a promise on PostgreSQL.
    const enqueue = (tx: never, n: number, ids: string[]) => {
      const id: unknown = kit.kinds.enqueueTx(tx, { n }, { scope: 's' })
      if (id instanceof Promise) return id.then((i: string) => ids.push(i))
      ids.push(id as string)
    }
    const rolledBack: string[] = []
    await kits.transaction(kit, (tx) => enqueue(tx, 1, rolledBack), 'rollback')
    const committed: string[] = []
    await kits.transaction(kit, (tx) => enqueue(tx, 2, committed), 'commit')
    expect(rolledBack).toHaveLength(1)
    await expect(kit.job(rolledBack[0]!)).rejects.toThrow(JobNotFoundError)
    await kit.assertNotEnqueued(ping, { n: 1 })
    expect(await kit.assertEnqueued(ping, { n: 2 }, { scope: 's', count: 1 })).toMatchObject({ id: committed[0], status: 'queued', payload: { n: 2 }, scope: 's' })
    expect(await kit.drain()).toMatchObject([{ id: committed[0], status: 'succeeded' }])
  })

  it('kit.jobs() lists in insertion order, filtered by kind, status and scope', async () => {
    const kit = await shopKit()
    const a = await kit.kinds.ping.enqueue({ n: 1 })
    const b = await kit.kinds.order.enqueue(big, { scope: 's' })
    const c = await kit.kinds.ping.enqueue({ n: 2 }, { scope: 's' })
    const ids = async (filter?: Parameters<typeof kit.jobs>[0]) => (await kit.jobs(filter)).map((j) => j.id)
    expect(await ids()).toEqual([a, b, c])
    expect(await ids({ kind: ping })).toEqual([a, c])
    expect(await ids({ kind: 'order' })).toEqual([b])
    expect(await ids({ scope: 's' })).toEqual([b, c])
    expect(await ids({ kind: 'ping', scope: null })).toEqual([a])
    expect(await ids({ status: 'running' })).toEqual([])
    expect(await ids({ status: ['queued', 'succeeded'] })).toEqual([a, b, c])
  })

  it('each call refuses a key it does not know, naming it', async () => {
    const kit = await shopKit()
    await expect(kit.drain({ maxjobs: 1 } as never)).rejects.toThrow(new InvalidArgumentError('drain: unknown option "maxjobs" (known: maxJobs, timeoutMs, advance)'))
    await expect(kit.drain({ timeoutMs: 0 })).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(kit.jobs({ kinds: 'ping' } as never)).rejects.toThrow(/jobs: unknown option "kinds"/)
    await expect(kit.enqueued('ping', {}, { statuses: 'queued' } as never)).rejects.toThrow(/enqueued: unknown option "statuses"/)
    await expect(kit.assertEnqueued('ping', {}, { counts: 1 } as never)).rejects.toThrow(/assertEnqueued: unknown option "counts"/)
    await expect(kit.assertNotEnqueued('ping', {}, { count: 1 } as never)).rejects.toThrow(/assertNotEnqueued: unknown option "count"/)
    await expect(kit.enqueued('ping', {}, { status: 'done' as never })).rejects.toThrow(/status must be one of/)
    await expect(kit.assertEnqueued('ping', {}, { count: 0 })).rejects.toThrow(/count must be an integer >= 1/)
  })

  it("the kit's runner reads its clock: delayMs counts from it, and runAt is stored as given", async () => {
    const t0 = Date.UTC(2020, 5, 1)
    const kit = await kits.kit({ clock: new Date(t0), register: (runner) => runner.register(ping, () => undefined) })
    const id = await kit.kinds.enqueue({ n: 1 }, { delayMs: 60_000 })
    expect(await kit.job(id)).toMatchObject({ status: 'scheduled', runAt: t0 + 60_000 })
  })
})

describe('testing: options', () => {
  it('createTestKit refuses a key it does not know, naming it, and the runner options the kit owns', async () => {
    await expect(createTestKit({ workers: 2 } as never)).rejects.toThrow(new ConfigError('createTestKit: unknown option "workers" (known: register, clock, storage, driver, runner, drain)'))
    await expect(createTestKit({ runner: { worker: 2 } } as never)).rejects.toThrow(/createTestKit runner options: unknown option "worker"/)
    await expect(createTestKit({ runner: { clock: () => 0 } } as never)).rejects.toThrow(/unknown option "clock" \(the kit's clock is its clock option\)/)
    await expect(createTestKit({ runner: { driver: {} } } as never)).rejects.toThrow(/unknown option "driver" \(the kit's driver is its driver option\)/)
    await expect(createTestKit({ drain: { maxjobs: 1 } } as never)).rejects.toThrow(/createTestKit drain options: unknown option "maxjobs"/)
    await expect(createTestKit({ storage: 'disk' } as never)).rejects.toBeInstanceOf(ConfigError)
    await expect(createTestKit({ drain: { maxJobs: 0 } })).rejects.toBeInstanceOf(ConfigError)
    await expect(createTestKit({ runner: { onHandlerError: 'log' } } as never)).rejects.toThrow(new ConfigError('createTestKit runner options: onHandlerError must be a function'))
    // The runner's own checks still apply.
    await expect(createTestKit({ runner: { workers: 0 } })).rejects.toThrow(/workers must be an integer >= 1/)
  })

  it('driver: anything but a jobtable driver is refused, naming the option; so is storage beside it', async () => {
    const refused = new ConfigError('createTestKit: driver must be a jobtable driver, e.g. postgres({ connectionString, schema }) from jobtable/postgres')
    for (const bad of [null, 'postgres://localhost/test', {}, { jobClaim: () => [] }, () => undefined]) {
      await expect(createTestKit({ driver: bad } as never)).rejects.toThrow(refused)
    }
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-testkit-test-'))
    try {
      const driver = sqlite({ path: join(dir, 'jobs.db') })
      await expect(createTestKit({ driver, storage: 'file' })).rejects.toThrow(
        new ConfigError("createTestKit: storage is for the kit's own SQLite database; with a driver, the driver says where the jobs are"),
      )
      // The driver was the kit's from the start: a createTestKit that fails closes it.
      expect(driver.database.open).toBe(false)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('driver: a SQLite driver of the test\'s own runs the kit on its file; kit.database is its database, and close closes the driver', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-testkit-test-'))
    try {
      const driver = sqlite({ path: join(dir, 'jobs.db') })
      const kit = await createTestKit({ driver, register: (runner) => runner.register(ping, () => undefined) })
      open.push(kit as TestKit<unknown>)
      expect(kit.runner.driver.database).toBe(driver.database)
      expect(kit.database).toBe(driver.database)
      expect(kit.path).toBeNull()
      const id = await kit.kinds.enqueue({ n: 1 })
      expect(await kit.drain()).toMatchObject([{ id, status: 'succeeded', payload: { n: 1 }, scope: null }])
      await kit.close()
      expect(driver.database.open).toBe(false)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
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
})
