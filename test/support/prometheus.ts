/**
 * Reads the Prometheus text exposition format (version 0.0.4), so a test
 * asserts on samples rather than on substrings: each line's metric name,
 * labels (unescaped) and value. Refuses a line it cannot read, so a
 * malformed answer fails the test instead of reading as no samples.
 */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y

/** Every sample of an exposition, in order. */
export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = SAMPLE.exec(line)
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`)
    const labels: Record<string, string> = {}
    const body = m[2] ?? ''
    LABEL.lastIndex = 0
    while (LABEL.lastIndex < body.length) {
      const l = LABEL.exec(body)
      if (!l) throw new Error(`bad labels in ${JSON.stringify(line)}`)
      labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
    }
    const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3])
    if (Number.isNaN(value) && m[3] !== 'NaN') throw new Error(`bad value in ${JSON.stringify(line)}`)
    samples.push({ name: m[1]!, labels, value })
  }
  return samples
}

/** The samples of one exposition, looked up by name and exact labels. */
export function samplesOf(text: string) {
  const samples = parseExposition(text)
  const matches = (s: Sample, name: string, labels: Record<string, string>) =>
    s.name === name && Object.keys(s.labels).length === Object.keys(labels).length && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  return {
    samples,
    /** The value of the sample with exactly these labels, or undefined when there is none. */
    value(name: string, labels: Record<string, string> = {}): number | undefined {
      return samples.find((s) => matches(s, name, labels))?.value
    },
    /** The samples of a name whose labels include these. */
    all(name: string, labels: Record<string, string> = {}): Sample[] {
      return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    },
    /** Every label value anywhere in the exposition. */
    labelValues(): string[] {
      return samples.flatMap((s) => Object.values(s.labels))
    },
  }
}
