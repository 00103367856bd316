import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'

/**
 * Prometheus's own linter, `promtool check metrics` (Debian's
 * `prometheus` package): the check Prometheus's maintainers apply to an
 * exposition. Without it the tests that use it are skipped with a
 * printed reason, unless JOBTABLE_REQUIRE_PROMTOOL=1 (set by .ci/run,
 * which installs the package), which makes its absence a failure.
 * JOBTABLE_PROMTOOL names another binary.
 */
function findPromtool(): string | undefined {
  const given = process.env['JOBTABLE_PROMTOOL']
  if (given !== undefined) return existsSync(given) ? given : undefined
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir !== '' && existsSync(join(dir, 'promtool'))) return join(dir, 'promtool')
  }
  return undefined
}

export const PROMTOOL = findPromtool()

const missing = PROMTOOL === undefined ? `no promtool ${process.env['JOBTABLE_PROMTOOL'] === undefined ? 'on PATH' : `at ${process.env['JOBTABLE_PROMTOOL']}`} (apt-get install prometheus, or set JOBTABLE_PROMTOOL)` : undefined
/** Why the promtool tests are skipped here, or undefined when they run. */
export const promtoolSkipReason: string | undefined = missing
if (missing !== undefined) {
  if (process.env['JOBTABLE_REQUIRE_PROMTOOL'] === '1') throw new Error(`${missing}, and JOBTABLE_REQUIRE_PROMTOOL=1 makes the promtool tests required`)
  console.warn(`jobtable tests: the promtool tests were SKIPPED: ${missing}`)
}

/** What `promtool check metrics` said of an exposition: its exit code and everything it printed. */
export interface PromtoolVerdict {
  readonly code: number | null
  readonly output: string
}

/** Pipes `text` to `promtool check metrics` and resolves with its exit code and output (stdout and stderr together). */
export function checkMetrics(text: string): Promise<PromtoolVerdict> {
  return new Promise((resolve, reject) => {
    const child = spawn(PROMTOOL!, ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output }))
    child.stdin.end(text)
  })
}
