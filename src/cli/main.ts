#!/usr/bin/env node
/**
 * The `jobtable` command: `serve`, `worker`, `migrate`, `jobs`, `kinds`, `prune`,
 * `schedules`, `rate-limits`, `cooldowns` and `doctor`. See
 * `jobtable --help`, docs/cli.md and docs/http.md.
 */
import { run } from './run.js'

const code = await run(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env })
// Let stdout drain, then exit even if a user's kinds module left a timer behind.
process.stdout.write('', () => process.exit(code))
