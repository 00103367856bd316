import { ConfigError, InvalidArgumentError } from './errors.js'

/**
 * Refuses an options object with a key jobtable does not know, naming the
 * key, so a misspelled or not-yet-supported option (`delayMs`, `retry`)
 * is never silently ignored. `where` names the call for the message, e.g.
 * `sqlite()` or `enqueue options`. Constructor options are a ConfigError;
 * per-call options an InvalidArgumentError.
 *
 * Written by hand: a schema library would do it, but every options object
 * would then pay a schema's cost and its error text, which is not ours to
 * keep stable.
 */
export function checkKeys(
  value: object,
  allowed: readonly string[],
  where: string,
  kind: 'config' | 'argument' = 'config',
): void {
  for (const key of Object.keys(value)) {
    if (allowed.includes(key)) continue
    const message = `${where}: unknown option ${JSON.stringify(key)} (known: ${allowed.join(', ')})`
    throw kind === 'config' ? new ConfigError(message) : new InvalidArgumentError(message)
  }
}

/**
 * An options argument that may be omitted: undefined gives `{}`; anything
 * but a plain object (null, a string, an array) is refused with the same
 * kind of error as an unknown key.
 */
export function optionsObject<T extends object>(value: T | undefined, allowed: readonly string[], where: string, kind: 'config' | 'argument' = 'config'): Partial<T> {
  if (value === undefined) return {}
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    const message = `${where}: options must be an object`
    throw kind === 'config' ? new ConfigError(message) : new InvalidArgumentError(message)
  }
  checkKeys(value, allowed, where, kind)
  return value
}
