/**
 * jobtable benchmarks: `npm run bench -- [options]`.
 *
 *   --backend sqlite|postgres   default: both (postgres is skipped, saying why, when unavailable)
 *   --workload NAME[,NAME]      drain, enqueue, latency, mixed, scale, scheduled, limited, prune, ratelimited, fair;
 *                               default all but scale, scheduled, limited, prune, ratelimited and fair
 *   --jobs N                    jobs per throughput workload, default 20000
 *   --workers N                 runner workers, default 10
 *   --samples N                 latency samples, default 2000
 *   --scale-rows N              finished rows for scale, default 1000000
 *   --scheduled-rows N          jobs scheduled for next week beside the due ones, for scheduled; default 1000000
 *   --prune-rows N              finished jobs the prune workload deletes; default 200000
 *   --repeat N                  repeats per measurement, medians reported; default 1
 *   --sync normal|full|both     SQLite durability settings to run, default both
 *   --no-floor                  skip the raw-SQL floors (for profiling)
 *   --profile DIR               CPU-profile each timed section into DIR (see bench/profile-summary.ts)
 *
 * The library measured is the one users get: `jobtable`, `jobtable/sqlite`
 * and `jobtable/postgres` resolve through package.json "exports" to the
 * compiled dist/ (`npm run bench` builds it first), not to src/ through
 * tsx's transforms: no `--conditions=source`, and the children inherit
 * this process's execArgv. The bench's own TypeScript (and the SQL text
 * and newJobId the floors import from src/) still runs through tsx.
 *
 * Each (backend, durability, workload) runs in its own child process, so
 * one workload's memory and JIT state never colour the next, and RSS is
 * the runner process's own. Prints one JSON line per result as it lands,
 * then a table. Benchmarks only: nothing here is a test, nothing asserts
 * a time.
 */
import { spawn } from 'node:child_process'
import { mkdirSync, readdirSync, statSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Backend, FloorRate } from './backend.js'
import { jsonLine, table, type Result } from './report.js'
import { median } from './stats.js'
import { postgresBackend, postgresUnavailable } from './backend-postgres.js'
import { sqliteBackend } from './backend-sqlite.js'
import { profileLabel } from './profiler.js'
import * as work from './workloads.js'
import * as rateFair from './workloads-rate-fair.js'

const WORKLOADS = ['drain', 'enqueue', 'latency', 'mixed', 'scale', 'scheduled', 'limited', 'prune', 'ratelimited', 'fair'] as const

/** Batch sizes the prune workload's floor runs the prune statement at: the library's PRUNE_BATCH and a tenth and ten times it. */
const PRUNE_FLOOR_BATCHES = [100, 1_000, 10_000] as const
type Workload = (typeof WORKLOADS)[number]

interface Options {
  backends: ('sqlite' | 'postgres')[]
  workloads: Workload[]
  jobs: number
  workers: number
  samples: number
  scaleRows: number
  scheduledRows: number
  pruneRows: number
  repeat: number
  syncs: ('normal' | 'full')[]
  floor: boolean
  profile?: string
}

/** What one child process runs. */
interface Unit {
  backend: 'sqlite' | 'postgres'
  sync: 'normal' | 'full'
  workload: Workload
}

function parseArgs(argv: string[]): Options {
  const o: Options = {
    backends: ['sqlite', 'postgres'],
    workloads: ['drain', 'enqueue', 'latency', 'mixed'],
    jobs: 20_000,
    workers: 10,
    samples: 2_000,
    scaleRows: 1_000_000,
    scheduledRows: 1_000_000,
    pruneRows: 200_000,
    repeat: 1,
    syncs: ['normal', 'full'],
    floor: true,
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    const [flag, inline] = arg.includes('=') ? (arg.split('=', 2) as [string, string]) : [arg, undefined]
    const value = (): string => {
      const v = inline ?? argv[++i]
      if (v === undefined) usage(`${flag} needs a value`)
      return v
    }
    const int = (): number => {
      const n = Number(value())
      if (!Number.isInteger(n) || n < 1) usage(`${flag} needs a positive integer`)
      return n
    }
    switch (flag) {
      case '--backend': {
        const v = value()
        if (v !== 'sqlite' && v !== 'postgres' && v !== 'both') usage('--backend is sqlite, postgres or both')
        o.backends = v === 'both' ? ['sqlite', 'postgres'] : [v]
        break
      }
      case '--workload': {
        const names = value().split(',')
        for (const n of names) if (n !== 'all' && !(WORKLOADS as readonly string[]).includes(n)) usage(`unknown workload ${n}`)
        o.workloads = names.includes('all') ? [...WORKLOADS] : (names as Workload[])
        break
      }
      case '--jobs': o.jobs = int(); break
      case '--workers': o.workers = int(); break
      case '--samples': o.samples = int(); break
      case '--scale-rows': o.scaleRows = int(); break
      case '--scheduled-rows': o.scheduledRows = int(); break
      case '--prune-rows': o.pruneRows = int(); break
      case '--repeat': o.repeat = int(); break
      case '--sync': {
        const v = value()
        if (v !== 'normal' && v !== 'full' && v !== 'both') usage('--sync is normal, full or both')
        o.syncs = v === 'both' ? ['normal', 'full'] : [v]
        break
      }
      case '--no-floor': o.floor = false; break
      case '--profile': o.profile = value(); break
      case '--help': usage()
      // falls through: usage exits
      default: usage(`unknown option ${arg}`)
    }
  }
  return o
}

function usage(problem?: string): never {
  if (problem) console.error(problem)
  console.error('usage: npm run bench -- [--backend sqlite|postgres] [--workload drain|enqueue|latency|mixed|scale|scheduled|limited|prune|ratelimited|fair|all] [--jobs N] [--workers N]')
  console.error('       [--samples N] [--scale-rows N] [--scheduled-rows N] [--prune-rows N] [--repeat N] [--sync normal|full|both] [--no-floor] [--profile DIR]')
  process.exit(problem ? 2 : 0)
}

/** The issue's targets, for the default durability of each backend. */
function target(r: Omit<Result, 'target' | 'target_met'>): { target: string; target_met: boolean } | undefined {
  const isDefault = r.durability === 'synchronous=NORMAL' || r.durability === 'synchronous_commit=on'
  if (!isDefault) return undefined
  type Check = { target: string; met: (x: Omit<Result, 'target' | 'target_met'>) => boolean }
  const targets: Record<string, Check> = {
    'sqlite drain': { target: '>= 60000/s', met: (x) => x.jobs_per_s >= 60_000 },
    'sqlite enqueue/sequential': { target: '>= 30000/s', met: (x) => x.jobs_per_s >= 30_000 },
    'sqlite enqueue/concurrent': { target: '>= 100000/s', met: (x) => x.jobs_per_s >= 100_000 },
    'sqlite enqueue/many': { target: '>= 200000/s', met: (x) => x.jobs_per_s >= 200_000 },
    'sqlite latency': { target: 'p50 <= 0.3, p99 <= 2 ms', met: (x) => x.p50_ms <= 0.3 && x.p99_ms <= 2 },
    'postgres drain': { target: '>= 30000/s', met: (x) => x.jobs_per_s >= 30_000 },
    'postgres mixed': { target: '>= 5000/s', met: (x) => x.jobs_per_s >= 5_000 },
    'postgres latency': { target: 'p50 <= 1.5, p99 <= 5 ms', met: (x) => x.p50_ms <= 1.5 && x.p99_ms <= 5 },
    'sqlite scale': { target: '>= 0.9 x empty, rss <= 200 MB', met: scaleMet },
    'postgres scale': { target: '>= 0.9 x empty, rss <= 200 MB', met: scaleMet },
    'sqlite scheduled': { target: '>= 0.9x empty', met: scheduledMet },
    'postgres scheduled': { target: '>= 0.9x empty', met: scheduledMet },
    'sqlite limited': { target: '>= 0.8x alone', met: limitedMet },
    'postgres limited': { target: '>= 0.8x alone', met: limitedMet },
    'sqlite ratelimited': { target: '>= 0.9x alone, <= limit a window', met: rateLimitedMet },
    'postgres ratelimited': { target: '>= 0.9x alone, <= limit a window', met: rateLimitedMet },
    'sqlite fair': { target: 'p99 first wait <= 1 round, Jain >= 0.95', met: fairMet },
    'postgres fair': { target: 'p99 first wait <= 1 round, Jain >= 0.95', met: fairMet },
  }
  const at = (key: string): Check | undefined => targets[key]
  const t = at(`${r.backend} ${r.workload}${r.mode ? `/${r.mode}` : ''}`)
  return t && { target: t.target, target_met: t.met(r) }
}

function scaleMet(r: Omit<Result, 'target' | 'target_met'>): boolean {
  const ratio = r.extra?.['ratio_to_empty']
  return typeof ratio === 'number' && ratio >= 0.9 && r.rss_mb <= 200
}

/** The due jobs drain beside a million scheduled for next week at least 90% as fast as on an empty table. */
function scheduledMet(r: Omit<Result, 'target' | 'target_met'>): boolean {
  const ratio = r.extra?.['ratio_to_empty']
  return typeof ratio === 'number' && ratio >= 0.9
}

/** The unlimited kind drains beside a backlog of a kind at its concurrency limit at least 80% as fast as alone. */
function limitedMet(r: Omit<Result, 'target' | 'target_met'>): boolean {
  const ratio = r.extra?.['ratio_to_alone']
  return typeof ratio === 'number' && ratio >= 0.8
}

/**
 * The unlimited kind drains beside a rate-limited backlog at least 90% as fast as alone, and the rated kind
 * never starts more than its limit in a window (its use of the limit is reported beside, as rated_ratio_to_limit).
 */
function rateLimitedMet(r: Omit<Result, 'target' | 'target_met'>): boolean {
  const ratio = r.extra?.['ratio_to_alone']
  const max = r.extra?.['rated_max_in_window']
  return typeof ratio === 'number' && ratio >= 0.9 && typeof max === 'number' && max <= rateFair.RATE_LIMIT
}

/** A household's first job waits at most one claim round (p99), and starts are shared with a Jain index of at least 0.95 in every second. */
function fairMet(r: Omit<Result, 'target' | 'target_met'>): boolean {
  const wait = r.extra?.['first_wait_p99_rounds']
  const jain = r.extra?.['jain_per_second_min']
  return typeof wait === 'number' && wait <= 1 && typeof jain === 'number' && jain >= 0.95
}

/** One library measurement with the floors measured beside it (NaN where none). */
interface Sample {
  m: work.Measurement
  floor: FloorRate
  extra?: Record<string, number>
}

/** Runs one unit's repeats in this process and prints a `RESULT {json}` line per result. */
async function runUnit(unit: Unit, o: Options): Promise<void> {
  const backend: Backend = unit.backend === 'sqlite' ? sqliteBackend(unit.sync) : postgresBackend()
  profileLabel(`${unit.backend}${unit.backend === 'sqlite' ? `-${unit.sync}` : ''}-${unit.workload}`)
  const f = backend.floors
  const noFloor: FloorRate = { single: Number.NaN, batched: Number.NaN, shaped: Number.NaN }
  const rounds: Sample[][] = []
  for (let rep = 0; rep < o.repeat; rep++) {
    const round: Sample[] = []
    const fresh = async <T>(fn: (s: Awaited<ReturnType<Backend['store']>>) => Promise<T>): Promise<T> => {
      const s = await backend.store()
      try {
        return await fn(s)
      } finally {
        await s.drop()
      }
    }
    switch (unit.workload) {
      case 'drain': {
        const floor = o.floor ? await f.drain(o.jobs, o.workers) : noFloor
        round.push({ m: await fresh((s) => work.drain(s, o.jobs, o.workers)), floor })
        break
      }
      case 'enqueue': {
        const floors = o.floor ? await f.insert(o.jobs) : undefined
        for (const mode of ['sequential', 'concurrent', 'many'] as const) {
          // Each mode has its own shaped floor (the library's batch of 1, 16 or 1,000 per transaction).
          const floor = floors ? { single: floors.single, batched: floors.batched, shaped: floors.shaped[mode] } : noFloor
          round.push({ m: await fresh((s) => work.enqueue(s, o.jobs, mode)), floor })
        }
        break
      }
      case 'latency': {
        const lf = o.floor ? await f.latency(o.samples) : { p50: Number.NaN, p99: Number.NaN }
        const m = await fresh((s) => work.latency(s, o.samples, o.workers))
        // For latency the "floor" is insert-then-claim time; its ratio is library p50 over floor p50.
        round.push({ m, floor: { single: 1000 / lf.p50, batched: Number.NaN, shaped: Number.NaN }, extra: { floor_p50_ms: lf.p50, floor_p99_ms: lf.p99 } })
        break
      }
      case 'mixed': {
        const floor = o.floor ? await f.mixed(o.jobs, o.workers) : noFloor
        round.push({ m: await fresh((s) => work.mixed(s, o.jobs, o.workers)), floor })
        break
      }
      case 'scale': {
        const warm = await backend.store()
        const empty = await backend.store()
        const big = await backend.store()
        try {
          const m = await work.scale(warm, empty, big, o.scaleRows, o.jobs, o.workers)
          const floor = o.floor ? await f.drain(o.jobs, o.workers, o.scaleRows) : noFloor
          // The same ratio for the library's SQL alone: its shaped floor on the big table over the empty one.
          const emptyFloor = o.floor ? await f.drain(o.jobs, o.workers) : noFloor
          round.push({ m, floor, extra: { floor_shape_ratio_to_empty: floor.shaped / emptyFloor.shaped } })
        } finally {
          await warm.drop()
          await empty.drop()
          await big.drop()
        }
        break
      }
      case 'scheduled': {
        const stores = [await backend.store(), await backend.store(), await backend.store(), await backend.store()] as const
        let m: work.Measurement
        try {
          m = await work.scheduled(...stores, o.scheduledRows, o.jobs, o.workers)
        } finally {
          // Dropped before the floors run, so their tables do not share the cache with these.
          for (const s of stores) await s.drop()
        }
        // Only the shaped floor (the library's own SQL in its own batch shape), bracketed by
        // empty-table runs as the library's drain is: its ratio is the design's own. The 1/tx
        // and x100 floors would cost two more seedings of a million rows and say nothing more here.
        let shaped = Number.NaN
        let extra: Record<string, number> | undefined
        if (o.floor) {
          await f.drainShapedBesideScheduled(o.jobs, o.workers, 0) // warm-up, not counted
          const before = await f.drainShapedBesideScheduled(o.jobs, o.workers, 0)
          shaped = await f.drainShapedBesideScheduled(o.jobs, o.workers, o.scheduledRows)
          const after = await f.drainShapedBesideScheduled(o.jobs, o.workers, 0)
          const emptyShaped = (before + after) / 2
          extra = { floor_shape_empty_jobs_per_s: emptyShaped, floor_shape_ratio_to_empty: shaped / emptyShaped }
          console.error(
            `bench: scheduled: floor shape ${Math.round(shaped)}/s beside ${o.scheduledRows} scheduled; empty ${Math.round(before)}/s before, ${Math.round(after)}/s after; ratio ${(shaped / emptyShaped).toFixed(3)}`,
          )
        }
        round.push({ m, floor: { single: Number.NaN, batched: Number.NaN, shaped }, ...(extra ? { extra } : {}) })
        break
      }
      case 'prune': {
        // The latency floor is the same runner's claim latency without the prune, before and after it (in extra).
        const m = await fresh((s) => work.prune(s, o.pruneRows, o.samples, o.workers))
        // The prune statement alone at each batch size: how long one holds the database, and rows deleted per second.
        const extra: Record<string, number> = {}
        if (o.floor) {
          for (const batch of PRUNE_FLOOR_BATCHES) {
            const pf = await f.prune(o.pruneRows, batch)
            extra[`floor_batch_${batch}_rows_per_s`] = pf.rows_per_s
            extra[`floor_batch_${batch}_p50_ms`] = pf.p50_ms
            extra[`floor_batch_${batch}_p99_ms`] = pf.p99_ms
            console.error(`bench: prune floor: batch ${batch}: ${Math.round(pf.rows_per_s)} rows/s, ${pf.p50_ms.toFixed(2)}/${pf.p99_ms.toFixed(2)} ms per statement (p50/p99, ${pf.statements} statements)`)
          }
        }
        round.push({ m, floor: noFloor, extra })
        break
      }
      case 'ratelimited': {
        // No floor, as for limited: the ratio is to the same drain without the rated kind, in this process.
        const stores = [await backend.store(), await backend.store(), await backend.store(), await backend.store()] as const
        try {
          round.push({ m: await rateFair.ratelimited(...stores, o.jobs, o.workers), floor: noFloor })
        } finally {
          for (const s of stores) await s.drop()
        }
        break
      }
      case 'fair': {
        // No floor: the baseline is the same backlog claimed oldest first, in this process.
        const stores = [await backend.store(), await backend.store(), await backend.store()] as const
        try {
          round.push({ m: await rateFair.fair(...stores, o.jobs, o.workers), floor: noFloor })
        } finally {
          for (const s of stores) await s.drop()
        }
        break
      }
      case 'limited': {
        // No floor: the question is the library's own claim with and without a limited backlog,
        // and the ratio between the two says it.
        const stores = [await backend.store(), await backend.store(), await backend.store(), await backend.store()] as const
        try {
          round.push({ m: await work.limited(...stores, o.jobs, o.workers), floor: noFloor })
        } finally {
          for (const s of stores) await s.drop()
        }
        break
      }
    }
    rounds.push(round)
  }
  const first: Sample[] = rounds[0] ?? []
  first.forEach((sample, i) => {
    const all = rounds.map((r) => r[i] as Sample)
    const med = (pick: (x: Sample) => number): number => median(all.map(pick))
    const jobsPerS = med((x) => x.m.jobs_per_s)
    const floorSingle = med((x) => x.floor.single)
    const floorBatched = med((x) => x.floor.batched)
    const floorShaped = med((x) => x.floor.shaped)
    const extraKeys = Object.keys({ ...sample.m.extra, ...sample.extra })
    const extra = Object.fromEntries(extraKeys.map((k) => [k, med((x) => ({ ...x.m.extra, ...x.extra })[k] ?? Number.NaN)]))
    const isLatency = unit.workload === 'latency'
    const p50 = med((x) => x.m.p50_ms)
    const base: Omit<Result, 'target' | 'target_met'> = {
      backend: backend.name,
      durability: backend.durability,
      workload: unit.workload,
      ...(sample.m.mode ? { mode: sample.m.mode } : {}),
      jobs: sample.m.jobs,
      workers: unit.workload === 'enqueue' ? 0 : o.workers,
      jobs_per_s: jobsPerS,
      p50_ms: p50,
      p99_ms: med((x) => x.m.p99_ms),
      rss_mb: med((x) => x.m.rss_mb),
      cpu_us_per_job: med((x) => x.m.cpu_us_per_job),
      floor_jobs_per_s: floorSingle,
      ratio_to_floor: isLatency ? p50 / (extra['floor_p50_ms'] ?? Number.NaN) : jobsPerS / floorSingle,
      floor_batched_jobs_per_s: floorBatched,
      ratio_to_batched_floor: jobsPerS / floorBatched,
      floor_shaped_jobs_per_s: floorShaped,
      ratio_to_shaped_floor: jobsPerS / floorShaped,
      repeats: o.repeat,
      ...(extraKeys.length > 0 ? { extra } : {}),
    }
    const t = target(base)
    console.log('RESULT ' + JSON.stringify({ ...base, ...t }))
  })
}

/** Runs a unit in a child process and collects its results; the child's other output passes through to stderr. */
function runChild(unit: Unit, o: Options, argv: string[]): Promise<Result[]> {
  const env = { ...process.env }
  if (o.profile) {
    mkdirSync(o.profile, { recursive: true })
    env['JOBTABLE_BENCH_PROFILE'] = resolve(o.profile)
  }
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...argv, '--child', JSON.stringify(unit)], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env,
  })
  const results: Result[] = []
  let buffered = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk: string) => {
    buffered += chunk
    let nl: number
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      if (line.startsWith('RESULT ')) {
        const r = JSON.parse(line.slice(7)) as Result
        results.push(r)
        console.log(jsonLine(r))
      } else if (line.length > 0) console.error(line)
    }
  })
  return new Promise((done) => {
    child.on('close', (code) => {
      if (code !== 0) console.error(`bench: ${unit.backend} ${unit.workload} (${unit.sync}) exited with code ${code}`)
      done(results)
    })
  })
}

/**
 * Says on stderr which build of jobtable this process (and so every child,
 * which has the same execArgv) loads, and warns when that is dist/ older
 * than a source file in src/ (run `npm run build`; `npm run bench` does).
 */
function reportLibrary(): void {
  const entry = fileURLToPath(import.meta.resolve('jobtable'))
  const root = resolve(fileURLToPath(import.meta.url), '../..')
  console.error(`bench: jobtable from ${relative(root, entry)}`)
  if (!entry.startsWith(join(root, 'dist'))) return
  const stale: string[] = []
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, e.name)
      if (e.isDirectory()) walk(path)
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) {
        const built = join(root, 'dist', relative(join(root, 'src'), path)).replace(/\.ts$/, '.js')
        const builtAt = statSync(built, { throwIfNoEntry: false })?.mtimeMs ?? 0
        if (builtAt < statSync(path).mtimeMs) stale.push(relative(root, path))
      }
    }
  }
  walk(join(root, 'src'))
  if (stale.length > 0) console.error(`bench: warning: dist/ is older than ${stale.slice(0, 3).join(', ')}${stale.length > 3 ? ` and ${stale.length - 3} more` : ''}; run npm run build`)
}

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const childAt = args.indexOf('--child')
  if (childAt >= 0) {
    const unit = JSON.parse(args[childAt + 1] as string) as Unit
    const o = parseArgs(args.slice(0, childAt))
    await runUnit(unit, o)
    return
  }
  const o = parseArgs(args)
  reportLibrary()
  const units: Unit[] = []
  for (const backend of o.backends) {
    if (backend === 'postgres') {
      const why = await postgresUnavailable()
      if (why !== undefined) {
        console.error(`bench: skipping postgres: ${why}`)
        continue
      }
    }
    for (const workload of o.workloads) {
      if (backend === 'sqlite') {
        // Scale and scheduled are about table size, limited, ratelimited and fair about the claim and prune about the claim beside it, not fsync: run them at the default setting only.
        const defaultOnly = workload === 'scale' || workload === 'scheduled' || workload === 'limited' || workload === 'prune' || workload === 'ratelimited' || workload === 'fair'
        for (const sync of defaultOnly ? (['normal'] as const) : o.syncs) units.push({ backend, sync, workload })
      } else units.push({ backend, sync: 'normal', workload })
    }
  }
  const started = performance.now()
  const results: Result[] = []
  for (const unit of units) {
    console.error(`bench: ${unit.backend}${unit.backend === 'sqlite' ? ` synchronous=${unit.sync}` : ''} ${unit.workload} ...`)
    results.push(...(await runChild(unit, o, args)))
  }
  console.log('')
  console.log(table(results))
  console.log(`\n${results.length} results in ${Math.round((performance.now() - started) / 1000)} s; jobs=${o.jobs} workers=${o.workers} repeat=${o.repeat}`)
}

await main()
