import { execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import Database from 'better-sqlite3'
import pg from 'pg'
import type { Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, testSchema } from '../../support/backends.js'
import { REFUSED } from './secrets-kinds.js'

const run = promisify(execFile)

/**
 * One backend's store for the secret test, with what that test needs and
 * the harness's stores do not give: the --database value a `jobtable`
 * process opens it with, a trigger that refuses rows quoting them, and
 * everything the database holds in its own form (the SQLite files with
 * their -wal and -shm, or a pg_dump of the schema).
 */
export interface SecretStore {
  readonly backend: 'sqlite' | 'postgres'
  /** The --database value of a `jobtable` process on this store. */
  readonly database: string
  /** A PostgreSQL URL a handler may query, on PostgreSQL. */
  readonly pgUrl: string | undefined
  driver(): Driver
  /**
   * Installs a trigger that refuses any payload inserted, or result
   * written, containing REFUSED, with an error whose message quotes the
   * row's value. The schema must exist (a driver has migrated). Returns
   * the database's own message for such a row, to show it does quote it.
   */
  refuseQuoting(probe: string): Promise<string>
  /** Everything the store holds, as the database keeps it (latin1 for files, pg_dump's text), with what made it. */
  dump(): Promise<{ how: string; text: string }>
  drop(): Promise<void>
}

export function sqliteSecretStore(): SecretStore {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-secrets-'))
  const path = join(dir, 'jobs.db')
  const opened: Driver[] = []
  return {
    backend: 'sqlite',
    database: path,
    pgUrl: undefined,
    driver() {
      const d = sqlite({ path, pollIntervalMs: 50 })
      opened.push(d)
      return d
    },
    async refuseQuoting(probe) {
      const db = new Database(path)
      try {
        db.pragma('busy_timeout = 5000')
        db.exec(`
          CREATE TRIGGER secrets_refuse_payload BEFORE INSERT ON jobtable_jobs WHEN NEW.payload LIKE '%${REFUSED}%'
            BEGIN SELECT RAISE(ABORT, 'refused payload ' || NEW.payload); END;
          CREATE TRIGGER secrets_refuse_result BEFORE UPDATE OF result ON jobtable_jobs WHEN NEW.result LIKE '%${REFUSED}%'
            BEGIN SELECT RAISE(ABORT, 'refused result ' || NEW.result); END;`)
        try {
          db.prepare(`INSERT INTO jobtable_jobs (id, kind, payload) VALUES ('probe', 'probe', ?)`).run(`"${REFUSED} ${probe}"`)
          return 'inserted'
        } catch (err) {
          return (err as Error).message
        }
      } finally {
        db.close()
      }
    },
    async dump() {
      const files = ['', '-wal', '-shm', '-journal'].map((s) => path + s).filter((f) => existsSync(f))
      return { how: files.map((f) => f.slice(dir.length + 1)).join(' '), text: files.map((f) => readFileSync(f).toString('latin1')).join('\n') }
    },
    async drop() {
      for (const d of opened) await d.close().catch(() => undefined)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

export function postgresSecretStore(): SecretStore {
  const schema = testSchema()
  const opened: Driver[] = []
  const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
  admin.on('error', () => undefined)
  const url = new URL(PG_URL)
  url.searchParams.set('schema', schema)
  return {
    backend: 'postgres',
    database: url.toString(),
    pgUrl: PG_URL,
    driver() {
      const d = postgres({ connectionString: PG_URL, schema })
      opened.push(d)
      return d
    },
    async refuseQuoting(probe) {
      await admin.query(`
        CREATE FUNCTION "${schema}".secrets_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'INSERT' AND NEW.payload LIKE '%${REFUSED}%' THEN RAISE EXCEPTION 'refused payload %', NEW.payload; END IF;
          IF TG_OP = 'UPDATE' AND NEW.result::text LIKE '%${REFUSED}%' THEN RAISE EXCEPTION 'refused result %', NEW.result; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER secrets_refuse BEFORE INSERT OR UPDATE ON "${schema}".jobs FOR EACH ROW EXECUTE FUNCTION "${schema}".secrets_refuse();`)
      const client = await admin.connect()
      try {
        await client.query('BEGIN')
        // Inside a transaction rolled back, should the trigger let it through.
        await client.query(`INSERT INTO "${schema}".jobs (id, kind, payload) VALUES ('probe', 'probe', $1)`, [`"${REFUSED} ${probe}"`])
        return 'inserted'
      } catch (err) {
        return (err as Error).message
      } finally {
        await client.query('ROLLBACK').catch(() => undefined)
        client.release()
      }
    },
    async dump() {
      // pg_dump of the schema, definitions and data; every table's rows as text when pg_dump is not installed.
      try {
        const { stdout } = await run('pg_dump', ['--dbname', PG_URL, '--schema', schema], { maxBuffer: 512 * 1024 * 1024 })
        return { how: 'pg_dump', text: stdout }
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'ENOENT') throw err
      }
      const tables = await admin.query<{ name: string }>('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1', [schema])
      const parts: string[] = []
      for (const { name } of tables.rows) {
        const rows = await admin.query<{ row: string }>(`SELECT t::text AS row FROM "${schema}"."${name}" t`)
        parts.push(...rows.rows.map((r) => r.row))
      }
      return { how: 'SELECT of every table', text: parts.join('\n') }
    },
    async drop() {
      for (const d of opened) await d.close().catch(() => undefined)
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined)
      await admin.end()
    },
  }
}
