import { round } from './stats.js'

/**
 * One measured result. Throughput results have jobs_per_s; latency results
 * have p50_ms/p99_ms as their headline. Each result carries the raw-SQL
 * floors measured in the same process just before it, and its ratio to
 * each (for latency the ratio is library/floor, so lower is better; for
 * throughput it is library/floor, so higher is better):
 *
 * - floor 1/tx and floor x100: the least SQL a durable queue runs, one
 *   transaction per write or 100 writes per statement; the ratio to them
 *   is what the library's design adds or saves.
 * - floor shape: the library's own SQL statements in the library's own
 *   batch shape (drain: one transaction per cycle holding the previous
 *   cycle's final writes and a claim of `workers`; enqueue: 1, 16 or 1,000
 *   inserts per transaction for sequential, concurrent, many), run straight
 *   through better-sqlite3 or pg: the ratio to it ("x shape") is what the
 *   library's JavaScript costs. Only drain, enqueue, scale and scheduled have one
 *   (limited and ratelimited have none: their ratio is to the same drain without
 *   the limited or rated kind; fair's is to the same backlog claimed oldest first).
 */
export interface Result {
  readonly backend: string
  /** The durability setting in force: never one that loses acknowledged jobs without saying so. */
  readonly durability: string
  readonly workload: string
  /** The variant of a workload with several (enqueue: sequential, concurrent, many). */
  readonly mode?: string
  readonly jobs: number
  readonly workers: number
  readonly jobs_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  /** Largest resident set size of the process while the workload ran. */
  readonly rss_mb: number
  /** The process's CPU time per job: wall-clock rates move with other load on a shared machine, this much less. */
  readonly cpu_us_per_job: number
  /** The raw-SQL floor with one transaction per write. */
  readonly floor_jobs_per_s: number
  readonly ratio_to_floor: number
  /** The raw-SQL floor with claims, completions and inserts 100 to a statement. */
  readonly floor_batched_jobs_per_s: number
  readonly ratio_to_batched_floor: number
  /** The library's own statements in its own batch shape, without its JavaScript; NaN (null in JSON) where not measured. */
  readonly floor_shaped_jobs_per_s: number
  readonly ratio_to_shaped_floor: number
  /** How many repeats the medians are taken over. */
  readonly repeats: number
  /** The target for this result, as text, and whether the median met it. */
  readonly target?: string
  readonly target_met?: boolean
  /** Extra figures a workload reports (scale: the empty-table rate). */
  readonly extra?: Record<string, number | string>
}

export function jsonLine(r: Result): string {
  const rounded: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(r)) {
    if (typeof v === 'number') rounded[k] = round(v)
    else if (k === 'extra' && v !== undefined) rounded[k] = Object.fromEntries(Object.entries(v).map(([ek, ev]) => [ek, typeof ev === 'number' ? round(ev) : ev]))
    else rounded[k] = v
  }
  return JSON.stringify(rounded)
}

const COLUMNS: [string, (r: Result) => string][] = [
  ['backend', (r) => r.backend],
  ['durability', (r) => r.durability],
  ['workload', (r) => r.workload + (r.mode ? `/${r.mode}` : '')],
  ['jobs', (r) => String(r.jobs)],
  ['wk', (r) => String(r.workers)],
  ['jobs/s', (r) => fmt(r.jobs_per_s)],
  ['p50 ms', (r) => fmt(r.p50_ms)],
  ['p99 ms', (r) => fmt(r.p99_ms)],
  ['rss MB', (r) => fmt(r.rss_mb)],
  ['cpu us/job', (r) => fmt(r.cpu_us_per_job)],
  ['floor 1/tx', (r) => fmt(r.floor_jobs_per_s)],
  ['x floor', (r) => fmt(r.ratio_to_floor)],
  ['floor x100', (r) => fmt(r.floor_batched_jobs_per_s)],
  ['x floor100', (r) => fmt(r.ratio_to_batched_floor)],
  ['floor shape', (r) => fmt(r.floor_shaped_jobs_per_s)],
  ['x shape', (r) => fmt(r.ratio_to_shaped_floor)],
  ['target', (r) => (r.target === undefined ? '' : `${r.target_met ? 'MET ' : 'MISS'} ${r.target}`)],
]

/** A plain-text table of results, one row each. */
export function table(results: readonly Result[]): string {
  const rows = [COLUMNS.map(([h]) => h), ...results.map((r) => COLUMNS.map(([, f]) => f(r)))]
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((row) => (row[i] as string).length)))
  const line = (row: string[]): string => row.map((cell, i) => (i < 4 ? cell.padEnd(widths[i] as number) : cell.padStart(widths[i] as number))).join('  ')
  const out = [line(rows[0] as string[]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)]
  const extras = results.filter((r) => r.extra !== undefined)
  for (const r of extras) out.push(`  ${r.backend} ${r.workload}: ${Object.entries(r.extra ?? {}).map(([k, v]) => `${k}=${typeof v === 'number' ? round(v) : v}`).join(' ')}`)
  return out.join('\n')
}

function fmt(n: number): string {
  if (!Number.isFinite(n)) return '-'
  const r = round(n)
  return Math.abs(r) >= 1000 ? r.toLocaleString('en-US') : String(r)
}
