/**
 * jobtable as a user installs it: built to JavaScript and declarations,
 * copied into a consumer project's node_modules beside only the packages
 * that user has, then type checked with the user's own strict settings
 * (`skipLibCheck: false`, so every .d.ts jobtable ships is checked) and
 * imported by Node. better-sqlite3 and pg are optional peer dependencies:
 * a PostgreSQL user must not need SQLite, nor a SQLite user pg.
 */
import { spawn } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import pg from 'pg'
import { PG_URL, postgresSkipReason, testSchema } from './support/backends.js'

const REPO = resolve(import.meta.dirname, '..')
const TSC = join(REPO, 'node_modules/typescript/bin/tsc')
/** What every user installs with jobtable: its dependencies, and @types/node for a TypeScript user on Node. */
const RUNTIME = ['@standard-schema/spec', 'hono', '@hono/node-server', 'pino', 'croner', '@opentelemetry/api', '@types/node']

interface Exit {
  readonly code: number | null
  readonly output: string
}

function exec(args: string[], cwd: string, command = process.execPath): Promise<Exit> {
  return new Promise((resolvePromise, reject) => {
    const proc = spawn(command, args, { cwd, env: { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    proc.stdout.on('data', (d) => (output += d))
    proc.stderr.on('data', (d) => (output += d))
    proc.once('error', reject)
    proc.once('close', (code) => resolvePromise({ code, output }))
  })
}

let root: string
let build: Exit

beforeAll(async () => {
  // Under the system temporary folder, so that no node_modules above the
  // consumer (this repository's) can lend it a package it lacks.
  root = realpathSync(mkdtempSync(join(tmpdir(), 'jobtable-packaging-')))
  build = await exec([TSC, '-p', 'tsconfig.build.json', '--outDir', join(root, 'dist')], REPO)
  // A build of the whole package: a bound for a loaded machine, not a measure.
}, 120_000)

afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true })
})

/**
 * A consumer project: jobtable (its package.json and the built dist,
 * copied, as npm would unpack them) and symlinks to this repository's
 * copies of only the packages named.
 */
function consumer(name: string, packages: string[], files: Record<string, string>): string {
  const dir = join(root, name)
  const own = join(dir, 'node_modules/jobtable')
  mkdirSync(own, { recursive: true })
  cpSync(join(REPO, 'package.json'), join(own, 'package.json'))
  cpSync(join(root, 'dist'), join(own, 'dist'), { recursive: true })
  for (const pkg of [...RUNTIME, ...packages]) {
    const link = join(dir, 'node_modules', pkg)
    mkdirSync(dirname(link), { recursive: true })
    symlinkSync(join(REPO, 'node_modules', pkg), link, 'dir')
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `consumer-${name}`, private: true, type: 'module' }))
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        skipLibCheck: false,
        noEmit: true,
        types: ['node'],
      },
      files: ['consumer.ts'],
    }),
  )
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text)
  return dir
}

const POSTGRES_TS = `
import { Runner, JobFailure, type Driver, type Job } from 'jobtable'
import { postgres, PostgresDriver, type PostgresOptions } from 'jobtable/postgres'
import { createApi, bearerTokens, listen, type Api } from 'jobtable/http'

const options: PostgresOptions = { connectionString: 'postgres://localhost/app', schema: 'jobs' }
export function open(): { runner: Runner; api: Api } {
  const driver: Driver = postgres(options)
  const runner = new Runner({ driver, workers: 2 })
  return { runner, api: createApi({ runner, authorize: bearerTokens({ 'a-token-of-enough-length-0123': 'household-1' }) }) }
}
export const pieces = [JobFailure, PostgresDriver, listen] as const
export type Shown = Job
`

const SQLITE_TS = `
import { Runner, JobFailure, type Driver, type Job } from 'jobtable'
import { sqlite, SqliteDriver, migrate, type SqliteOptions } from 'jobtable/sqlite'
import { createApi, listen, type Api } from 'jobtable/http'

const options: SqliteOptions = { path: './app.db' }
export function open(): { runner: Runner; api: Api } {
  const driver: Driver = sqlite(options)
  const runner = new Runner({ driver })
  return { runner, api: createApi({ runner }) }
}
export const pieces = [JobFailure, SqliteDriver, migrate, listen] as const
export type Shown = Job
`

const METRICS_TS = `
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { createApi, metricsHandler as fromHttp } from 'jobtable/http'
import { createMetrics, metricsHandler, type Metrics } from 'jobtable/metrics'
import { Registry } from 'prom-client'

export function open(): { metrics: Metrics; serve: (request: Request) => Promise<Response> } {
  const runner = new Runner({ driver: sqlite({ path: './app.db' }) })
  const metrics = createMetrics({ runner, registry: new Registry(), queueDepthLimit: 1000 })
  createApi({ runner, metrics: metrics.registry, metricsScope: 'monitoring' })
  return { metrics, serve: fromHttp === metricsHandler ? metricsHandler(metrics.registry) : fromHttp(metrics.registry) }
}
`

/** Imports every entry point the consumer has, at run time. */
function importsMjs(entries: string[]): string {
  return `${entries.map((e, i) => `import * as m${i} from '${e}'`).join('\n')}
console.log(JSON.stringify([${entries.map((_, i) => `Object.keys(m${i}).length`).join(', ')}]))
`
}

describe('jobtable as installed by a user', () => {
  it('packs the README, the license, docs/ and examples/, everything the docs link to, and no tests', async () => {
    const pack = await exec(['pack', '--dry-run', '--json', '--ignore-scripts'], REPO, 'npm')
    expect(pack.code, pack.output).toBe(0)
    const paths = (JSON.parse(pack.output.slice(pack.output.indexOf('['))) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path)
    expect(paths).toEqual(expect.arrayContaining(['README.md', 'LICENSE', 'package.json', 'docs/http.md', 'docs/postgres.md', 'examples/meal-plan.ts', 'examples/testing/signup.ts']))
    expect(paths.filter((p) => p.startsWith('test/') || p.startsWith('bench/') || p.startsWith('.ci/'))).toEqual([])
    // A relative link of the README or of docs/*.md names a packed file, or a folder holding some.
    const docs = paths.filter((p) => p === 'README.md' || /^docs\/[^/]+\.md$/.test(p))
    const missing: string[] = []
    for (const doc of docs) {
      for (const [, target] of readFileSync(join(REPO, doc), 'utf8').matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue
        const path = join(dirname(doc), target!).replace(/\/$/, '')
        if (!paths.some((p) => p === path || p.startsWith(`${path}/`))) missing.push(`${doc}: ${target}`)
      }
    }
    expect(missing).toEqual([])
    expect(JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'))).toMatchObject({
      license: 'MIT',
      repository: { type: 'git', url: 'git+https://github.com/jobtable/jobtable.git' },
      homepage: 'https://github.com/jobtable/jobtable#readme',
    })
  })

  it('builds with tsc -p tsconfig.build.json', () => {
    expect(build.code, build.output).toBe(0)
  })

  it.concurrent('type checks for a PostgreSQL user (pg and @types/pg, no better-sqlite3) with skipLibCheck false', async () => {
    const dir = consumer('postgres-types', ['pg', '@types/pg'], { 'consumer.ts': POSTGRES_TS })
    const tsc = await exec([TSC, '-p', 'tsconfig.json'], dir)
    expect(tsc.output).toBe('')
    expect(tsc.code).toBe(0)
    // A whole tsc run with no skipLibCheck: a bound for a loaded machine, not a measure.
  }, 120_000)

  it.concurrent('type checks for a SQLite user (better-sqlite3 and @types/better-sqlite3, no pg) with skipLibCheck false', async () => {
    const dir = consumer('sqlite-types', ['better-sqlite3', '@types/better-sqlite3'], { 'consumer.ts': SQLITE_TS })
    const tsc = await exec([TSC, '-p', 'tsconfig.json'], dir)
    expect(tsc.output).toBe('')
    expect(tsc.code).toBe(0)
    // A whole tsc run with no skipLibCheck: a bound for a loaded machine, not a measure.
  }, 120_000)

  it('type checks and runs for a user of jobtable/metrics (prom-client installed) with skipLibCheck false', async () => {
    const dir = consumer('metrics', ['better-sqlite3', '@types/better-sqlite3', 'prom-client'], {
      'consumer.ts': METRICS_TS,
      'main.mjs': `${importsMjs(['jobtable/metrics'])}
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { createMetrics } from 'jobtable/metrics'
const runner = new Runner({ driver: sqlite({ path: './app.db' }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
const metrics = createMetrics({ runner })
console.log((await metrics.registry.metrics()).includes('jobtable_queue_depth{status="scheduled"} 0'))
metrics.close()
await runner.close()
`,
    })
    const tsc = await exec([TSC, '-p', 'tsconfig.json'], dir)
    expect(tsc.output).toBe('')
    expect(tsc.code).toBe(0)
    const node = await exec(['main.mjs'], dir)
    expect(node.output).toMatch(/^\[\d+\]\ntrue\n$/)
    expect(node.code).toBe(0)
  })

  // Its types are checked by both cases above, each without one driver's packages.
  it('runs for a user of jobtable and jobtable/http alone (neither driver package)', async () => {
    const dir = consumer('http-only', [], { 'main.mjs': importsMjs(['jobtable', 'jobtable/http']) })
    const node = await exec(['main.mjs'], dir)
    expect(node.output).toMatch(/^\[\d+,\d+\]\n$/)
    expect(node.code).toBe(0)
  })

  it('runs for a PostgreSQL user without better-sqlite3: imports, and the command migrates a postgres:// database', async () => {
    const dir = consumer('postgres-run', ['pg'], { 'main.mjs': importsMjs(['jobtable', 'jobtable/postgres', 'jobtable/http']) })
    const node = await exec(['main.mjs'], dir)
    expect(node.output).toMatch(/^\[\d+,\d+,\d+\]\n$/)
    expect(node.code).toBe(0)
    // SQLite named without better-sqlite3: one line naming the package to install.
    const cli = join(dir, 'node_modules/jobtable/dist/cli/main.js')
    const sqliteMigrate = await exec([cli, 'migrate', '-d', join(dir, 'app.db')], dir)
    expect(sqliteMigrate.output).toBe('jobtable: SQLite support needs the better-sqlite3 package, which is not installed: npm install better-sqlite3@12\n')
    expect(sqliteMigrate.code).toBe(1)
    if (postgresSkipReason !== undefined) {
      console.warn(`jobtable tests: migrate from the built command on PostgreSQL SKIPPED: ${postgresSkipReason}`)
      return
    }
    const schema = testSchema()
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    try {
      const migrate = await exec([cli, 'migrate', '-d', `${PG_URL}?schema=${schema}`, '--log-level', 'error'], dir)
      expect(migrate.output).toBe('')
      expect(migrate.code).toBe(0)
      const tables = await admin.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'jobs'`, [schema])
      expect(tables.rowCount).toBe(1)
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await admin.end()
    }
  })

  it('runs for a SQLite user without pg: imports, opens a file, and the command names pg for a postgres:// URL', async () => {
    const dir = consumer('sqlite-run', ['better-sqlite3'], {
      'main.mjs': `${importsMjs(['jobtable', 'jobtable/sqlite', 'jobtable/http'])}
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
const runner = new Runner({ driver: sqlite({ path: './app.db' }), logger: { debug() {}, info() {}, warn() {}, error() {} } })
console.log((await runner.list({})).jobs.length)
await runner.close()
`,
    })
    const node = await exec(['main.mjs'], dir)
    expect(node.output).toMatch(/^\[\d+,\d+,\d+\]\n0\n$/)
    expect(node.code).toBe(0)
    const cli = join(dir, 'node_modules/jobtable/dist/cli/main.js')
    const migrate = await exec([cli, 'migrate', '-d', join(dir, 'cli.db'), '--log-level', 'error'], dir)
    expect(migrate.output).toBe('')
    expect(migrate.code).toBe(0)
    const pgMigrate = await exec([cli, 'migrate', '-d', 'postgres://127.0.0.1:1/none'], dir)
    expect(pgMigrate.output).toBe('jobtable: PostgreSQL support needs the pg package, which is not installed: npm install pg@8\n')
    expect(pgMigrate.code).toBe(1)
    // Metrics asked for without prom-client: one line naming it, before anything listens.
    const metrics = await exec([cli, 'serve', '--workers', '0', '--metrics', '--port', '0', '-d', join(dir, 'cli.db'), '--log-level', 'error'], dir)
    expect(metrics.output).toBe('jobtable: metrics need the prom-client package, which is not installed: npm install prom-client@15\n')
    expect(metrics.code).toBe(1)
  })
})
