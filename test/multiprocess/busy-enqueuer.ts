/**
 * A process that only enqueues, for the busy-file test: waits until
 * JT_START_AT (epoch ms, so several processes start together), then runs
 * JT_ROUNDS rounds on the SQLite file JT_SQLITE_PATH, 10 to 40 ms apart,
 * each of one shape in turn: an awaited `enqueue` (a lone autocommitted
 * insert), 8 concurrent `enqueue`s (one transaction of 8), an
 * `enqueueMany` of 10. JT_BUSY_RETRY_MS, when set, is the driver's
 * `busyRetryMs` (0 shows the refusals the default rides out). It never
 * retries by itself: any error is the driver's answer. Prints one JSON
 * line per job stored, `{ "id", "i", "calledAt", "doneAt", "ticksAt",
 * "ticksDone" }` (`i` numbers its payloads; `ticks*` read a 5 ms
 * setInterval's count at the call and at its answer), and on an error one
 * line `{ "error", "transient" }` and exit code 1.
 */
import { DatabaseError, defineKind, Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { z } from 'zod'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`busy-enqueuer: ${name} is required`)
  return value
}
const retry = process.env['JT_BUSY_RETRY_MS']
const driver = sqlite({ path: env('JT_SQLITE_PATH'), ...(retry === undefined ? {} : { busyRetryMs: Number(retry) }) })
const runner = new Runner({ driver, logger: { debug() {}, info() {}, warn() {}, error() {} } })
const kind = runner.register(defineKind('busy_file', { payload: z.strictObject({ pid: z.number().int(), i: z.number().int() }) }))
const rounds = Number(env('JT_ROUNDS'))
let ticks = 0
const ticker = setInterval(() => ticks++, 5)
let i = 0
const out: string[] = []
/** Enqueues `count` payloads the round's way, and records each id with when its call was made and answered. */
async function round(r: number): Promise<void> {
  const calledAt = Date.now()
  const ticksAt = ticks
  const shape = r % 3
  const first = i
  const payloads = Array.from({ length: shape === 0 ? 1 : shape === 1 ? 8 : 10 }, () => ({ pid: process.pid, i: i++ }))
  const ids = shape === 0 ? [await kind.enqueue(payloads[0]!)] : shape === 1 ? await Promise.all(payloads.map((p) => kind.enqueue(p))) : await kind.enqueueMany(payloads)
  const doneAt = Date.now()
  ids.forEach((id, k) => out.push(JSON.stringify({ id, i: first + k, calledAt, doneAt, ticksAt, ticksDone: ticks })))
}
await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(env('JT_START_AT')) - Date.now())))
let failed = false
try {
  for (let r = 0; r < rounds; r++) {
    await round(r)
    await new Promise((resolve) => setTimeout(resolve, 10 + Math.random() * 30))
  }
} catch (err) {
  failed = true
  out.push(JSON.stringify({ error: err instanceof DatabaseError ? err.dbCode : String(err), transient: err instanceof DatabaseError && err.transient }))
}
clearInterval(ticker)
await runner.close()
process.stdout.write(out.join('\n') + '\n', () => process.exit(failed ? 1 : 0))
