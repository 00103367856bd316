import { createHash } from 'node:crypto'
import pg from 'pg'
import type { Driver } from 'jobtable'
import { newJobId } from '../src/id.js'
import { queries } from '../src/postgres/queries.js'
import { SCHEDULED_DELAY_MS, type Backend, type EnqueueShape, type FloorRate, type Floors, type InsertFloorRate, type Store } from './backend.js'
import { percentile } from './stats.js'

/**
 * PostgreSQL through jobtable's driver, and through pg directly for the
 * floors, on a fresh schema per store; the floors' tables are made by
 * jobtable's own migrations and their ids by jobtable's newJobId (UUID
 * version 7), so the ratio to them is what the library adds. "single" and
 * "batched" are the least SQL a durable queue runs (see floor-sqlite.ts);
 * "shaped" is the library's own statements (src/postgres/queries.ts, with
 * the parameters src/postgres/driver.ts passes) in the library's own batch
 * shape on one connection: drain is one finishAndClaimJobs statement per
 * cycle (the previous cycle's final writes and a claim of `workers`),
 * after a first claimJobs; enqueue is insertJobs with arrays of 1
 * (sequential), 16 (concurrent) or 1,000 (enqueueMany). Like the
 * driver's, these statements are prepared once per connection; the other
 * floors send theirs unprepared.
 * Default server settings: synchronous_commit on.
 */

const URL = process.env['JOBTABLE_BENCH_PG'] ?? 'postgres://postgres@127.0.0.1:5432/test'
const BATCH = 100
/**
 * A one-statement-per-write floor stops after this long: at one fsync per
 * commit it runs near 1,000 jobs/s here, and its rate is steady well
 * before 20,000 jobs, so the default run stays within minutes.
 */
const SINGLE_FLOOR_MS = 5_000
const PAYLOAD = JSON.stringify({ n: 0 })
/** Through a variable, so the type check does not need the module while it is being written. */
const POSTGRES_ENTRY = 'jobtable/postgres'

type Factory = (options: { connectionString: string; schema: string }) => Driver

async function factory(): Promise<Factory> {
  const mod = (await import(POSTGRES_ENTRY)) as { postgres?: Factory }
  if (typeof mod.postgres !== 'function') throw new Error('jobtable/postgres exports no postgres() factory')
  return mod.postgres
}

/** Why postgres cannot be benchmarked here, or undefined when it can. */
export async function postgresUnavailable(): Promise<string | undefined> {
  try {
    await factory()
  } catch (err) {
    return `the jobtable/postgres driver cannot be loaded (${(err as Error).message.split('\n')[0]})`
  }
  const client = new pg.Client({ connectionString: URL })
  try {
    await client.connect()
    await client.query('SELECT 1')
  } catch (err) {
    return `cannot connect to ${URL} (${(err as Error).message}); set JOBTABLE_BENCH_PG`
  } finally {
    await client.end().catch(() => undefined)
  }
  return undefined
}

let schemas = 0
function schemaName(): string {
  return `bench_${process.pid}_${Date.now()}_${schemas++}`
}

/** A fresh schema migrated by jobtable's driver; the driver it opened stays with the store. */
async function makeSchema(): Promise<{ schema: string; driver: Driver }> {
  const schema = schemaName()
  const driver = (await factory())({ connectionString: URL, schema })
  // Any read makes the driver migrate the schema if it does so lazily.
  await driver.jobList({ limit: 1 })
  return { schema, driver }
}

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: URL })
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    await client.end()
  }
}

async function connect(schema: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: URL })
  await client.connect()
  await client.query(`SET search_path TO "${schema}"`)
  return client
}

/** Rows per statement when seeding finished jobs: arrays of ids, each a few MB. */
const SEED_CHUNK = 50_000

/**
 * Inserts `rows` finished jobs with ids made by newJobId at times 1 ms
 * apart ending just before now (so they sit in time order at the start of
 * the id index, before any later job's id), SEED_CHUNK rows per statement
 * through unnest.
 */
async function seedFinished(client: pg.Client, rows: number): Promise<void> {
  const first = Date.now() - rows
  for (let start = 0; start < rows; start += SEED_CHUNK) {
    const count = Math.min(SEED_CHUNK, rows - start)
    const ids = new Array<string>(count)
    for (let i = 0; i < count; i++) ids[i] = newJobId(first + start + i)
    await client.query(
      `INSERT INTO jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at)
       SELECT t.id, 'noop', 'succeeded', '{"n":0}', 'null', 1, 'old-runner', $2::bigint + t.ord, $2::bigint + t.ord, $2::bigint + t.ord, $2::bigint + t.ord
         FROM unnest($1::text[]) WITH ORDINALITY AS t(id, ord)
        ORDER BY t.ord`,
      [ids, first + start - 1],
    )
  }
  await client.query('ANALYZE jobs')
}

/**
 * Inserts `rows` scheduled jobs as if each had been enqueued with a delay
 * of `delayMs`: created 1 ms apart ending just before now (ids by newJobId
 * at that time, so they sort like real ones), status 'scheduled', run_at =
 * created_at + delayMs; SEED_CHUNK rows per statement through unnest, as
 * seedFinished; then ANALYZE and CHECKPOINT.
 */
async function seedScheduled(client: pg.Client, rows: number, delayMs: number): Promise<void> {
  const first = Date.now() - rows
  for (let start = 0; start < rows; start += SEED_CHUNK) {
    const count = Math.min(SEED_CHUNK, rows - start)
    const ids = new Array<string>(count)
    for (let i = 0; i < count; i++) ids[i] = newJobId(first + start + i)
    await client.query(
      `INSERT INTO jobs (id, kind, status, payload, created_at, updated_at, run_at)
       SELECT t.id, 'noop', 'scheduled', '{"n":0}', $2::bigint + t.ord, $2::bigint + t.ord, $2::bigint + t.ord + $3::bigint
         FROM unnest($1::text[]) WITH ORDINALITY AS t(id, ord)
        ORDER BY t.ord`,
      [ids, first + start - 1, delayMs],
    )
  }
  await client.query('ANALYZE jobs')
  // Written out now, not by the timed drain: a million jobs scheduled last week were
  // checkpointed long ago, and the seed's dirty pages far exceed the default shared_buffers.
  await client.query('CHECKPOINT')
}

/** How many jobs the schema's table holds in each status. */
async function countByStatus(client: pg.Client): Promise<Record<string, number>> {
  const { rows } = await client.query<{ status: string; n: string }>(`SELECT status, count(*) AS n FROM jobs GROUP BY status`)
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]))
}

/** Jobs per kind, then per status. */
async function countByKindAndStatus(client: pg.Client): Promise<Record<string, Record<string, number>>> {
  const { rows } = await client.query<{ kind: string; status: string; n: string }>(`SELECT kind, status, count(*) AS n FROM jobs GROUP BY kind, status`)
  const out: Record<string, Record<string, number>> = {}
  for (const r of rows) (out[r.kind] ??= {})[r.status] = Number(r.n)
  return out
}

/**
 * The jobs table's live and dead tuples as the statistics collector last
 * counted them, how often it was vacuumed, and its size with indexes.
 */
async function storage(client: pg.Client, schema: string): Promise<Record<string, number>> {
  const { rows } = await client.query<{ live: string; dead: string; bytes: string; vacuums: string }>(
    `SELECT n_live_tup AS live, n_dead_tup AS dead, pg_total_relation_size(relid) AS bytes, vacuum_count + autovacuum_count AS vacuums
       FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
    [schema],
  )
  const r = rows[0]
  return r === undefined ? {} : { live_tuples: Number(r.live), dead_tuples: Number(r.dead), table_mb: Number(r.bytes) / 2 ** 20, vacuums: Number(r.vacuums) }
}

/** Inserts `jobs` queued jobs in one statement, ids from newJobId, in seq order of the array. */
async function seedQueued(client: pg.Client, jobs: number): Promise<void> {
  const now = Date.now()
  await client.query(
    `INSERT INTO jobs (id, kind, payload, created_at, updated_at)
     SELECT t.id, 'noop', $2, $3, $3 FROM unnest($1::text[]) WITH ORDINALITY AS t(id, ord) ORDER BY t.ord`,
    [Array.from({ length: jobs }, () => newJobId(now)), PAYLOAD, now],
  )
}

export function postgresBackend(): Backend {
  return { name: 'postgres', durability: 'synchronous_commit=on', store: pgStore, floors: pgFloors }
}

async function pgStore(): Promise<Store> {
  const { schema, driver: first } = await makeSchema()
  await first.close()
  const opened: Driver[] = []
  return {
    driver() {
      const make = factoryCache
      if (make === undefined) throw new Error('postgres factory not loaded')
      const d = make({ connectionString: URL, schema })
      opened.push(d)
      return d
    },
    async seedFinished(rows) {
      const client = await connect(schema)
      try {
        await seedFinished(client, rows)
      } finally {
        await client.end()
      }
    },
    async seedScheduled(rows, delayMs) {
      const client = await connect(schema)
      try {
        await seedScheduled(client, rows, delayMs)
      } finally {
        await client.end()
      }
    },
    async countByStatus() {
      const client = await connect(schema)
      try {
        return await countByStatus(client)
      } finally {
        await client.end()
      }
    },
    async countByKindAndStatus() {
      const client = await connect(schema)
      try {
        return await countByKindAndStatus(client)
      } finally {
        await client.end()
      }
    },
    async starts(kind) {
      const client = await connect(schema)
      try {
        const { rows } = await client.query<{ scope: string | null; at: string }>(`SELECT scope, started_at AS at FROM jobs WHERE kind = $1 AND started_at IS NOT NULL ORDER BY started_at, seq`, [kind])
        return rows.map((r) => ({ scope: r.scope, at: Number(r.at) }))
      } finally {
        await client.end()
      }
    },
    async storage() {
      // The connections that wrote report their counts once idle for 10 s at most (PostgreSQL 15).
      await new Promise((resolve) => setTimeout(resolve, 11_000))
      const client = await connect(schema)
      try {
        return await storage(client, schema)
      } finally {
        await client.end()
      }
    },
    async drop() {
      for (const d of opened) await d.close().catch(() => undefined)
      await dropSchema(schema)
    },
  }
}
let factoryCache: Factory | undefined
void factory().then(
  (f) => (factoryCache = f),
  () => undefined,
)

const CLAIM_ONE = `
  UPDATE jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = $1, updated_at = $1
   WHERE seq = (SELECT seq FROM jobs WHERE status = 'queued' AND kind = 'noop' ORDER BY priority DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING seq, id, kind, payload, attempt`
const CLAIM_MANY = `
  UPDATE jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = $1, updated_at = $1
   WHERE seq IN (SELECT seq FROM jobs WHERE status = 'queued' AND kind = 'noop' ORDER BY priority DESC, seq LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
  RETURNING seq, id, kind, payload, attempt`
const FINISH_ONE = `
  UPDATE jobs SET status = 'succeeded', result = 'null', finished_at = $3, updated_at = $3
   WHERE id = $1 AND status = 'running' AND attempt = $2`
const FINISH_MANY = `
  UPDATE jobs SET status = 'succeeded', result = 'null', finished_at = $2, updated_at = $2
   WHERE status = 'running' AND id = ANY($1::text[])`
const INSERT_ONE = `INSERT INTO jobs (id, kind, payload, created_at, updated_at) VALUES ($1, 'noop', $2, $3, $3)`
const INSERT_MANY = `
  INSERT INTO jobs (id, kind, payload, created_at, updated_at)
  SELECT id, 'noop', $2, $3, $3 FROM unnest($1::text[]) AS id`

interface Claimed {
  id: string
  attempt: number
}

/** Runs fn on `connections` clients of a fresh schema (its unquoted name given too), then drops it. */
async function withSchema<T>(connections: number, fn: (clients: pg.Client[], schema: string) => Promise<T>): Promise<T> {
  const { schema, driver } = await makeSchema()
  await driver.close()
  const clients = await Promise.all(Array.from({ length: connections }, () => connect(schema)))
  try {
    return await fn(clients, schema)
  } finally {
    await Promise.all(clients.map((c) => c.end()))
    await dropSchema(schema)
  }
}

function rate(jobs: number, t0: number): number {
  return jobs / ((performance.now() - t0) / 1000)
}

/** Jobs per insertJobs statement of each enqueue shape, as the library batches them. */
const ENQUEUE_SHAPES: Readonly<Record<EnqueueShape, number>> = { sequential: 1, concurrent: 16, many: 1_000 }

/**
 * The library's claim shape: a first claimJobs of `workers`, then one
 * finishAndClaimJobs per cycle with the previous cycle's final writes
 * (parameters as the driver's finishValues, then limit and runner id)
 * until a cycle claims none; then checks every job succeeded. Returns jobs/s.
 */
async function drainShaped(client: pg.Client, schema: string, jobs: number, workers: number): Promise<number> {
  const q = queries(`"${schema}"`)
  let done = 0
  const t0 = performance.now()
  let claimed = (await client.query<Claimed>(prepared(q.claimJobs, [['noop'], [null], [null], [null], workers, 'floor', Date.now()]))).rows
  while (claimed.length > 0) {
    const next = await finishAndClaim(client, q, claimed, workers)
    done += claimed.length
    claimed = next
  }
  const r = rate(done, t0)
  // Scheduled jobs beside the queued ones (the scheduled workload) are not the floor's to run.
  const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM jobs WHERE status NOT IN ('succeeded', 'scheduled')`)
  if (done !== jobs || rows[0]?.n !== '0') throw new Error(`shaped drain floor: ${done} of ${jobs} finished, ${rows[0]?.n} not succeeded`)
  return r
}

/**
 * The library's SQL in the mixed workload's shape, on two connections at
 * once: the 4 producers' awaited enqueues as insertJobs with arrays of 4,
 * one after another (as the runner batches them), and the workers as
 * finishAndClaimJobs cycles of up to `workers` jobs. A cycle that claims
 * nothing waits for the next insert to commit, as an idle runner waits for
 * its wake. Returns jobs/s from the first insert until every job finished.
 */
async function mixedShaped(producer: pg.Client, worker: pg.Client, schema: string, jobs: number, workers: number): Promise<number> {
  const q = queries(`"${schema}"`)
  let inserted = 0
  let nextInsert: Promise<void> = Promise.resolve()
  let announce = (): void => {}
  const t0 = performance.now()
  const produce = (async () => {
    while (inserted < jobs) {
      const count = Math.min(4, jobs - inserted)
      const now = Date.now()
      const ids = Array.from({ length: count }, () => newJobId(now))
      await producer.query(prepared(q.insertJobs, [ids, ids.map(() => 'noop'), ids.map(() => PAYLOAD), ids.map(() => null), now, ids.map(() => 0), ids.map(() => null), ids.map(() => 1), ids.map(() => null), ids.map(() => false), ids.map(() => null)]))
      inserted += count
      announce()
    }
  })()
  let done = 0
  let claimed: Claimed[] = []
  while (done < jobs) {
    nextInsert = new Promise((resolve) => (announce = resolve))
    const next = await finishAndClaim(worker, q, claimed, workers)
    done += claimed.length
    claimed = next
    if (claimed.length === 0 && done < jobs) await nextInsert
  }
  await produce
  return rate(done, t0)
}

/** One cycle as the runner makes it: `claimed` succeed and up to `workers` more are claimed, in the library's one statement; returns those. */
async function finishAndClaim(client: pg.Client, q: ReturnType<typeof queries>, claimed: readonly Claimed[], workers: number): Promise<Claimed[]> {
  const { rows } = await client.query<Claimed & { part: 'f' | 'c' }>(
    prepared(q.finishAndClaimJobs, [
      claimed.map((j) => j.id),
      claimed.map((j) => j.attempt),
      claimed.map(() => 'succeeded'),
      claimed.map(() => 'null'),
      claimed.map(() => null),
      Date.now(),
      workers,
      'floor',
      ['noop'],
      [null],
      [null],
      [null],
    ]),
  )
  return rows.filter((r) => r.part === 'c')
}

/** A statement prepared once on the connection, as the driver sends its own by default (preparedStatements). */
function prepared(text: string, values: unknown[]): pg.QueryConfig {
  return { name: `floor_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`, text, values }
}

/** The library's insertJobs with arrays of `perStatement` jobs, each statement autocommitted; returns jobs/s. */
async function insertShaped(client: pg.Client, schema: string, jobs: number, perStatement: number): Promise<number> {
  const q = queries(`"${schema}"`)
  let done = 0
  const t0 = performance.now()
  while (done < jobs && performance.now() - t0 < SINGLE_FLOOR_MS) {
    const count = Math.min(perStatement, jobs - done)
    const now = Date.now()
    const ids = new Array<string>(count)
    for (let i = 0; i < count; i++) ids[i] = newJobId(now)
    await client.query(prepared(q.insertJobs, [ids, ids.map(() => 'noop'), ids.map(() => PAYLOAD), ids.map(() => null), now, ids.map(() => 0), ids.map(() => null), ids.map(() => 1), ids.map(() => null), ids.map(() => false), ids.map(() => null)]))
    done += count
  }
  return rate(done, t0)
}

const pgFloors: Floors = {
  // One statement per write, one connection per worker (as many workers
  // would); batched on one connection, 100 claims or completions a statement.
  async drain(jobs, workers, finishedRows = 0): Promise<FloorRate> {
    const single = await withSchema(workers, async (clients) => {
      if (finishedRows > 0) await seedFinished(clients[0] as pg.Client, finishedRows)
      await seedQueued(clients[0] as pg.Client, jobs)
      let done = 0
      const t0 = performance.now()
      await Promise.all(
        clients.map(async (c) => {
          while (performance.now() - t0 < SINGLE_FLOOR_MS) {
            const { rows } = await c.query<Claimed>(CLAIM_ONE, [Date.now()])
            const job = rows[0]
            if (job === undefined) return
            await c.query(FINISH_ONE, [job.id, job.attempt, Date.now()])
            done++
          }
        }),
      )
      return rate(done, t0)
    })
    const batched = await withSchema(1, async ([c]) => {
      const client = c as pg.Client
      if (finishedRows > 0) await seedFinished(client, finishedRows)
      await seedQueued(client, jobs)
      let done = 0
      const t0 = performance.now()
      for (;;) {
        const { rows } = await client.query<Claimed>(CLAIM_MANY, [Date.now()])
        if (rows.length === 0) break
        await client.query(FINISH_MANY, [rows.map((r) => r.id), Date.now()])
        done += rows.length
      }
      return rate(done, t0)
    })
    const shaped = await withSchema(1, async ([c], schema) => {
      const client = c as pg.Client
      if (finishedRows > 0) await seedFinished(client, finishedRows)
      await seedQueued(client, jobs)
      return drainShaped(client, schema, jobs, workers)
    })
    return { single, batched, shaped }
  },
  async insert(jobs): Promise<InsertFloorRate> {
    const single = await withSchema(1, async ([c]) => {
      const t0 = performance.now()
      let done = 0
      for (; done < jobs && performance.now() - t0 < SINGLE_FLOOR_MS; done++) {
        const now = Date.now()
        await (c as pg.Client).query(INSERT_ONE, [newJobId(now), PAYLOAD, now])
      }
      return rate(done, t0)
    })
    const batched = await withSchema(1, async ([c]) => {
      const t0 = performance.now()
      for (let i = 0; i < jobs; i += BATCH) {
        const now = Date.now()
        await (c as pg.Client).query(INSERT_MANY, [Array.from({ length: BATCH }, () => newJobId(now)), PAYLOAD, now])
      }
      return rate(Math.ceil(jobs / BATCH) * BATCH, t0)
    })
    const shaped = async (shape: EnqueueShape): Promise<number> =>
      withSchema(1, ([c], schema) => insertShaped(c as pg.Client, schema, jobs, ENQUEUE_SHAPES[shape]))
    return {
      single,
      batched,
      shaped: { sequential: await shaped('sequential'), concurrent: await shaped('concurrent'), many: await shaped('many') },
    }
  },
  async mixed(jobs, workers) {
    const single = await withSchema(workers, async (clients) => {
      let next = 0
      const t0 = performance.now()
      await Promise.all(
        clients.map(async (c) => {
          while (next < jobs && performance.now() - t0 < SINGLE_FLOOR_MS) {
            next++
            const now = Date.now()
            await c.query(INSERT_ONE, [newJobId(now), PAYLOAD, now])
            const { rows } = await c.query<Claimed>(CLAIM_ONE, [now])
            const job = rows[0]
            if (job !== undefined) await c.query(FINISH_ONE, [job.id, job.attempt, now])
          }
        }),
      )
      return rate(next, t0)
    })
    const batched = await withSchema(1, async ([c]) => {
      const client = c as pg.Client
      const t0 = performance.now()
      for (let i = 0; i < jobs; i += BATCH) {
        const now = Date.now()
        await client.query(INSERT_MANY, [Array.from({ length: BATCH }, () => newJobId(now)), PAYLOAD, now])
        const { rows } = await client.query<Claimed>(CLAIM_MANY, [now])
        await client.query(FINISH_MANY, [rows.map((r) => r.id), now])
      }
      return rate(Math.ceil(jobs / BATCH) * BATCH, t0)
    })
    const shaped = await withSchema(2, ([p, w], schema) => mixedShaped(p as pg.Client, w as pg.Client, schema, jobs, workers))
    return { single, batched, shaped }
  },
  async latency(samples) {
    return withSchema(1, async ([c]) => {
      const client = c as pg.Client
      const times: number[] = []
      for (let i = 0; i < samples; i++) {
        const t0 = performance.now()
        const now = Date.now()
        await client.query(INSERT_ONE, [newJobId(now), PAYLOAD, now])
        const { rows } = await client.query<Claimed>(CLAIM_ONE, [now])
        times.push(performance.now() - t0)
        const job = rows[0]
        if (job !== undefined) await client.query(FINISH_ONE, [job.id, job.attempt, now])
      }
      return { p50: percentile(times, 50), p99: percentile(times, 99) }
    })
  },
  async prune(rows, batch) {
    return withSchema(1, async ([c], schema) => {
      const client = c as pg.Client
      await seedFinished(client, rows)
      const q = queries(`"${schema}"`)
      const times: number[] = []
      let deleted = 0
      const before = Date.now() + 1
      const t0 = performance.now()
      for (;;) {
        const s = performance.now()
        const n = (await client.query(prepared(q.pruneJobs, ['noop', ['succeeded', 'failed', 'cancelled'], before, batch]))).rowCount ?? 0
        times.push(performance.now() - s)
        deleted += n
        if (n < batch) break
      }
      const r = rate(deleted, t0)
      if (deleted !== rows) throw new Error(`prune floor: ${deleted} of ${rows} deleted`)
      return { rows_per_s: r, p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), statements: times.length }
    })
  },
  async drainShapedBesideScheduled(jobs, workers, scheduledRows) {
    return withSchema(1, async ([c], schema) => {
      const client = c as pg.Client
      if (scheduledRows > 0) await seedScheduled(client, scheduledRows, SCHEDULED_DELAY_MS)
      await seedQueued(client, jobs)
      const rate = await drainShaped(client, schema, jobs, workers)
      const left = (await countByStatus(client))['scheduled'] ?? 0
      if (left !== scheduledRows) throw new Error(`shaped drain floor: ${left} of ${scheduledRows} scheduled jobs still scheduled`)
      return rate
    })
  },
}
