import { randomUUID } from 'node:crypto'
import pg from 'pg'
import type { Driver } from 'jobtable'
import type { Backend, FloorRate, Floors, Store } from './backend.js'
import { percentile } from './stats.js'

/**
 * PostgreSQL through jobtable's driver, and through pg directly for the
 * floor, on a fresh schema per store; the floor's tables are made by
 * jobtable's own migrations, so the ratio to it is what the library adds.
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

async function seedFinished(client: pg.Client, rows: number): Promise<void> {
  await client.query(
    `INSERT INTO jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at)
     SELECT gen_random_uuid()::text, 'noop', 'succeeded', '{"n":0}', 'null', 1, 'old-runner', $2, $2, $2, $2
       FROM generate_series(1, $1::int)`,
    [rows, Date.now()],
  )
  await client.query('ANALYZE jobs')
}

async function seedQueued(client: pg.Client, jobs: number): Promise<void> {
  await client.query(
    `INSERT INTO jobs (id, kind, payload, created_at, updated_at)
     SELECT gen_random_uuid()::text, 'noop', $2, $3, $3 FROM generate_series(1, $1::int)`,
    [jobs, PAYLOAD, Date.now()],
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
   WHERE seq = (SELECT seq FROM jobs WHERE status = 'queued' ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING seq, id, kind, payload, attempt`
const CLAIM_MANY = `
  UPDATE jobs SET status = 'running', attempt = attempt + 1, runner_id = 'floor', started_at = $1, updated_at = $1
   WHERE seq IN (SELECT seq FROM jobs WHERE status = 'queued' ORDER BY seq LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
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

/** Runs fn on `connections` clients of a fresh schema, then drops it. */
async function withSchema<T>(connections: number, fn: (clients: pg.Client[]) => Promise<T>): Promise<T> {
  const { schema, driver } = await makeSchema()
  await driver.close()
  const clients = await Promise.all(Array.from({ length: connections }, () => connect(schema)))
  try {
    return await fn(clients)
  } finally {
    await Promise.all(clients.map((c) => c.end()))
    await dropSchema(schema)
  }
}

function rate(jobs: number, t0: number): number {
  return jobs / ((performance.now() - t0) / 1000)
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
    return { single, batched }
  },
  async insert(jobs) {
    const single = await withSchema(1, async ([c]) => {
      const t0 = performance.now()
      let done = 0
      for (; done < jobs && performance.now() - t0 < SINGLE_FLOOR_MS; done++) {
        await (c as pg.Client).query(INSERT_ONE, [randomUUID(), PAYLOAD, Date.now()])
      }
      return rate(done, t0)
    })
    const batched = await withSchema(1, async ([c]) => {
      const t0 = performance.now()
      for (let i = 0; i < jobs; i += BATCH) {
        await (c as pg.Client).query(INSERT_MANY, [Array.from({ length: BATCH }, () => randomUUID()), PAYLOAD, Date.now()])
      }
      return rate(Math.ceil(jobs / BATCH) * BATCH, t0)
    })
    return { single, batched }
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
            await c.query(INSERT_ONE, [randomUUID(), PAYLOAD, now])
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
        await client.query(INSERT_MANY, [Array.from({ length: BATCH }, () => randomUUID()), PAYLOAD, now])
        const { rows } = await client.query<Claimed>(CLAIM_MANY, [now])
        await client.query(FINISH_MANY, [rows.map((r) => r.id), now])
      }
      return rate(Math.ceil(jobs / BATCH) * BATCH, t0)
    })
    return { single, batched }
  },
  async latency(samples) {
    return withSchema(1, async ([c]) => {
      const client = c as pg.Client
      const times: number[] = []
      for (let i = 0; i < samples; i++) {
        const t0 = performance.now()
        const now = Date.now()
        await client.query(INSERT_ONE, [randomUUID(), PAYLOAD, now])
        const { rows } = await client.query<Claimed>(CLAIM_ONE, [now])
        times.push(performance.now() - t0)
        const job = rows[0]
        if (job !== undefined) await client.query(FINISH_ONE, [job.id, job.attempt, now])
      }
      return { p50: percentile(times, 50), p99: percentile(times, 99) }
    })
  },
}
