import { JOBTABLE_VERSION } from '../version.js'

/** jobtable's version, for `jobtable --version`. */
export function packageVersion(): string {
  if (JOBTABLE_VERSION === null) throw new Error('package.json beside jobtable is not its own')
  return JOBTABLE_VERSION
}
