/**
 * The `jobtable` command as a user runs it: built to JavaScript and run by
 * plain Node.js, with no TypeScript loader in the process (the other CLI
 * tests run the source under tsx, which would load any .ts itself). Each
 * installation is a project's node_modules holding a copy of jobtable and
 * symlinks to only the packages named, under the system temporary folder
 * so that no node_modules above it can lend a package it lacks: whether
 * tsx can be found is decided by where it really is.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const REPO = resolve(import.meta.dirname, '../..')
const TSC = join(REPO, 'node_modules/typescript/bin/tsc')
/** What the command needs at run time on SQLite: jobtable's dependencies and better-sqlite3. */
const RUNTIME = ['@standard-schema/spec', 'hono', '@hono/node-server', 'pino', 'croner', '@opentelemetry/api', 'better-sqlite3']

/**
 * A kinds module in TypeScript (types Node cannot strip by itself) with no
 * imports, which says on stdout that it ran: through tsx or not at all.
 */
const KINDS_TS = `
interface Schema { readonly '~standard': { version: 1; vendor: string; validate(value: unknown): { value: unknown } } }
const anything: Schema = { '~standard': { version: 1, vendor: 'test', validate: (value: unknown) => ({ value }) } }
export function registerKinds(runner: { register(kind: string, definition: { payload: Schema; handler: () => null }): unknown }): void {
  runner.register('noop', { payload: anything, handler: () => null })
  process.stdout.write('kinds registered: noop\\n')
}
`

interface Run {
  readonly proc: ChildProcess
  stdout: string
  stderr: string
  readonly exit: Promise<number | null>
}

let root: string
let build: { code: number | null; output: string }

function node(args: string[], cwd: string): Run {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '', JOBTABLE_TOKENS: '' }
  // Nothing may lend the process a loader.
  delete env.NODE_OPTIONS
  const proc = spawn(process.execPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const run: Run = { proc, stdout: '', stderr: '', exit: new Promise((r) => proc.once('close', (code) => r(code))) }
  proc.stdout!.on('data', (d) => (run.stdout += d))
  proc.stderr!.on('data', (d) => (run.stderr += d))
  return run
}

/** A project with jobtable installed (copied, as npm unpacks it) beside symlinks to this repository's copies of the packages named. */
function project(name: string, packages: string[]): string {
  const dir = join(root, name)
  const own = join(dir, 'node_modules/jobtable')
  mkdirSync(own, { recursive: true })
  cpSync(join(REPO, 'package.json'), join(own, 'package.json'))
  cpSync(join(root, 'dist'), join(own, 'dist'), { recursive: true })
  for (const pkg of packages) {
    const link = join(dir, 'node_modules', pkg)
    mkdirSync(dirname(link), { recursive: true })
    symlinkSync(join(REPO, 'node_modules', pkg), link, 'dir')
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `project-${name}`, private: true, type: 'module' }))
  return dir
}

/** A folder with a kinds.ts and nothing else: no package.json (so Node takes kinds.ts as CommonJS), no node_modules. */
function bareFolder(name: string): string {
  const dir = join(root, name)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'kinds.ts'), KINDS_TS)
  return dir
}

const main = (projectDir: string) => join(projectDir, 'node_modules/jobtable/dist/cli/main.js')

/** Waits until stdout holds `text`, failing if the process exits first. */
async function stdoutHas(run: Run, text: string): Promise<void> {
  while (!run.stdout.includes(text)) {
    if (run.proc.exitCode !== null) throw new Error(`exited ${run.proc.exitCode} first: ${run.stderr}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

beforeAll(async () => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'jobtable-cli-built-')))
  const tsc = node([TSC, '-p', 'tsconfig.build.json', '--outDir', join(root, 'dist')], REPO)
  build = { code: await tsc.exit, output: tsc.stdout + tsc.stderr }
  // A build of the whole package: a bound for a loaded machine, not a measure.
}, 120_000)

afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true })
})

describe('the built jobtable command, without a TypeScript loader', () => {
  it('built', () => {
    // tsc emits despite a type error elsewhere; the command is what these tests need.
    expect(existsSync(join(root, 'dist/cli/main.js')), build.output).toBe(true)
  })

  it('--version and -v print the version in package.json', async () => {
    const app = project('version', RUNTIME)
    const { version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }
    for (const flag of ['--version', '-v']) {
      const run = node([main(app), flag], app)
      expect(await run.exit, run.stderr).toBe(0)
      expect(run.stdout).toBe(`${version}\n`)
    }
  })

  it('a TypeScript kinds module, when no tsx can be found: fails with exit 1 saying what to do, and creates no database', async () => {
    const app = project('no-tsx', RUNTIME)
    const user = bareFolder('user-without-tsx')
    const run = node([main(app), 'worker', '--kinds', 'kinds.ts', '-d', 'jobs.db'], user)
    expect(await run.exit).toBe(1)
    expect(run.stderr).toMatch(/^jobtable: the kinds module kinds\.ts is TypeScript, which Node\.js v[\d.]+ does not run by itself, and no tsx was found/)
    expect(run.stderr).toContain('npm i -D tsx')
    expect(run.stderr).toContain('node --import tsx')
    expect(run.stderr).toContain('compile kinds.ts to JavaScript')
    expect(run.stderr).not.toContain('ERR_UNKNOWN_FILE_EXTENSION')
    expect(run.stderr).not.toMatch(/\n\s+at /)
    expect(existsSync(join(user, 'jobs.db'))).toBe(false)
  })

  it('a TypeScript kinds module loads through the tsx of the working directory’s project (an ESM package)', async () => {
    const app = project('for-user-tsx', RUNTIME)
    const user = project('user-with-tsx', ['tsx'])
    writeFileSync(join(user, 'kinds.ts'), KINDS_TS)
    const run = node([main(app), 'worker', '--kinds', 'kinds.ts', '-d', 'jobs.db'], user)
    await stdoutHas(run, 'kinds registered: noop')
    run.proc.kill('SIGTERM')
    expect(await run.exit, run.stderr).toBe(0)
  })

  it('a TypeScript kinds module loads through the tsx installed beside jobtable, from a folder without one (CommonJS there)', async () => {
    const app = project('with-tsx', [...RUNTIME, 'tsx'])
    const user = bareFolder('user-bare')
    const run = node([main(app), 'worker', '--kinds', 'kinds.ts', '-d', 'jobs.db'], user)
    await stdoutHas(run, 'kinds registered: noop')
    run.proc.kill('SIGTERM')
    expect(await run.exit, run.stderr).toBe(0)
  })
})
