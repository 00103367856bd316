import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { captureLogs } from '../support/logs.js'
import { servers } from './client.js'

// SQLite only: the other process opens the same file. A PostgreSQL run
// would hand it the connection string instead.
describe('sqlite: event streams across processes', () => {
  const s = servers()
  const cleanup: (() => Promise<void> | void)[] = []
  afterEach(async () => {
    for (const c of cleanup.reverse()) await c()
    cleanup.length = 0
  })

  it('streams each partial result and the final state of a job another process runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-sse-'))
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'jobs.db')
    // This process only serves the API: its runner is never started.
    const runner = new Runner({ driver: sqlite({ path }), workers: 1, logger: captureLogs() })
    cleanup.push(() => runner.close())
    runner.register('steps', { payload: z.strictObject({}), handler: () => null, enqueueOverHttp: true })
    const api = await s.serve(runner, { eventsPollMs: 20 })
    const id = (await api.post({ kind: 'steps', payload: {} })).json.id
    const stream = await api.events(id)
    expect(JSON.parse((await stream.next())!.data).status).toBe('queued')

    const worker = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'test/http/fixtures/remote-worker.ts', path, dir], {
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
