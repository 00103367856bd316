/**
 * `jobtable/testing` as a user installs it: built to JavaScript and
 * declarations, reached through the package's "exports", type checked
 * with `skipLibCheck: false` without @types/better-sqlite3 (its
 * declarations name no better-sqlite3 type, as jobtable/sqlite's do not),
 * and run by Node against the native driver.
 */
import { spawn } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const REPO = resolve(import.meta.dirname, '../..')
const TSC = join(REPO, 'node_modules/typescript/bin/tsc')
const PACKAGES = ['@standard-schema/spec', 'hono', '@hono/node-server', 'pino', 'croner', '@opentelemetry/api', '@types/node', 'better-sqlite3', 'zod']

function exec(args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolvePromise, reject) => {
    const proc = spawn(process.execPath, args, { cwd, env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    proc.stdout.on('data', (d) => (output += d))
    proc.stderr.on('data', (d) => (output += d))
    proc.once('error', reject)
    proc.once('close', (code) => resolvePromise({ code, output }))
  })
}

const CONSUMER_TS = `
import { z } from 'zod'
import { createTestKit, createTestClock, DrainLimitError, type TestJob, type TestKit } from 'jobtable/testing'

export async function check(): Promise<TestJob[]> {
  const kit: TestKit<unknown> = await createTestKit({
    clock: createTestClock(0),
    register: (runner) => runner.register('hello', { payload: z.strictObject({ name: z.string() }), handler: ({ name }) => name }),
  })
  try {
    await kit.assertNotEnqueued('hello')
    return await kit.drain({ maxJobs: 10 })
  } finally {
    await kit.close()
  }
}
export const pieces = [DrainLimitError] as const
`

/** Loads jobtable/testing and says which optional database modules that loaded. */
const LOADS_MJS = `
import { createRequire } from 'node:module'
const require = createRequire(import.meta.url)
const testing = await import('jobtable/testing')
const loaded = Object.keys(require.cache)
console.log(JSON.stringify([typeof testing.createTestKit, loaded.some((k) => k.includes('/better-sqlite3/')), loaded.some((k) => k.includes('/pg/'))]))
`

const MAIN_MJS = `
import { z } from 'zod'
import { createTestKit } from 'jobtable/testing'
const kit = await createTestKit({
  register: (runner) => runner.register('hello', { payload: z.strictObject({ name: z.string() }), result: (r) => r, handler: ({ name }) => 'hello ' + name }),
})
try {
  const id = await kit.kinds.enqueue({ name: 'ada' })
  await kit.assertEnqueued('hello', { name: 'ada' })
  const [job] = await kit.drain()
  console.log(JSON.stringify([job.id === id, job.status, job.result]))
} finally {
  await kit.close()
}
`

describe('jobtable/testing as installed by a user', () => {
  let root: string
  let built: { code: number | null; output: string }
  beforeAll(async () => {
    root = realpathSync(mkdtempSync(join(tmpdir(), 'jobtable-testing-packaging-')))
    built = await exec([TSC, '-p', 'tsconfig.build.json', '--outDir', join(root, 'dist')], REPO)
    const own = join(root, 'consumer/node_modules/jobtable')
    mkdirSync(own, { recursive: true })
    cpSync(join(REPO, 'package.json'), join(own, 'package.json'))
    cpSync(join(root, 'dist'), join(own, 'dist'), { recursive: true })
    for (const pkg of PACKAGES) {
      const link = join(root, 'consumer/node_modules', pkg)
      mkdirSync(dirname(link), { recursive: true })
      symlinkSync(join(REPO, 'node_modules', pkg), link, 'dir')
    }
    const dir = join(root, 'consumer')
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer-testing', private: true, type: 'module' }))
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', lib: ['ES2023', 'ESNext.Disposable'], module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, skipLibCheck: false, noEmit: true, types: ['node'] },
        files: ['consumer.ts'],
      }),
    )
    writeFileSync(join(dir, 'consumer.ts'), CONSUMER_TS)
    writeFileSync(join(dir, 'main.mjs'), MAIN_MJS)
    writeFileSync(join(dir, 'loads.mjs'), LOADS_MJS)
    // A build of the whole package: a bound for a loaded machine, not a measure.
  }, 120_000)
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true })
  })

  it('type checks with skipLibCheck false and no @types/better-sqlite3', async () => {
    expect(built.code, built.output).toBe(0)
    const tsc = await exec([TSC, '-p', 'tsconfig.json'], join(root, 'consumer'))
    expect(tsc.output).toBe('')
    expect(tsc.code).toBe(0)
    // A whole tsc run with no skipLibCheck: a bound for a loaded machine, not a measure.
  }, 120_000)

  it('loads neither better-sqlite3 nor pg until a kit needs one (pg is not even installed here)', async () => {
    expect(built.code, built.output).toBe(0)
    const node = await exec(['loads.mjs'], join(root, 'consumer'))
    expect(node.output).toBe('["function",false,false]\n')
    expect(node.code).toBe(0)
  })

  it('imports from the built package and drains a job on better-sqlite3', async () => {
    expect(built.code, built.output).toBe(0)
    const node = await exec(['main.mjs'], join(root, 'consumer'))
    expect(node.output).toBe('[true,"succeeded","hello ada"]\n')
    expect(node.code).toBe(0)
  })
})
