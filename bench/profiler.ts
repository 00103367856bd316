import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { join } from 'node:path'

/**
 * CPU profiles of the timed section only (setup such as pre-enqueueing
 * excluded), through the inspector, when `--profile DIR` is given. Each
 * profile is a .cpuprofile file: open it in Chrome DevTools or summarise
 * it with `tsx bench/profile-summary.ts FILE`.
 */
let session: Session | undefined
let label = 'bench'
const dir = process.env['JOBTABLE_BENCH_PROFILE']

/** Names the profiles that follow (backend, durability, workload). */
export function profileLabel(name: string): void {
  label = name
}

export async function profileStart(): Promise<void> {
  if (dir === undefined || dir === '') return
  session = new Session()
  session.connect()
  await session.post('Profiler.enable')
  await session.post('Profiler.setSamplingInterval', { interval: 100 })
  await session.post('Profiler.start')
}

/** Stops the profile begun by profileStart and writes it as DIR/LABEL[-PART]-PID.cpuprofile. */
export async function profileStop(part?: string): Promise<void> {
  if (session === undefined || dir === undefined) return
  const { profile } = await session.post('Profiler.stop')
  session.disconnect()
  session = undefined
  const file = join(dir, `${label}${part ? `-${part}` : ''}-${process.pid}.cpuprofile`)
  writeFileSync(file, JSON.stringify(profile))
  console.error(`bench: profile written to ${file}`)
}
