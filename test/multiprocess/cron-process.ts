/**
 * A process declaring a recurring schedule, for the recurring jobs'
 * multi-process test. Its clock runs JT_SPEED times faster than the real
 * one from JT_START_AT (epoch ms, so several processes share one clock):
 * a minute of schedule time passes in 60000 / JT_SPEED real ms. It
 * declares `every-minute` (`* * * * *`, missed ticks: all) of the kind
 * `tick`, wakes its runner every few real milliseconds so passes of the
 * processes overlap, and closes at JT_STOP_AT. Backend as in
 * worker-process.ts (JT_BACKEND with JT_SQLITE_PATH, or JT_PG_URL and
 * JT_SCHEMA). Errors go to JT_LOG when it is set.
 */
import { appendFileSync } from 'node:fs'
import { z } from 'zod'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`cron-process: ${name} is required`)
  return value
}
const driver: Driver =
  env('JT_BACKEND') === 'postgres' ? postgres({ connectionString: env('JT_PG_URL'), schema: env('JT_SCHEMA') }) : sqlite({ path: env('JT_SQLITE_PATH') })
const startAt = Number(env('JT_START_AT'))
const speed = Number(env('JT_SPEED'))
/** 2026-01-05 10:30 UTC at JT_START_AT. */
const V0 = Date.UTC(2026, 0, 5, 10, 30)
const clock = () => V0 + Math.max(0, Date.now() - startAt) * speed
const logFile = process.env['JT_LOG']
const line = (fields: object, message: string) => {
  if (logFile) appendFileSync(logFile, JSON.stringify({ pid: process.pid, ...fields, message }) + '\n')
}
const runner = new Runner({ driver, clock, logger: { debug() {}, info() {}, warn: line, error: line } })
const tick = runner.register('tick', { payload: z.strictObject({ pid: z.number().int() }), handler: () => undefined })
runner.schedule('every-minute', tick, { cron: '* * * * *', payload: { pid: process.pid }, missed: 'all' })
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())))
await runner.start()
const stopAt = Number(env('JT_STOP_AT'))
while (Date.now() < stopAt) {
  await runner.wake()
  await new Promise((resolve) => setTimeout(resolve, 5 + (process.pid % 7)))
}
await runner.close()
process.stdout.write('done\n')
