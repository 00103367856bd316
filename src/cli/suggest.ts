/**
 * The candidate nearest to `word` by edit distance, when it is near
 * enough to be what was meant: at most a third of the word's length
 * (at least 1, at most 3) edits away; ties go to the first candidate in
 * order. Written here rather than taken from a package: it is a few
 * lines, and the CLI's dependencies are the library's, which every user
 * installs.
 */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  const limit = Math.min(3, Math.max(1, Math.floor(word.length / 3)))
  let best: string | undefined
  let bestDistance = limit + 1
  for (const candidate of candidates) {
    const d = editDistance(word, candidate)
    if (d > 0 && d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return best
}

/**
 * The optimal string alignment distance: how many single-character
 * insertions, deletions, substitutions, and swaps of two neighbours
 * (the commonest typo: `mael_plan`) turn `a` into `b`. By UTF-16 code
 * units, which is exact for the ASCII names kinds mostly have.
 */
export function editDistance(a: string, b: string): number {
  // d[i][j]: the distance between a's first i characters and b's first j.
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1)
      d[i]![j] = v
    }
  }
  return d[a.length]![b.length]!
}
