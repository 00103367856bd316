/**
 * Summarises a V8 .cpuprofile (from node --cpu-prof): the functions with
 * the most self time, and self time grouped by where the code lives.
 * Usage: tsx bench/profile-summary.ts FILE.cpuprofile [TOP]
 */
import { readFileSync } from 'node:fs'

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}
interface Profile {
  nodes: Node[]
  samples: number[]
  timeDeltas: number[]
  startTime: number
  endTime: number
}

const [file, topArg] = process.argv.slice(2)
if (file === undefined) {
  console.error('usage: profile-summary FILE.cpuprofile [TOP]')
  process.exit(2)
}
const top = Number(topArg ?? 25)
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const self = new Map<number, number>()
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
const total = [...self.values()].reduce((a, b) => a + b, 0)

function where(url: string): string {
  if (url === '') return '(native/vm)'
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (m) return `dep:${m[1]}`
  if (url.startsWith('node:')) return 'node core'
  // dist/ is the library as `npm run bench` loads it; src/ when run with --conditions=source.
  const s = /\/(src|dist|bench)\/(.*)$/.exec(url)
  return s ? `${s[1]}/${s[2]}` : url
}

const fns = new Map<string, number>()
const places = new Map<string, number>()
for (const [id, us] of self) {
  const n = byId.get(id)
  if (n === undefined) continue
  const { functionName, url, lineNumber } = n.callFrame
  const key = `${functionName || '(anonymous)'}  ${where(url)}${url ? `:${lineNumber + 1}` : ''}`
  fns.set(key, (fns.get(key) ?? 0) + us)
  const place = where(url).replace(/:\d+$/, '')
  places.set(place, (places.get(place) ?? 0) + us)
}
const pct = (us: number): string => ((100 * us) / total).toFixed(1).padStart(5) + '%'
console.log(`total sampled ${(total / 1000).toFixed(0)} ms`)
console.log('\nself time by function:')
for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(us)}  ${(us / 1000).toFixed(1).padStart(8)} ms  ${k}`)
console.log('\nself time by file:')
for (const [k, us] of [...places].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${pct(us)}  ${(us / 1000).toFixed(1).padStart(8)} ms  ${k}`)

// With a third argument, the callers of every function of that name, by self time.
const callersOf = process.argv[4]
if (callersOf !== undefined) {
  const parent = new Map<number, Node>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n)
  const callers = new Map<string, number>()
  for (const [id, us] of self) {
    const n = byId.get(id)
    if (n?.callFrame.functionName !== callersOf) continue
    const chain: string[] = []
    let p = parent.get(id)
    for (let depth = 0; p !== undefined && depth < 3; depth++, p = parent.get(p.id)) chain.push(`${p.callFrame.functionName || '(anonymous)'}@${where(p.callFrame.url)}:${p.callFrame.lineNumber + 1}`)
    const key = chain.join(' < ')
    callers.set(key, (callers.get(key) ?? 0) + us)
  }
  console.log(`\ncallers of ${callersOf}:`)
  for (const [k, us] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, 10)) console.log(`${pct(us)}  ${k}`)
}
