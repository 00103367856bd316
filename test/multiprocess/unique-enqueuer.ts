/**
 * A process that only enqueues, for the unique-jobs multi-process test:
 * waits until JT_START_AT (epoch ms, so several processes start together),
 * then enqueues one `plan_week` job for each key `k0` .. `k<JT_KEYS - 1>`
 * with enqueueUnique, in an order of its own, and prints one JSON line per
 * answer: `{ "key", "id", "created" }`. Backend as in worker-process.ts
 * (JT_BACKEND with JT_SQLITE_PATH, or JT_PG_URL and JT_SCHEMA).
 */
import { z } from 'zod'
import { DatabaseError, defineKind, Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`unique-enqueuer: ${name} is required`)
  return value
}
const driver: Driver =
  env('JT_BACKEND') === 'postgres' ? postgres({ connectionString: env('JT_PG_URL'), schema: env('JT_SCHEMA') }) : sqlite({ path: env('JT_SQLITE_PATH') })
const runner = new Runner({ driver, logger: { debug() {}, info() {}, warn() {}, error() {} } })
const kind = runner.register(defineKind('plan_week', { payload: z.strictObject({ pid: z.number().int() }) }))
const keys = Array.from({ length: Number(env('JT_KEYS')) }, (_, i) => `k${i}`)
// Each process its own order (a rotation by its pid), so processes meet on keys at different moments.
const shift = process.pid % keys.length
const order = [...keys.slice(shift), ...keys.slice(0, shift)]
await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(env('JT_START_AT')) - Date.now())))
for (const key of order) {
  const { id, created } = await enqueueRetrying(key)
  process.stdout.write(JSON.stringify({ key, id, created }) + '\n')
}

/**
 * As an application would: an enqueue refused for a transient reason (four
 * processes writing one SQLite file at once outlast its busy timeout) is
 * tried again, and a retried enqueue of a key still finds one job.
 */
async function enqueueRetrying(key: string): Promise<{ id: string; created: boolean }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await kind.enqueueUnique({ pid: process.pid }, { uniqueKey: key })
    } catch (err) {
      if (!(err instanceof DatabaseError) || !err.transient || attempt >= 20) throw err
      await new Promise((resolve) => setTimeout(resolve, 10 * attempt))
    }
  }
}
await runner.close()
