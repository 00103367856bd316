import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { JobtableError, type Runner } from '../index.js'
import { describeError } from '../error-name.js'
import { shellWord } from './database-errors.js'
import { CliFailure } from './usage.js'

/** What a --kinds module exports: `registerKinds` is required, `demo` is used by `serve --demo`. */
export interface KindsModule {
  registerKinds(runner: Runner): unknown
  /** Called by `serve --demo` once the API is up; `signal` aborts when the server begins to stop. */
  demo?: (runner: Runner, options: { url: string; signal: AbortSignal }) => unknown
}

/** Where loadKinds looks for a TypeScript loader; the defaults are the process's. */
export interface LoadKindsOptions {
  /** The user's working directory: tsx installed in their project is found from it. Default process.cwd(). */
  readonly cwd?: string
}

/** The shape a kinds module has, shown when it has another. */
const SHAPE = `  export function registerKinds(runner) {
    runner.register(kind, handler)   // each kind this process runs
  }`

/**
 * Imports the user's kinds module from a path relative to the working
 * directory. A TypeScript module (.ts, .mts, .cts) that this Node.js
 * cannot import by itself is loaded through tsx when tsx can be found
 * (see registerTsx); when it cannot, the error says how to get it.
 */
export async function loadKinds(path: string, options: LoadKindsOptions = {}): Promise<KindsModule> {
  const cwd = options.cwd ?? process.cwd()
  const file = resolve(cwd, path)
  if (!existsSync(file)) throw new CliFailure(`no kinds module at ${path} (--kinds takes the path of a module, relative to the working directory)`)
  const url = pathToFileURL(file).href
  let mod: Record<string, unknown>
  try {
    mod = (await import(url)) as Record<string, unknown>
  } catch (err) {
    if (!(isTypeScript(file) && NO_TYPESCRIPT.has(codeOf(err)))) throw loadFailure(path, err)
    await registerTsx(path, cwd)
    try {
      // Node keeps the failed import of this URL: a query makes it a new one, which tsx loads.
      mod = (await import(`${url}?jobtable-tsx`)) as Record<string, unknown>
    } catch (again) {
      throw loadFailure(path, again)
    }
  }
  return kindsExports(path, mod)
}

/**
 * A registerKinds that threw: jobtable's own errors (a registration it
 * refused) say what was wrong in words safe to print; any other, only its
 * class, as for a module that fails to load.
 */
export function registerFailure(path: string, err: unknown): CliFailure {
  if (err instanceof JobtableError) return new CliFailure(`registerKinds(runner) of ${path} failed: ${err.message.replace(/^jobtable: /, '')}`)
  return new CliFailure(`registerKinds(runner) of ${path} failed (${describeError(err)})`)
}

/** The module's error may quote its configuration: say only what failed and its class, and what to do where that is known. */
function loadFailure(path: string, err: unknown): CliFailure {
  const hint =
    codeOf(err) === 'ERR_UNKNOWN_FILE_EXTENSION'
      ? ': it imports a file this Node.js cannot run as it is, such as TypeScript; run jobtable with a loader (node --import tsx), or compile the module to JavaScript'
      : codeOf(err) === 'ERR_MODULE_NOT_FOUND'
        ? ': a module it imports was not found (a package to install, or a path to fix)'
        : ''
  return new CliFailure(`could not load the kinds module ${path} (${describeError(err)})${hint}`)
}

/**
 * registerKinds from the module's exports. A module Node loaded as
 * CommonJS (a .ts file compiled where package.json does not say
 * "type": "module", a .cjs one) may hold it only on its default export.
 * Anything else is refused with the shape to export and what was found.
 */
function kindsExports(path: string, mod: Record<string, unknown>): KindsModule {
  if (typeof mod.registerKinds === 'function') return mod as unknown as KindsModule
  const fallback = mod.default
  if (typeof fallback === 'object' && fallback !== null && typeof (fallback as Record<string, unknown>).registerKinds === 'function') {
    return fallback as KindsModule
  }
  const names = Object.keys(mod)
  const found =
    mod.registerKinds !== undefined
      ? `its registerKinds is ${mod.registerKinds === null ? 'null' : `a ${typeof mod.registerKinds}`}, not a function`
      : names.length === 0
        ? 'it exports nothing'
        : `it exports: ${names.slice(0, 20).join(', ')}${names.length > 20 ? `, and ${names.length - 20} more` : ''}`
  const defaultHint = typeof fallback === 'function' ? '\nIts default export is a function: export it by the name registerKinds instead.' : ''
  throw new CliFailure(`${path} does not export a registerKinds(runner) function; ${found}.${defaultHint}\nA kinds module exports it by name:\n${SHAPE}`)
}

/**
 * Node's refusals of a TypeScript file: an extension it does not know
 * (Node 20 and 22 by default), or, where it strips types itself, syntax
 * it cannot strip (an enum) and a file it will not strip.
 */
const NO_TYPESCRIPT = new Set<unknown>(['ERR_UNKNOWN_FILE_EXTENSION', 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX', 'ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING'])

function isTypeScript(file: string): boolean {
  return /\.[cm]?ts$/i.test(file)
}

function codeOf(err: unknown): unknown {
  try {
    return (err as { code?: unknown } | null)?.code
  } catch {
    return undefined
  }
}

/**
 * Finds tsx and registers its loader in this process, for a TypeScript
 * kinds module: first the tsx the user's project has (resolved from the
 * working directory, as their own `npx tsx` would), then one beside
 * jobtable (a dependency of the project jobtable is installed in, or
 * jobtable's own development copy). Both its ESM and its CommonJS hooks
 * are registered: a .ts file in a package without "type": "module" is
 * CommonJS to Node, and reaches only the latter. With none found, fails
 * saying exactly how to get one.
 */
async function registerTsx(path: string, cwd: string): Promise<void> {
  let found: TsxEntries | undefined
  let tooOld: string | undefined
  for (const base of [pathToFileURL(join(cwd, 'noop.js')).href, import.meta.url]) {
    const entries = tsxEntries(base)
    if (typeof entries === 'object') {
      found = entries
      break
    }
    tooOld ??= entries?.slice('too old: '.length)
  }
  if (found === undefined) {
    const why =
      tooOld === undefined
        ? `no tsx was found to load it (looked from ${cwd}, and beside jobtable)`
        : `the tsx found at ${tooOld} is too old to be registered by jobtable (it has no tsx/esm/api); install tsx 4 or later`
    throw new CliFailure(
      `the kinds module ${path} is TypeScript, which Node.js ${process.version} does not run by itself, and ${why}. Do one of:\n` +
        `  npm i -D tsx          install tsx in this project; jobtable then loads ${path} through it\n` +
        `  node --import tsx …   run jobtable under a TypeScript loader you have (also: NODE_OPTIONS='--import tsx' npx jobtable …)\n` +
        `  compile ${path} to JavaScript (such as npx tsc) and pass the .js file to --kinds`,
    )
  }
  try {
    const esm = (await import(pathToFileURL(found.esm).href)) as { register: () => unknown }
    const cjs = (await import(pathToFileURL(found.cjs).href)) as { register: () => unknown }
    esm.register()
    cjs.register()
  } catch (err) {
    // Such as a Node.js before 20.6, which has no module.register.
    throw new CliFailure(
      `found tsx at ${found.root} but could not register it in Node.js ${process.version} (${describeError(err)}): run jobtable under it instead (node --import tsx …), or compile ${path} to JavaScript`,
    )
  }
}

interface TsxEntries {
  /** The package's folder. */
  readonly root: string
  readonly esm: string
  readonly cjs: string
}

/**
 * The ESM files of tsx's `esm/api` and `cjs/api` entry points, as the
 * package's exports map names them for `import`, when tsx resolves from
 * `base`. (Resolving `tsx/esm/api` with require would give its CommonJS
 * build, which cannot register the ESM hooks.)
 */
function tsxEntries(base: string): TsxEntries | `too old: ${string}` | undefined {
  let manifest: string
  try {
    manifest = createRequire(base).resolve('tsx/package.json')
  } catch {
    return undefined
  }
  const root = dirname(manifest)
  try {
    const exports = (JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: Record<string, unknown> }).exports ?? {}
    const esm = importTarget(exports['./esm/api'])
    const cjs = importTarget(exports['./cjs/api'])
    if (esm === undefined || cjs === undefined) return `too old: ${root}`
    return { root, esm: join(root, esm), cjs: join(root, cjs) }
  } catch {
    return `too old: ${root}`
  }
}

/** The file an exports entry gives `import`: the entry itself, or its `import`, then `default`, condition, however nested. */
function importTarget(entry: unknown): string | undefined {
  for (let depth = 0; depth < 5 && typeof entry === 'object' && entry !== null; depth++) {
    const conditions = entry as Record<string, unknown>
    entry = conditions.import ?? conditions.default
  }
  return typeof entry === 'string' ? entry : undefined
}
