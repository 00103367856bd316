import { getEventListeners } from 'node:events'
import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { NotificationListener } from '../../src/postgres/listener.js'
import { NOTIFY_CHANNEL } from '../../src/postgres/queries.js'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'
import { eventually } from '../multiprocess/processes.js'

describe.skipIf(postgresSkipReason !== undefined)('postgres: the notification listener', () => {
  let name: string
  let admin: pg.Pool
  let listener: NotificationListener | undefined

  beforeEach(() => {
    // A name of this test's own: its application_name marks the listener's connection, and it is the schema notified.
    name = testSchema()
    admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
  })
  afterEach(async () => {
    await listener?.stop()
    listener = undefined
    await admin.end()
  })

  /** The backend pid of the listener's LISTENing connection, once there is one. */
  const listeningPid = async (): Promise<number | undefined> => {
    const rows = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, [name])
    return rows.rows[0]?.pid
  }

  it('keeps at most one abort listener on its stop signal across reconnects, and still hears notifications after them', async () => {
    let notified = 0
    listener = new NotificationListener({ connectionString: PG_URL, application_name: name }, NOTIFY_CHANNEL, name, (what) => {
      if (what === 'jobs') notified++
    })
    const abortListeners = () => getEventListeners(listener!.stopSignal, 'abort').length
    listener.start()
    // onNotify is called once each time the connection is listening again.
    await eventually(async () => notified === 1 && (await listeningPid()) !== undefined, 20)
    expect(abortListeners()).toBe(1)
    const pids = new Set<number>()
    for (let reconnect = 1; reconnect <= 6; reconnect++) {
      const pid = (await listeningPid())!
      pids.add(pid)
      await admin.query('SELECT pg_terminate_backend($1)', [pid])
      // Checked while it is down (waiting out the backoff) and again once it listens on a new connection.
      const seen: number[] = []
      await eventually(async () => {
        seen.push(abortListeners())
        const now = await listeningPid()
        return notified === reconnect + 1 && now !== undefined && now !== pid
      }, 10)
      seen.push(abortListeners())
      expect(Math.max(...seen), `after reconnect ${reconnect}`).toBeLessThanOrEqual(1)
    }
    expect(pids.size).toBe(6)
    // A notification for this schema still reaches it; one for another schema does not.
    const before = notified
    await admin.query('SELECT pg_notify($1, $2), pg_notify($1, $3)', [NOTIFY_CHANNEL, `${name}_other`, name])
    await eventually(async () => notified > before, 10)
    expect(notified).toBe(before + 1)
    await listener.stop()
    expect(abortListeners()).toBe(0)
    await eventually(async () => (await listeningPid()) === undefined, 20)
  })
})
