import { execFile } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

/**
 * A PostgreSQL server of one test's own, in a temporary data directory, so
 * the test can restart it (as `pg_ctlcluster ... restart` does, through
 * the same pg_ctl) without breaking the other test files that share the
 * machine's server at the same moment.
 */
export interface PrivatePostgres {
  readonly url: string
  /** Stops the server in fast mode (every connection is terminated) and starts it again. */
  restart(): Promise<void>
  /** Stops the server and removes its data directory. */
  destroy(): Promise<void>
}

/** The directory of initdb and pg_ctl, or undefined when PostgreSQL's server binaries are not installed. */
function binDir(): string | undefined {
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return undefined
  const version = readdirSync(root).sort((a, b) => Number(b) - Number(a))[0]
  const dir = version && join(root, version, 'bin')
  return dir && existsSync(join(dir, 'initdb')) ? dir : undefined
}

/** Why a private server cannot be made here, or undefined when it can. */
export function privatePostgresUnavailable(): string | undefined {
  return binDir() === undefined ? 'PostgreSQL server binaries (initdb, pg_ctl) are not installed under /usr/lib/postgresql' : undefined
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
    server.on('error', reject)
  })
}

/** Makes and starts a private server with trust authentication on a free port of 127.0.0.1. */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binDir()
  if (bin === undefined) throw new Error(privatePostgresUnavailable())
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-pg-'))
  const data = join(dir, 'data')
  // initdb refuses to run as root: run the server as the postgres user then.
  const asRoot = process.getuid?.() === 0
  const exec = (cmd: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]) : run(join(bin, cmd), args)
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: gid } = await run('id', ['-g', 'postgres'])
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()))
  }
  chmodSync(dir, 0o700)
  const port = await freePort()
  await exec('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'])
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`
  const start = () => exec('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', 'start'])
  await start()
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async restart() {
      await exec('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop'])
      await start()
    },
    async destroy() {
      await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
