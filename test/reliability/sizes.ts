/**
 * The reliability suite runs in two sizes. Inside `npm test` each check
 * runs its fast size, small enough for the whole suite to stay within CI's
 * budget; `npm run test:reliability` sets JOBTABLE_RELIABILITY=full and
 * each check runs the size its issue names. One check's size can also be
 * set alone, e.g. JT_RELIABILITY_RANDOM_KILLS_JOBS=2000.
 */
export const FULL = process.env['JOBTABLE_RELIABILITY'] === 'full'

/**
 * The size `name` runs at: `JT_RELIABILITY_<NAME>` when set (a positive
 * integer, else this throws), `full` under `npm run test:reliability`,
 * `fast` otherwise.
 */
export function size(name: string, fast: number, full: number): number {
  const variable = `JT_RELIABILITY_${name.toUpperCase()}`
  const set = process.env[variable]
  if (set !== undefined) {
    const n = Number(set)
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${variable} must be a whole number, not ${JSON.stringify(set)}`)
    return n
  }
  return FULL ? full : fast
}

/** A test's time bound: `fastMs` in `npm test`, `fullMs` under the full sizes. */
export function bound(fastMs: number, fullMs: number): number {
  return FULL ? fullMs : fastMs
}
