import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { Runner } from '../index.js'
import { describeError } from '../error-name.js'
import { CliFailure } from './usage.js'

/** What a --kinds module exports: `registerKinds` is required, `demo` is used by `serve --demo`. */
export interface KindsModule {
  registerKinds(runner: Runner): unknown
  /** Called by `serve --demo` once the API is up; `signal` aborts when the server begins to stop. */
  demo?: (runner: Runner, options: { url: string; signal: AbortSignal }) => unknown
}

/** Imports the user's kinds module from a path relative to the working directory. */
export async function loadKinds(path: string): Promise<KindsModule> {
  let mod: Partial<KindsModule>
  try {
    mod = (await import(pathToFileURL(resolve(path)).href)) as Partial<KindsModule>
  } catch (err) {
    // The module's own error may quote configuration: say only what failed and its class.
    throw new CliFailure(`could not load the kinds module ${path} (${describeError(err)})`)
  }
  if (typeof mod.registerKinds !== 'function') throw new CliFailure(`${path} does not export a registerKinds(runner) function`)
  return mod as KindsModule
}
