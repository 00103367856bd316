import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type Database from 'better-sqlite3'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { DatabaseError, Runner } from 'jobtable'
import { sqlite, type SqliteDriver } from 'jobtable/sqlite'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'
import { servers } from '../http/client.js'

const payload = z.strictObject({ n: z.number().int(), pad: z.string() })

describe('sqlite: a full disk', () => {
  let dir: string
  let runners: Runner<SqliteDriver>[] = []
  const s = servers()
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'jobtable-full-'))
  })
  afterEach(async () => {
    for (const r of runners) await r.close().catch(() => undefined)
    runners = []
    rmSync(dir, { recursive: true, force: true })
  })

  it('an enqueue into a full file gets a clear error (503 unavailable over HTTP), nothing acknowledged is lost, and work resumes when space returns', async () => {
    const logger = captureLogs()
    const runner = new Runner({ driver: sqlite({ path: join(dir, 'jobs.db') }), logger, workers: 2 })
    runners.push(runner)
    const ran: number[] = []
    const kind = runner.register('padded', { payload, enqueueOverHttp: true, handler: ({ n }) => void ran.push(n) })
    const api = await s.serve(runner)
    // The writing connection's own limit: the file may grow by a few pages, no more (as a full disk would stop it).
    const writer = runner.driver.database as Database.Database
    const pages = writer.pragma('page_count', { simple: true }) as number
    writer.pragma(`max_page_count = ${pages + 8}`)

    const acknowledged: string[] = []
    let refused: unknown
    for (let n = 0; refused === undefined && n < 10_000; n++) {
      try {
        acknowledged.push(await kind.enqueue({ n, pad: 'x'.repeat(2_000) }))
      } catch (err) {
        refused = err
      }
    }
    expect(refused).toBeInstanceOf(DatabaseError)
    expect(refused).toMatchObject({ dbCode: 'SQLITE_FULL', transient: true })
    const http = await api.post({ kind: 'padded', payload: { n: -1, pad: 'x'.repeat(2_000) } })
    expect([http.status, http.json.code, http.headers.get('retry-after')]).toEqual([503, 'unavailable', '1'])

    // Started while full: its claims and final writes fail for now, and nothing is lost or given up.
    const done = track(runner)
    await runner.start()
    writer.pragma('max_page_count = 1073741823')
    runner.wake()
    await done.ends(acknowledged)
    for (const id of acknowledged) expect((await runner.get(id)).status).toBe('succeeded')
    expect(ran.sort((a, b) => a - b)).toEqual(acknowledged.map((_, n) => n))
    // And new work is taken again.
    const after = await kind.enqueue({ n: 99_999, pad: '' })
    await done.ends([after])
    expect(writer.pragma('integrity_check', { simple: true })).toBe('ok')
    expect(logger.text()).not.toContain('xxxxxxxx')
  })
})
