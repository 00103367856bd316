/**
 * Every TypeScript example in README.md and docs/*.md, as a newcomer meets
 * it: the package packed with `npm pack` and unpacked into a fresh project
 * beside only the packages the examples name, every block type checked in
 * one tsc run with the tsconfig.json `tsc --init` writes (its target and
 * module) made stricter still, then compiled to JavaScript and run with
 * `node` (Node 20, no loader), each within a bound.
 *
 * Which block makes which file (test/docs/blocks.ts enforces it): a block
 * whose first line is `// name.ts` is that whole file, imports included;
 * one whose first line is `// continues name.ts` goes at the end of that
 * earlier file; any other block is a whole file of its own.
 */
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import openapiTS, { astToString } from 'openapi-typescript'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { createApi } from 'jobtable/http'
import { sqlite } from 'jobtable/sqlite'
import { registerKinds } from '../../examples/meal-plan.js'
import { PG_URL, postgresSkipReason } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { assemble, extractBlocks, firstOrigin, origin, type DocFile } from './blocks.js'

const REPO = resolve(import.meta.dirname, '../..')
const TSC = join(REPO, 'node_modules/typescript/bin/tsc')
const DOCS = ['README.md', ...readdirSync(join(REPO, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)]
/** The files the blocks make, in the docs' order; a block that breaks the convention fails the whole file here. */
const FILES: DocFile[] = assemble(DOCS.flatMap((doc) => extractBlocks(doc, readFileSync(join(REPO, doc), 'utf8'))))

/**
 * What the examples' project has installed beside jobtable: its
 * dependencies (npm installs them with it), and what the examples import
 * or tell a reader to install (drivers and their types, zod, the
 * frameworks the mounting example names, the OpenTelemetry SDK's parts,
 * openapi-fetch, kysely, vitest for the test kit's example). Linked from
 * this repository's node_modules: nothing is fetched.
 */
const PACKAGES = [
  ...Object.keys((JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }).dependencies),
  '@types/node', 'zod', 'better-sqlite3', '@types/better-sqlite3', 'pg', '@types/pg', 'prom-client',
  'kysely', 'openapi-fetch', 'express', '@types/express', 'fastify', 'vitest',
  '@opentelemetry/sdk-trace-base', '@opentelemetry/context-async-hooks', '@opentelemetry/core',
]

/**
 * How each file runs; a file not named here runs with `node` and must
 * exit 0 by itself. The runs of one file share nothing with another's:
 * each starts in an empty folder of its own (where `./app.db` lands).
 */
interface How {
  /** It stays up: once it has written its first line it gets SIGTERM, and must then exit 0. */
  readonly server?: true
  /** It needs PostgreSQL: it runs against a fresh database (DATABASE_URL) when one is reachable, and is skipped, saying why, when not. */
  readonly postgres?: true
  /**
   * A vitest test file: the compiled file runs under `vitest run`, and
   * every test in it must pass. A test of it that needs PostgreSQL runs
   * when there is a database (TEST_DATABASE_URL), and must then not be
   * skipped.
   */
  readonly vitest?: true
  /** Instead of `node <file>.js`: the arguments given to node, from the project's folder. */
  readonly args?: readonly string[]
  /** Why it is type checked only. */
  readonly typeOnly?: string
}
const HOW: Record<string, How> = {
  // The Quick start's kinds module, served by the packed `jobtable` command as the README says,
  // on a free port rather than 8080, which something else on the machine may hold.
  'jobs.ts': { server: true, args: ['node_modules/jobtable/dist/cli/main.js', 'serve', '--kinds', './jobs.js', '--port', '0'] },
  'worker.ts': { server: true },
  'digest.ts': { server: true },
  'server.ts': { server: true },
  'signup.test.ts': { vitest: true },
  // Its pg client and Kysely transactions write to an orders table (made here, as "yours") and enqueue.
  'orders.ts': { postgres: true },
  // Type checked only: its calls go to https://app.example, and there is no server to answer them here.
  'src/client.ts': { typeOnly: 'its calls go to https://app.example, a server that is not there' },
}

/** Files the text names but no block is: the package's own example, and the client openapi-typescript generates. */
const SIGNUP = 'signup.ts'
const GENERATED_CLIENT = 'src/jobtable-api.ts'

/** Bounds for a loaded machine, not measures: an example takes well under a second. */
const RUN_BOUND_MS = 20_000
const VITEST_BOUND_MS = 40_000

interface Exit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly output: string
  readonly timedOut: boolean
}

/**
 * Runs a command; `onOutput` sees the output so far at each chunk (and may
 * signal the process). Killed, and marked timed out, past `boundMs`.
 */
function exec(command: string, args: readonly string[], options: { cwd: string; env?: NodeJS.ProcessEnv; boundMs?: number; onOutput?: (output: string, kill: (signal: NodeJS.Signals) => void) => void }): Promise<Exit> {
  return new Promise((resolvePromise, reject) => {
    const proc = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      proc.kill('SIGKILL')
    }, options.boundMs ?? RUN_BOUND_MS)
    const seen = (chunk: Buffer) => {
      output += chunk.toString()
      options.onOutput?.(output, (signal) => proc.kill(signal))
    }
    proc.stdout.on('data', seen)
    proc.stderr.on('data', seen)
    proc.once('error', reject)
    proc.once('close', (code, signal) => {
      clearTimeout(timer)
      resolvePromise({ code, signal, output, timedOut })
    })
  })
}

/** The newest modification time of any file under `dir`. */
function newest(dir: string): number {
  let latest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) latest = Math.max(latest, statSync(join(entry.parentPath, entry.name)).mtimeMs)
  }
  return latest
}

/** The OpenAPI document `npm start` serves (examples/meal-plan.ts's kinds), as openapi-typescript turns it into types. */
async function generatedClientTypes(): Promise<string> {
  const runner = new Runner({ driver: sqlite({ path: ':memory:' }), logger: captureLogs() })
  try {
    registerKinds(runner)
    const api = createApi({ runner })
    const answer = await api.fetch(new Request('http://127.0.0.1/api/v1/openapi.json'))
    return astToString(await openapiTS((await answer.json()) as never))
  } finally {
    await runner.close()
  }
}

let root: string
let project: string
let tsc: Exit
/** The URL of the fresh PostgreSQL database the PostgreSQL examples use; undefined when there is none. */
let databaseUrl: string | undefined
let databaseName: string | undefined
let postgresSkip: string | undefined = postgresSkipReason

beforeAll(async () => {
  // Under the system temporary folder, so that no node_modules above the
  // project (this repository's) can lend it a package it lacks.
  root = realpathSync(mkdtempSync(join(tmpdir(), 'jobtable-docs-')))
  project = join(root, 'project')
  const own = join(project, 'node_modules/jobtable')
  mkdirSync(own, { recursive: true })

  // What npm would install: the packed tarball, unpacked. In CI `npm ci`
  // has built dist/ (the prepare script); a dist/ older than src/ (a
  // working copy) is built afresh into the unpacked package, never here.
  const pack = await exec('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', root], { cwd: REPO, boundMs: 60_000 })
  expect(pack.code, pack.output).toBe(0)
  const tarball = (JSON.parse(pack.output.slice(pack.output.indexOf('['))) as { filename: string }[])[0]!.filename
  const untar = await exec('tar', ['-xzf', join(root, tarball), '--strip-components=1', '-C', own], { cwd: root })
  expect(untar.code, untar.output).toBe(0)
  const built = join(REPO, 'dist/index.js')
  if (!existsSync(built) || statSync(built).mtimeMs < newest(join(REPO, 'src'))) {
    rmSync(join(own, 'dist'), { recursive: true, force: true })
    const build = await exec(process.execPath, [TSC, '-p', 'tsconfig.build.json', '--outDir', join(own, 'dist')], { cwd: REPO, boundMs: 120_000 })
    expect(existsSync(join(own, 'dist/index.js')), build.output).toBe(true)
  }
  for (const pkg of PACKAGES) {
    const link = join(project, 'node_modules', pkg)
    mkdirSync(dirname(link), { recursive: true })
    symlinkSync(join(REPO, 'node_modules', pkg), link, 'dir')
  }

  // The tsconfig.json `tsc --init` writes, kept as written (its target,
  // module and checks), then stricter: "types": ["node"] as its comment
  // says for Node, and every .d.ts checked too.
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'docs-examples', private: true, type: 'module' }))
  const init = await exec(process.execPath, [TSC, '--init'], { cwd: project })
  expect(init.code, init.output).toBe(0)
  renameSync(join(project, 'tsconfig.json'), join(project, 'tsconfig.init.json'))
  for (const file of FILES) {
    mkdirSync(dirname(join(project, file.name)), { recursive: true })
    writeFileSync(join(project, file.name), file.text)
  }
  cpSync(join(own, 'examples/testing/signup.ts'), join(project, SIGNUP))
  writeFileSync(join(project, GENERATED_CLIENT), await generatedClientTypes())
  // The README sends its reader to the packed examples/ too: they are type checked with the blocks
  // (test/examples.test.ts runs them).
  cpSync(join(own, 'examples'), join(project, 'examples'), { recursive: true })
  const examples = readdirSync(join(project, 'examples'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => `examples/${f}`)
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      extends: './tsconfig.init.json',
      compilerOptions: { types: ['node'], strict: true, exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true, skipLibCheck: false },
      files: [...FILES.map((f) => f.name), SIGNUP, GENERATED_CLIENT, ...examples],
    }),
  )
  // One run for every block: it also writes the JavaScript each runs as.
  tsc = await exec(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: project, boundMs: 120_000 })

  if (postgresSkip === undefined) {
    // A database of their own: the examples use jobtable's default schema and an orders table of "yours".
    databaseName = `jobtable_docs_${process.pid}_${Date.now()}`
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    try {
      await admin.query(`CREATE DATABASE "${databaseName}"`)
    } catch (err) {
      postgresSkip = `could not create a database on ${PG_URL} (${(err as { code?: string }).code ?? 'error'})`
      databaseName = undefined
    } finally {
      await admin.end()
    }
    if (databaseName === undefined && process.env['JOBTABLE_REQUIRE_POSTGRES'] === '1') throw new Error(`${postgresSkip}, and JOBTABLE_REQUIRE_POSTGRES=1`)
    if (databaseName !== undefined) {
      const url = new URL(PG_URL)
      url.pathname = `/${databaseName}`
      databaseUrl = url.href
      const client = new pg.Client({ connectionString: databaseUrl })
      await client.connect()
      await client.query('CREATE TABLE orders (id serial PRIMARY KEY, total integer NOT NULL)')
      await client.end()
    }
  }
  if (postgresSkip !== undefined) console.warn(`jobtable tests: the docs' PostgreSQL examples were SKIPPED: ${postgresSkip}`)
}, 240_000)

afterAll(async () => {
  if (databaseName !== undefined) {
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    await admin.query(`DROP DATABASE IF EXISTS "${databaseName}" WITH (FORCE)`).finally(() => admin.end())
  }
  if (root) rmSync(root, { recursive: true, force: true })
})

/** tsc's diagnostics, each led by the line of the doc it points at. */
function diagnostics(output: string): string[] {
  return output
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const at = /^(.+?)\((\d+),\d+\): /.exec(line)
      const file = at === null ? undefined : FILES.find((f) => f.name === at[1])
      return file === undefined ? line : `${origin(file, Number(at![2]))}: ${line}`
    })
}

/** A run's output with each place in a doc file (`/…/project/app.ts:27:11`, from its source map) followed by its doc line. */
function annotated(output: string): string {
  return output.replace(/(?:[\w./-]*\/project\/)?([\w./-]+\.ts):(\d+)(?::\d+)?/g, (place: string, name: string, line: string) => {
    const file = FILES.find((f) => f.name === name)
    return file === undefined ? place : `${place} [${origin(file, Number(line))}]`
  })
}

/** A plain shell's environment (none of this test runner's), with what the examples read: tokens, a port, a database. */
function environment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...Object.fromEntries(['PATH', 'HOME', 'TMPDIR', 'LANG'].filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]])),
    NO_COLOR: '1',
    TOKEN_H1: 'token-of-household-1-0123456789',
    OPS_TOKEN: 'token-of-the-operators-0123456789',
    PROMETHEUS_TOKEN: 'token-of-prometheus-0123456789',
    PORT: '0',
    // runner.ts only makes a driver, which connects at its first query: it runs without a server too.
    DATABASE_URL: databaseUrl ?? 'postgres://127.0.0.1:1/none',
  }
  if (databaseUrl !== undefined) env['TEST_DATABASE_URL'] = databaseUrl
  return env
}

/** Runs one file's JavaScript as `how` says, in a folder of its own (or the project's, for a command). */
async function run(file: DocFile, how: How): Promise<Exit> {
  const js = file.name.replace(/\.ts$/, '.js')
  if (how.vitest) {
    // This .js alone, run as compiled (vitest's filter is a substring, which examples/testing/'s copy also holds).
    const vitest = [join(project, 'node_modules/vitest/vitest.mjs'), 'run', '--exclude', 'examples/**', js]
    return exec(process.execPath, vitest, { cwd: project, env: environment(), boundMs: VITEST_BOUND_MS })
  }
  const cwd = how.args === undefined ? mkdtempSync(join(root, 'run-')) : project
  // Source maps (tsc --init writes them) only point a stack trace at the TypeScript line.
  const args = ['--enable-source-maps', ...(how.args ?? [join(project, js)])]
  let stopped = false
  return exec(process.execPath, args, {
    cwd,
    env: environment(),
    onOutput: how.server
      ? (_, kill) => {
          // Up once it has said anything: then stopped as a supervisor stops it.
          if (!stopped) kill('SIGTERM')
          stopped = true
        }
      : undefined,
  })
}

describe('the examples of README.md and docs/*.md, from the packed package', () => {
  it('every block (and the packed examples/) type checks, in one tsc run, with the settings tsc --init writes made stricter', () => {
    expect(diagnostics(tsc.output).join('\n')).toBe('')
    expect(tsc.code).toBe(0)
  })

  it('names only files the docs have in its table of how they run', () => {
    expect(Object.keys(HOW).filter((name) => !FILES.some((f) => f.name === name))).toEqual([])
  })

  for (const file of FILES.filter((f) => HOW[f.name]?.typeOnly !== undefined)) {
    it.skip(`runs ${file.name} (${firstOrigin(file)}): type checked only, since ${HOW[file.name]!.typeOnly}`, () => {})
  }

  it.concurrent.each(FILES.filter((f) => HOW[f.name]?.typeOnly === undefined).map((f) => [`${f.name} (${firstOrigin(f)})`, f] as const))(
    'runs %s',
    async (where, file) => {
      const how = HOW[file.name] ?? {}
      if (how.postgres && postgresSkip !== undefined) {
        console.warn(`jobtable tests: ${where} SKIPPED: ${postgresSkip}`)
        return
      }
      const exit = await run(file, how)
      const said = `${where}:\n${annotated(exit.output)}`
      expect(exit.timedOut, `did not exit within ${how.vitest ? VITEST_BOUND_MS : RUN_BOUND_MS} ms: ${said}`).toBe(false)
      expect({ code: exit.code, signal: exit.signal }, said).toEqual({ code: 0, signal: null })
      // Every test passed, none skipped, when there is a database for the ones that need it.
      if (how.vitest && databaseUrl !== undefined) expect(exit.output, said).toMatch(/Tests +(\d+) passed \(\1\)/)
    },
    60_000,
  )
})
