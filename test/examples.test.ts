import { execFile, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { captureLogs } from './support/logs.js'

const run = promisify(execFile)

describe('examples', () => {
  const dirs: string[] = []
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
  })

  it('meal-plan.ts runs a meal plan to success and a recipe import to its declared failure', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-example-'))
    dirs.push(dir)
    const db = join(dir, 'example.db')
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--conditions=source', 'examples/meal-plan.ts'], {
      env: { ...process.env, JOBTABLE_DB: db },
    })
    expect(stdout).toMatch(/meal_plan +succeeded result=\{"days":\[\{"day":1,.*\{"day":3,"dinner":"tacos"\}\]\} error=null/)
    expect(stdout).toMatch(/import_recipe +failed +result=null error=no_recipe_found/)
    // What it printed is what the file holds.
    const runner = new Runner({ driver: sqlite({ path: db }), logger: captureLogs() })
    const { jobs } = await runner.list()
    await runner.close()
    expect(jobs.map((j) => [j.kind, j.status, j.error])).toEqual([
      ['import_recipe', 'failed', 'no_recipe_found'],
      ['meal_plan', 'succeeded', null],
    ])
    expect(stdout).not.toContain('providerCost')
  })

  it('deploy/worker.ts stays up while idle, runs what deploy/web.ts (no handlers) enqueues later, and exits 0 on SIGTERM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-example-'))
    dirs.push(dir)
    const env = { ...process.env, JOBTABLE_DATABASE: join(dir, 'app.db') }
    const worker = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'examples/deploy/worker.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    const exited = new Promise<number | string | null>((resolve) => worker.on('exit', (code, signal) => resolve(signal ?? code)))
    let out = ''
    await new Promise<void>((resolve, reject) => {
      worker.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString()
        if (out.includes('worker ready')) resolve()
      })
      void exited.then((how) => reject(new Error(`the worker exited (${how}) before it was ready`)))
    })
    // The worker idles (nothing queued) while another process starts, enqueues, and exits.
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--conditions=source', 'examples/deploy/web.ts'], { env })
    const id = /enqueued meal_plan (\S+): queued/.exec(stdout)?.[1]
    expect(id).toBeDefined()
    const reader = new Runner({ driver: sqlite({ path: env.JOBTABLE_DATABASE }), logger: captureLogs() })
    try {
      // The worker notices another process's commit within its poll interval (1 s).
      for (;;) {
        const job = await reader.get(id!)
        if (job.status === 'succeeded') {
          expect(job.result).toEqual({ days: [{ day: 1, dinner: 'lentil soup' }, { day: 2, dinner: 'risotto' }, { day: 3, dinner: 'tacos' }] })
          break
        }
        expect(worker.exitCode).toBeNull()
        await new Promise((r) => setTimeout(r, 50))
      }
    } finally {
      await reader.close()
    }
    worker.kill('SIGTERM')
    expect(await exited).toBe(0)
  })
})
