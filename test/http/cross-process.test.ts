import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { Runner } from 'jobtable'
import type { Driver } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { postgres } from 'jobtable/postgres'
import pg from 'pg'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { servers } from './client.js'

/** A store both processes open: the same SQLite file, or the same PostgreSQL schema. */
interface Shared {
  readonly name: string
  readonly skip?: string
  open(dir: string, cleanup: (() => Promise<void> | void)[]): { driver: Driver; args: string[] }
}

const shared: Shared[] = [
  {
    name: 'sqlite',
    open(dir) {
      const path = join(dir, 'jobs.db')
      return { driver: sqlite({ path }), args: [path, dir] }
    },
  },
  {
    name: 'postgres',
    skip: postgresBackend().skip,
    open(dir, cleanup) {
      const schema = `jobtable_sse_${process.pid}_${Date.now()}`
      cleanup.push(async () => {
        const admin = new pg.Client({ connectionString: PG_URL })
        await admin.connect()
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
        await admin.end()
      })
      return { driver: postgres({ connectionString: PG_URL, schema }), args: [PG_URL, dir, schema] }
    },
  },
]

describe.each(shared)('$name: event streams across processes', (store) => {
  if (store.skip) it.skip(`skipped: ${store.skip}`, () => {})
  if (store.skip) return
  const s = servers()
  const cleanup: (() => Promise<void> | void)[] = []
  afterEach(async () => {
    for (const c of cleanup.reverse()) await c()
    cleanup.length = 0
  })

  it('streams each partial result and the final state of a job another process runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-sse-'))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const { driver, args } = store.open(dir, cleanup)
    // This process only serves the API: its runner is never started.
    const runner = new Runner({ driver, workers: 1, logger: captureLogs() })
    cleanup.push(() => runner.close())
    runner.register('steps', { payload: z.strictObject({}), handler: () => null, enqueueOverHttp: true })
    const api = await s.serve(runner, { eventsPollMs: 20 })
    const id = (await api.post({ kind: 'steps', payload: {} })).json.id
    const stream = await api.events(id)
    expect(JSON.parse((await stream.next())!.data).status).toBe('queued')

    const worker = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'test/http/fixtures/remote-worker.ts', ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const exited = new Promise((resolve) => worker.once('exit', resolve))
    cleanup.push(async () => {
      if (worker.exitCode === null) worker.kill('SIGTERM')
      await exited
    })

    const seen: { status: string; result: unknown }[] = []
    for (;;) {
      const e = await stream.next()
      if (!e) break
      const job = JSON.parse(e.data)
      seen.push({ status: job.status, result: job.result })
      if (job.status !== 'running') continue
      // Release the next step only once this one has been seen.
      const next = job.result === null ? 0 : job.result.step + 1
      writeFileSync(join(dir, next < 3 ? `step-${next}` : 'final'), '')
    }
    expect(seen.map((j) => j.result)).toEqual([null, { step: 0 }, { step: 1 }, { step: 2 }, { step: 99 }])
    expect(seen.map((j) => j.status)).toEqual(['running', 'running', 'running', 'running', 'succeeded'])
  })
})
