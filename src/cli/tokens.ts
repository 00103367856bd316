import { readFileSync, statSync } from 'node:fs'
import { CliFailure } from './usage.js'

/**
 * Reads the bearer tokens of `serve`: a JSON object mapping each token to
 * the scope its holder owns, from --tokens-file or the JOBTABLE_TOKENS
 * environment variable. Returns undefined when neither is set. Error
 * messages never quote the file's content.
 */
export function readTokens(file: string | undefined, env: string | undefined, warn: (message: string) => void): Record<string, string> | undefined {
  let text: string
  let source: string
  if (file !== undefined) {
    source = file
    try {
      text = readFileSync(file, 'utf8')
      if ((statSync(file).mode & 0o077) !== 0) warn(`${file} is readable by other users; chmod 600 it`)
    } catch (err) {
      throw new CliFailure(`could not read the tokens file ${file} (${(err as { code?: string }).code ?? 'error'})`)
    }
  } else if (env !== undefined && env.trim() !== '') {
    source = 'JOBTABLE_TOKENS'
    text = env
  } else {
    return undefined
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    throw new CliFailure(`${source} is not JSON: expected {"<token>": "<scope>", ...}`)
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === 'string')) {
    throw new CliFailure(`${source} must be a JSON object {"<token>": "<scope>", ...}`)
  }
  return parsed as Record<string, string>
}
