/**
 * Tests of the signup kinds (signup.ts) with jobtable/testing, as the
 * app's developers would write them: a fake mailer, the kit's clock for
 * the three days before a reminder, drain() to run what is due.
 */
import type Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { createTestKit } from 'jobtable/testing'
import { DAY, registerSignupKinds, registerWeeklyDigest, type Mailer } from './signup.js'

/** A mailer that records what it sends, and fails the next `n` sends when told to. */
function fakeMailer() {
  const sent: [to: string, template: string][] = []
  let failures = 0
  const mailer: Mailer & { sent: typeof sent; failNext(n: number): void } = {
    sent,
    failNext(n) {
      failures = n
    },
    async send(to, template) {
      if (failures > 0) {
        failures--
        throw new Error('503 from the mail provider')
      }
      sent.push([to, template])
    },
  }
  return mailer
}

const ada = { userId: 'u1', email: 'ada@example.com' }

describe('signup mail', () => {
  it('the welcome job sends the welcome mail and schedules a reminder three days on', async () => {
    const mailer = fakeMailer()
    await using kit = await createTestKit({ register: (runner) => registerSignupKinds(runner, mailer) })
    const signedUpAt = kit.clock.now()
    await kit.kinds.welcome.enqueue(ada)

    const ran = await kit.drain()

    expect(ran.map((job) => [job.kind, job.status])).toEqual([['signup_welcome', 'succeeded']])
    expect(mailer.sent).toEqual([['ada@example.com', 'welcome']])
    await kit.assertEnqueued(kit.kinds.reminder, { userId: 'u1' }, { status: 'scheduled', runAt: signedUpAt + 3 * DAY, count: 1 })
  })

  it('the reminder goes out once the clock reaches three days, not a millisecond before', async () => {
    const mailer = fakeMailer()
    await using kit = await createTestKit({ register: (runner) => registerSignupKinds(runner, mailer) })
    await kit.kinds.welcome.enqueue(ada)
    await kit.drain()

    kit.clock.advance(3 * DAY - 1)
    expect(await kit.drain()).toEqual([])
    expect(mailer.sent).toEqual([['ada@example.com', 'welcome']])

    kit.clock.advance(1)
    const ran = await kit.drain()
    expect(ran).toMatchObject([{ kind: 'signup_reminder', status: 'succeeded', payload: ada }])
    expect(mailer.sent).toEqual([
      ['ada@example.com', 'welcome'],
      ['ada@example.com', 'reminder'],
    ])
  })

  it('a reminder whose mail fails twice is retried after its backoff, and succeeds on the third attempt', async () => {
    const mailer = fakeMailer()
    await using kit = await createTestKit({ register: (runner) => registerSignupKinds(runner, mailer) })
    const id = await kit.kinds.reminder.enqueue(ada)
    mailer.failNext(2)

    // The first attempt fails; its retry waits for the backoff, which the clock has not reached.
    expect(await kit.drain()).toMatchObject([{ id, status: 'scheduled', attempt: 1 }])
    expect(mailer.sent).toEqual([])

    // advance: the clock moves to each retry's due time in turn.
    await kit.drain({ advance: true })
    expect(await kit.job(id)).toMatchObject({ status: 'succeeded', attempt: 3, error: null })
    expect(mailer.sent).toEqual([['ada@example.com', 'reminder']])
  })

  it('a reminder gives up with mailer_down after its three attempts', async () => {
    const mailer = fakeMailer()
    await using kit = await createTestKit({ register: (runner) => registerSignupKinds(runner, mailer) })
    const id = await kit.kinds.reminder.enqueue(ada)
    mailer.failNext(3)

    await kit.drain({ advance: true })

    expect(await kit.job(id)).toMatchObject({ status: 'failed', error: 'mailer_down', attempt: 3, maxAttempts: 3 })
    expect(mailer.sent).toEqual([])
  })

  it('a user row and its welcome job commit together, or neither is stored', async () => {
    const mailer = fakeMailer()
    await using kit = await createTestKit({ register: (runner) => registerSignupKinds(runner, mailer) })
    // The kit's database is a better-sqlite3 Database: the app's own tables live beside the jobs.
    const db = kit.database as Database.Database
    db.exec('CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT NOT NULL)')
    const signUp = db.transaction((u: typeof ada, fail: boolean) => {
      db.prepare('INSERT INTO users (id, email) VALUES (?, ?)').run(u.userId, u.email)
      kit.kinds.welcome.enqueueTx(db, u)
      if (fail) throw new Error('the form was submitted twice')
    })

    expect(() => signUp({ userId: 'u2', email: 'grace@example.com' }, true)).toThrow('submitted twice')
    await kit.assertNotEnqueued(kit.kinds.welcome, { userId: 'u2' })
    signUp(ada, false)
    kit.kinds.welcome.wake()

    await kit.drain()
    expect(db.prepare('SELECT id FROM users').all()).toEqual([{ id: 'u1' }])
    expect(mailer.sent).toEqual([['ada@example.com', 'welcome']])
  })

  it('the weekly digest goes out each Monday at 09:00 Paris time, once, and not for the Mondays before the app first ran', async () => {
    const mailer = fakeMailer()
    // Sunday 2026-12-06, noon in Paris (11:00 UTC).
    await using kit = await createTestKit({ register: (runner) => registerWeeklyDigest(runner, mailer), clock: new Date('2026-12-06T11:00:00Z') })
    expect(await kit.drain()).toEqual([])

    // Monday 08:59 in Paris: not yet.
    kit.clock.set(new Date('2026-12-07T07:59:00Z'))
    expect(await kit.drain()).toEqual([])

    kit.clock.set(new Date('2026-12-07T08:00:00Z'))
    expect(await kit.drain()).toMatchObject([{ kind: 'signup_digest', status: 'succeeded', payload: { to: 'team@example.com', week: '2026-12-07' } }])
    // Drained again the same morning: the tick was enqueued once.
    expect(await kit.drain()).toEqual([])
    expect(mailer.sent).toEqual([['team@example.com', 'digest']])
  })
})
