/** Small numeric helpers for the benchmarks: percentiles, medians, a resident-memory sampler. */

/** The p-th percentile (0..100) of values by nearest rank; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank] as number
}

export function median(values: readonly number[]): number {
  return percentile(values, 50)
}

/** Rounds for display and JSON: 3 significant decimals below 10, whole numbers above. */
export function round(n: number): number {
  if (!Number.isFinite(n)) return n
  if (Math.abs(n) >= 100) return Math.round(n)
  if (Math.abs(n) >= 10) return Math.round(n * 10) / 10
  return Math.round(n * 1000) / 1000
}

/**
 * Samples this process's resident set size every `everyMs` and keeps the
 * maximum. The event loop must turn for a sample to be taken, so a long
 * synchronous stretch is seen only at its end (its memory is still held).
 */
export class RssSampler {
  #max = process.memoryUsage.rss()
  readonly #timer: NodeJS.Timeout

  constructor(everyMs = 20) {
    this.#timer = setInterval(() => this.sample(), everyMs)
    this.#timer.unref()
  }

  sample(): void {
    const rss = process.memoryUsage.rss()
    if (rss > this.#max) this.#max = rss
  }

  /** The largest RSS seen, in MB. */
  get maxMb(): number {
    this.sample()
    return this.#max / (1024 * 1024)
  }

  stop(): void {
    clearInterval(this.#timer)
  }
}

export function mb(bytes: number): number {
  return bytes / (1024 * 1024)
}
