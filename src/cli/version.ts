import { readFileSync } from 'node:fs'

/**
 * jobtable's version, from its package.json: two folders up from this
 * module both in src/cli (run through tsx) and in dist/cli (as
 * installed), where package.json sits beside src and dist.
 */
export function packageVersion(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { name?: unknown; version?: unknown }
  if (manifest.name !== 'jobtable' || typeof manifest.version !== 'string') throw new Error('package.json beside jobtable is not its own')
  return manifest.version
}
