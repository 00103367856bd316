import { expect, it } from 'vitest'
import { defineKind, InvalidArgumentError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

const plan = defineKind('plan_week', { payload: echoPayload })
// A limit that never binds: it takes the claim through the limited path too.
const mail = defineKind('send_mail', { payload: echoPayload, concurrency: 5 })

describeEachBackend('pausing a kind', (backend) => {
  const h = harness(backend)

  it('a paused kind keeps its jobs queued while other kinds run and its running job finishes; resumed, they run', async () => {
    const runner = h.runner({ workers: 2 })
    const hold = gate()
    const started: string[] = []
    runner.register(plan, async ({ n }) => {
      started.push(`plan-${n}`)
      if (n === 0) await hold.promise
    })
    runner.register(mail, ({ n }) => void started.push(`mail-${n}`))
    const web = h.runner()
    const plans = web.register(plan)
    const mails = web.register(mail)
    const done = track(runner)
    const first = await plans.enqueue({ n: 0 })
    await runner.start()
    await done.starts(1)
    expect(await web.pause('plan_week')).toBe(true)
    expect(await web.pause('send_mail')).toBe(true)
    expect(await web.pause('plan_week')).toBe(false)
    const later = await plans.enqueueMany([{ n: 1 }, { n: 2 }])
    const mailIds = await mails.enqueueMany([{ n: 1 }])
    expect(await web.resume('send_mail')).toBe(true)
    runner.wake()
    await done.ends(mailIds)
    // The running plan finishes; the queued ones stay queued however often the runner looks.
    hold.open()
    await done.ends([first])
    for (let i = 0; i < 3; i++) {
      runner.wake()
      await runner.get(first)
    }
    expect(started).toEqual(['plan-0', 'mail-1'])
    for (const id of later) expect((await runner.get(id)).status).toBe('queued')
    expect((await web.paused()).map((p) => p.kind)).toEqual(['plan_week'])
    expect(await runner.resume('plan_week')).toBe(true)
    await done.ends(later)
    expect(started).toEqual(['plan-0', 'mail-1', 'plan-1', 'plan-2'])
    expect(await web.paused()).toEqual([])
    expect(await web.resume('plan_week')).toBe(false)
  })

  it("a pause made by another process holds for this runner's claims, and its resume reaches it", async () => {
    const worker = h.runner({ workers: 2 })
    const kind = worker.register('echo', { payload: echoPayload, handler: () => undefined })
    const done = track(worker)
    await worker.start()
    // The operator's process knows no kinds at all.
    const operator = h.runner({ driver: h.store.driver() })
    await operator.pause('echo')
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }])
    worker.wake()
    await worker.get(ids[0]!)
    expect((await worker.get(ids[0]!)).status).toBe('queued')
    await operator.resume('echo')
    // PostgreSQL's resume notifies every runner; on SQLite an idle runner of another process finds it within its poll, which this test store sets to an hour.
    if (!backend.wakesOnCommit) worker.wake()
    await done.ends(ids)
  })

  it('a pause outlasts the runners that saw it: a new runner on the store finds it, and runs nothing of the kind', async () => {
    const first = h.runner()
    first.register('echo', { payload: echoPayload, handler: () => undefined })
    const at = Date.now()
    await first.pause('echo')
    await first.close()
    const next = h.runner({ driver: h.store.driver() })
    const kind = next.register('echo', { payload: echoPayload, handler: () => undefined })
    const paused = await next.paused()
    expect(paused.map((p) => p.kind)).toEqual(['echo'])
    expect(paused[0]!.pausedAt).toBeGreaterThanOrEqual(at)
    const id = await kind.enqueue({ n: 1 })
    await next.start()
    next.wake()
    await next.get(id)
    expect((await next.get(id)).status).toBe('queued')
  })

  it('refuses a kind that is not a non-empty string of at most 256 characters', async () => {
    const runner = h.runner()
    for (const kind of ['', 'x'.repeat(257), 7, null]) {
      await expect(runner.pause(kind as string)).rejects.toBeInstanceOf(InvalidArgumentError)
      await expect(runner.resume(kind as string)).rejects.toBeInstanceOf(InvalidArgumentError)
    }
    expect(await runner.paused()).toEqual([])
  })
})
