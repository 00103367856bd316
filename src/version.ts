import { readFileSync } from 'node:fs'

/**
 * jobtable's version, from its package.json, one folder up from this
 * module both in src (run through tsx) and in dist (as installed), where
 * package.json sits beside them. Null when it cannot be read (jobtable
 * bundled into one file by an application's bundler): runners then record
 * no version, which only an operator's report shows.
 */
export const JOBTABLE_VERSION: string | null = (() => {
  try {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { name?: unknown; version?: unknown }
    const version = manifest.version
    // It goes into SQL text (the runner's row) and logs: a plain version string only.
    return manifest.name === 'jobtable' && typeof version === 'string' && /^[0-9A-Za-z.+-]{1,64}$/.test(version) ? version : null
  } catch {
    return null
  }
})()

/** The version as a SQL literal: quoted, or NULL. */
export const VERSION_SQL = JOBTABLE_VERSION === null ? 'NULL' : `'${JOBTABLE_VERSION}'`
