/**
 * A process that holds the write lock of the SQLite file JT_SQLITE_PATH
 * again and again, for the busy-file test: BEGIN IMMEDIATE, held 100 to
 * 300 ms (a timer: this process's own event loop stays free), COMMIT, then
 * 30 to 100 ms without it, until SIGTERM, which ends the hold under way
 * first. Prints `ready` once it has the file open, then one JSON line per
 * hold when it exits: `{ "from", "to" }`, epoch ms read just after the
 * lock was taken and just before it was let go.
 */
import Database from 'better-sqlite3'

const path = process.env['JT_SQLITE_PATH']
if (path === undefined) throw new Error('lock-holder: JT_SQLITE_PATH is required')
const db = new Database(path)
// Waits (blocking this process only) for the enqueuers' own short writes to end.
db.pragma('busy_timeout = 5000')
let stopping = false
process.on('SIGTERM', () => (stopping = true))
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const holds: { from: number; to: number }[] = []
process.stdout.write('ready\n')
while (!stopping) {
  db.exec('BEGIN IMMEDIATE')
  const from = Date.now()
  await sleep(100 + Math.random() * 200)
  holds.push({ from, to: Date.now() })
  db.exec('COMMIT')
  await sleep(30 + Math.random() * 70)
}
db.close()
process.stdout.write(holds.map((h) => JSON.stringify(h)).join('\n') + '\n', () => process.exit(0))
