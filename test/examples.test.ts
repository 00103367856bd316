import { execFile } from 'node:child_process'
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
})
