import { randomUUID } from 'node:crypto'
import type Database from 'better-sqlite3'
import { expect, it } from 'vitest'
import type { Driver, JobRow, NewJob, Runner } from 'jobtable'
import type { PostgresDriver } from 'jobtable/postgres'
import type { SqliteDriver } from 'jobtable/sqlite'
import { describeEachBackend, type Store } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'

/**
 * A list cursor names the last job of the page it ends. When that job is
 * deleted before the next page is asked for (retention, a prune, any
 * DELETE), the next page used to be empty with no cursor, although older
 * jobs existed: the listing ended early, silently. The cursor now stays
 * valid: its position is read from its job's id, whose leading 48 bits
 * are the enqueue time (a version-7 UUID), so the next page holds the
 * older jobs. A cursor still moves within the caller's own scope only.
 */

const T0 = 1_000_000

/** Every page from `cursor` on, until the last. */
async function rest(runner: Runner, options: { limit: number; scope?: string | null }, cursor: string | null): Promise<string[][]> {
  const pages: string[][] = []
  while (cursor !== null) {
    const page = await runner.list({ ...options, cursor })
    pages.push(page.jobs.map((j) => j.id))
    cursor = page.nextCursor
  }
  return pages
}

/** Enqueues one job per call, each in a millisecond of its own: ids are made from the wall clock (not the runner's), to the millisecond. */
async function enqueueApart(enqueue: () => Promise<string>, count: number): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < count; i++) {
    const started = Date.now()
    while (Date.now() === started) await new Promise((resolve) => setImmediate(resolve))
    ids.push(await enqueue())
  }
  return ids
}

/** A version-7 id of the millisecond `ms`, as jobtable makes them (random after the time). */
function idAt(ms: number): string {
  const time = ms.toString(16).padStart(12, '0')
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`
}

function job(id: string, scope: string | null = null): NewJob {
  return { id, kind: 'work', payload: '{"n":1}', scope, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }
}

/** Deletes one job by SQL, beside the driver, as an operator or another tool might. */
async function deleteJob(store: Store, driver: Driver, id: string): Promise<void> {
  if (store.sql !== undefined) {
    await store.sql(`DELETE FROM "${(driver as PostgresDriver).schema}".jobs WHERE id = $1`, [id])
    return
  }
  ;((driver as SqliteDriver).database as Database.Database).prepare('DELETE FROM jobtable_jobs WHERE id = ?').run(id)
}

describeEachBackend('a list cursor whose job was deleted', (backend) => {
  const h = harness(backend)

  it('runner: after the job ending page 1 is pruned, the next pages hold every older job, in order, and the last page ends the list', async () => {
    const clock = { now: T0 }
    const runner = h.runner({ clock: () => clock.now, retention: false })
    const kind = runner.register('work', { payload: echoPayload, handler: () => undefined })
    // Oldest first: j[0] .. j[5].
    const j = await enqueueApart(() => kind.enqueue({ n: 1 }), 6)
    const first = await runner.list({ limit: 2 })
    expect(first.jobs.map((x) => x.id)).toEqual([j[5], j[4]])
    // The job the cursor names ends and retention deletes it.
    expect(await runner.cancel(j[4]!)).toBe('cancelled')
    clock.now += 1_000
    expect(await runner.prune({ olderThanMs: 500 })).toBe(1)
    await expect(runner.get(j[4]!)).rejects.toThrow()

    expect(await rest(runner, { limit: 2 }, first.nextCursor)).toEqual([
      [j[3], j[2]],
      [j[1], j[0]],
    ])
  })

  it('driver: a cursor whose job was deleted by SQL lists the older jobs; one in a batch of its millisecond lists the rest of that batch again and skips nothing', async () => {
    const driver = h.store.driver()
    // Six jobs in six milliseconds, then four enqueued together in one.
    const apart = [0, 1, 2, 3, 4, 5].map((i) => job(idAt(1_700_000_000_000 + i * 7)))
    for (const x of apart) await driver.jobInsertMany({ jobs: [x], now: T0 })
    const batch = [0, 1, 2, 3].map(() => job(idAt(1_700_000_000_100)))
    await driver.jobInsertMany({ jobs: batch, now: T0 })
    const all = [...apart, ...batch].map((x) => x.id)
    const listAfter = async (beforeId: string) => (await driver.jobList({ limit: 100, beforeId })).map((r: JobRow) => r.id)

    // Jobs of distinct milliseconds: exactly the older ones.
    await deleteJob(h.store, driver, apart[3]!.id)
    expect(await listAfter(apart[3]!.id)).toEqual([apart[2]!.id, apart[1]!.id, apart[0]!.id])

    // A cursor in a batch of one millisecond: its position in the batch is gone with it, so the rest of the
    // batch is listed again (the newer ones were on the page before); every older job follows, none skipped.
    await deleteJob(h.store, driver, batch[2]!.id)
    const after = await listAfter(batch[2]!.id)
    const surviving = all.filter((id) => id !== apart[3]!.id && id !== batch[2]!.id)
    expect(after.slice(-5)).toEqual([apart[5]!.id, apart[4]!.id, apart[2]!.id, apart[1]!.id, apart[0]!.id])
    expect(new Set(after.slice(0, -5))).toEqual(new Set([batch[0]!.id, batch[1]!.id, batch[3]!.id]))
    expect(after.every((id) => surviving.includes(id))).toBe(true)
  })

  it('driver: a job of an older jobtable (a random version-4 id) sorting just after the cursor’s millisecond does not place the cursor', async () => {
    const driver = h.store.driver()
    const cursorMs = 1_700_000_000_000
    // Stored first, as an older jobtable would have: its id sorts right after the cursor's millisecond, but says nothing of its time.
    const legacy = job(idAt(cursorMs + 1).replace(/^(.{14})7/, '$14'))
    await driver.jobInsertMany({ jobs: [legacy], now: T0 })
    const [older, cursor, newer] = [job(idAt(cursorMs - 5)), job(idAt(cursorMs)), job(idAt(cursorMs + 9))]
    for (const x of [older, cursor, newer]) await driver.jobInsertMany({ jobs: [x], now: T0 })
    await deleteJob(h.store, driver, cursor.id)
    expect((await driver.jobList({ limit: 100, beforeId: cursor.id })).map((r) => r.id)).toEqual([older.id, legacy.id])
  })

  it('scopes: a deleted cursor moves within the caller’s own jobs only, and a cursor naming another scope’s job lists the caller’s older jobs, never that scope’s', async () => {
    const driver = h.store.driver()
    // Interleaved: a0 b0 a1 b1 a2 b2 a3 b3, each in a millisecond of its own.
    const jobs: NewJob[] = []
    for (let i = 0; i < 4; i++) {
      jobs.push(job(idAt(1_700_000_000_000 + 10 * i), 'a'))
      jobs.push(job(idAt(1_700_000_000_000 + 10 * i + 5), 'b'))
    }
    for (const x of jobs) await driver.jobInsertMany({ jobs: [x], now: T0 })
    const a = jobs.filter((x) => x.scope === 'a').map((x) => x.id)
    const b = jobs.filter((x) => x.scope === 'b').map((x) => x.id)
    const list = async (scope: string, beforeId: string) => (await driver.jobList({ scope, limit: 100, beforeId })).map((r) => r.id)

    // Scope a's page 1 ends at a2, which is then deleted.
    expect((await driver.jobList({ scope: 'a', limit: 2 })).map((r) => r.id)).toEqual([a[3], a[2]])
    await deleteJob(h.store, driver, a[2]!)
    expect(await list('a', a[2]!)).toEqual([a[1], a[0]])
    // b1's cursor (a job of scope b, still there) given to scope a: a's jobs older than it, no job of b.
    expect(await list('a', b[1]!)).toEqual([a[1], a[0]])
    expect(await list('b', b[1]!)).toEqual([b[0]])
  })
})
